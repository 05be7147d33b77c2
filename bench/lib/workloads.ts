/**
 * W1–W5 for any system (through its driver), W6 for Skiplock. Each function resets the system,
 * runs one repetition and closes every connection and worker it opened, even when it fails.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Queue } from '../../src/index.js';
import { SKIPLOCK_SCHEMA, SkiplockDriver } from '../systems/skiplock.js';
import type { BenchEnv, BenchPayload, Consumer, Producer, SystemDriver } from '../systems/types.js';
import { WorkerChild } from './child-process.js';
import type { Sizes } from './config.js';
import { adminPool, ident } from './db.js';
import type { StatementsSetup } from './statements.js';
import { DriverTrace } from './trace.js';
import { quantile, quietly, runConcurrently, sleep, waitFor, wallNow, withTimeout } from './util.js';
import { traceSummary, W3_MATCHERS, w3Breakdown } from './w3-parts.js';

export type Metrics = Record<string, number>;

export interface RunContext {
  sizes: Sizes;
  env: BenchEnv;
  log(message: string): void;
  /** `--profile` with pg_stat_statements (`--pg embedded`): the child's role and where its statements go. */
  statements?: StatementsSetup;
}

export function payloads(count: number, from = 0, groups = 0, sequences = 0): BenchPayload[] {
  return Array.from({ length: count }, (_, k) =>
    groups > 0
      ? { i: from + k, t: 0, g: (from + k) % groups }
      : sequences > 0
        ? { i: from + k, t: 0, s: (from + k) % sequences }
        : { i: from + k, t: 0 },
  );
}

/** Resolves the resources opened by `body` (producers, consumers, children) in reverse order. */
export async function using<T>(
  body: (defer: (close: () => Promise<unknown>) => void) => Promise<T>,
): Promise<T> {
  const closers: (() => Promise<unknown>)[] = [];
  try {
    return await body((close) => closers.push(close));
  } finally {
    for (const close of closers.reverse()) await quietly(close, 30_000, 'closing');
  }
}

export async function openProducer(
  driver: SystemDriver,
  defer: (close: () => Promise<unknown>) => void,
): Promise<Producer> {
  const producer = await withTimeout(driver.producer(), 30_000, 'opening the producer');
  defer(() => producer.close());
  return producer;
}

/** Enqueues `count` jobs through the batch API in chunks (untimed setup). */
async function preload(
  producer: Producer,
  count: number,
  chunk: number,
  groups = 0,
  sequences = 0,
): Promise<void> {
  for (let from = 0; from < count; from += chunk) {
    await producer.enqueueBatch(payloads(Math.min(chunk, count - from), from, groups, sequences));
  }
}

/** W1: bulk enqueue through the batch API, `w1Chunk` jobs per call, calls one after another. */
export async function w1(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { w1Jobs, w1Chunk } = ctx.sizes;
  await withTimeout(driver.reset(), 120_000, 'reset');
  return using(async (defer) => {
    const producer = await openProducer(driver, defer);
    await producer.enqueueBatch(payloads(10, -10)); // warm-up: connections, prepared statements
    const chunks: BenchPayload[][] = [];
    for (let from = 0; from < w1Jobs; from += w1Chunk)
      chunks.push(payloads(Math.min(w1Chunk, w1Jobs - from), from));
    const t0 = performance.now();
    await withTimeout(
      (async () => {
        for (const chunk of chunks) await producer.enqueueBatch(chunk);
      })(),
      Math.max(120_000, w1Jobs * 5),
      'bulk enqueue',
    );
    const ms = performance.now() - t0;
    return { jobsPerSec: (w1Jobs / ms) * 1000, ms };
  });
}

/**
 * W2 (+ memory): `w2Jobs` pre-enqueued jobs drained by one worker process at `w2Concurrency`.
 * Timed from the first handler start until the system's storage has no unfinished job left (so
 * buffered completions count); the process's peak RSS is its getrusage maxrss.
 */
