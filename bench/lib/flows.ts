/**
 * Workflows (SPEC §10, issue 12): W-flow-fanout, W-flow-chain and W-flow-insert for every system
 * whose driver has flows, and W-flow-scan (Skiplock: is there a sequential scan on the hot path?).
 *
 * A flow is enqueued first (the enqueue call timed alone), then one worker process at W2's
 * settings runs it; that process stamps, by payload `i`, each handler's start and end and, where
 * the system reports it, each completion. When a completion *committed* is taken from what each
 * system can show: Skiplock — the arrival of its wake-up NOTIFY at a LISTEN connection of this
 * process (PostgreSQL delivers a notification when its transaction commits, and the trigger that
 * unblocks dependents sends one only when it made one pending); BullMQ — the worker's `completed`
 * event (after the Lua script that finished the job, and moved its parent, returned); pg-boss —
 * the job's `completed_on` as stored (the database's clock, this machine's).
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { ChildResult } from '../child.js';
import { PgBossDriver } from '../systems/pg-boss.js';
import { SKIPLOCK_SCHEMA, SkiplockDriver } from '../systems/skiplock.js';
import type { FlowProducer, SystemDriver } from '../systems/types.js';
import { WorkerChild } from './child-process.js';
import { closeAdminPool, ident } from './db.js';
import { quantile, quietly, runConcurrently, sleep, waitFor, wallNow, withTimeout } from './util.js';
import {
  type Metrics,
  multiplyDone,
  openProducer,
  payloads,
  type RunContext,
  using,
  vacuumSchema,
} from './workloads.js';

/** Arrival times of Skiplock's wake-up notifications on a schema's channel, at a LISTEN connection. */
class CommitWatch {
  private readonly times: number[] = [];

  private constructor(private readonly client: pg.Client) {
    client.on('notification', (message) => {
      if (message.payload === 'jobs') this.times.push(wallNow());
    });
  }

  static async start(url: string, schema: string): Promise<CommitWatch> {
    const client = new pg.Client({ connectionString: url, application_name: 'skiplock-bench-listen' });
    client.on('error', () => {});
    await client.connect();
    const watch = new CommitWatch(client);
    await client.query(`LISTEN ${ident(`skiplock:${schema}`)}`);
    return watch;
  }

  /** The first notification that arrived after `at`, or NaN. */
  firstAfter(at: number): number {
    return this.times.find((t) => t > at) ?? Number.NaN;
  }

  async close(): Promise<void> {
    await this.client.end().catch(() => {});
  }
}

/** Opens the driver's flow producer; a system without flows fails the workload with its reason. */
function requireFlows(driver: SystemDriver): () => Promise<FlowProducer> {
  const open = driver.flowProducer?.bind(driver);
  if (!open) throw new Error(`not supported: ${driver.noFlows ?? 'no job dependencies'}`);
  return open;
}

interface FlowRun {
  insertMs: number;
  result: ChildResult;
  starts: Float64Array;
  ends: Float64Array;
  /** When each job's completion committed, by i (NaN: unknown). */
  committed: (i: number) => number;
}

/**
 * Resets the system, enqueues one flow of `size` jobs (i 0..size − 1) with `enqueue` (timed),
 * then runs it with one worker process at W2's settings until job size − 1 ran.
 */
