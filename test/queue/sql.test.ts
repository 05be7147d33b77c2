/**
 * The store's SQL: every statement prepares (types and syntax are checked by the server, under
 * the suite's schema name), the claim walks its partial index instead of sorting the backlog
 * (SPEC §7), and the pool survives a connection killed under it.
 *
 * Deliberate break seen failing: dropping `WHERE status = 'pending'` from jobs_claim_idx made
 * "the claim uses the partial claim index" fail (the claim walked and filtered out thousands of
 * done rows before reaching pending ones).
 */
import { describe, expect, test } from 'vitest';
import { QueueClosedError, ValidationError } from '../../src/errors.js';
import { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();

function statementsOf(queue: Queue): Record<string, string> {
  return (queue as unknown as { store: { sql: Record<string, string> } }).store.sql;
}

describe('store SQL', () => {
  test('every statement prepares', async () => {
    const queue = db.queue();
    const client = await db.pool.connect();
    try {
      for (const [name, text] of Object.entries(statementsOf(queue))) {
        await client.query(`PREPARE check_${name} AS ${text}`).catch((error: Error) => {
          throw new Error(`statement ${name} does not prepare: ${error.message}`);
        });
        await client.query(`DEALLOCATE check_${name}`);
      }
    } finally {
      client.release();
    }
  });

  test('the claim uses the partial claim index on a table of finished jobs', async () => {
    const queue = db.queue({ schema: 'explain' });
    await queue.migrate();
    await db.sql(
      `INSERT INTO explain.jobs (task, status, priority) SELECT 't', 'done', i % 7 FROM generate_series(1, 50000) i`,
    );
    await db.sql(
      `INSERT INTO explain.jobs (task, priority) SELECT 't', i % 7 FROM generate_series(1, 2000) i`,
    );
    await db.sql('ANALYZE explain.jobs');
    const text = statementsOf(queue).claim!;
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, [
        'w',
        10,
        null,
        null,
        1000,
      ]);
      await client.query('ROLLBACK');
      const plan = JSON.stringify(rows[0]['QUERY PLAN']);
      expect(plan).toContain('jobs_claim_idx');
      // No scan reads the backlog: the only Seq Scan allowed is none at all.
      expect(plan).not.toContain('"Node Type":"Seq Scan"');
      // The index holds pending rows only: the claim reads its 10 rows and skips no done rows.
      const removed = [...plan.matchAll(/"Rows Removed by Filter":(\d+)/g)].reduce(
        (n, m) => n + Number(m[1]),
        0,
      );
      expect(removed).toBeLessThan(50);
    } finally {
      client.release();
    }
  });

  test('a killed idle pool connection does not crash the process; the queue keeps working', async () => {
    const warnings: string[] = [];
    const queue = db.queue({ logger: { warn: (_fields, message) => warnings.push(String(message)) } });
    await queue.enqueue('pool.kill', {});
    const [idle] = await db.sql<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE application_name = 'skiplock' AND datname = current_database()
       AND state = 'idle' ORDER BY backend_start DESC LIMIT 1`,
    );
    await db.sql('SELECT pg_terminate_backend($1)', [idle?.pid]);
    await expect.poll(() => warnings.length, { timeout: 5_000 }).toBeGreaterThan(0);
    expect(warnings[0]).toMatch(/idle database connection failed/);
    expect((await queue.enqueue('pool.kill', {})).created).toBe(true);
  });

  test('a closed queue refuses work with a typed error; close is idempotent', async () => {
    const queue = db.queue();
    await queue.close();
    await queue.close();
    await expect(queue.enqueue('x', {})).rejects.toBeInstanceOf(QueueClosedError);
    await expect(queue.ops()).rejects.toMatchObject({ code: 'ERR_QUEUE_CLOSED' });
  });

  test('constructor options are validated', () => {
    expect(() => new Queue({ connectionString: db.url, schema: '' })).toThrow(ValidationError);
    expect(() => new Queue({ connectionString: db.url, schema: 'x'.repeat(64) })).toThrow(/63 bytes/);
    expect(() => new Queue({ connectionString: db.url, leaseMs: 0 })).toThrow(ValidationError);
    expect(() => new Queue({ connectionString: db.url, backoff: { jitter: 'often' as 'full' } })).toThrow(
      ValidationError,
    );
    expect(() => new Queue({ connectionString: db.url, conectionString: 'typo' } as never)).toThrow(
      /conectionString/,
    );
    const saved = process.env.DATABASE_URL;
    delete process.env.DATABASE_URL;
    try {
      expect(() => new Queue({})).toThrow(/connectionString/);
    } finally {
      if (saved !== undefined) process.env.DATABASE_URL = saved;
    }
  });

  test('a user-supplied pool is used and left open by close()', async () => {
    const queue = new Queue({ pool: db.pool as never, schema: TEST_SCHEMA });
    await queue.enqueue('own.pool', {});
    await queue.close();
    expect((await db.pool.query('SELECT 1 AS one')).rows[0].one).toBe(1);
  });
});