export async function w2(driver: SystemDriver, ctx: RunContext, deleteCompleted = false): Promise<Metrics> {
  const { w2Jobs, w2Concurrency, w1Chunk } = ctx.sizes;
  await withTimeout(driver.reset(), 120_000, 'reset');
  await using(async (defer) => {
    const producer = await openProducer(driver, defer);
    await withTimeout(preload(producer, w2Jobs, w1Chunk), Math.max(120_000, w2Jobs * 10), 'pre-enqueue');
  });
  const queued = await driver.remaining();
  if (queued !== w2Jobs)
    throw new Error(`expected ${w2Jobs} queued jobs after the pre-enqueue, found ${queued}`);
  const drainLimit = Math.max(120_000, w2Jobs * 10);
  const { child, ready } = await WorkerChild.start({
    system: driver.name,
    env: ctx.env,
    mode: 'drain',
    concurrency: w2Concurrency,
    expect: w2Jobs,
    ...(deleteCompleted ? { deleteCompleted: true } : {}),
    lifetimeMs: drainLimit + 120_000,
  });
  try {
    const handled = await child.next('handled', drainLimit);
    let left = -1;
    await waitFor(
      async () => {
        left = await driver.remaining();
        return left === 0;
      },
      60_000,
      `the last completions to be written (${left} unfinished)`,
      5,
    );
    const endAt = wallNow();
    const result = await child.stop();
    const drainMs = endAt - result.firstJobAt;
    return {
      jobsPerSec: (w2Jobs / drainMs) * 1000,
      drainMs,
      handlersDoneMs: (handled.at as number) - result.firstJobAt,
      startupMs: (ready.readyAt as number) - (ready.startedAt as number),
      rssMb: result.maxRssBytes / 2 ** 20,
      sampledRssMb: result.sampledPeakRssBytes / 2 ** 20,
      extraRuns: result.handled - w2Jobs,
      backgroundErrors: result.errors.length,
    };
  } finally {
    child.kill();
  }
}

/**
 * W-batch (SPEC §11): `wBatchJobs` pre-enqueued no-op jobs drained by one worker process whose
 * handler gets up to `wBatchSize` jobs per call, `wBatchInFlight` calls at once — Skiplock's batch
 * task, pg-boss's work() with batchSize (perJobResults). graphile-worker has no handler that
 * takes many jobs: its "batch jobs" are one job whose payload is an array, so it drains
 * wBatchJobs / wBatchSize such jobs of wBatchSize items (an enqueue-side grouping: each item
 * is no job of its own — no own retry, status or dedupe). Timed as W2.
 */
export async function wBatch(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { wBatchJobs, wBatchSize, wBatchInFlight, w1Chunk } = ctx.sizes;
  await withTimeout(driver.reset(), 120_000, 'reset');
  const items = payloads(wBatchJobs);
  const withItems = driver as SystemDriver & {
    enqueueBatchJobs?(payloads: readonly BenchPayload[], size: number): Promise<void>;
  };
  if (driver.batching === 'payload') {
    if (!withItems.enqueueBatchJobs) throw new Error(`${driver.name}: no batch-job producer`);
    await withTimeout(withItems.enqueueBatchJobs(items, wBatchSize), 120_000, 'pre-enqueue');
  } else {
    await using(async (defer) => {
      const producer = await openProducer(driver, defer);
      await withTimeout(
        preload(producer, wBatchJobs, w1Chunk),
        Math.max(120_000, wBatchJobs * 10),
        'pre-enqueue',
      );
    });
  }
  const drainLimit = Math.max(120_000, wBatchJobs * 10);
  const { child } = await WorkerChild.start({
    system: driver.name,
    env: ctx.env,
    mode: 'drain',
    // a batch job of graphile-worker is one job: as many at once as the others run batches
    concurrency: driver.batching === 'payload' ? wBatchInFlight : wBatchSize * wBatchInFlight,
    batchSize: wBatchSize,
    expect: wBatchJobs,
    lifetimeMs: drainLimit + 120_000,
  });
  try {
    const handled = await child.next('handled', drainLimit);
    let left = -1;
    await waitFor(
      async () => {
        left = await driver.remaining();
        return left === 0;
      },
      60_000,
      `the last completions to be written (${left} unfinished)`,
      5,
    );
    const endAt = wallNow();
    const result = await child.stop();
    const drainMs = endAt - result.firstJobAt;
    return {
      jobsPerSec: (wBatchJobs / drainMs) * 1000,
      drainMs,
      handlersDoneMs: (handled.at as number) - result.firstJobAt,
      rssMb: result.maxRssBytes / 2 ** 20,
      extraRuns: result.handled - wBatchJobs,
      backgroundErrors: result.errors.length,
    };
  } finally {
    child.kill();
  }
}