async function runFlow(
  driver: SystemDriver,
  ctx: RunContext,
  size: number,
  enqueue: (producer: FlowProducer) => Promise<void>,
  limitMs: number,
): Promise<FlowRun> {
  const open = requireFlows(driver);
  await withTimeout(driver.reset(), 120_000, 'reset');
  const insertMs = await using(async (defer) => {
    const producer = await withTimeout(open(), 30_000, 'opening the flow producer');
    defer(() => producer.close());
    const t0 = performance.now();
    await withTimeout(enqueue(producer), limitMs, 'flow insert');
    return performance.now() - t0;
  });
  const watch =
    driver instanceof SkiplockDriver ? await CommitWatch.start(ctx.env.databaseUrl, driver.schema) : null;
  try {
    const { child } = await WorkerChild.start({
      system: driver.name,
      env: ctx.env,
      mode: 'flow',
      concurrency: ctx.sizes.w2Concurrency,
      expect: size,
      lifetimeMs: limitMs + 120_000,
    });
    let result: ChildResult;
    try {
      await child.next('handled', limitMs);
      await sleep(300); // the last job's completion is written and reported
      result = await child.stop();
    } finally {
      child.kill();
    }
    const { starts, ends, acks } = result as Required<ChildResult>;
    for (let i = 0; i < size; i++) {
      if (starts[i] === 0 && (i > 0 || driver.flowShapes?.root))
        throw new Error(`job ${i} of the flow never ran`);
    }
    let committed: (i: number) => number;
    if (watch) committed = (i) => watch.firstAfter(ends[i] as number);
    else if (driver instanceof PgBossDriver) {
      const at = await driver.completedAt();
      committed = (i) => at.get(i) ?? Number.NaN;
    } else committed = (i) => ((acks[i] as number) > 0 ? (acks[i] as number) : Number.NaN);
    return { insertMs, result, starts, ends, committed };
  } finally {
    await watch?.close();
  }
}

/**
 * W-flow-fanout: one flow of a root → `flowChildren` children → one fan-in job that depends on
 * all of them (BullMQ: no root, see its driver), in one call; drained by one worker process.
 */
export async function wFlowFanout(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const n = ctx.sizes.flowChildren;
  const root = driver.flowShapes?.root ?? false;
  const last = n + 1;
  const run = await runFlow(driver, ctx, n + 2, (p) => p.fanOut(n), Math.max(120_000, n * 20));
  const { starts, ends } = run;
  let firstChildStart = Number.POSITIVE_INFINITY;
  let lastChildEnd = 0;
  let lastChild = 1;
  for (let i = 1; i <= n; i++) {
    firstChildStart = Math.min(firstChildStart, starts[i] as number);
    if ((ends[i] as number) > lastChildEnd) {
      lastChildEnd = ends[i] as number;
      lastChild = i;
    }
  }
  // The fan-in was unblocked by the child whose completion committed last: for Skiplock, the one
  // notification after the last handler ended; for the others, the latest completion.
  let lastCommit = run.committed(lastChild);
  if (!(driver instanceof SkiplockDriver)) {
    for (let i = 1; i <= n; i++) {
      const at = run.committed(i);
      if (Number.isFinite(at)) lastCommit = Number.isFinite(lastCommit) ? Math.max(lastCommit, at) : at;
    }
  }
  const faninStart = starts[last] as number;
  const nodes = root ? n + 2 : n + 1;
  const metrics: Metrics = {
    insertMs: run.insertMs,
    insertNodesPerSec: (nodes / run.insertMs) * 1000,
    drainJobsPerSec: (n / (lastCommit - firstChildStart)) * 1000,
    faninFromCommitMs: faninStart - lastCommit,
    faninFromHandlerEndMs: faninStart - lastChildEnd,
    backgroundErrors: run.result.errors.length,
  };
  if (root) {
    metrics.rootToChildMs = firstChildStart - (ends[0] as number);
    // Skiplock: root handler end → commit of its completion (whose trigger made every child pending)
    if (driver instanceof SkiplockDriver) metrics.rootCommitMs = run.committed(0) - (ends[0] as number);
  }
  return metrics;
}

/** W-flow-chain: `flowChain` jobs (fewer where the driver says so), each depending on the one before. */
export async function wFlowChain(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const length = Math.min(
    ctx.sizes.flowChain,
    driver.flowShapes?.chainLimit?.length ?? Number.POSITIVE_INFINITY,
  );
  const run = await runFlow(driver, ctx, length, (p) => p.chain(length), Math.max(180_000, length * 3_000));
  const { starts, ends } = run;
  const hops: number[] = [];
  const fromCommit: number[] = [];
  const toCommit: number[] = [];
  for (let k = 0; k + 1 < length; k++) {
    hops.push((starts[k + 1] as number) - (ends[k] as number));
    const at = run.committed(k);
    if (Number.isFinite(at)) {
      fromCommit.push((starts[k + 1] as number) - at);
      toCommit.push(at - (ends[k] as number));
    }
  }
  const totalMs = (ends[length - 1] as number) - (starts[0] as number);
  return {
    length,
    insertMs: run.insertMs,
    insertNodesPerSec: (length / run.insertMs) * 1000,
    totalMs,
    jobsPerSec: (length / totalMs) * 1000,
    hopP50: quantile(hops, 0.5),
    hopP95: quantile(hops, 0.95),
    hopMax: Math.max(...hops),
    commitToNextP50: quantile(fromCommit, 0.5),
    commitToNextP95: quantile(fromCommit, 0.95),
    endToCommitP50: quantile(toCommit, 0.5),
    backgroundErrors: run.result.errors.length,
  };
}

