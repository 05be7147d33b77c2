/**
 * Guards SPEC §1.5 (nothing is lost) and §1.1–§1.3 (no double claim, compare-and-set on a claim
 * token) end to end, through the real CLI: 3 `skiplock worker` processes run 1,500 jobs whose
 * handler records every execution in a ledger table (test/worker/fixtures/ledger-tasks.ts); one
 * worker is SIGKILLed mid-run. Every job must end `done` with exactly one completion (a trigger
 * on the jobs table counts the updates that leave a row `done`) and the result of its last
 * attempt; only the jobs the killed worker held when it died may run twice — once by the killed
 * worker (attempt 1), once by a survivor (attempt 2) — and those are exactly the jobs the reaper
 * took back, whose LeaseExpired error names the killed worker. The survivors then stop on SIGTERM
 * with exit code 0 and their "stopped" line.
 *
 * The CLI has no `--reap-interval-ms` flag and the Worker reaps every 30 s by default, too slow
 * here: the test itself calls `queue.reap()` every 200 ms while it waits (any caller of reap()
 * is "the reaper"), and sends a wake-up hint after a reap that took jobs back, as a Worker's own
 * reaper loop does for its own claim loop.
 *
 * Deliberate breaks seen failing (in a private copy of the tree, never here):
 * - the claim statement (src/store/statements.ts) without `FOR UPDATE SKIP LOCKED` and without
 *   the outer `AND status = 'pending'` re-check: jobs ran twice under two live workers
 *   ("job 1 ran twice but the killed worker did not hold it").
 * - the reap statement without `lease_until < now()` (CTE and outer re-check): the test's reaper
 *   took live leases from the survivors, and their jobs ran twice.
 * - src/cli/worker.ts not handling SIGTERM: the survivors died of the signal instead of
 *   stopping gracefully with exit code 0.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { notifyChannel, quoteIdent } from '../../src/db/identifier.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { killChildren, REPO_ROOT } from '../support/spawn.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);
const LEDGER = `${S}.crash_ledger`;
const COMPLETIONS = `${S}.crash_completions`;
const FIXTURE = 'test/worker/fixtures/ledger-tasks.ts';
const TASK = 'crash.ledger';
const TOTAL = 1_500;
const WORKERS = 3;
const CONCURRENCY = 10;
/** Jobs each worker may claim ahead of its free slots. */
const PREFETCH = 20;
const LEASE_MS = 2_000;
const STOP_TIMEOUT_MS = 5_000;

/** One `skiplock worker` child process. */
interface CliWorker {
  readonly child: ChildProcess;
  /** Resolves with the worker id printed in the start banner. */
  readonly started: Promise<string>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stdout(): string;
  stderr(): string;
}

const children: ChildProcess[] = [];

function startCliWorker(): CliWorker {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'src/cli/main.ts',
      'worker',
      '--tasks',
      FIXTURE,
      '--schema',
      TEST_SCHEMA,
      '--concurrency',
      String(CONCURRENCY),
      '--prefetch',
      String(PREFETCH),
      '--lease-ms',
      String(LEASE_MS),
      '--stop-timeout-ms',
      String(STOP_TIMEOUT_MS),
    ],
    {
      cwd: REPO_ROOT,
      env: { ...process.env, DATABASE_URL: db.url, SKIPLOCK_TEST_SCHEMA: TEST_SCHEMA },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  children.push(child);
  let out = '';
  let err = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    // 'close', not 'exit': the "stopped" line is read once the pipes have closed too
    child.once('close', (code, signal) => resolve({ code, signal }));
  });
  const started = new Promise<string>((resolve, reject) => {
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (chunk: string) => {
      out += chunk;
      const match = /^skiplock worker (\S+) started: /m.exec(out);
      if (match) resolve(match[1]!);
    });
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      err += chunk;
    });
    void exited.then(({ code, signal }) =>
      reject(new Error(`worker exited (code ${code}, signal ${signal}) before starting; stderr:\n${err}`)),
    );
  });
  started.catch(() => undefined); // awaited by the test; never unhandled
  return { child, started, exited, stdout: () => out, stderr: () => err };
}