/**
 * W3: an idle worker (in this process); jobs enqueued `w3IntervalMs` apart; enqueue call → handler
 * start. For the PostgreSQL systems, the breakdown of that time (lib/w3-parts.ts) from a trace of
 * the driver in this process; BENCH_TRACE_DUMP=dir writes each system's trace summary there.
 */
export async function w3(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { w3Jobs, w3IntervalMs, w3Concurrency } = ctx.sizes;
  await withTimeout(driver.reset(), 120_000, 'reset');
  return using(async (defer) => {
    const called = new Float64Array(w3Jobs);
    const resolved = new Float64Array(w3Jobs);
    const started = new Float64Array(w3Jobs);
    let handled = 0;
    let warmups = 0;
    const errors: string[] = [];
    const producer = await openProducer(driver, defer);
    const consumer: Consumer = await withTimeout(
      driver.consumer({
        concurrency: w3Concurrency,
        onJob: (payload) => {
          const now = performance.now();
          if (payload.i < 0) {
            warmups++;
          } else if (started[payload.i] === 0) {
            started[payload.i] = now;
            handled++;
          }
        },
        onError: (error) => errors.push(String(error)),
      }),
      60_000,
      'starting the worker',
    );
    defer(() => consumer.stop());
    // Warm-up: one job end to end, then let the worker go idle.
    await producer.enqueueOne({ i: -1, t: wallNow() });
    await waitFor(() => warmups > 0, 30_000, 'the warm-up job');
    await sleep(1_000);
    const trace = W3_MATCHERS[driver.name] ? DriverTrace.start() : null;
    defer(async () => trace?.stop());
    const calls: Promise<void>[] = [];
    const t0 = performance.now();
    for (let i = 0; i < w3Jobs; i++) {
      const wait = t0 + i * w3IntervalMs - performance.now();
      if (wait > 0) await sleep(wait);
      called[i] = performance.now();
      calls.push(
        producer.enqueueOne({ i, t: wallNow() }).then(() => {
          resolved[i] = performance.now();
        }),
      );
    }
    await withTimeout(Promise.all(calls), 60_000, 'enqueue calls');
    await waitFor(() => handled === w3Jobs, 30_000, `handlers (${handled}/${w3Jobs} started)`);
    trace?.stop();
    const latencies = Array.from(started, (at, i) => at - (called[i] as number));
    const dump = process.env.BENCH_TRACE_DUMP;
    if (trace && dump) {
      mkdirSync(dump, { recursive: true });
      writeFileSync(join(dump, `w3-${driver.name}.txt`), `${traceSummary(trace)}\n`);
    }
    return {
      p50: quantile(latencies, 0.5),
      p95: quantile(latencies, 0.95),
      p99: quantile(latencies, 0.99),
      max: Math.max(...latencies),
      backgroundErrors: errors.length,
      ...(trace ? w3Breakdown(driver.name, trace, called, resolved, started) : {}),
    };
  });
}

