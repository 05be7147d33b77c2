/**
 * Guards SPEC §7 (behind PgBouncer in transaction mode everything works, and a misconfiguration
 * gets a clear error) and §1.1 (no double execution) with a real PgBouncer 1.18 in transaction
 * mode (test/support/pgbouncer.ts) in front of the test server, and the real CLI:
 *
 * - 4 `skiplock worker --no-listen` processes (nothing else: `--no-listen` implies no prepared
 *   statements) drain 3,000 jobs through PgBouncer with fewer server connections than clients;
 *   every job ends `done` after one attempt and was executed exactly once (a ledger table that
 *   the handler writes straight to PostgreSQL), and no worker reports an error.
 * - The same setup with prepared statements forced on (`--prepared-statements`) fails with the
 *   error that names PgBouncer's transaction mode and the fix, keeping the SQLSTATE.
 *
 * Caught on the code before the fix (issue 8, defect 7): `--no-listen` left prepared statements
 * on, and workers failed claims and completions with 42P05/26000 ("prepared statement … already
 * exists" / "does not exist": a bare driver message) while jobs ran twice; the CLI had no
 * `--prepared-statements`/`--no-prepared-statements` at all (exit 2, unknown option).
 */
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, inject, onTestFinished, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { spawnCli } from '../cli/run-cli.js';
import { useTestDatabase } from '../support/database.js';
import { describeWithPgBouncer, type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { killChildren } from '../support/spawn.js';

const FIXTURE = 'test/pgbouncer/fixtures/count-tasks.ts';
const LEDGER = `${quoteIdent(TEST_SCHEMA)}.bouncer_executions`;
const TOTAL = 3_000;
const WORKERS = 4;

/** One `skiplock worker` child process behind PgBouncer. */
interface CliWorker {
  readonly child: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stdout(): string;
  stderr(): string;
}

describeWithPgBouncer('CLI workers behind PgBouncer in transaction mode', () => {
  const db = useTestDatabase();
  const children: ChildProcess[] = [];
  let bouncer: PgBouncer;

  beforeAll(async () => {
    // 6 server connections for 4 workers × up to 12 clients: every transaction may land on
    // another server connection, as in production behind a busy PgBouncer.
    bouncer = await startPgBouncer(inject('adminUrl'), { defaultPoolSize: 6 });
    await db.sql(`CREATE TABLE ${LEDGER} (job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL)`);
  });

  afterAll(async () => {
    await killChildren(children);
    await bouncer?.stop();
  });

  function startWorker(flags: string[], through = bouncer): CliWorker {
    const child = spawnCli(
      ['worker', '--tasks', FIXTURE, '--concurrency', '10', '--poll-interval-ms', '200', ...flags],
      { url: through.url(db.url), env: { LEDGER_URL: db.url, SKIPLOCK_TEST_SCHEMA: TEST_SCHEMA } },
    );
    children.push(child);
    let out = '';
    let err = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
    });
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      err += chunk;
    });
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      // 'close', not 'exit': the output is complete only once the pipes have closed
      child.once('close', (code, signal) => resolve({ code, signal })),
    );
    return { child, exited, stdout: () => out, stderr: () => err };
  }

  async function waitFor(what: string, ms: number, done: () => Promise<boolean> | boolean): Promise<void> {
    const deadline = Date.now() + ms;
    while (!(await done())) {
      if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
      await sleep(100);
    }
  }

  const doneCount = async () =>
    (await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE status = 'done'`))[0]?.n ??
    0;

  test(`4 × \`worker --no-listen\`: ${TOTAL.toLocaleString('en')} jobs, each executed exactly once`, async () => {
    const workers = Array.from({ length: WORKERS }, () => startWorker(['--no-listen']));
    const banner = /^skiplock worker \S+ started: .*; polling; no prepared statements$/m;
    await waitFor('4 start banners', 60_000, () =>
      workers.every((w) => {
        if (w.child.exitCode !== null) throw new Error(`a worker exited early:\n${w.stderr()}`);
        return banner.test(w.stdout());
      }),
    );

    const queue = db.queue({ poolSize: 2 });
    for (let i = 0; i < TOTAL; i += 500) {
      await queue.enqueueMany(
        Array.from({ length: 500 }, (_, k) => ({ task: 'bouncer.count', payload: { i: i + k } })),
      );
    }
    await waitFor(`${TOTAL} jobs done`, 120_000, async () => (await doneCount()) === TOTAL);

    for (const w of workers) w.child.kill('SIGTERM');
    const exits = await Promise.all(workers.map((w) => w.exited));
    const stderr = workers.map((w) => w.stderr()).join('');
    expect(exits, stderr).toEqual(workers.map(() => ({ code: 0, signal: null })));
    // Nothing but the stop lines: no failed claim, completion or renewal (42P05, 26000, …).
    expect(stderr.split('\n').filter((line) => line && !/SIGTERM, stopping/.test(line))).toEqual([]);

    const [jobs] = await db.sql<{ done: number; first_attempt: number }>(
      `SELECT count(*) FILTER (WHERE status = 'done')::int AS done,
              count(*) FILTER (WHERE attempts = 1)::int AS first_attempt FROM ${db.jobs}`,
    );
    expect(jobs).toEqual({ done: TOTAL, first_attempt: TOTAL });
    const [runs] = await db.sql<{ executions: number; jobs: number; workers: number }>(
      `SELECT count(*)::int AS executions, count(DISTINCT job_id)::int AS jobs,
              count(DISTINCT pid)::int AS workers FROM ${LEDGER}`,
    );
    expect(runs?.executions, 'executions: a job ran twice').toBe(TOTAL);
    expect(runs?.jobs).toBe(TOTAL);
    expect(runs?.workers, 'the jobs were shared by the worker processes').toBeGreaterThan(1);
  });

  test('`worker --no-listen --prepared-statements`: the error names PgBouncer and the fix', async () => {
    await db.sql(`TRUNCATE ${db.jobs}`);
    // One server connection behind this PgBouncer: the second worker to prepare a statement
    // finds the first one's there (42P05), every time, not just under load.
    // (It ignores the statement_timeout Skiplock sends at connect when prepared statements are
    // on, as a PgBouncer ≥ 1.21 set up for them would; the next test covers a stock one.)
    const single = await startPgBouncer(inject('adminUrl'), {
      defaultPoolSize: 1,
      ignoreStartupParameters: 'statement_timeout',
    });
    onTestFinished(() => single.stop());
    const workers = Array.from({ length: 2 }, () =>
      startWorker(['--no-listen', '--prepared-statements'], single),
    );
    const queue = db.queue({ poolSize: 2 });
    await queue.enqueueMany(
      Array.from({ length: 1_000 }, (_, i) => ({ task: 'bouncer.count', payload: { i } })),
    );
    // A worker either dies at start (its first claim failed) or reports the failure and goes on.
    const clear =
      /SQLSTATE (42P05|26000)\).*prepared statements do not survive a transaction-pooling proxy: behind PgBouncer in transaction mode, turn them off.*preparedStatements: false.*--no-prepared-statements.*PgBouncer ≥ 1\.21 with `max_prepared_statements`/;
    await waitFor('the clear error on a worker', 60_000, () => {
      if (workers.some((w) => clear.test(w.stderr()))) return true;
      if (workers.every((w) => w.child.exitCode !== null)) {
        throw new Error(
          `the workers exited without the clear error:\n${workers.map((w) => w.stderr()).join('')}`,
        );
      }
      return false;
    });
    await killChildren(workers.map((w) => w.child));
    const stderr = workers.map((w) => w.stderr()).join('');
    expect(stderr).not.toContain('unknown option');
  });

  test('`worker --prepared-statements` through a stock PgBouncer: it exits at once, naming the fix', async () => {
    // With prepared statements on, a Queue assumes a direct connection and sends statement_timeout
    // at connect; a stock PgBouncer refuses it. No retry can fix that: the worker must not wait
    // for the database forever but say what to change.
    const worker = startWorker(['--no-listen', '--prepared-statements']);
    const exit = await Promise.race([
      worker.exited,
      sleep(30_000).then(() => ({ code: null, signal: null as NodeJS.Signals | null })),
    ]);
    expect(exit.code, worker.stderr()).toBe(1);
    expect(worker.stderr()).toMatch(
      /unsupported startup parameter.*preparedStatements: false.*ignore_startup_parameters/,
    );
  });
});
