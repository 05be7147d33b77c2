/**
 * Guards SPEC §3 (`preparedStatements` on the Worker), §1.9 (the LISTEN self-check) and §7
 * (behind PgBouncer in transaction mode everything works; a misconfiguration gets a clear error
 * or warning) for the library, the parts that need PgBouncer with a real PgBouncer 1.18 in
 * transaction mode (test/support/pgbouncer.ts):
 *
 * - Worker options: `preparedStatements` is accepted with `connectionString`, must be a
 *   boolean, and is refused together with `queue` (the Queue owns that setting).
 * - The clear error, without PgBouncer: a named statement that the connection already has
 *   (42P05) or has lost (26000) — provoked on a one-connection pool of our own — is a
 *   DatabaseError that names PgBouncer's transaction mode and the fix, with the SQLSTATE and the
 *   driver's error as `cause`; an unnamed statement's error stays as it was.
 * - Through PgBouncer: Workers with `listen: false` (prepared statements off by that default)
 *   run every job once; forced on, the worker reports the clear error.
 * - `ctx.transaction` and `queue.transaction` through PgBouncer: the handler's write and the
 *   completion commit together, each job exactly once.
 * - A worker with LISTEN on behind PgBouncer emits the `LISTEN_UNREACHABLE` warning.
 *
 * Caught on the code before the fix (issue 8, defect 7): `new Worker({ connectionString,
 * listen: false, preparedStatements: false })` threw "preparedStatements is not a known option";
 * a listen:false worker kept prepared statements and failed claims with 42P05/26000, a bare
 * driver message that named neither PgBouncer nor the option.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, onTestFinished, test } from 'vitest';
import { DatabaseError, ValidationError } from '../../src/errors.js';
import { Queue } from '../../src/queue.js';
import type { JobContext } from '../../src/worker/options.js';
import { Worker } from '../../src/worker/worker.js';
import { useTestDatabase } from '../support/database.js';
import { describeWithPgBouncer, type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { nextEvent, within } from '../worker/helpers.js';

const db = useTestDatabase();
const tasks = { 'bouncer.noop': async () => null };
const CLEAR =
  /prepared statements do not survive a transaction-pooling proxy: behind PgBouncer in transaction mode, turn them off \(`new Queue\(\{ preparedStatements: false \}\)`, `new Worker\(\{ listen: false, … \}\)`, or `--no-prepared-statements` on the command line\), or use PgBouncer ≥ 1\.21 with `max_prepared_statements` set/;

describe('Worker option preparedStatements', () => {
  test('accepted with connectionString; must be a boolean; refused together with queue', async () => {
    const worker = new Worker({ connectionString: db.url, listen: false, preparedStatements: false, tasks });
    await worker.stop();
    expect(() => new Worker({ connectionString: db.url, preparedStatements: 'no' as never, tasks })).toThrow(
      ValidationError,
    );
    const queue = db.queue();
    const both = () => new Worker({ queue, preparedStatements: false, tasks });
    expect(both).toThrow(ValidationError);
    expect(both).toThrow(/preparedStatements: set it on the Queue you pass as `queue`/);
  });
});

describe('a named statement lost between connections: the error names PgBouncer and the fix', () => {
  /** A Queue on a one-connection pool of ours, so the test can reach the statements' session. */
  function onOneConnection(): { queue: Queue; pool: pg.Pool } {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    return { queue: new Queue({ pool, schema: TEST_SCHEMA }), pool };
  }

  test('26000: the connection lost the statement the driver had prepared', async () => {
    const { queue, pool } = onOneConnection();
    try {
      expect(await queue.get('1')).toBeNull(); // prepares the statement on the connection
      await pool.query('DEALLOCATE ALL'); // what another server connection looks like to pg
      const error = await queue.get('1').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DatabaseError);
      expect(error).toMatchObject({ sqlState: '26000', cause: { code: '26000' } });
      expect((error as Error).message).toMatch(/^Database error \(SQLSTATE 26000\): prepared statement "/);
      expect((error as Error).message).toMatch(CLEAR);
    } finally {
      await queue.close();
      await pool.end();
    }
  });

  test('42P05: the connection already has a statement of that name (another client prepared it)', async () => {
    const { queue, pool } = onOneConnection();
    const prefix = createHash('sha256').update(TEST_SCHEMA).digest('hex').slice(0, 8);
    try {
      await pool.query(`PREPARE skiplock_${prefix}_get AS SELECT 1`);
      const error = await queue.get('1').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DatabaseError);
      expect(error).toMatchObject({ sqlState: '42P05', cause: { code: '42P05' } });
      expect((error as Error).message).toMatch(CLEAR);
    } finally {
      await queue.close();
      await pool.end();
    }
  });

  test('unnamed statements (preparedStatements: false) keep the plain error', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    const queue = new Queue({ pool, schema: TEST_SCHEMA, preparedStatements: false });
    try {
      const error = await queue.transaction(async (client) => {
        await client.query('PREPARE twice AS SELECT 1');
        return client.query('PREPARE twice AS SELECT 1').catch((e: unknown) => e);
      });
      expect(error).toMatchObject({ code: '42P05' }); // the user's own statement: not ours to explain
      expect(await queue.get('1')).toBeNull();
    } finally {
      await queue.close();
      await pool.end();
    }
  });
});

