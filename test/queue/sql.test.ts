/**
 * The store's SQL: every statement prepares (types and syntax are checked by the server, under
 * the suite's schema name), the claim walks its partial index instead of sorting the backlog
 * (SPEC §7) — also on a table never analyzed — and the pool survives a connection killed under it.
 *
 * Deliberate breaks seen failing: dropping `WHERE status = 'pending'` from jobs_claim_idx made
 * "50,000 finished jobs cost it nothing" fail (the claim walked and filtered out thousands of
 * done rows before reaching pending ones); the claim statement of before migration 5 (inline
 * pick, `id IN (…) AND status = 'pending'`) made the never-analyzed test fail.
 */
import { describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { QueueClosedError, ValidationError } from '../../src/errors.js';
import { Queue } from '../../src/queue.js';
import { buildStatements } from '../../src/store/statements.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();

function statementsOf(queue: Queue): Record<string, string> {
  return buildStatements(quoteIdent(queue.schema));
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

  /**
   * Blocks (shared buffers hit or read) one execution of the claim touches, under the generic
   * plan a prepared statement gets after its fifth run, on a session that has claimed once. The
   * pick runs inside `pick_pending`, so its plan is not in the outer EXPLAIN, but the blocks it
   * touches are counted in the total.
   */
  async function claimBlocks(schema: string, limit: number): Promise<{ blocks: number; claimed: number }> {
    const text = statementsOf(db.queue({ schema })).claim!;
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
      await client.query(`PREPARE claim_blocks(text, int, text[], text[], float8, text) AS ${text}`);
      // once first, unmeasured: a session's first call compiles and plans the pick (catalog
      // reads); the figure is what every later claim of that session touches
      await client.query(`EXECUTE claim_blocks('w', ${limit}, '{t}', null, 1000, null)`);
      const { rows } = await client.query(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim_blocks('w', ${limit}, '{t}', null, 1000, null)`,
      );
      await client.query('ROLLBACK');
      await client.query('DEALLOCATE claim_blocks');
      const plan = (rows[0]['QUERY PLAN'] as { Plan: Record<string, number> }[])[0]!.Plan;
      client.release();
      return {
        blocks: (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0),
        claimed: plan['Actual Rows'] ?? 0,
      };
    } catch (error) {
      client.release(true); // never hand a connection in an aborted transaction back to the pool
      throw error;
    }
  }

  test('the claim walks the partial claim index: 50,000 finished jobs cost it nothing', async () => {
    const queue = db.queue({ schema: 'explain' });
    await queue.migrate();
    await db.sql(
      `INSERT INTO explain.jobs (task, status, priority) SELECT 't', 'done', i % 7 FROM generate_series(1, 50000) i`,
    );
    await db.sql(
      `INSERT INTO explain.jobs (task, priority) SELECT 't', i % 7 FROM generate_series(1, 2000) i`,
    );
    await db.sql('ANALYZE explain.jobs');
    const { blocks, claimed } = await claimBlocks('explain', 10);
    expect(claimed).toBe(10);
    // Ten rows locked and updated through their index entries: tens of blocks. Walking the done
    // rows (an index that is not partial) or sorting the backlog reads hundreds.
    expect(blocks).toBeLessThan(300);
  });

  test('a connection whose first claim met an empty, never-analyzed schema: its claims stay cheap after a burst of keyed jobs', async () => {
    // The picks keep their plan for the session (migration 16). Found by review: planned on an
    // empty table, the scope-'pending' filter became a hash of every running keyed job, kept
    // for every later claim — 4,484 blocks for a claim of 10 with 20,000 running keyed jobs.
    // Break seen failing: the filter without its OFFSET 0.
    const schema = 'stale_plan';
    await db.queue({ schema }).migrate();
    const s = quoteIdent(schema);
    const text = statementsOf(db.queue({ schema })).claim!;
    const client = await db.pool.connect();
    const blocks = async () => {
      await client.query('BEGIN');
      const { rows } = await client.query(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE stale_claim('w', 10, null, null, 1000, null)`,
      );
      await client.query('ROLLBACK');
      const plan = (rows[0]['QUERY PLAN'] as { Plan: Record<string, number> }[])[0]!.Plan;
      return {
        blocks: (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0),
        claimed: plan['Actual Rows'],
      };
    };
    try {
      await client.query(`PREPARE stale_claim(text, int, text[], text[], float8, text) AS ${text}`);
      expect((await blocks()).claimed).toBe(0); // a worker's first pass, on the empty table
      await db.sql(
        `INSERT INTO ${s}.jobs (task, pending_key) SELECT 't', CASE WHEN i % 2 = 0 THEN 'k' || i END FROM generate_series(1, 30000) i`,
      );
      await db.sql(
        `INSERT INTO ${s}.jobs (task, status, pending_key, worker_id, lease_until)
         SELECT 't', 'running', 'r' || i, 'w', now() + interval '1 hour' FROM generate_series(1, 20000) i`,
      );
      const after = await blocks();
      expect(after.claimed).toBe(10);
      expect(after.blocks).toBeLessThan(300);
    } finally {
      client.release(true); // its session's cached plans go with it
    }
  });

  test('the claim stays cheap on a table that was never analyzed (a burst on a new schema)', async () => {
    // Before pick_pending, the generic plan of a never-analyzed table (estimated: one pending
    // row) bitmap-scanned and sorted every pending row on every claim, and the UPDATE
    // hash-joined them all: ~2,900 blocks for 200 rows of a 50,000 backlog, growing with it.
    const queue = db.queue({ schema: 'never_analyzed' });
    await queue.migrate();
    await db.sql(
      `ALTER TABLE never_analyzed.jobs SET (autovacuum_enabled = false);
       INSERT INTO never_analyzed.jobs (task) SELECT 't' FROM generate_series(1, 30000)`,
    );
    const [stats] = await db.sql<{ reltuples: number }>(
      `SELECT reltuples FROM pg_class WHERE oid = 'never_analyzed.jobs'::regclass`,
    );
    expect(stats?.reltuples).toBeLessThan(1); // -1 (PostgreSQL ≥ 14) or 0: never analyzed
    const { blocks, claimed } = await claimBlocks('never_analyzed', 10);
    expect(claimed).toBe(10);
    expect(blocks).toBeLessThan(300);
  });

  test('no pick is JIT-compiled, however large the (analyzed) backlog', async () => {
    // Migration 10's filter made the planner cost pick_pending's walk over 30,000 jobs past
    // jit_above_cost: every claim was JIT-compiled (30–120 ms), a drain of an analyzed backlog
    // ran at a tenth of its speed. Break seen failing: pick_pending without `SET jit = off`.
    const queue = db.queue({ schema: 'nojit' });
    await queue.migrate();
    await db.sql(`INSERT INTO nojit.jobs (task) SELECT 't' FROM generate_series(1, 30000)`);
    await db.sql('ANALYZE nojit.jobs');
    const config = await db.sql<{ proname: string; proconfig: string[] | null }>(
      `SELECT proname, proconfig FROM pg_proc WHERE pronamespace = 'nojit'::regnamespace AND proname LIKE 'pick\\_%'`,
    );
    expect(config.map((f) => f.proname).sort()).toEqual([
      'pick_aged',
      'pick_groups',
      'pick_mixed',
      'pick_pending',
      'pick_queue',
    ]);
    for (const f of config) expect(f.proconfig, f.proname).toContain('jit=off');

    // Where JIT and auto_explain are available: with JIT made as cheap as it gets for the
    // session, the statements inside the picks still run without it.
    const client = await db.pool.connect();
    const logs: string[] = [];
    const onNotice = (notice: { message?: string }) => logs.push(notice.message ?? '');
    client.on('notice', onNotice);
    try {
      const [jit] = (await client.query('SELECT pg_jit_available() AS available')).rows;
      const explained = await client.query("LOAD 'auto_explain'").then(
        () => true,
        () => false,
      );
      if (!jit.available || !explained) return;
      await client.query(`SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
                          SET client_min_messages = log; SET jit = on; SET jit_above_cost = 0`);
      await client.query('BEGIN');
      await client.query(`SELECT count(*) FROM nojit.pick_pending(10, '{t}', null)`);
      await client.query(`SELECT count(*) FROM nojit.pick_mixed(10, '{t}', null, null)`);
      await client.query(`SELECT count(*) FROM nojit.pick_queue(10, '{t}', 'default', now(), null, null)`);
      await client.query('ROLLBACK');
      const nested = logs.filter(
        (log) => log.includes('FROM "nojit".jobs') || log.includes('FROM nojit.jobs'),
      );
      expect(nested.length).toBeGreaterThan(0);
      expect(nested.filter((log) => /\bJIT:/.test(log))).toEqual([]);
      expect(logs.some((log) => /\bJIT:/.test(log))).toBe(true); // the session's own statements were compiled
    } finally {
      client.off('notice', onNotice);
      await client.query('RESET ALL').catch(() => undefined);
      client.release(true);
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

  test('a bad option next to your pool is refused before the queue touches the pool', () => {
    // Break: validate readConnectionString/poolSize after watchPool() and this fails (a listener
    // left on a pool the caller keeps using, one per failed construction).
    const before = db.pool.listenerCount('error');
    expect(() => new Queue({ pool: db.pool as never, readConnectionString: 42 as never })).toThrow(
      /readConnectionString/,
    );
    expect(() => new Queue({ pool: db.pool as never, poolSize: 0 })).toThrow(/poolSize/);
    expect(() => new Queue({ connectionString: db.url, readConnectionString: '' })).toThrow(
      /readConnectionString/,
    );
    expect(db.pool.listenerCount('error')).toBe(before);
  });
});
