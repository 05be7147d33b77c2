/**
 * SPEC §3: every statement has a timeout — and a statement that timed out did not happen.
 *
 * Review finding: `statementTimeoutMs` was only a client-side bound (pg's query_timeout): the
 * caller's promise rejected, but the server went on waiting for the lock and then committed —
 * an enqueue reported as failed existed after all (a retry duplicates it); a claim reported as
 * failed left the job running under a lease nobody held. Now the server cancels first
 * (statement_timeout, rolled back); the client bound stays as the backstop for a silent network.
 * Before the fix both tests below found the row written after the lock was released.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

/** Holds a lock on the jobs table that blocks INSERT and UPDATE until `release()`. */
async function lockJobs() {
  const client = await db.pool.connect();
  await client.query('BEGIN');
  await client.query(`LOCK TABLE ${db.jobs} IN EXCLUSIVE MODE`);
  return {
    async release() {
      await client.query('ROLLBACK');
      client.release();
    },
  };
}

describe('a statement that times out did not happen', () => {
  test('enqueue blocked past statementTimeoutMs rejects, and no job appears afterwards', async () => {
    const queue = db.queue({ statementTimeoutMs: 400, batchEnqueue: false });
    const lock = await lockJobs();
    try {
      await expect(queue.enqueue('timeout.enqueue', { n: 1 })).rejects.toThrow(
        /statement timeout|57014|timeout/i,
      );
    } finally {
      await lock.release();
    }
    await sleep(300);
    expect(await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = 'timeout.enqueue'`)).toEqual([]);
  });

  test('claim blocked past statementTimeoutMs rejects, and the job stays pending', async () => {
    const setup = db.queue();
    const { id } = await setup.enqueue('timeout.claim', {});
    const queue = db.queue({ statementTimeoutMs: 400 });
    const lock = await lockJobs();
    try {
      await expect(queue.claim('w', { tasks: ['timeout.claim'] })).rejects.toThrow(
        /statement timeout|57014|timeout/i,
      );
    } finally {
      await lock.release();
    }
    await sleep(300);
    expect(await setup.get(id)).toMatchObject({ status: 'pending', attempts: 0, workerId: null });
  });

  test('the server-side bound is sent unless preparedStatements is false (a pooler refuses it)', async () => {
    const show = (q: ReturnType<typeof db.queue>) =>
      q.transaction(
        async (client) => (await client.query('SHOW statement_timeout')).rows[0].statement_timeout,
      );
    expect(await show(db.queue({ statementTimeoutMs: 12_000 }))).toBe('12s');
    expect(await show(db.queue({ statementTimeoutMs: 12_000, preparedStatements: false }))).toBe('0');
  });
});