describeWithPgBouncer('the library behind PgBouncer in transaction mode', () => {
  let bouncer: PgBouncer;
  let url: string;
  const workers: Worker[] = [];

  beforeAll(async () => {
    bouncer = await startPgBouncer(inject('adminUrl'), { defaultPoolSize: 4 });
    url = bouncer.url(db.url);
    await db.sql('CREATE TABLE public.bouncer_effects (job_id bigint NOT NULL, n int NOT NULL)');
  });

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop({ timeoutMs: 1_000 })));
    await bouncer?.stop();
  });

  function worker(
    options: Omit<ConstructorParameters<typeof Worker>[0], 'connectionString'>,
    through = url,
  ): Worker {
    const w = new Worker({ schema: TEST_SCHEMA, pollIntervalMs: 100, ...options, connectionString: through });
    workers.push(w);
    return w;
  }

  async function drained(): Promise<void> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const [row] = await db.sql<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${db.jobs} WHERE status IN ('pending', 'running')`,
      );
      if (row?.n === 0) return;
      if (Date.now() > deadline) throw new Error(`${row?.n} jobs still pending or running after 60 s`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  test('listen: false (prepared statements off by default): 2 workers, ctx.transaction, each job once', async () => {
    const errors: unknown[] = [];
    const handler = async (payload: { n: number }, ctx: JobContext<{ n: number }>) =>
      ctx.transaction(async (client) => {
        await client.query('INSERT INTO public.bouncer_effects (job_id, n) VALUES ($1, $2)', [
          ctx.job.id,
          payload.n,
        ]);
        return { n: payload.n };
      });
    const pair = [0, 1].map(() =>
      worker({ listen: false, concurrency: 5, tasks: { 'bouncer.tx': handler } }),
    );
    for (const w of pair) w.on('error', ({ error }) => errors.push(error));
    await Promise.all(pair.map((w) => w.start()));
    const queue = new Queue({ connectionString: url, schema: TEST_SCHEMA, preparedStatements: false });
    try {
      // queue.transaction through PgBouncer too: the job exists once its transaction commits.
      await queue.transaction(async (client) => {
        await queue.enqueue('bouncer.tx', { n: -1 }, { client });
      });
      await queue.enqueueMany(
        Array.from({ length: 400 }, (_, n) => ({ task: 'bouncer.tx', payload: { n } })),
      );
      await drained();
    } finally {
      await queue.close();
    }
    await Promise.all(pair.map((w) => w.stop()));
    expect(errors).toEqual([]);
    const [effects] = await db.sql<{ rows: number; jobs: number }>(
      'SELECT count(*)::int AS rows, count(DISTINCT job_id)::int AS jobs FROM public.bouncer_effects',
    );
    expect(effects).toEqual({ rows: 401, jobs: 401 });
    const [jobs] = await db.sql<{ done: number; matching: number }>(
      `SELECT count(*) FILTER (WHERE status = 'done')::int AS done,
              count(*) FILTER (WHERE result = jsonb_build_object('n', payload->'n'))::int AS matching
         FROM ${db.jobs} WHERE task = 'bouncer.tx'`,
    );
    expect(jobs).toEqual({ done: 401, matching: 401 });
  });

  test('listen: false with preparedStatements: true: the worker reports the clear error', async () => {
    // One server connection behind this PgBouncer: the second client to prepare a statement
    // finds the first one's there (42P05), every time, not just under load.
    const single = await startPgBouncer(inject('adminUrl'), {
      defaultPoolSize: 1,
      ignoreStartupParameters: 'statement_timeout', // set up for prepared statements (see workers.test.ts)
    });
    onTestFinished(() => single.stop());
    const pair = [0, 1].map(() =>
      worker({ listen: false, preparedStatements: true, concurrency: 5, tasks }, single.url(db.url)),
    );
    const reported = Promise.race(pair.map((w) => nextEvent(w, 'error', () => true, 30_000)));
    // A worker may instead fail its first claim, in start(): that error is the clear one too.
    const started = Promise.all(pair.map((w) => w.start())).then(
      () => null,
      (error: unknown) => error,
    );
    const queue = db.queue();
    await queue.enqueueMany(Array.from({ length: 300 }, () => ({ task: 'bouncer.noop', payload: {} })));
    const error = (await started) ?? (await reported).error;
    await Promise.all(pair.map((w) => w.stop({ timeoutMs: 1_000 })));
    expect(error).toBeInstanceOf(DatabaseError);
    expect((error as DatabaseError).sqlState).toMatch(/^(42P05|26000)$/);
    expect((error as Error).message).toMatch(CLEAR);
    expect((error as Error).cause).toMatchObject({ code: (error as DatabaseError).sqlState });
  });

  test('LISTEN through PgBouncer: the worker warns LISTEN_UNREACHABLE and still works by polling', async () => {
    const w = worker({ preparedStatements: false, tasks });
    const warning = nextEvent(w, 'warning', (e) => e.code === 'LISTEN_UNREACHABLE', 15_000);
    await w.start();
    expect((await warning).message).toMatch(/transaction-pooling proxy \(PgBouncer\).*listen: false/);
    const queue = db.queue();
    const { id } = await queue.enqueue('bouncer.noop', {});
    const done = nextEvent(w, 'job:done', (e) => e.job.id === id, 10_000);
    await within(done, 10_000, 'the job done on the fallback poll');
  });
});