/** W4: `w4Calls` single enqueue calls, `w4InFlight` at once (no batching by the harness). */
export async function w4(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { w4Calls, w4InFlight } = ctx.sizes;
  await withTimeout(driver.reset(), 120_000, 'reset');
  return using(async (defer) => {
    const producer = await openProducer(driver, defer);
    await runConcurrently(32, w4InFlight, (i) => producer.enqueueOne({ i: -1 - i, t: 0 })); // warm-up
    const t0 = performance.now();
    await withTimeout(
      runConcurrently(w4Calls, w4InFlight, (i) => producer.enqueueOne({ i, t: 0 })),
      Math.max(60_000, w4Calls * 20),
      'single enqueues',
    );
    const ms = performance.now() - t0;
    return { jobsPerSec: (w4Calls / ms) * 1000, ms };
  });
}

/**
 * W5: `w5Workers` worker processes at `w5Concurrency` each, while this process enqueues with
 * `w5InFlight` single enqueue calls in flight for `w5Seconds`. Sustained rate = handler starts
 * inside the window / window; latency = enqueue call start → handler start (across processes).
 */
export async function w5(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { w5Seconds, w5Workers, w5Concurrency, w5InFlight } = ctx.sizes;
  await withTimeout(driver.reset(), 120_000, 'reset');
  const children: WorkerChild[] = [];
  try {
    const starts = await Promise.allSettled(
      Array.from({ length: w5Workers }, () =>
        WorkerChild.start({
          system: driver.name,
          env: ctx.env,
          mode: 'steady',
          concurrency: w5Concurrency,
          expect: 0,
          lifetimeMs: w5Seconds * 1000 + 300_000,
        }),
      ),
    );
    for (const start of starts) if (start.status === 'fulfilled') children.push(start.value.child);
    const failed = starts.find((start) => start.status === 'rejected');
    if (failed) throw failed.reason;
    const started = [...children];
    let enqueued = 0;
    let backlog = 0;
    let windowStart = 0;
    let windowEnd = 0;
    await using(async (defer) => {
      const producer = await openProducer(driver, defer);
      await runConcurrently(32, w5InFlight, (i) => producer.enqueueOne({ i: -1 - i, t: wallNow() })); // warm-up
      await sleep(500);
      windowStart = wallNow();
      windowEnd = windowStart + w5Seconds * 1000;
      let i = 0;
      const lane = async (): Promise<void> => {
        while (wallNow() < windowEnd) {
          await producer.enqueueOne({ i: i++, t: wallNow() });
          enqueued++;
        }
      };
      await withTimeout(
        Promise.all(Array.from({ length: w5InFlight }, lane)),
        w5Seconds * 1000 + 60_000,
        'producers',
      );
      backlog = await driver.remaining();
    });
    const results = await Promise.all(started.map((child) => child.stop({ windowStart, windowEnd })));
    const latencies = results.flatMap((r) => Array.from(r.latencies));
    const inWindow = results.reduce((sum, r) => sum + r.inWindow, 0);
    return {
      jobsPerSec: inWindow / w5Seconds,
      enqueuedPerSec: enqueued / w5Seconds,
      p50: quantile(latencies, 0.5),
      p99: quantile(latencies, 0.99),
      backlogAtEnd: backlog,
      backgroundErrors: results.reduce((sum, r) => sum + r.errors.length, 0),
    };
  } finally {
    for (const child of children) child.kill();
  }
}

/**
 * Pre-enqueued jobs drained by `processes` worker children at `concurrency` each, started
 * together (each waits for 'go'): the ms from the first handler start in any of them until the
 * system's storage holds no unfinished job, and the handler runs beyond one per job.
 */