/**
 * W-flow-insert: `flowSmall` 3-node flows (jobs a and b, and c that depends on both), one call
 * each, `flowInFlight` calls at once; against as many batch-API calls of 3 independent jobs, on a
 * fresh schema each, after warm-up calls.
 */
export async function wFlowInsert(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const { flowSmall, flowInFlight } = ctx.sizes;
  const open = requireFlows(driver);
  const limit = Math.max(120_000, flowSmall * 50);
  await withTimeout(driver.reset(), 120_000, 'reset');
  const batchMs = await using(async (defer) => {
    const producer = await openProducer(driver, defer);
    await runConcurrently(16, flowInFlight, (k) => producer.enqueueBatch(payloads(3, -3 * (k + 1))));
    const t0 = performance.now();
    await withTimeout(
      runConcurrently(flowSmall, flowInFlight, (k) => producer.enqueueBatch(payloads(3, 3 * k))),
      limit,
      'batch calls',
    );
    return performance.now() - t0;
  });
  await withTimeout(driver.reset(), 120_000, 'reset');
  const flowMs = await using(async (defer) => {
    const producer = await withTimeout(open(), 30_000, 'opening the flow producer');
    defer(() => producer.close());
    await runConcurrently(16, flowInFlight, (k) => producer.small(-3 * (k + 1)));
    const t0 = performance.now();
    await withTimeout(
      runConcurrently(flowSmall, flowInFlight, (k) => producer.small(3 * k)),
      limit,
      'flow calls',
    );
    return performance.now() - t0;
  });
  const flowJobsPerSec = ((flowSmall * 3) / flowMs) * 1000;
  const batchJobsPerSec = ((flowSmall * 3) / batchMs) * 1000;
  return {
    flowsPerSec: (flowSmall / flowMs) * 1000,
    flowJobsPerSec,
    batchJobsPerSec,
    flowVsBatch: flowJobsPerSec / batchJobsPerSec,
  };
}

// ------------------------------------------------------------------ W-flow-scan (Skiplock)

const SCAN_TABLES = ['jobs', 'job_dependencies'] as const;
const SCAN_COUNTERS = ['seq_scan', 'seq_tup_read', 'idx_scan'] as const;
export const SCAN_PHASES = ['control', 'fanout', 'chain', 'after'] as const;

type TableStats = Record<string, Record<string, number>>;

async function tableStats(client: pg.Client, schema: string): Promise<TableStats> {
  await client.query('SELECT pg_stat_force_next_flush()');
  await client.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await client.query<{ relname: string } & Record<string, string>>(
    `SELECT relname, ${SCAN_COUNTERS.map((c) => `coalesce(${c}, 0)::bigint AS ${c}`).join(', ')}
       FROM pg_stat_user_tables WHERE schemaname = $1`,
    [schema],
  );
  const out: TableStats = {};
  for (const row of rows) {
    out[row.relname] = Object.fromEntries(SCAN_COUNTERS.map((c) => [c, Number(row[c])]));
  }
  return out;
}

/** The plan of `sql` as text, in a transaction rolled back (EXPLAIN ANALYZE runs the statement). */

