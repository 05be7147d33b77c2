/** How the system came back from each fault, and which processes crashed during which fault. */
import type { Fault, FaultType } from './faults.js';
import { crashCause, logHead, type Proc } from './fleet.js';
import type { RunInfo } from './runs.js';
import type { JobRow } from './verify.js';

export interface RecoveryRow {
  type: FaultType;
  count: number;
  /** Fault end → the next job completion, ms, one per fault. */
  firstCompletionMs: number[];
  /** Fault start → every job its victims held was running again elsewhere or finished, ms. */
  settledMs: number[];
}

/** Processes that crashed, grouped by cause. */
export interface CrashGroup {
  cause: string;
  procs: string[];
  /** The faults under way (or just ended) when they crashed. */
  during: string[];
  /** The head of the first one's log. */
  excerpt: string;
}

/** How long after a fault's end a crash still counts as "during" it. */
const CRASH_AFTER_FAULT_MS = 3_000;

export function recoveryRows(faults: Fault[], jobs: JobRow[], byJob: Map<string, RunInfo[]>): RecoveryRow[] {
  const doneTimes = jobs
    .filter((j) => j.status === 'done')
    .map((j) => j.updated_ms)
    .sort((a, b) => a - b);
  const finalAt = new Map(
    jobs.filter((j) => j.status !== 'pending' && j.status !== 'running').map((j) => [j.id, j.updated_ms]),
  );
  const rows = new Map<FaultType, RecoveryRow>();
  for (const f of faults) {
    const row = rows.get(f.type) ?? { type: f.type, count: 0, firstCompletionMs: [], settledMs: [] };
    rows.set(f.type, row);
    row.count++;
    const next = doneTimes.find((t) => t >= f.end);
    if (next !== undefined) row.firstCompletionMs.push(next - f.end);
    const settled = victimsSettled(f, byJob, finalAt);
    if (settled !== null) row.settledMs.push(settled);
  }
  return [...rows.values()];
}

/** For the jobs the fault's victims were running when it began: the worst time until each moved on. */
function victimsSettled(
  f: Fault,
  byJob: Map<string, RunInfo[]>,
  finalAt: Map<string, number>,
): number | null {
  let worst: number | null = null;
  for (const [jobId, list] of byJob) {
    const held = list.find((r) => f.victims.includes(r.proc.name) && r.start <= f.start && r.end > f.start);
    if (!held) continue;
    const later = list.find((r) => r !== held && r.start > f.start);
    const settled = later?.start ?? finalAt.get(jobId);
    if (settled !== undefined) worst = Math.max(worst ?? 0, settled - f.start);
  }
  return worst;
}

export function crashGroups(crashed: Proc[], faults: Fault[]): CrashGroup[] {
  const groups = new Map<string, CrashGroup>();
  for (const proc of crashed) {
    const cause = crashCause(proc);
    const group = groups.get(cause) ?? { cause, procs: [], during: [], excerpt: logHead(proc) };
    groups.set(cause, group);
    group.procs.push(proc.name);
    const at = proc.exitedAt ?? 0;
    const fault = faults.findLast((f) => f.start <= at && at <= f.end + CRASH_AFTER_FAULT_MS);
    const during =
      proc.endedBy === 'term' ? 'its graceful stop' : fault ? `#${fault.n} ${fault.type}` : 'no fault';
    if (!group.during.includes(during)) group.during.push(during);
  }
  return [...groups.values()];
}