async function drainWithChildren(
  driver: SystemDriver,
  ctx: RunContext,
  run: {
    jobs: number;
    processes: number;
    concurrency: number;
    handlerMs?: number;
    groupConcurrency?: number;
    what: string;
  },
): Promise<{ ms: number; extraRuns: number }> {
  const drainLimit = Math.max(120_000, run.jobs * (run.handlerMs ? 20 : 10));
  const children: WorkerChild[] = [];
  try {
    const started = await Promise.all(
      Array.from({ length: run.processes }, () =>
        WorkerChild.start({
          system: driver.name,
          env: ctx.env,
          mode: 'drain',
          concurrency: run.concurrency,
          expect: run.jobs + 1, // never reached by one child: the storage says when all is done
          lifetimeMs: drainLimit + 120_000,
          hold: true,
          ...(run.handlerMs ? { handlerMs: run.handlerMs } : {}),
          ...(run.groupConcurrency ? { groupConcurrency: run.groupConcurrency } : {}),
        }).then((started) => {
          children.push(started.child);
          return started.child;
        }),
      ),
    );
    for (const child of started) child.go();
    let left = -1;
    await waitFor(
      async () => {
        left = await driver.remaining();
        return left === 0;
      },
      drainLimit,
      `${run.what} to drain (${left} unfinished)`,
      10,
    );
    const endAt = wallNow();
    const results = await Promise.all(started.map((child) => child.stop()));
    const handled = results.reduce((sum, r) => sum + r.handled, 0);
    const firstJobAt = Math.min(...results.filter((r) => r.handled > 0).map((r) => r.firstJobAt));
    return { ms: endAt - firstJobAt, extraRuns: handled - run.jobs };
  } finally {
    for (const child of children) child.kill();
  }
}

/**
 * W7 (scale-out): for each point of `w7Processes`, `w7Jobs` pre-enqueued jobs drained by that
 * many worker processes at `w7Concurrency` each, on one database. The children start their
 * consumers together (each waits for 'go'); timed from the first handler start in any of them
 * until the system's storage holds no unfinished job. Metric `pN`: jobs/s with N processes.
 */
export async function w7(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { w7Jobs, w7Processes, w7Concurrency, w1Chunk } = ctx.sizes;
  const metrics: Metrics = {};
  for (const processes of w7Processes) {
    await withTimeout(driver.reset(), 120_000, 'reset');
    await using(async (defer) => {
      const producer = await openProducer(driver, defer);
      await withTimeout(preload(producer, w7Jobs, w1Chunk), Math.max(120_000, w7Jobs * 10), 'pre-enqueue');
    });
    const { ms, extraRuns } = await drainWithChildren(driver, ctx, {
      jobs: w7Jobs,
      processes,
      concurrency: w7Concurrency,
      what: `W7 with ${processes} processes`,
    });
    metrics[`p${processes}`] = (w7Jobs / ms) * 1000;
    metrics[`extraRuns${processes}`] = extraRuns;
    ctx.log(
      `W7 ${driver.name}: ${processes} × ${w7Concurrency}: ${Math.round(metrics[`p${processes}`] ?? 0)} jobs/s`,
    );
  }
  return metrics;
}

/**
 * W8 (a limited queue, SPEC §8): `w8Jobs` pre-enqueued jobs drained by `w8Processes` worker
 * processes × `w8Concurrency` under the system's own global limit of `w8Limit` jobs running at
 * once, each handler taking `w8HandlerMs`: the most the limit allows is
 * w8Limit / w8HandlerMs × 1000 jobs/s. Metrics: `jobsPerSec`, and `ofLimit` (that rate as a
 * share of the most the limit allows). Timed like W7. Systems without such a limit are skipped.
 */
