/**
 * Guards the long-running commands of SPEC §4 end to end, as real child processes
 * (`node --import tsx src/cli/main.ts …`) against a real PostgreSQL database:
 *
 * - `skiplock worker --tasks test/cli/fixtures/tasks.ts`: prints its one-line start banner, runs
 *   the jobs waiting at start and those enqueued after its banner, prints exactly one line per
 *   failure and none per success — unless --verbose, which prints a start and a done line per
 *   job — and on SIGTERM stops with exit code 0 and its "stopped" line with the right totals.
 *   A missing tasks module, a module without handlers, no --tasks, a bad --concurrency and no
 *   database URL each exit 2 with one line on stderr.
 * - `skiplock dashboard --port P`: prints its URL, answers GET /api/ops with 200 and the
 *   snapshot, and exits 0 on SIGINT; a port in use exits 2 and an unreachable database exits 1,
 *   each with one line. (`--port 0` is refused by the CLI's positiveInt, so the test picks a free
 *   port itself.)
 *
 * Deliberate breaks seen failing (in a private copy of the tree, never here):
 * - src/cli/worker.ts `report()` printing a line on `job:done` also without --verbose: the quiet
 *   worker's stderr had a line per success.
 * - src/cli/worker.ts without the SIGTERM handler: the worker died of the signal (code null,
 *   signal SIGTERM) and never printed "stopped".
 * - src/cli/worker.ts `loadTasks()` without its ERR_MODULE_NOT_FOUND branch: the missing module
 *   exited 1 instead of 2.
 * - src/cli/dashboard.ts listening only for SIGTERM: SIGINT killed it (no exit code 0).
 */
import type { ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Queue } from '../../src/queue.js';
import type { OpsSnapshot } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { freePort } from '../support/ports.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { killChildren } from '../support/spawn.js';
import { type CliOptions, oneLineError, runCli, spawnCli } from './run-cli.js';

const db = useTestDatabase();
const TASKS = 'test/cli/fixtures/tasks.ts';
let queue: Queue;
const children: ChildProcess[] = [];

beforeAll(() => {
  queue = db.queue({ poolSize: 2 });
});

afterAll(async () => {
  await killChildren(children);
});

/** A CLI process that keeps running: its output so far, and helpers to wait on it. */
interface Running {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the match once stdout (or stderr) matches `pattern`; rejects if it exits first. */
  waitFor(pattern: RegExp, stream?: 'stdout' | 'stderr', timeoutMs?: number): Promise<RegExpExecArray>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function start(args: string[], options: CliOptions = {}): Running {
  const child = spawnCli(args, { url: db.url, ...options });
  children.push(child);
  const out = { stdout: '', stderr: '' };
  // 'close', not 'exit': 'exit' may come before the last output has been read from the pipes
  // (the "stopped" line was then missing from stdout now and then).
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('close', (code, signal) => resolve({ code, signal })),
  );
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    out.stdout += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    out.stderr += chunk;
  });
  let done = false;
  void exited.then(() => {
    done = true;
  });
  return {
    child,
    exited,
    stdout: () => out.stdout,
    stderr: () => out.stderr,
    async waitFor(pattern, stream = 'stdout', timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const match = pattern.exec(out[stream]);
        if (match) return match;
        if (done || Date.now() > deadline) {
          throw new Error(
            `${pattern} not on ${stream} (${done ? 'the process exited' : `within ${timeoutMs} ms`})\n--- stdout\n${out.stdout}--- stderr\n${out.stderr}`,
          );
        }
        await sleep(25);
      }
    },
  };
}

/** Resolves once `check` is true (polled), or rejects after `timeoutMs`. */
async function until(check: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(50);
  }
}

const lines = (text: string) => text.replace(/\n$/, '').split('\n');
const STAMP = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z';

async function listen(server: Server, port = 0): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

async function jobsOf(queueName: string) {
  return db.sql<{
    id: string;
    task: string;
    status: string;
    worker_id: string;
    result: unknown;
    last_error: string;
  }>(
    // ORDER BY j.id: the bigint column (a bare `id` would sort the text alias: '10' before '9')
    `SELECT j.id::text AS id, task, status, attempted_by[cardinality(attempted_by)] AS worker_id, result, last_error
     FROM ${db.jobs} AS j WHERE queue = $1 ORDER BY j.id`,
    [queueName],
  );
}

