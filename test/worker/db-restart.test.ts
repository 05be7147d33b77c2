/**
 * Guards SPEC §3 (a worker survives a database restart: its LISTEN connection reconnects with
 * backoff; outcome writes that fail while the database is away are retried while the lease
 * lasts; a failed heartbeat or reap is reported, not fatal) and §1.5/§1.9 around it: every job still ends `done`,
 * each handler ran exactly once (no write was dropped and left for the reaper), a 3 s handler
 * spanning the outage is not aborted and its outcome is written once the server is back, and the
 * wake-up latency of fresh jobs afterwards is back to normal (the fallback poll is 60 s, so only
 * a working LISTEN passes).
 *
 * The test owns its embedded PostgreSQL (not the suite's server): it stops it mid-run (fast
 * shutdown, every connection dropped), waits 1 s, and starts it again on the same port and data
 * folder. Errors are expected during the outage: the worker's 'error' listener collects them, and
 * the test's own Queue survives its pool's dead connections.
 *
 * Deliberate breaks seen failing (in a private copy of src/, never here):
 * - NotificationListener.scheduleReconnect() made a no-op: no 'listen:connected' with
 *   `reconnected: true` (timed out waiting for it).
 * - persist() in src/worker/job-executor.ts not retrying connection errors: the outcomes of the
 *   jobs that finished during the outage were dropped and those jobs stayed `running` (their
 *   10 s leases, then the 30 s reaper): not all jobs done within 30 s.
 * - LeaseKeeper.tick() treating a failed renewal as lost leases: the long handler was aborted
 *   and its outcome discarded; the job was reaped and ran again (attempts 2, LeaseExpired).
 * Not covered here: Worker.listening() without its claim pass on reconnect passed (the backlog
 * kept the claim loop busy, and NOTIFY works again once LISTEN is back); wakeup.test.ts covers
 * it by killing the LISTEN backend while jobs are enqueued.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, expect, test } from 'vitest';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../../src/embedded/embedded-postgres.js';
import { Queue } from '../../src/queue.js';
import { Worker } from '../../src/worker/worker.js';
import { TEST_SCHEMA } from '../support/schema.js';

const SHORT = 'restart.short';
const LONG = 'restart.long';
const LATENCY = 'restart.latency';
const BEFORE = 300;
const AFTER = 100;
const FRESH = 20;
const DOWNTIME_MS = 1_000;

let dir: string | undefined;
let server: EmbeddedPostgres | undefined;
let queue: Queue | undefined;
let worker: Worker | undefined;

afterAll(async () => {
  await worker?.stop({ timeoutMs: 1_000 });
  await queue?.close();
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Polls `check` every 20 ms until it holds; throws after `timeoutMs`. */
async function until(
  what: string,
  check: () => Promise<boolean> | boolean,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

test('database restart mid-run: every job done once, the worker reconnects, wake-up latency recovers', async () => {
  dir = await mkdtemp(join(tmpdir(), 'skiplock-restart-'));
  const dataDir = join(dir, 'data');
  server = await startEmbeddedPostgres({ dataDir, fast: true });
  const { port, connectionString } = server;
  queue = new Queue({ connectionString, schema: TEST_SCHEMA, poolSize: 4 });
  await queue.migrate();

  // What the handlers did, in this process.
  const executions = new Map<string, number>();
  const latencyStart = new Map<number, number>();
  let longStarted = false;
  let longFinishedAt = 0;
  let longAbortedWhileRunning: boolean | null = null;
  const errors: { during: string; message: string }[] = [];
  const connected: { reconnected: boolean; at: number }[] = [];
  let longDoneEventAt = 0;

  worker = new Worker({
    connectionString,
    schema: TEST_SCHEMA,
    concurrency: 5,
    leaseMs: 10_000,
    pollIntervalMs: 60_000,
    tasks: {
      [SHORT]: async (payload: { i: number }, { job }) => {
        executions.set(job.id, (executions.get(job.id) ?? 0) + 1);
        await sleep(20);
        return { i: payload.i };
      },
      [LONG]: async (_payload: unknown, { signal }) => {
        longStarted = true;
        await sleep(3_000);
        longAbortedWhileRunning = signal.aborted;
        longFinishedAt = performance.now();
        return { aborted: signal.aborted };
      },
      [LATENCY]: (payload: { i: number }) => {
        latencyStart.set(payload.i, performance.now());
      },
    },
  });
  worker.on('error', ({ error, during }) => errors.push({ during, message: error.message }));
  worker.on('listen:connected', ({ reconnected }) => connected.push({ reconnected, at: performance.now() }));
  worker.on('job:done', ({ job }) => {
    if (job.task === LONG) longDoneEventAt = performance.now();
  });
  await worker.start();
  expect(connected).toEqual([{ reconnected: false, at: expect.any(Number) }]);

  const countDone = async () => {
    const counts = await queue!.counts();
    return counts.done;
  };

  // A long job first, so it is running when the server goes away; then the 300 short ones.
  const { id: longId } = await queue.enqueue(LONG, {});
  await until('the long job to start', () => longStarted, 5_000);
  const before = await queue.enqueueMany(
    Array.from({ length: BEFORE }, (_, i) => ({ task: SHORT, payload: { i } })),
  );
  await until('50 short jobs done', async () => (await countDone()) >= 50, 15_000);

  // The outage: fast shutdown (every connection dropped), 1 s down, back on the same port.
  const tStop = performance.now();
  await server.stop();
  const tDown = performance.now();
  const doneAtStop = [...executions.values()].length;
  // A heartbeat and a reap while the server is away (their timers are 3.3 s and 30 s apart, so
  // run one of each now): both fail, are reported, and cost no lease.
  await worker.tick.renewLeases();
  await worker.tick.reap();
  await sleep(DOWNTIME_MS); // the outage itself, not a wait for a condition
  const errorsWhileDown = errors.length;
  server = await startEmbeddedPostgres({ dataDir, port, fast: true });
  const tUp = performance.now();
  expect(server.port).toBe(port);

  await until(
    "the worker's LISTEN connection to come back",
    () => connected.some((c) => c.reconnected),
    15_000,
  );
  const reconnectedAt = connected.find((c) => c.reconnected)!.at;

  // Keep enqueueing after the restart, in small batches.
  const after: { id: string }[] = [];
  for (let batch = 0; batch < AFTER / 10; batch++) {
    after.push(
      ...(await queue.enqueueMany(
        Array.from({ length: 10 }, (_, k) => ({ task: SHORT, payload: { i: BEFORE + batch * 10 + k } })),
      )),
    );
    await sleep(20);
  }
  const total = BEFORE + AFTER + 1;
  await until(`all ${total} jobs done`, async () => (await countDone()) === total, 30_000).catch(
    async (error: Error) => {
      throw new Error(`${error.message}: ${JSON.stringify(await queue!.counts())}`);
    },
  );
  const tAllDone = performance.now();

  const counts = await queue.counts();
  expect(counts).toEqual({ waiting: 0, pending: 0, running: 0, done: total, dead: 0, cancelled: 0 });
  // Each short job ran exactly once: no outcome write was dropped and left to the reaper.
  const shortIds = [...before, ...after].map((e) => e.id).sort();
  expect([...executions.keys()].sort()).toEqual(shortIds);
  expect([...executions.entries()].filter(([, n]) => n !== 1)).toEqual([]);
  const attempts = await queue.list({ status: 'done', limit: 1_000 });
  expect(attempts.filter((job) => job.attempts !== 1 || job.lastError !== null)).toEqual([]);

  // The long handler spanned the outage, was never aborted, and its outcome was written after.
  const long = await queue.get(longId);
  expect(long).toMatchObject({ status: 'done', attempts: 1, result: { aborted: false } });
  expect(longAbortedWhileRunning).toBe(false);
  expect(longFinishedAt).toBeGreaterThan(tDown); // it outlived the connections it started with
  expect(longDoneEventAt).toBeGreaterThan(tUp);
  expect(worker.stats()).toMatchObject({ leaseLost: 0, retried: 0, dead: 0, runaway: 0 });

  // The outage was seen and survived: errors were reported, not thrown.
  expect(errorsWhileDown).toBeGreaterThan(0);
  const during = errors.map((e) => e.during);
  expect(during).toContain('renewing leases');
  expect(during).toContain('reaping expired leases');
  expect(during).toContain('listening for notifications (reconnecting)');

  // Wake-up latency is back to normal: 20 jobs, 30 ms apart, with a 60 s fallback poll.
  const enqueuedAt: number[] = [];
  for (let i = 0; i < FRESH; i++) {
    enqueuedAt[i] = performance.now();
    await queue.enqueue(LATENCY, { i });
    await sleep(30);
  }
  await until('the fresh jobs to start', () => latencyStart.size === FRESH, 10_000);
  const latencies = enqueuedAt.map((t, i) => latencyStart.get(i)! - t);
  const p50 = percentile(latencies, 50);
  const max = Math.max(...latencies);

  await worker.stop({ timeoutMs: 5_000 });
  const errorKinds = [...new Set(errors.map((e) => e.during.replace(/\(job \d+\).*/, '(job …)')))];
  console.log(
    `db restart: stopped the server after ${doneAtStop} jobs had started (stop took ${Math.round(tDown - tStop)} ms), ` +
      `outage ${Math.round(tUp - tStop)} ms (down ${DOWNTIME_MS} ms + restart ${Math.round(tUp - tDown - DOWNTIME_MS)} ms); ` +
      `LISTEN back ${Math.round(reconnectedAt - tUp)} ms after the server; all ${total} done ` +
      `${Math.round(tAllDone - tUp)} ms after it; long handler finished ${Math.round(longFinishedAt - tUp)} ms after it; ` +
      `wake-up after restart p50 ${p50.toFixed(1)} ms, max ${max.toFixed(1)} ms; ` +
      `${errors.length} errors reported (${errorKinds.join('; ')})`,
  );
  // Wake-ups again, not the 60 s poll. Generous for a loaded machine: the same figure measured by
  // wakeup.test.ts reached a p50 of 134 ms with other work on the 2 cores (issue 21); a worker
  // whose LISTEN did not come back would not start these jobs within the 10 s above.
  expect(p50).toBeLessThan(250);
  expect(max).toBeLessThan(2_000);
});