export async function w8(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { w8Jobs, w8Processes, w8Concurrency, w8Limit, w8HandlerMs, w1Chunk } = ctx.sizes;
  if (!driver.limitConcurrency) {
    throw new Error(`not supported: ${driver.noConcurrencyLimit ?? 'no global concurrency limit'}`);
  }
  await withTimeout(driver.reset(), 120_000, 'reset');
  await driver.limitConcurrency(w8Limit);
  await using(async (defer) => {
    const producer = await openProducer(driver, defer);
    await withTimeout(preload(producer, w8Jobs, w1Chunk), Math.max(120_000, w8Jobs * 10), 'pre-enqueue');
  });
  const { ms } = await drainWithChildren(driver, ctx, {
    jobs: w8Jobs,
    processes: w8Processes,
    concurrency: w8Concurrency,
    handlerMs: w8HandlerMs,
    what: 'W8',
  });
  const jobsPerSec = (w8Jobs / ms) * 1000;
  return { jobsPerSec, ofLimit: jobsPerSec / ((w8Limit / w8HandlerMs) * 1000) };
}

/**
 * W9 (fair groups, SPEC §8): `w9Jobs` pre-enqueued jobs spread round-robin over `w9Groups` group
 * keys (tenants), drained by `w9Processes` worker processes × `w9Concurrency` with the system's
 * own per-group limit of one running job per group, each handler taking `w9HandlerMs`: the most
 * that allows is min(groups, processes × concurrency) / w9HandlerMs × 1000 jobs/s. Metrics:
 * `jobsPerSec`, and `ofBound` (that rate as a share of the bound). Timed like W7.
 */
export async function w9(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { w9Jobs, w9Groups, w9Processes, w9Concurrency, w9HandlerMs, w1Chunk } = ctx.sizes;
  if (!driver.limitGroups) throw new Error(`not supported: ${driver.noGroups ?? 'no group keys'}`);
  await withTimeout(driver.reset(), 120_000, 'reset');
  await driver.limitGroups(1);
  await using(async (defer) => {
    const producer = await openProducer(driver, defer);
    await withTimeout(
      preload(producer, w9Jobs, w1Chunk, w9Groups),
      Math.max(120_000, w9Jobs * 10),
      'pre-enqueue',
    );
  });
  const { ms } = await drainWithChildren(driver, ctx, {
    jobs: w9Jobs,
    processes: w9Processes,
    concurrency: w9Concurrency,
    handlerMs: w9HandlerMs,
    groupConcurrency: 1,
    what: 'W9',
  });
  const jobsPerSec = (w9Jobs / ms) * 1000;
  const bound = (Math.min(w9Groups, w9Processes * w9Concurrency) / w9HandlerMs) * 1000;
  return { jobsPerSec, ofBound: jobsPerSec / bound };
}

/**
 * W-seq (strict per-key FIFO, SPEC §11): `wSeqKeys` × `wSeqPerKey` pre-enqueued jobs, the keys
 * round-robin (each batch holds every key's next jobs), drained by `wSeqProcesses` worker
 * processes × `wSeqConcurrency` with the system's own per-key FIFO, no-op handlers; then the
 * same number of jobs without keys, drained the same way (the cost of the ordering). Metrics:
 * `jobsPerSec` (sequenced), `plainJobsPerSec`, `ofPlain` (their ratio). Timed like W7.
 */
export async function wSeq(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { wSeqKeys, wSeqPerKey, wSeqProcesses, wSeqConcurrency, w1Chunk } = ctx.sizes;
  if (!driver.strictFifo) throw new Error(`not supported: ${driver.noStrictFifo ?? 'no per-key FIFO'}`);
  const jobs = wSeqKeys * wSeqPerKey;
  const drain = async (sequenced: boolean): Promise<number> => {
    await withTimeout(driver.reset(), 120_000, 'reset');
    if (sequenced) await driver.strictFifo?.();
    await using(async (defer) => {
      const producer = await openProducer(driver, defer);
      await withTimeout(
        preload(producer, jobs, w1Chunk, 0, sequenced ? wSeqKeys : 0),
        Math.max(120_000, jobs * 10),
        'pre-enqueue',
      );
    });
    const { ms } = await drainWithChildren(driver, ctx, {
      jobs,
      processes: wSeqProcesses,
      concurrency: wSeqConcurrency,
      what: sequenced ? 'W-seq' : 'W-seq without keys',
    });
    return (jobs / ms) * 1000;
  };
  const jobsPerSec = await drain(true);
  const plainJobsPerSec = await drain(false);
  return { jobsPerSec, plainJobsPerSec, ofPlain: jobsPerSec / plainJobsPerSec };
}