/**
 * W-flow-scan (Skiplock): with `flowScanFinished` unrelated done rows in the table (VACUUM
 * ANALYZE after), four phases run one after another — control (as many independent jobs as the
 * fan-out has, enqueueMany + drain), fan-out/fan-in, chain, and the control again with the two
 * flows' edges in job_dependencies (completions of jobs without dependents still read it) — each with its own Queue and Worker
 * (concurrency `w2Concurrency`) in this process, closed at the phase's end (a backend flushes its
 * statistics as it exits). Metrics: the deltas of pg_stat_user_tables' seq_scan, seq_tup_read and
 * idx_scan of jobs and job_dependencies per phase. Then EXPLAIN of the trigger's statements.
 */
export async function wFlowScan(ctx: RunContext): Promise<{ metrics: Metrics; plans: string[] }> {
  const { flowScanFinished, flowChildren, flowChain, w2Concurrency } = ctx.sizes;
  const url = ctx.env.databaseUrl;
  const driver = new SkiplockDriver(ctx.env, `${SKIPLOCK_SCHEMA}_flowscan`);
  const stats = new pg.Client({ connectionString: url, application_name: 'skiplock-bench-stats' });
  stats.on('error', () => {});
  try {
    await withTimeout(driver.reset(), 120_000, 'reset');
    const seed = driver.queue();
    try {
      const count = Math.min(1_000, flowScanFinished);
      await seed.enqueueMany(payloads(count).map((payload) => ({ task: 'bench_noop', payload })));
      const claimed = await seed.claim('bench-flowscan-seed', { limit: count });
      await runConcurrently(claimed.length, 16, (i) => seed.complete(claimed[i] as (typeof claimed)[number]));
    } finally {
      await seed.close();
    }
    await multiplyDone(url, driver.schema, flowScanFinished, ctx.log);
    await vacuumSchema(url, driver.schema);
    // the admin pool's own statistics (the copy read every done row) must not land in a phase
    await closeAdminPool(url);
    await sleep(1_500);
    await stats.connect();
    const metrics: Metrics = {};
    for (const phase of SCAN_PHASES) {
      const before = await tableStats(stats, driver.schema);
      const expected = phase === 'chain' ? flowChain : flowChildren + 2;
      let ran = 0;
      const t0 = performance.now();
      await using(async (defer) => {
        if (phase === 'control' || phase === 'after') {
          const queue = driver.queue();
          defer(() => queue.close());
          for (let from = 0; from < expected; from += 1_000) {
            await queue.enqueueMany(
              payloads(Math.min(1_000, expected - from), from).map((payload) => ({
                task: 'bench_noop',
                payload,
              })),
            );
          }
        } else {
          const producer = await requireFlows(driver)();
          defer(() => producer.close());
          if (phase === 'fanout') await producer.fanOut(flowChildren);
          else await producer.chain(flowChain);
        }
        const consumer = await driver.consumer({
          concurrency: w2Concurrency,
          onJob: () => {
            ran++;
          },
          onError: () => {},
        });
        defer(() => consumer.stop());
        await waitFor(() => ran >= expected, 600_000, `W-flow-scan ${phase} (${ran}/${expected} ran)`, 20);
        await sleep(300);
      });
      const ms = performance.now() - t0;
      await sleep(1_500);
      const after = await tableStats(stats, driver.schema);
      for (const table of SCAN_TABLES) {
        for (const counter of SCAN_COUNTERS) {
          metrics[`${phase}.${table}.${counter}`] =
            (after[table]?.[counter] ?? 0) - (before[table]?.[counter] ?? 0);
        }
      }
      metrics[`${phase}.ms`] = ms;
      ctx.log(
        `W-flow-scan ${phase}: ${SCAN_TABLES.map((t) => `${t} seq_scan +${metrics[`${phase}.${t}.seq_scan`]} (${metrics[`${phase}.${t}.seq_tup_read`]} rows read), idx_scan +${metrics[`${phase}.${t}.idx_scan`]}`).join('; ')}`,
      );
    }
    // No plans copied from the statements: copies go stale (the counters above are the evidence)
    const plans: string[] = [];
    return { metrics, plans };
  } finally {
    await stats.end().catch(() => {});
    await quietly(() => driver.drop(), 120_000, 'dropping the W-flow-scan schema');
    await quietly(() => driver.close(), 10_000, 'closing the W-flow-scan driver');
  }
}
