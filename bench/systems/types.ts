/**
 * What the benchmark needs from each job queue. One driver per system; each maps these calls onto
 * the system's own public API, tuned with the settings listed in `settings`.
 */

export const SYSTEM_NAMES = ['skiplock', 'graphile-worker', 'pg-boss', 'bullmq', 'bullmq-pg'] as const;
export type SystemName = (typeof SYSTEM_NAMES)[number];

export const DISPLAY_NAMES: Record<SystemName, string> = {
  skiplock: 'Skiplock',
  'graphile-worker': 'graphile-worker',
  'pg-boss': 'pg-boss',
  bullmq: 'BullMQ',
  'bullmq-pg': 'BullMQ on PostgreSQL',
};

/** Every job's payload: its index in the run and the wall-clock time its enqueue call started. */
export interface BenchPayload {
  i: number;
  t: number;
  /** W9: the job's group (tenant) number; the driver enqueues it with the system's group key. */
  g?: number;
  /** W-seq: the job's sequence number; the driver enqueues it with the system's per-key FIFO key. */
  s?: number;
}

/** Where the systems live. */
export interface BenchEnv {
  databaseUrl: string;
  redis: { host: string; port: number };
}

export interface Producer {
  /** One job through the system's single-enqueue call. */
  enqueueOne(payload: BenchPayload): Promise<void>;
  /** Many jobs through the system's batch API, in one call. */
  enqueueBatch(payloads: readonly BenchPayload[]): Promise<void>;
  close(): Promise<void>;
}

export interface ConsumerOptions {
  /** Jobs handled at once. */
  concurrency: number;
  /** Called at the start of every job's handler (a no-op handler otherwise). */
  onJob(payload: BenchPayload): void;
  /** Called with errors the system reports in the background (logged by the caller). */
  onError(error: unknown): void;
  /** W2d: completed jobs are deleted, not kept (the system's own option for it). */
  deleteCompleted?: boolean;
  /** W8: each handler waits this long (a job that takes time, so a concurrency limit binds). */
  handlerMs?: number;
  /** W9: at most this many running jobs per group, where the system sets it on the consumer. */
  groupConcurrency?: number;
  /** Workflows: called as every handler returns (after `onJob`, before the system writes the outcome). */
  onJobEnd?(payload: BenchPayload): void;
  /**
   * Workflows: called when the system reports a job's completion written (Skiplock's `job:done`,
   * BullMQ's `completed`); never for a system without such an event (pg-boss).
   */
  onAck?(payload: BenchPayload): void;
  /** Workflows: the consumer runs flows (pg-boss: its flow resolver at its shortest interval). */
  flows?: boolean;
  /**
   * W-batch (SPEC §11): the consumer runs the jobs through the system's batch handler, up to
   * this many jobs per call (and `concurrency` jobs at once in all).
   */
  batchSize?: number;
}

export interface Consumer {
  /** Stops gracefully and closes every connection of this consumer. */
  stop(): Promise<void>;
}

/**
 * Workflows (SPEC §10): one flow per call, through the system's own flow API. Payload `i` numbers
 * the jobs in the order they can run.
 */
export interface FlowProducer {
  /**
   * Fan-out/fan-in: a root (i 0), `children` jobs that depend on it (i 1..children) and one job
   * that depends on all of them (i children + 1), in one call. Without a root
   * (`FlowShapes.root` false), the children and the fan-in only.
   */
  fanOut(children: number): Promise<void>;
  /** `length` jobs (i 0..length − 1), each depending on the one before, in one call. */
  chain(length: number): Promise<void>;
  /** A small flow: jobs i `base` and `base` + 1, and job `base` + 2 that depends on both. */
  small(base: number): Promise<void>;
  close(): Promise<void>;
}

/** What a system's flows can express, for the workflow workloads and the report. */
export interface FlowShapes {
  /** Whether a fan-out can hang under one root job (BullMQ: a job has at most one parent). */
  root: boolean;
  /** The longest chain measured (a system whose hops take seconds runs a shorter one), and why. */
  chainLimit?: { length: number; why: string };
  /** The API used, in words, for the report. */
  api: string;
}

