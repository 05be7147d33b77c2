/**
 * What the benchmark needs from each job queue. One driver per system; each maps these calls onto
 * the system's own public API, tuned with the settings listed in `settings`.
 */

export const SYSTEM_NAMES = ['skiplock', 'graphile-worker', 'pg-boss', 'bullmq'] as const;
export type SystemName = (typeof SYSTEM_NAMES)[number];

export const DISPLAY_NAMES: Record<SystemName, string> = {
  skiplock: 'Skiplock',
  'graphile-worker': 'graphile-worker',
  'pg-boss': 'pg-boss',
  bullmq: 'BullMQ',
};

/** Every job's payload: its index in the run and the wall-clock time its enqueue call started. */
export interface BenchPayload {
  i: number;
  t: number;
  /** W9: the job's group (tenant) number; the driver enqueues it with the system's group key. */
  g?: number;
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
}

export interface Consumer {
  /** Stops gracefully and closes every connection of this consumer. */
  stop(): Promise<void>;
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
  /** Drops this system's schema (or keys): the cleanup at the end of a run. */
  drop(): Promise<void>;
  /** Jobs not finished yet (queued or running), as the system's storage says. */
  remaining(): Promise<number>;
  producer(): Promise<Producer>;
  consumer(options: ConsumerOptions): Promise<Consumer>;
  /** Closes the driver's own connections (admin pool). */
  close(): Promise<void>;
}

/** The task (queue) name every system uses. */
export const TASK = 'bench_noop';

/** Imports a package of bench/node_modules by a name the type checker does not resolve (peers are not installed at typecheck time). */
export async function importPeer<T>(name: string): Promise<T> {
  return (await import(name)) as T;
}