/** Tables of a schema, for VACUUM ANALYZE. */
export async function vacuumSchema(url: string, schema: string): Promise<void> {
  const pool = adminPool(url);
  const { rows } = await pool.query<{ name: string }>(
    "SELECT tablename AS name FROM pg_tables WHERE schemaname = $1 AND tablename NOT LIKE '%migrations%'",
    [schema],
  );
  for (const { name } of rows) await pool.query(`VACUUM ANALYZE ${ident(schema)}.${ident(name)}`);
}

/**
 * Grows the finished rows to `target` by copying the `done` rows written through the public API:
 * every column but the id sequence is copied, so it keeps working as the table gains columns.
 */
export async function multiplyDone(
  url: string,
  schema: string,
  target: number,
  log: (m: string) => void,
): Promise<void> {
  const pool = adminPool(url);
  const { rows: tables } = await pool.query<{ table_name: string }>(
    `SELECT c.table_name FROM information_schema.columns c
       JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
      WHERE c.table_schema = $1 AND c.column_name = 'status' AND t.table_type = 'BASE TABLE'`,
    [schema],
  );
  const table = tables[0]?.table_name;
  if (!table || tables.length !== 1)
    throw new Error(`W6: expected one jobs table with a status column in ${schema}`);
  const { rows: columns } = await pool.query<{ column_name: string }>(
    `SELECT column_name FROM information_schema.columns
      WHERE table_schema = $1 AND table_name = $2 AND is_identity = 'NO' AND is_generated = 'NEVER'
        AND coalesce(column_default, '') NOT LIKE 'nextval(%'
      ORDER BY ordinal_position`,
    [schema, table],
  );
  const list = columns.map((c) => ident(c.column_name)).join(', ');
  const qualified = `${ident(schema)}.${ident(table)}`;
  const client = await pool.connect();
  try {
    await client.query(
      `CREATE TEMP TABLE bench_seed AS SELECT ${list} FROM ${qualified} WHERE status = 'done'`,
    );
    const seed =
      (await client.query<{ n: number }>('SELECT count(*)::int AS n FROM bench_seed')).rows[0]?.n ?? 0;
    if (seed === 0) throw new Error('W6: no done rows to copy');
    let total = seed;
    while (total < target) {
      const copies = Math.max(1, Math.min(Math.floor(200_000 / seed), Math.round((target - total) / seed)));
      await client.query(
        `INSERT INTO ${qualified} (${list}) SELECT ${list} FROM bench_seed, generate_series(1, ${copies})`,
      );
      total += seed * copies;
      log(`W6: ${total.toLocaleString('en-US')} finished rows`);
    }
  } finally {
    await client.query('DROP TABLE IF EXISTS bench_seed').catch(() => {});
    client.release();
  }
}

/** Fills a fresh Skiplock schema: `finished` done rows (if any), then `pending` pending jobs. */
async function fillDepth(driver: SkiplockDriver, ctx: RunContext, finished: number): Promise<void> {
  const { w6Pending } = ctx.sizes;
  await withTimeout(driver.reset(), 120_000, 'reset');
  const queue = driver.queue();
  try {
    if (finished > 0) {
      // Real finished jobs through the public API, then copied up to the target.
      const seed = Math.min(1_000, finished);
      await queue.enqueueMany(payloads(seed).map((payload) => ({ task: 'bench_noop', payload })));
      const claimed = await queue.claim('bench-w6-seed', { limit: seed });
      await runConcurrently(claimed.length, 16, (i) =>
        queue.complete(claimed[i] as (typeof claimed)[number]),
      );
      await multiplyDone(ctx.env.databaseUrl, driver.schema, finished, ctx.log);
    }
    for (let from = 0; from < w6Pending; from += 5_000) {
      await queue.enqueueMany(
        payloads(Math.min(5_000, w6Pending - from), from).map((payload) => ({ task: 'bench_noop', payload })),
      );
    }
  } finally {
    await queue.close();
  }
  await vacuumSchema(ctx.env.databaseUrl, driver.schema);
}