export interface SystemDriver {
  readonly name: SystemName;
  /** The installed version (read from the package, or the repo for Skiplock). */
  version(): Promise<string>;
  /** The settings used, in words, for the report. */
  settings(concurrency: number): string;
  /**
   * W2d: how the system can delete completed jobs — always (its only mode), by an option of the
   * consumer, or not at all (then W2d is not run for it).
   */
  readonly deletesCompleted: 'always' | 'option' | 'no';
  /** null when the system can run here; otherwise why not (e.g. Redis does not answer). */
  unavailable(): Promise<string | null>;
  /** Drops this system's schema (or keys) and installs it afresh. */
  reset(): Promise<void>;
  /**
   * W8: limits the bench queue to `n` jobs running at once across every worker process, with
   * the system's own global limit; absent when the open-source system has none.
   */
  limitConcurrency?(n: number): Promise<void>;
  /** W8: why the system has no global concurrency limit (for the report). */
  readonly noConcurrencyLimit?: string;
  /**
   * W9: prepares a run in which each group key (`BenchPayload.g`) has at most `n` running jobs
   * across every worker process, with the system's own group feature; absent when the
   * open-source system has none.
   */
  limitGroups?(n: number): Promise<void>;
  /** W9: why the system has no per-group concurrency limit (for the report). */
  readonly noGroups?: string;
  /**
   * W-seq: prepares a run in which the jobs of each sequence key (`BenchPayload.s`) run one at a
   * time in enqueue order, with the system's own per-key FIFO; absent when it has none.
   */
  strictFifo?(): Promise<void>;
  /** W-seq: why the system has no per-key FIFO (for the report). */
  readonly noStrictFifo?: string;
  /**
   * W-batch: how the system runs many jobs in one handler call — `handler` (its worker hands a
   * handler many jobs: Skiplock, pg-boss), `payload` (graphile-worker's "batch jobs": one job
   * whose payload is an array of items, which the producer must build), or absent with
   * {@link noBatch} saying why.
   */
  readonly batching?: 'handler' | 'payload';
  /** W-batch: why the system is not run (for the report). */
  readonly noBatch?: string;
  /** Workflows: a producer of flows; absent when the open-source system has no job dependencies. */
  flowProducer?(): Promise<FlowProducer>;
  /** Workflows: what the system's flows can express. */
  readonly flowShapes?: FlowShapes;
  /** Workflows: why the system has none (for the report). */
  readonly noFlows?: string;
  /**
   * W4-sql: the statement that enqueues one job through the system's own SQL function ($1 the
   * task, $2 the payload as JSON text); absent when it has none.
   */
  sqlEnqueue?(): string;
  /** W4-sql: why the system has no SQL enqueue function (for the report). */
  readonly noSqlEnqueue?: string;
  /** Drops this system's schema (or keys): the cleanup at the end of a run. */
  drop(): Promise<void>;
  /** Jobs not finished yet (queued or running), as the system's storage says. */
  remaining(): Promise<number>;
  producer(): Promise<Producer>;
  consumer(options: ConsumerOptions): Promise<Consumer>;
  /** Closes the driver's own connections (admin pool). */
  close(): Promise<void>;
}

/**
 * `BENCH_SCHEMA_SUFFIX` (letters, digits, _): appended to every schema and Redis key prefix of the
 * run, so that two checkouts can run the benchmark on one server without dropping each other's.
 */
export const BENCH_SUFFIX = ((suffix: string) => {
  if (!/^[a-z0-9_]*$/.test(suffix)) throw new Error('BENCH_SCHEMA_SUFFIX: use a-z, 0-9 and _ only');
  return suffix ? `_${suffix}` : '';
})(process.env.BENCH_SCHEMA_SUFFIX ?? '');

/** The task (queue) name every system uses. */
export const TASK = 'bench_noop';

/** Imports a package of bench/node_modules by a name the type checker does not resolve (peers are not installed at typecheck time). */
export async function importPeer<T>(name: string): Promise<T> {
  return (await import(name)) as T;
}
