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
  | { type: 'event'; t: number; event: string; job?: string; attempt?: number; detail?: string };

/** Records written by the producer process. */
export type ProducerRecord =
  | { type: 'life'; t: number; what: 'started' | 'stopped' }
  | {
      type: 'enqueue';
      t: number;
      many: boolean;
      refs: string[];
      results?: { id: string; created: boolean }[];
      error?: string;
    }
  | { type: 'cancel'; t: number; id: string; ok?: boolean; error?: string };

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
