/**
 * Workflows (SPEC §10), judged on the edges ever written (soak.edges: an edge goes with its job
 * when prune deletes it), the jobs' final rows and their status changes:
 *
 * - stuck: a job still `waiting` after the drain although every dependency is done (or, for
 *   `onDependencyFailure: 'run'`, finished). Nothing will ever wake it.
 * - order violated: a claim of a job before each of its dependencies was done (for 'run': had
 *   finished). The completion that unblocks a job commits before anything can claim it, so its
 *   change to done is always stamped earlier.
 * - ctx.dependencies() wrong: a run that read its dependencies while its job could still run
 *   (before the job's last change to a final status) and got one missing, one that is not a
 *   dependency, or one not done ('run': not finished).
 * - cascade wrong: at the end, a job ('cancel') with a dead or cancelled dependency that is not
 *   cancelled; a job ('cancel') cancelled although every dependency is done — the requeue of the
 *   dead one did not bring it back (the soak cancels no job with dependencies itself); a job
 *   ('run') cancelled.
 */
import { FINAL, type History, isoUs } from './history.js';
import type { RunInfo } from './runs.js';
import type { Finding, JobRow } from './verify.js';

export interface Edge {
  job_id: string;
  depends_on: string;
}

export interface FlowVerdict {
  stuck: Finding[];
  order: Finding[];
  depsSeen: Finding[];
  cascade: Finding[];
  /** Jobs with dependencies, waiting behind a dependency that is itself stuck or unfinished. */
  behind: number;
  jobsWithDependencies: number;
  /** Dependents whose dependency was running when their edge was written. */
  addedToRunning: number;
  cancelledByDependency: number;
  broughtBack: number;
}

export function flowChecks(
  jobsById: Map<string, JobRow>,
  edges: Edge[],
  history: History,
  byJob: Map<string, RunInfo[]>,
): FlowVerdict {
  const depsOf = new Map<string, Set<string>>();
  for (const e of edges) {
    const set = depsOf.get(e.job_id) ?? new Set<string>();
    set.add(e.depends_on);
    depsOf.set(e.job_id, set);
  }
  const verdict: FlowVerdict = {
    stuck: [],
    order: [],
    depsSeen: [],
    cascade: [],
    behind: 0,
    jobsWithDependencies: depsOf.size,
    addedToRunning: 0,
    cancelledByDependency: 0,
    broughtBack: 0,
  };
  for (const [id, deps] of depsOf) {
    const job = jobsById.get(id);
    if (!job) continue;
    const runMode = job.run_on_failure;
    // A dependency with no row at all was deleted before the history began: it counts as done.
    const statusOf = (dep: string) => jobsById.get(dep)?.status ?? 'done';
    const satisfied = (dep: string) => (runMode ? FINAL.has(statusOf(dep)) : statusOf(dep) === 'done');
    const failed = [...deps].filter((d) => statusOf(d) === 'dead' || statusOf(d) === 'cancelled');
    endState(verdict, job, [...deps], failed, satisfied, history);
    claimOrder(verdict, job, [...deps], history);
    dependenciesSeen(verdict, job, deps, history, byJob.get(id) ?? []);
    const inserted = history.insertedUs(id);
    if (
      inserted !== null &&
      [...deps].some((d) =>
        history
          .intervals(d)
          .some((iv) => iv.status === 'running' && iv.fromUs < inserted && inserted < iv.toUs),
      )
    ) {
      verdict.addedToRunning++;
    }
    const trail = history.of(id);
    verdict.cancelledByDependency += trail.filter((t) => t.to === 'cancelled').length;
    verdict.broughtBack += trail.filter((t) => t.from === 'cancelled' && t.to === 'waiting').length;
  }
  return verdict;
}

