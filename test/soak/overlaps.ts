/**
 * Two runs of one job "overlap" when the later one (N) started before the earlier one (O) ended.
 * SPEC §1.1 allows that only when O's lease had really ended — by an outcome written under it,
 * or by expiry — and O had been told to stop. So an overlap is explained when:
 *   - O's signal was aborted before N started (within TOLERANCE_MS): a deadline or cancel whose
 *     outcome was written (a runaway), or a lost lease — the handler simply ignored its signal;
 *   - or O's process was SIGSTOPped past its lease and O was aborted as soon as it woke (within
 *     RESUME_TOLERANCE_MS of SIGCONT, before the handler did anything else).
 * It is unexplained when O's worker released the job on stop while O still ran (issue 8,
 * defect 2), when O was never aborted, or was aborted only after N had started (a paused or
 * partitioned worker that went on believing it owned the job: defect 3). Whatever the cause,
 * O's late outcome must be refused: the job's result, its ledger row and its final state must
 * come from another run.
 */
import type { Fault, FaultType } from './faults.js';
import type { RunInfo } from './runs.js';
import type { JobRow, LedgerRow } from './verify.js';

/** How much later than N's start O's abort may be recorded (event-loop lag on a busy machine). */
const TOLERANCE_MS = 500;
/** How soon after SIGCONT a paused process must abort a run whose lease ran out meanwhile. */
const RESUME_TOLERANCE_MS = 1_000;
/** An outcome event is emitted just after its write commits; the next claim may come first. */
const EVENT_SLACK_MS = 1_000;
const OUTCOME_EVENTS = new Set(['job:done', 'job:retry', 'job:dead', 'job:cancelled']);

export interface OverlapVerdict {
  explained: boolean;
  why: string;
}

export function judgeOverlap(O: RunInfo, N: RunInfo, faults: Fault[]): OverlapVerdict {
  const released = O.events.find((e) => e.event === 'job:released');
  if (released && released.t <= N.start + EVENT_SLACK_MS) {
    const until = O.ended ? `until ${iso(O.end)}` : 'until its process exited';
    return {
      explained: false,
      why: `its worker released the job on stop (${iso(released.t)}) while the handler still ran (${until})`,
    };
  }
  if (O.abortedAt !== null && O.abortedAt <= N.start + TOLERANCE_MS) {
    const ignored = O.kind.startsWith('stubborn') || O.kind === 'runaway';
    return {
      explained: true,
      why: `${O.abortReason} abort before the job restarted; the handler ${ignored ? 'ignored its signal' : 'was winding down'}`,
    };
  }
  const pause = faultDuring(faults, 'pause-worker', O, N);
  if (pause) return judgePaused(O, pause);
  const partition = faultDuring(faults, 'partition', O, N);
  const where = partition ? ` (its worker was cut off by partition #${partition.n})` : '';
  if (O.abortedAt === null) return { explained: false, why: `never aborted${where}` };
  return {
    explained: false,
    why: `aborted (${O.abortReason}) only ${O.abortedAt - N.start} ms after the job restarted${where}`,
  };
}

/** O's process was paused while N started: O must be aborted on resume, before it acts again. */
function judgePaused(O: RunInfo, pause: Fault): OverlapVerdict {
  const paused = `its process was paused past its lease (#${pause.n})`;
  if (O.abortedAt === null) {
    return {
      explained: false,
      why: `${paused} and ran on after SIGCONT without an abort (ended ${iso(O.end)})`,
    };
  }
  const abortedAt = O.abortedAt;
  const acted = O.acts.some((a) => a.t > pause.end && a.t < abortedAt);
  if (abortedAt <= pause.end + RESUME_TOLERANCE_MS && !acted) {
    return { explained: true, why: 'paused past its lease; aborted on resume' };
  }
  const late = `aborted ${abortedAt - pause.end} ms after SIGCONT${acted ? ', after the handler had acted' : ''}`;
  return { explained: false, why: `${paused}; ${late}` };
}

/** Did O's late outcome count? A reason if it did, else null. */
export function staleOutcome(
  O: RunInfo,
  N: RunInfo,
  job: JobRow | undefined,
  ledger: LedgerRow | undefined,
): string | null {
  if (job?.result_run === O.id) return `its result is the job's result (${job.status})`;
  if (ledger?.run_id === O.id) return 'its ledger row committed';
  // A runaway's outcome is written when it is abandoned, before N can start: not late.
  const runaway = O.events.find((e) => e.event === 'job:runaway' && e.t <= N.start + EVENT_SLACK_MS);
  const late = O.events.find((e) => OUTCOME_EVENTS.has(e.event) && e.t > N.start + EVENT_SLACK_MS);
  if (late && !runaway) return `its ${late.event} was written ${late.t - N.start} ms after the job restarted`;
  return null;
}

/** The last fault of `type` that hit O's process between O's start and N's start. */
function faultDuring(faults: Fault[], type: FaultType, O: RunInfo, N: RunInfo): Fault | undefined {
  return faults.findLast(
    (f) => f.type === type && f.victims.includes(O.proc.name) && f.start <= N.start && f.end >= O.start,
  );
}

export function iso(t: number): string {
  return new Date(t).toISOString().slice(11, 23);
}