/**
 * W6: claim and ops() latency with `w6Pending` pending jobs, on an empty table and after
 * `w6Finished` finished rows. Both tables exist side by side (two schemas) and the calls
 * alternate between them, so a change of load on the machine hits both alike.
 */
export async function w6(ctx: RunContext): Promise<Metrics> {
  const { w6ClaimSamples, w6OpsSamples, w6Finished } = ctx.sizes;
  const empty = new SkiplockDriver(ctx.env, `${SKIPLOCK_SCHEMA}_w6_empty`);
  const deep = new SkiplockDriver(ctx.env, `${SKIPLOCK_SCHEMA}_w6_deep`);
  const queues: Queue[] = [];
  try {
    const limit = Math.max(300_000, w6Finished / 2);
    await withTimeout(fillDepth(empty, ctx, 0), limit, 'W6: filling the empty table');
    await withTimeout(fillDepth(deep, ctx, w6Finished), limit, 'W6: filling the deep table');
    const qEmpty = empty.queue();
    const qDeep = deep.queue();
    queues.push(qEmpty, qDeep);
    const claimOnce = async (queue: Queue): Promise<number> => {
      const t0 = performance.now();
      const [job] = await queue.claim('bench-w6', { limit: 1 });
      const ms = performance.now() - t0;
      if (!job) throw new Error('W6: claim found no pending job');
      await queue.complete(job);
      return ms;
    };
    const opsOnce = async (queue: Queue): Promise<number> => {
      const t0 = performance.now();
      await queue.ops();
      return performance.now() - t0;
    };
    const sample = async (count: number, warmup: number, once: (q: Queue) => Promise<number>) => {
      const a: number[] = [];
      const b: number[] = [];
      for (let i = -warmup; i < count; i++) {
        // Alternate which table goes first, so neither always follows the other.
        const [first, second] = i % 2 === 0 ? [qEmpty, qDeep] : [qDeep, qEmpty];
        const x = await once(first);
        const y = await once(second);
        if (i < 0) continue;
        a.push(first === qEmpty ? x : y);
        b.push(first === qEmpty ? y : x);
      }
      return { empty: a, deep: b };
    };
    const claims = await withTimeout(sample(w6ClaimSamples, 20, claimOnce), 300_000, 'W6 claims');
    const ops = await withTimeout(sample(w6OpsSamples, 5, opsOnce), 300_000, 'W6 ops()');
    return {
      claimEmptyP50: quantile(claims.empty, 0.5),
      claimEmptyP95: quantile(claims.empty, 0.95),
      claimDeepP50: quantile(claims.deep, 0.5),
      claimDeepP95: quantile(claims.deep, 0.95),
      claimRatio: quantile(claims.deep, 0.5) / quantile(claims.empty, 0.5),
      opsEmptyP50: quantile(ops.empty, 0.5),
      opsEmptyP95: quantile(ops.empty, 0.95),
      opsDeepP50: quantile(ops.deep, 0.5),
      opsDeepP95: quantile(ops.deep, 0.95),
      opsRatio: quantile(ops.deep, 0.5) / quantile(ops.empty, 0.5),
    };
  } finally {
    for (const queue of queues) await quietly(() => queue.close(), 10_000, 'closing a W6 queue');
    // Leave no million-row table behind.
    for (const driver of [empty, deep]) await quietly(() => driver.drop(), 120_000, 'dropping a W6 schema');
  }
}