function endState(
  verdict: FlowVerdict,
  job: JobRow,
  deps: string[],
  failed: string[],
  satisfied: (dep: string) => boolean,
  history: History,
): void {
  const mode = job.run_on_failure ? "'run'" : "'cancel'";
  if (job.status === 'waiting') {
    if (deps.every(satisfied)) {
      verdict.stuck.push({
        check: 'dependent stuck',
        job: job.id,
        text: `still waiting after the drain, although every dependency is ${job.run_on_failure ? 'finished' : 'done'} (${job.kind}, onDependencyFailure ${mode}): ${deps.map((d) => story(history, job.id, d)).join('; ')}`,
      });
    } else if (!job.run_on_failure && failed.length > 0) {
      verdict.cascade.push({
        check: 'cascade wrong',
        job: job.id,
        text: `still waiting, although dependency ${failed.join(', ')} ended dead or cancelled`,
      });
    } else {
      verdict.behind++;
    }
    return;
  }
  if (!job.run_on_failure && failed.length > 0 && job.status !== 'cancelled') {
    verdict.cascade.push({
      check: 'cascade wrong',
      job: job.id,
      text: `ended ${job.status}, although dependency ${failed.join(', ')} ended dead or cancelled (onDependencyFailure 'cancel')`,
    });
  }
  if (job.status === 'cancelled' && (job.run_on_failure || deps.every(satisfied))) {
    verdict.cascade.push({
      check: 'cascade wrong',
      job: job.id,
      text: job.run_on_failure
        ? `cancelled, although onDependencyFailure is 'run' (last error: ${firstLine(job.last_error)})`
        : `cancelled, although every dependency (${deps.join(', ')}) is done: a requeue did not bring it back (last error: ${firstLine(job.last_error)})`,
    });
  }
}

function claimOrder(verdict: FlowVerdict, job: JobRow, deps: string[], history: History): void {
  const wanted = job.run_on_failure ? FINAL : new Set(['done']);
  for (const claim of history.claims(job.id)) {
    for (const dep of deps) {
      if (history.of(dep).length === 0) continue; // no history: nothing to judge by
      const at = history.firstEntered(dep, wanted);
      if (at === null || at > claim.atUs) {
        verdict.order.push({
          check: 'dependency order violated',
          job: job.id,
          text: `claimed at ${isoUs(claim.atUs)}, but dependency ${dep} ${at === null ? `never became ${[...wanted].join('/')}` : `became ${[...wanted].join('/')} only at ${isoUs(at)}`}`,
        });
      }
    }
  }
}

function dependenciesSeen(
  verdict: FlowVerdict,
  job: JobRow,
  deps: Set<string>,
  history: History,
  runs: RunInfo[],
): void {
  const finalAt = history
    .of(job.id)
    .filter((t) => t.to !== null && FINAL.has(t.to))
    .at(-1)?.atUs;
  for (const run of runs) {
    if (!run.deps) continue;
    if (finalAt !== undefined && run.deps.t * 1000 > finalAt) continue; // read after its job had finished
    const seen = new Map(run.deps.entries.map((d) => [d.id, d.status]));
    const problems: string[] = [];
    for (const dep of deps) {
      const status = seen.get(dep);
      if (status === undefined) problems.push(`${dep} missing`);
      else if (job.run_on_failure ? !finishedBefore(history, dep, status, run.start) : status !== 'done') {
        problems.push(`${dep} ${status}`);
      }
    }
    for (const id of seen.keys()) if (!deps.has(id)) problems.push(`${id} is not a dependency`);
    if (problems.length > 0) {
      verdict.depsSeen.push({
        check: 'ctx.dependencies() wrong',
        job: job.id,
        text: `${run.id} read ${problems.join(', ')}`,
      });
    }
  }
}

/** When the dependent was written, what its dependency was doing then, and when that one finished. */
function story(history: History, job: string, dep: string): string {
  const inserted = history.insertedUs(job);
  const finished = history.firstEntered(dep, FINAL);
  const then =
    inserted === null
      ? '?'
      : (history.intervals(dep).find((iv) => iv.fromUs <= inserted && inserted < iv.toUs)?.status ?? '?');
  const finishedText = finished === null ? 'never finished' : `finished at ${isoUs(finished)}`;
  return `written at ${inserted === null ? '?' : isoUs(inserted)} while ${dep} was ${then}; ${dep} ${finishedText}`;
}

/**
 * 'run': a dependency counts once it has finished; requeued since (a cascade root), it may be
 * pending or running again — the dependent does not wait for it again (docs/workflows.md).
 */
function finishedBefore(history: History, dep: string, status: string, runStartMs: number): boolean {
  if (FINAL.has(status)) return true;
  const at = history.firstEntered(dep, FINAL);
  return at !== null && at <= runStartMs * 1000;
}

function firstLine(text: string | null): string {
  return (text ?? '').split('\n')[0]!.slice(0, 160);
}
