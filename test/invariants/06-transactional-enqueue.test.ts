/**
 * SPEC §1.6 — enqueue can join the caller's transaction: with `client`, the job exists if and
 * only if the caller's transaction commits, and so does its wake-up notification (§1.9).
 *
 * Notifications are checked without sleeps: after the transaction ends, a marker NOTIFY is
 * sent from another session; notifications arrive in commit order, so the first one the
 * listener hears tells whether the transaction delivered one.
 *
 * Deliberate break seen failing: making Queue.writer() ignore `client` (always the pool) made
 * the ROLLBACK tests fail: the job existed after rollback and its notification arrived before
 * the marker.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';
import { type Listener, listen } from '../support/listener.js';

const db = useTestDatabase();
let listener: Listener;

beforeAll(async () => {
  listener = await listen(db.url);
});
beforeEach(async () => {
  await listener.sync(db.pool);
});
afterAll(async () => {
  await listener.close();
});

/** Runs `fn` in a transaction on its own client and ends it with COMMIT or ROLLBACK. */
async function inTransaction<T>(
  end: 'COMMIT' | 'ROLLBACK',
  fn: (client: import('pg').PoolClient) => Promise<T>,
) {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const value = await fn(client);
    await client.query(end);
    return value;
  } finally {
    client.release();
  }
}

describe('§1.6 transactional enqueue', () => {
  test('ROLLBACK leaves no job and delivers no notification', async () => {
    const queue = db.queue();
    const before = await db.jobCount();
    const { id } = await inTransaction('ROLLBACK', async (client) => {
      await client.query('CREATE TEMP TABLE IF NOT EXISTS side_effect (n int)'); // the caller's own work
      const result = await queue.enqueue('tx.rollback', { n: 1 }, { client });
      // Inside the transaction the caller sees its job.
      const { rows } = await client.query(`SELECT status FROM ${db.jobs} WHERE id = $1`, [result.id]);
      expect(rows[0]?.status).toBe('pending');
      return result;
    });
    expect(await queue.get(id)).toBeNull();
    expect(await db.jobCount()).toBe(before);
    await listener.mark(db.pool, 'marker-rollback');
    expect(await listener.next()).toBe('marker-rollback');
  });

  test('COMMIT delivers both the job and its notification', async () => {
    const queue = db.queue();
    const { id } = await inTransaction('COMMIT', (client) =>
      queue.enqueue('tx.commit', { n: 2 }, { client }),
    );
    expect((await queue.get(id))?.status).toBe('pending');
    await listener.mark(db.pool, 'marker-commit');
    expect(await listener.next()).toBe('jobs');
    expect(await listener.next()).toBe('marker-commit');
  });

  test('the job is invisible to other sessions (and to claim) until the commit', async () => {
    const queue = db.queue();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { id } = await queue.enqueue('tx.invisible', {}, { client });
      expect(await queue.get(id)).toBeNull();
      expect(await queue.claim('w-tx', { tasks: ['tx.invisible'] })).toEqual([]);
      await client.query('COMMIT');
      const [job] = await queue.claim('w-tx', { tasks: ['tx.invisible'] });
      expect(job?.id).toBe(id);
    } finally {
      client.release();
    }
  });

  test('enqueueMany joins the transaction too: all or nothing, one notification', async () => {
    const queue = db.queue();
    const before = await db.jobCount();
    const specs = Array.from({ length: 25 }, (_, i) => ({ task: 'tx.many', payload: { i } }));
    await inTransaction('ROLLBACK', (client) => queue.enqueueMany(specs, { client }));
    expect(await db.jobCount()).toBe(before);
    await listener.mark(db.pool, 'marker-many-rollback');
    expect(await listener.next()).toBe('marker-many-rollback');

    const results = await inTransaction('COMMIT', (client) => queue.enqueueMany(specs, { client }));
    expect(results.every((r) => r.created)).toBe(true);
    expect(await db.jobCount()).toBe(before + 25);
    await listener.mark(db.pool, 'marker-many-commit');
    // One NOTIFY for the whole batch (SPEC §1.9), then the marker.
    expect(await listener.next()).toBe('jobs');
    expect(await listener.next()).toBe('marker-many-commit');
  });

  test('a failed statement inside the transaction takes the job with it', async () => {
    const queue = db.queue();
    const client = await db.pool.connect();
    let id = '';
    try {
      await client.query('BEGIN');
      ({ id } = await queue.enqueue('tx.aborted', {}, { client }));
      await expect(client.query('SELECT 1/0')).rejects.toThrow(/division by zero/);
      await expect(queue.enqueue('tx.aborted', {}, { client })).rejects.toMatchObject({
        code: 'ERR_DATABASE',
        sqlState: '25P02', // in_failed_sql_transaction: the SQLSTATE is kept
      });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await queue.get(id)).toBeNull();
  });
});