describe.concurrent('long-running commands', { timeout: 120_000 }, () => {
  test('worker: banner, jobs run, one line per failure (every job with --verbose); SIGTERM → exit 0, "stopped"', async () => {
    // Waiting before the workers start.
    for (let n = 1; n <= 3; n++) await queue.enqueue('cli.ok', { n }, { queue: 'cli-quiet' });
    for (let n = 1; n <= 2; n++) await queue.enqueue('cli.ok', { n }, { queue: 'cli-loud' });

    const quiet = start(['worker', '--tasks', TASKS, '--queues', 'cli-quiet', '--concurrency', '2']);
    const loud = start(['worker', '--tasks', TASKS, '--queues', 'cli-loud', '--verbose']);
    const banner = (concurrency: number) =>
      new RegExp(
        `^skiplock worker (\\S+) started: tasks cli\\.ok, cli\\.fail; concurrency ${concurrency}; schema "${TEST_SCHEMA.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}"; LISTEN$`,
        'm',
      );
    const [quietId, loudId] = (await Promise.all([quiet.waitFor(banner(2)), loud.waitFor(banner(10))])).map(
      (m) => m[1] as string,
    );

    // Enqueued after the banner (the fallback poll is 30 s away: a NOTIFY wakes the workers).
    const failQuiet = (await queue.enqueue('cli.fail', null, { queue: 'cli-quiet', maxAttempts: 1 })).id;
    await queue.enqueue('cli.ok', { n: 4 }, { queue: 'cli-quiet' });
    const failLoud = (await queue.enqueue('cli.fail', null, { queue: 'cli-loud', maxAttempts: 1 })).id;

    await until(async () => {
      const jobs = [...(await jobsOf('cli-quiet')), ...(await jobsOf('cli-loud'))];
      return jobs.length === 8 && jobs.every((j) => j.status === 'done' || j.status === 'dead');
    }, 'all 8 jobs finished');
    // Their lines are written as the outcomes are recorded; wait for them before stopping.
    await quiet.waitFor(/ dead {3}cli\.fail /, 'stderr');
    await loud.waitFor(new RegExp(`(^${STAMP} done .*\\n[^]*){2}`, 'm'), 'stderr');
    await loud.waitFor(/ dead {3}cli\.fail /, 'stderr');

    quiet.child.kill('SIGTERM');
    loud.child.kill('SIGTERM');
    expect(await quiet.exited, quiet.stderr()).toEqual({ code: 0, signal: null });
    expect(await loud.exited, loud.stderr()).toEqual({ code: 0, signal: null });

    expect(lines(quiet.stdout())).toEqual([
      expect.stringMatching(banner(2)),
      `skiplock worker ${quietId} stopped: 4 done, 0 retried, 1 dead, 0 released`,
    ]);
    expect(lines(quiet.stderr())).toEqual([
      expect.stringMatching(
        new RegExp(
          `^${STAMP} dead {3}cli\\.fail #${failQuiet} after 1 attempts: Error: boom from the fixture$`,
        ),
      ),
      'skiplock worker: SIGTERM, stopping (again to exit at once)',
    ]);

    expect(lines(loud.stdout())).toEqual([
      expect.stringMatching(banner(10)),
      `skiplock worker ${loudId} stopped: 2 done, 0 retried, 1 dead, 0 released`,
    ]);
    const loudLines = lines(loud.stderr());
    expect(loudLines.at(-1)).toBe('skiplock worker: SIGTERM, stopping (again to exit at once)');
    const kinds = loudLines.slice(0, -1).map((line) => new RegExp(`^${STAMP} (\\w+) `).exec(line)?.[1]);
    expect(kinds.sort()).toEqual(['dead', 'done', 'done', 'start', 'start', 'start']);
    expect(loud.stderr()).toMatch(new RegExp(`^${STAMP} start {2}cli\\.fail #${failLoud} attempt 1$`, 'm'));
    expect(loud.stderr()).toMatch(new RegExp(`^${STAMP} done {3}cli\\.ok #\\d+ in \\d+ ms$`, 'm'));

    const quietJobs = await jobsOf('cli-quiet');
    expect(
      quietJobs.filter((j) => j.task === 'cli.ok').map((j) => [j.status, j.worker_id, j.result]),
    ).toEqual([1, 2, 3, 4].map((n) => ['done', quietId, { ok: true, n }]));
    const failed = quietJobs.find((j) => j.id === failQuiet);
    expect(failed?.status).toBe('dead');
    expect(failed?.last_error).toMatch(/^Error: boom from the fixture\n/);
    expect((await jobsOf('cli-loud')).every((j) => j.worker_id === loudId)).toBe(true);
  });

  test('worker: a SIGTERM while it starts (its first jobs already running) stops it gracefully', async () => {
    // Before: the signal handlers came after start() resolved, so Node's default killed the
    // process (exit 143) and left the started job running until its lease expired.
    const { id } = await queue.enqueue('cli.slow', null, { queue: 'cli-early' });
    const worker = start([
      'worker',
      '--tasks',
      'test/cli/fixtures/slow-task.ts',
      '--queues',
      'cli-early',
      '--verbose',
    ]);
    await worker.waitFor(/ start {2}cli\.slow /, 'stderr');
    worker.child.kill('SIGTERM');
    expect(await worker.exited, worker.stderr()).toEqual({ code: 0, signal: null });
    expect(worker.stderr()).toMatch(/SIGTERM, stopping/);
    expect((await jobsOf('cli-early')).find((j) => j.id === id)?.status).toBe('done');
  });

  test('worker --tasks with defined tasks (SPEC §9): found by their exports; a payload that fails its schema goes dead', async () => {
    const worker = start(['worker', '--tasks', 'test/cli/fixtures/typed-tasks.ts', '--queues', 'cli-typed']);
    // (a module namespace lists its exports in name order: other, typed)
    await worker.waitFor(/^skiplock worker \S+ started: tasks cli\.typed\.other, cli\.typed; /m);
    const good = (await queue.enqueue('cli.typed', { n: 21 }, { queue: 'cli-typed' })).id;
    const bad = (await queue.enqueue('cli.typed', { n: -1 }, { queue: 'cli-typed', maxAttempts: 5 })).id;
    await until(async () => {
      const jobs = await jobsOf('cli-typed');
      return jobs.length === 2 && jobs.every((j) => j.status === 'done' || j.status === 'dead');
    }, 'both typed jobs finished');
    await worker.waitFor(/ dead {3}cli\.typed /, 'stderr');
    worker.child.kill('SIGTERM');
    expect(await worker.exited, worker.stderr()).toEqual({ code: 0, signal: null });
    const jobs = await jobsOf('cli-typed');
    expect(jobs.find((j) => j.id === good)).toMatchObject({ status: 'done', result: { doubled: 42 } });
    expect(jobs.find((j) => j.id === bad)).toMatchObject({
      status: 'dead',
      last_error: expect.stringMatching(
        /^PermanentError: The payload does not match the schema of task "cli.typed": n: /,
      ),
    });
  });

  test('worker: missing module, module without handlers, no --tasks, bad flag, no database → exit 2, one line', async () => {
    const [missing, empty, noTasks, badConcurrency, noDatabase] = await Promise.all([
      runCli(['worker', '--tasks', 'test/cli/fixtures/nope.ts'], { url: db.url }),
      runCli(['worker', '--tasks', 'test/cli/fixtures/no-handlers.ts'], { url: db.url }),
      runCli(['worker'], { url: db.url }),
      runCli(['worker', '--tasks', TASKS, '--concurrency', '0'], { url: db.url }),
      runCli(['worker', '--tasks', TASKS]),
    ]);
    oneLineError(missing, 2, /^skiplock: --tasks: cannot find the module \S*test\/cli\/fixtures\/nope\.ts$/m);
    oneLineError(empty, 2, /^skiplock: --tasks: test\/cli\/fixtures\/no-handlers\.ts must export its tasks/);
    oneLineError(noTasks, 2, /^skiplock: required option '--tasks <module>' not specified$/m);
    oneLineError(badConcurrency, 2, /'0' is invalid.*positive integer/);
    oneLineError(noDatabase, 2, /^skiplock: --database-url: no database given/);
  });

  test('dashboard: prints its URL, GET /api/ops is 200, SIGINT exits 0; port in use → 2; database down → 1', async () => {
    const taken = createServer();
    const takenPort = await listen(taken);
    try {
      const [inUse, down] = await Promise.all([
        runCli(['dashboard', '--port', String(takenPort)], { url: db.url }),
        runCli(['dashboard', '--port', String(takenPort), '--database-url', 'postgres://127.0.0.1:1/x']),
      ]);
      oneLineError(inUse, 2, new RegExp(`^skiplock: port: ${takenPort} on 127\\.0\\.0\\.1 is in use`));
      oneLineError(down, 1, /^skiplock: .*ECONNREFUSED/);
    } finally {
      await new Promise<void>((resolve) => taken.close(() => resolve()));
    }

    // Another process may take the free port before the dashboard does: try a few.
    let dashboard: Running | undefined;
    let url = '';
    for (let attempt = 1; !dashboard; attempt++) {
      const port = await freePort();
      const candidate = start(['dashboard', '--port', String(port)], {
        env: { SKIPLOCK_ADMIN_TOKEN: undefined },
      });
      try {
        const match = await candidate.waitFor(
          /^skiplock dashboard on (http:\/\/127\.0\.0\.1:(\d+)\/) \(listening on 127\.0\.0\.1; no token: anyone on this machine may read and change jobs\); metrics at \1metrics\n$/,
        );
        expect(Number(match[2])).toBe(port);
        url = match[1] as string;
        dashboard = candidate;
      } catch (error) {
        if (attempt === 3 || !/is in use/.test(candidate.stderr())) throw error;
      }
    }
    const response = await fetch(`${url}api/ops`);
    expect(response.status).toBe(200);
    const ops = (await response.json()) as OpsSnapshot;
    for (const field of [
      'pending',
      'running',
      'done',
      'dead',
      'cancelled',
      'dead1h',
      'stuckRunning',
    ] as const) {
      expect(typeof ops[field], field).toBe('number');
    }
    dashboard.child.kill('SIGINT');
    expect(await dashboard.exited, dashboard.stderr()).toEqual({ code: 0, signal: null });
    expect(dashboard.stderr()).toBe('');
    expect(lines(dashboard.stdout())).toHaveLength(1);
  });
});