/** Rejects if `promise` has not settled within `ms`. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

const byId = (a: string, b: string) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0);
const sorted = (ids: Iterable<string>) => [...ids].sort(byId);

async function count(where: string, values: unknown[] = []): Promise<number> {
  const [row] = await db.sql<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${db.jobs} WHERE ${where}`,
    values,
  );
  return row?.n ?? 0;
}

async function runningOf(workerId: string): Promise<string[]> {
  const rows = await db.sql<{ id: string }>(
    `SELECT id::text AS id FROM ${db.jobs} WHERE status = 'running' AND worker_id = $1 ORDER BY id`,
    [workerId],
  );
  return rows.map((row) => row.id);
}

beforeAll(async () => {
  await db.sql(`CREATE TABLE ${LEDGER} (
    job_id bigint NOT NULL, attempt int NOT NULL, worker_id text NOT NULL, pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  // Every update that leaves a job `done` is a completion; a job must have exactly one.
  await db.sql(`CREATE TABLE ${COMPLETIONS} (job_id bigint NOT NULL, worker_id text, attempts int NOT NULL)`);
  await db.sql(`CREATE FUNCTION ${S}.crash_count_completion() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      INSERT INTO ${COMPLETIONS} (job_id, worker_id, attempts) VALUES (NEW.id, NEW.worker_id, NEW.attempts);
      RETURN NULL;
    END $fn$`);
  await db.sql(`CREATE TRIGGER crash_count_completion AFTER UPDATE ON ${db.jobs}
    FOR EACH ROW WHEN (NEW.status = 'done') EXECUTE FUNCTION ${S}.crash_count_completion()`);
});

afterAll(async () => {
  await killChildren(children);
});

test('3 CLI workers, 1,500 jobs, one SIGKILLed mid-run: every job done once; only its held jobs ran twice', async () => {
  const queue = db.queue({ poolSize: 2 });
  const workers = Array.from({ length: WORKERS }, startCliWorker);
  const ids = await within(
    Promise.all(workers.map((w) => w.started)),
    30_000,
    'the 3 workers printing their start banners',
  );
  expect(new Set(ids).size).toBe(WORKERS);

  const t0 = performance.now();
  const enqueued = await queue.enqueueMany(
    Array.from({ length: TOTAL }, (_, i) => ({ task: TASK, payload: { i } })),
  );
  const allIds = sorted(enqueued.map((e) => e.id));
  expect(enqueued.every((e) => e.created)).toBe(true);

  // Mid-run: a fifth of the jobs done, and the victim running some.
  const victimIndex = 1;
  const victim = workers[victimIndex]!;
  const victimId = ids[victimIndex]!;
  const killDeadline = Date.now() + 30_000;
  for (;;) {
    if ((await count(`status = 'done'`)) >= TOTAL / 5 && (await runningOf(victimId)).length > 0) break;
    if (Date.now() > killDeadline) throw new Error('the run never reached a fifth of the jobs done');
    await sleep(20);
  }
  const heldBeforeKill = await runningOf(victimId);
  victim.child.kill('SIGKILL');
  expect(await victim.exited).toEqual({ code: null, signal: 'SIGKILL' });
  const tKill = performance.now();
  const doneAtKill = await count(`status = 'done'`);

  // The dead worker's backends may still finish a statement it sent just before dying (a claim,
  // a complete): read its running jobs until the set is stable. Its leases last ≥ 1.3 s more.
  let held = await runningOf(victimId);
  for (let stable = 0; stable < 3; ) {
    await sleep(50);
    const again = await runningOf(victimId);
    stable = again.join() === held.join() ? stable + 1 : 0;
    held = again;
  }
  expect(held.length, 'the killed worker held jobs when it died').toBeGreaterThan(0);
  // It held at most its concurrency plus its prefetch, and nothing changed hands while we read
  // (leases still live).
  expect(held.length).toBeLessThanOrEqual(CONCURRENCY + PREFETCH);
  expect(await count(`id = ANY($1::bigint[]) AND lease_until > now()`, [held])).toBe(held.length);

  // Until every job is done: poll, and be the reaper every 200 ms.
  const reapedByTest = new Set<string>();
  const doneDeadline = Date.now() + 40_000;
  let lastReap = 0;
  for (;;) {
    if (performance.now() - lastReap >= 200) {
      lastReap = performance.now();
      const reaped = await queue.reap();
      for (const id of reaped) reapedByTest.add(id);
      // wake the survivors, as Worker's reaper wakes itself
      if (reaped.length > 0) await db.sql(`SELECT pg_notify($1, 'jobs')`, [notifyChannel(TEST_SCHEMA)]);
    }
    if ((await count(`status = 'done'`)) === TOTAL) break;
    for (const [i, w] of workers.entries()) {
      if (i !== victimIndex && w.child.exitCode !== null)
        throw new Error(`survivor ${ids[i]} exited with ${w.child.exitCode}; stderr:\n${w.stderr()}`);
    }
    if (Date.now() > doneDeadline) {
      const states = await db.sql(`SELECT status, count(*)::int AS n FROM ${db.jobs} GROUP BY 1`);
      throw new Error(`not every job done within 40 s: ${JSON.stringify(states)}`);
    }
    await sleep(50);
  }
  const tDone = performance.now();

  // The survivors stop gracefully on SIGTERM: exit 0 within the stop timeout, "stopped" line.
  const survivors = workers.filter((_, i) => i !== victimIndex);
  for (const w of survivors) w.child.kill('SIGTERM');
  const exits = await within(
    Promise.all(survivors.map((w) => w.exited)),
    STOP_TIMEOUT_MS + 10_000,
    'the survivors exiting after SIGTERM',
  );
  for (const [i, w] of survivors.entries()) {
    expect(exits[i], `survivor exit; stderr:\n${w.stderr()}`).toEqual({ code: 0, signal: null });
    expect(w.stdout()).toMatch(/^skiplock worker \S+ stopped: \d+ done, 0 retried, 0 dead, 0 released$/m);
  }

  // Every job done, with the result of its last attempt, written by its last owner.
  const states = await db.sql<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM ${db.jobs} GROUP BY 1`,
  );
  expect(states).toEqual([{ status: 'done', n: TOTAL }]);
  expect(
    await count(
      `result->>'workerId' = attempted_by[cardinality(attempted_by)] AND (result->>'attempt')::int = attempts
         AND worker_id IS NULL AND lease_until IS NULL`,
    ),
  ).toBe(TOTAL);

  // Exactly one completion per job.
  const completions = await db.sql<{ job_id: string; n: number }>(
    `SELECT job_id::text AS job_id, count(*)::int AS n FROM ${COMPLETIONS} GROUP BY 1`,
  );
  expect(sorted(completions.map((c) => c.job_id))).toEqual(allIds);
  expect(completions.filter((c) => c.n !== 1)).toEqual([]);

  // The ledger: every job executed at least once, by one of the three workers.
  const ledger = await db.sql<{ job_id: string; attempt: number; worker_id: string; pid: number }>(
    `SELECT job_id::text AS job_id, attempt, worker_id, pid FROM ${LEDGER} ORDER BY job_id, attempt`,
  );
  const executions = new Map<string, { attempt: number; workerId: string }[]>();
  for (const row of ledger) {
    expect(ids).toContain(row.worker_id);
    const list = executions.get(row.job_id) ?? [];
    list.push({ attempt: row.attempt, workerId: row.worker_id });
    executions.set(row.job_id, list);
  }
  expect(sorted(executions.keys())).toEqual(allIds);

  // Jobs executed twice: only ones the killed worker held — its attempt 1, then a survivor's 2.
  const duplicated = sorted([...executions].filter(([, runs]) => runs.length > 1).map(([id]) => id));
  for (const id of duplicated) {
    expect(held, `job ${id} ran twice but the killed worker did not hold it`).toContain(id);
    const runs = executions.get(id)!;
    expect(runs).toHaveLength(2);
    expect(runs[0]).toEqual({ attempt: 1, workerId: victimId });
    expect(runs[1]!.attempt).toBe(2);
    expect(runs[1]!.workerId).not.toBe(victimId);
  }

  // The reaper took back exactly the held jobs, each under the killed worker's name; they ran
  // again on attempt 2 and every other job on attempt 1.
  const reaped = await db.sql<{ id: string; attempts: number; worker_id: string; last_error: string }>(
    `SELECT id::text AS id, attempts, attempted_by[cardinality(attempted_by)] AS worker_id, last_error
     FROM ${db.jobs} WHERE last_error IS NOT NULL ORDER BY id`,
  );
  // A completion the killed worker had already sent can still commit after the kill (its
  // backend finishes the statement): such a held job ends done by its owner on attempt 1.
  const lateCompleted = new Set(
    (
      await db.sql<{ id: string }>(
        `SELECT id::text AS id FROM ${db.jobs} WHERE id = ANY($1::bigint[]) AND status = 'done'
         AND attempted_by = ARRAY[$2::text] AND attempts = 1 AND last_error IS NULL`,
        [held, victimId],
      )
    ).map((r) => r.id),
  );
  const reclaimed = held.filter((id) => !lateCompleted.has(id));
  expect(reaped.map((r) => r.id)).toEqual(reclaimed);
  for (const row of reaped) {
    expect(row.last_error.startsWith(`LeaseExpired: the lease of worker ${victimId} on attempt 1 of `)).toBe(
      true,
    );
    expect(row.attempts).toBe(2);
    expect(row.worker_id).not.toBe(victimId);
  }
  expect(sorted(reapedByTest).every((id) => held.includes(id))).toBe(true);
  expect(await count(`attempts = 1`)).toBe(TOTAL - reclaimed.length);
  // What the killed worker ran and did not complete is among what it held.
  const victimRuns = ledger.filter((row) => row.worker_id === victimId).map((row) => row.job_id);
  const completedByVictim = new Set(
    (
      await db.sql<{ id: string }>(
        `SELECT id::text AS id FROM ${db.jobs} WHERE status = 'done' AND attempted_by[cardinality(attempted_by)] = $1`,
        [victimId],
      )
    ).map((r) => r.id),
  );
  expect(victimRuns.filter((id) => !completedByVictim.has(id) && !held.includes(id))).toEqual([]);

  const perWorker = ids.map((id) => ledger.filter((row) => row.worker_id === id).length);
  console.log(
    `crash: ${TOTAL} jobs on ${WORKERS} CLI workers (concurrency ${CONCURRENCY}, lease ${LEASE_MS} ms); ` +
      `killed ${victimId} at ${Math.round(tKill - t0)} ms with ${doneAtKill} done; ` +
      `it held ${held.length} jobs (${heldBeforeKill.length} read just before the kill), ` +
      `all ${TOTAL} done at ${Math.round(tDone - t0)} ms (${Math.round(tDone - tKill)} ms after the kill); ` +
      `${ledger.length} executions (per worker ${perWorker.join('/')}), ${duplicated.length} ran twice ` +
      `(held but not yet started by the handler: ${held.length - duplicated.length}); ` +
      `test reaper took back ${reapedByTest.size}`,
  );
});
