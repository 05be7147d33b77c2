/**
 * What the soak's child processes record, one JSON object a line, in a file per process.
 *
 * Records go to a local file (appendFileSync: in the kernel before the call returns, so they
 * survive the process's SIGKILL), not to the database under test: the moments that matter most
 * — a database outage, a partition — are exactly when a write to that database would be lost.
 * The verifier reads every file after the run. `t` is the wall clock (Date.now()) of the
 * machine, shared by every process of the run and by the database.
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';

/** A soak job's payload: everything its handler does is decided at enqueue time (seeded). */
export interface SoakPayload {
  /** Unique per enqueued spec: ties a row to the producer call that wrote it. */
  ref: string;
  /** Label of the job's behaviour, for the report (see workload.ts). */
  kind: string;
  /** Work time of the first attempt, and of later attempts. */
  firstMs: number;
  ms: number;
  /** Whether the work stops when the signal is aborted (false: the handler ignores it). */
  respectSignal: boolean;
  /** How a successful attempt ends: a ledger row inside ctx.transaction, a side effect, or a plain return. */
  finish: 'tx' | 'effect' | 'return';
  /** Time spent inside ctx.transaction after the ledger insert (the backend is `idle in transaction`). */
  holdMs: number;
  /** Attempts up to this number throw (a poison job: more than its maxAttempts). */
  failAttempts: number;
  /** Debounced jobs: the producer's call number for this key (the verifier checks which one ran). */
  seq?: number;
  /** The job has dependencies: the handler reads ctx.dependencies() and records what it saw. */
  deps?: boolean;
  /**
   * A spawner: once started, the handler enqueues a follow-up that depends on its own job, in a
   * transaction of its own held open `holdMs` ('client'), or as a plain enqueue ('own').
   */
  spawn?: 'client' | 'own';
  /** A cascade root: fails for good (PermanentError) until the producer has marked it for requeue. */
  gate?: boolean;
  /** §12 a stepped job: a transactional step, a plain step and a short sleep first (step-checks.ts). */
  steps?: { sleepMs: number };
}

/** Records written by a worker process (one handler run is one `run` id). */
export type WorkerRecord =
  | {
      type: 'life';
      t: number;
      what: 'started' | 'start-failed' | 'stopping' | 'stopped' | 'closed';
      detail?: string;
    }
  | {
      type: 'start';
      t: number;
      run: string;
      job: string;
      attempt: number;
      token?: string;
      kind: string;
      /** The payload's debounce call number, if any. */
      seq?: number;
    }
  | { type: 'abort'; t: number; run: string; reason: string }
  | { type: 'effect'; t: number; run: string; job: string }
  | { type: 'ledger'; t: number; run: string; job: string }
  | { type: 'ledger-refused'; t: number; run: string; job: string }
  | {
      type: 'end';
      t: number;
      run: string;
      job: string;
      outcome: 'returned' | 'threw';
      aborted: boolean;
      error?: string;
    }
  | { type: 'event'; t: number; event: string; job?: string; attempt?: number; detail?: string }
  /** What ctx.dependencies() returned to a run: id and status of each entry. */
  | { type: 'deps'; t: number; run: string; job: string; deps: { id: string; status: string }[] }
  /** A follow-up a spawner enqueued with `dependsOn: [its own job]`. */
  | {
      type: 'spawn';
      t: number;
      run: string;
      job: string;
      via: 'client' | 'own';
      result?: { id: string; created: boolean };
      error?: string;
    };

/** Records written by the producer process. */
export type ProducerRecord =
  | { type: 'life'; t: number; what: 'started' | 'load-stopped' | 'stopped' }
  | {
      type: 'enqueue';
      t: number;
      many: boolean;
      refs: string[];
      results?: { id: string; created: boolean; replaced?: boolean }[];
      error?: string;
      /** A call with a dedupe mode: the mode, its key, and for debounce its call number (the payload's `seq`). */
      dedupe?: { mode: 'throttle' | 'debounce' | 'pending'; key: string; seq?: number };
    }
  | { type: 'cancel'; t: number; id: string; ok?: boolean; error?: string }
  /** An enqueueFlow call: its shape, the soak refs of its nodes by flow ref, and what it returned. */
  | {
      type: 'flow';
      t: number;
      shape: string;
      refs: string[];
      result?: { flowId: string; jobs: Record<string, string> };
      error?: string;
    }
  /** A dependent the producer added to a (probably running) job, in its own transaction or in one held open. */
  | {
      type: 'follow';
      t: number;
      parent: string;
      via: 'client' | 'own';
      ref: string;
      result?: { id: string; created: boolean };
      error?: string;
    }
  | { type: 'requeue'; t: number; id: string; ok?: boolean; error?: string }
  | { type: 'wait'; t: number; id: string }
  /** waitFor settled: with the job as it resolved, or with an error (`abandoned` at shutdown). */
  | {
      type: 'waited';
      t: number;
      id: string;
      status?: string;
      resultRun?: string | null;
      error?: string;
      abandoned?: boolean;
    }
  | { type: 'schedule'; t: number; nextRunAt?: number; error?: string }
  | { type: 'prune'; t: number; deleted?: number; error?: string };

/** Appends records to one file. */
export class RecordWriter<R> {
  constructor(private readonly file: string) {}

  write(record: R): void {
    appendFileSync(this.file, `${JSON.stringify(record)}\n`);
  }
}

/** Reads a record file; a last line cut short by a SIGKILL is skipped. */
export function readRecords<R>(file: string): R[] {
  if (!existsSync(file)) return [];
  const records: R[] = [];
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line) continue;
    try {
      records.push(JSON.parse(line) as R);
    } catch {
      // a torn last line
    }
  }
  return records;
}

/** The name of an abort reason as the handler saw it (the error class of `signal.reason`). */
export function abortReasonName(reason: unknown): string {
  if (reason instanceof Error) return reason.name;
  return typeof reason === 'string' ? reason : 'unknown';
}
