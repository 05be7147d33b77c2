/**
 * The evidence: every handler run of the soak, rebuilt from the worker processes' record files —
 * when it started and ended, when its signal was aborted and why, what it did in between, and
 * which events its worker emitted for it.
 */
import type { Proc } from './fleet.js';
import { readRecords, type WorkerRecord } from './records.js';

/** One handler run (`<process>:<job>:<attempt>:<n>`). */
export interface RunInfo {
  id: string;
  proc: Proc;
  job: string;
  attempt: number;
  kind: string;
  start: number;
  /** Its handler's end record, or its process's exit. */
  end: number;
  /** The handler recorded its end (else it ended with its process). */
  ended: boolean;
  abortedAt: number | null;
  /** The error class of `signal.reason`: LeaseLostError, JobDeadlineExceeded, WorkerStoppingError… */
  abortReason: string | null;
  /** Effect, ledger and end records: what the handler did, and when. */
  acts: { type: string; t: number }[];
  /** The worker's events for this claim (job:done, job:retry, job:released, lease:lost…). */
  events: { event: string; t: number }[];
  effect: boolean;
  ledgerRefused: boolean;
  /** A debounced job's call number, as the handler got it. */
  seq: number | null;
  /** What ctx.dependencies() returned, and when (jobs with dependencies). */
  deps: { t: number; entries: { id: string; status: string }[] } | null;
  /** Follow-ups this run enqueued (spawners). */
  spawned: { id: string; created: boolean }[];
}

/** Every run, by id. */
export function loadRuns(workers: Proc[]): Map<string, RunInfo> {
  const runs = new Map<string, RunInfo>();
  for (const proc of workers) {
    // Within one process, a worker event names its run by job id and attempt.
    const byClaim = new Map<string, RunInfo>();
    for (const r of readRecords<WorkerRecord>(proc.recordsFile)) {
      if (r.type === 'start') {
        const run = newRun(proc, r);
        runs.set(r.run, run);
        byClaim.set(`${r.job}/${r.attempt}`, run);
      } else if (r.type === 'event') {
        if (r.job !== undefined)
          byClaim.get(`${r.job}/${r.attempt}`)?.events.push({ event: r.event, t: r.t });
      } else if (r.type !== 'life') {
        const run = runs.get(r.run);
        if (run) apply(run, r);
      }
    }
  }
  return runs;
}

/** Runs grouped by job, oldest first. */
export function runsByJob(runs: Map<string, RunInfo>): Map<string, RunInfo[]> {
  const byJob = new Map<string, RunInfo[]>();
  for (const run of runs.values()) {
    const list = byJob.get(run.job);
    if (list) list.push(run);
    else byJob.set(run.job, [run]);
  }
  for (const list of byJob.values()) list.sort((a, b) => a.start - b.start);
  return byJob;
}

function newRun(proc: Proc, r: Extract<WorkerRecord, { type: 'start' }>): RunInfo {
  return {
    id: r.run,
    proc,
    job: r.job,
    attempt: r.attempt,
    kind: r.kind,
    start: r.t,
    end: proc.exitedAt ?? Date.now(),
    ended: false,
    abortedAt: null,
    abortReason: null,
    acts: [],
    events: [],
    effect: false,
    ledgerRefused: false,
    seq: r.seq ?? null,
    deps: null,
    spawned: [],
  };
}

function apply(run: RunInfo, r: Exclude<WorkerRecord, { type: 'start' | 'event' | 'life' }>): void {
  if (r.type === 'abort') {
    run.abortedAt = r.t;
    run.abortReason = r.reason;
    return;
  }
  // Neither is a new act of the handler: a read at its start, and the outcome of a write begun then.
  if (r.type === 'deps') {
    run.deps = { t: r.t, entries: r.deps };
    return;
  }
  if (r.type === 'spawn') {
    if (r.result) run.spawned.push(r.result);
    return;
  }
  run.acts.push({ type: r.type, t: r.t });
  if (r.type === 'end') {
    run.end = r.t;
    run.ended = true;
  } else if (r.type === 'effect') run.effect = true;
  else if (r.type === 'ledger-refused') run.ledgerRefused = true;
}
