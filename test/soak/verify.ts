/**
 * The verdict: reads the jobs table (with the rows prune deleted), the ledger, the database's
 * record of every status change and dependency edge, and every process's records after the run,
 * and checks what SPEC §1 promises under faults — no unexplained overlap of two runs of one job
 * (overlaps.ts), no duplicate completion, no stale outcome accepted, nothing lost, no process
 * crashed or hung — and what every feature promises under the same faults: flows
 * (flow-checks.ts), the schedule (schedule-checks.ts), queue and group limits (limit-checks.ts),
 * dedupe modes (dedupe-checks.ts) and waitFor (wait-checks.ts). It measures recovery per fault
 * type (recovery.ts).
 */
import { type DedupeVerdict, dedupeChecks } from './dedupe-checks.js';
import type { Fault } from './faults.js';
import type { Proc } from './fleet.js';
import { type Edge, type FlowVerdict, flowChecks } from './flow-checks.js';
import { History, type Transition } from './history.js';
import { type LimitVerdict, limitChecks } from './limit-checks.js';
import { iso, judgeOverlap, staleOutcome } from './overlaps.js';
import { type ProducerRecord, readRecords } from './records.js';
import { type CrashGroup, crashGroups, type RecoveryRow, recoveryRows } from './recovery.js';
import { loadRuns, type RunInfo, runsByJob } from './runs.js';
import { type ScheduleVerdict, type ScheduleWindow, scheduleChecks } from './schedule-checks.js';
import { type SteppedRow, stepChecks, stepFigures } from './step-checks.js';
import { type WaitVerdict, waitChecks } from './wait-checks.js';

/** A row of the jobs table (or of a job prune deleted), as the verifier reads it. */
export interface JobRow {
  id: string;
  status: string;
  ref: string | null;
  kind: string | null;
  /** How the payload's successful attempt ends: 'tx' (a ledger row), 'effect' or 'return'. */
  finish: string | null;
  result_run: string | null;
  last_error: string | null;
  attempts: number;
  max_attempts: number;
  updated_ms: number;
  lease_ms: number | null;
  worker_id: string | null;
  queue: string;
  group_key: string | null;
  dedupe_key: string | null;
  pending_key: string | null;
  /** onDependencyFailure 'run'. */
  run_on_failure: boolean;
  /** created_at (µs): the jobs of one schedule firing share it. */
  created_us: number;
  /** Deleted by prune (the row as it was then). */
  deleted: boolean;
}

export interface LedgerRow {
  job_id: string;
  run_id: string;
}

export interface Finding {
  /** Short name of the check that failed (or, with `info:`, of an observation). */
  check: string;
  job?: string;
  text: string;
}

export interface Figure {
  label: string;
  value: number | string;
  /** This figure must be 0 for the soak to pass. */
  mustBeZero?: boolean;
  /** The first figure of a section of the table (its title). */
  section?: string;
}

export interface Verdict {
  figures: Figure[];
  findings: Finding[];
  recovery: RecoveryRow[];
  crashes: CrashGroup[];
  failed: boolean;
}

export interface VerifyInput {
  procs: Proc[];
  faults: Fault[];
  jobs: JobRow[];
  ledger: LedgerRow[];
  /** Every status change the database's triggers recorded (database.ts). */
  transitions?: Transition[];
  /** Every dependency edge ever written. */
  edges?: Edge[];
  /** The schedule's ticks that passed during the run; null when it was not set up. */
  schedule?: ScheduleWindow | null;
  /** §12 the stepped jobs, their stored steps and step-ledger rows. */
  stepped?: SteppedRow[];
}

/** What the database and the records say, indexed for the checks. */
interface Evidence {
  jobs: JobRow[];
  jobsById: Map<string, JobRow>;
  ledgerByJob: Map<string, LedgerRow>;
  runs: Map<string, RunInfo>;
  byJob: Map<string, RunInfo[]>;
  faults: Fault[];
}

export function verify(input: VerifyInput): Verdict {
  const runs = loadRuns(input.procs.filter((p) => p.role === 'worker'));
  const ev: Evidence = {
    jobs: input.jobs,
    jobsById: new Map(input.jobs.map((j) => [j.id, j])),
    ledgerByJob: new Map(input.ledger.map((l) => [l.job_id, l])),
    runs,
    byJob: runsByJob(runs),
    faults: input.faults,
  };
  const producerRecords = input.procs
    .filter((p) => p.role === 'producer')
    .flatMap((p) => readRecords<ProducerRecord>(p.recordsFile));
  const producer = tallyProducer(producerRecords, input.jobs, runs);
  const lost = lostJobs(producer.acknowledged, ev);
  const history = new History(input.transitions ?? []);
  const flows = flowChecks(ev.jobsById, input.edges ?? [], history, ev.byJob);
  const schedule = scheduleChecks(input.jobs, input.schedule ?? null);
  const limits = limitChecks(input.jobs, history, ev.byJob);
  const dedupe = dedupeChecks(input.jobs, history, ev.byJob, producerRecords);
  const waits = waitChecks(producerRecords, ev.jobsById, history);
  const steps = stepChecks(input.stepped ?? []);
  const overlaps = overlapChecks(ev);
  const duplicates = duplicateCompletions(ev);
  const mismatches = ledgerMismatches(ev);
  const crashed = input.procs.filter((p) => p.crashed);
  const hung = input.procs.filter((p) => p.hung);
  const effects = repeatedSideEffects(ev);

  const count = (status: string) => input.jobs.filter((j) => j.status === status).length;
  const events = [...runs.values()].flatMap((r) => r.events.map((e) => e.event));
  const countEvent = (name: string) => events.filter((e) => e === name).length;
  const figures: Figure[] = [
    {
      section: 'every job (SPEC §1)',
      label: 'jobs enqueued (acknowledged)',
      value: producer.acknowledged.size,
    },
    { label: 'dedupe hits', value: producer.dedupeHits },
    {
      label: 'enqueue calls rejected (their rows committed anyway)',
      value: `${producer.failedCalls} (${producer.committedAnyway.length})`,
    },
    { label: 'handler executions', value: runs.size },
    { label: 'completions (done)', value: count('done') },
    {
      label: 'dead / cancelled',
      value: `${count('dead')} / ${count('cancelled')} (cancel calls won: ${producer.cancels})`,
    },
    {
      label: 'lease:lost / runaway / released events',
      value: `${countEvent('lease:lost')} / ${countEvent('job:runaway')} / ${countEvent('job:released')}`,
    },
    { label: 'ledger rows', value: input.ledger.length },
    { label: 'duplicate completions or stale ledger inserts', value: duplicates.length, mustBeZero: true },
    { label: 'ledger/result mismatches', value: mismatches.length, mustBeZero: true },
    { label: 'overlapping executions of one job', value: overlaps.total },
    { label: '  explained (aborted before the restart, or on resume)', value: overlaps.explained },
    { label: '  unexplained', value: overlaps.unexplained.length, mustBeZero: true },
    { label: 'stale outcomes accepted', value: overlaps.stale.length, mustBeZero: true },
    { label: 'lost jobs (missing, or pending/running after drain)', value: lost.length, mustBeZero: true },
    { label: 'processes that crashed on their own', value: crashed.length, mustBeZero: true },
    { label: 'processes hung on stop', value: hung.length, mustBeZero: true },
    {
      label: 'side effects repeated (of which in overlapping runs)',
      value: `${effects.repeated} (${effects.inOverlap})`,
    },
    ...flowFigures(producer, flows),
    ...scheduleFigures(schedule),
    ...limitFigures(limits),
    ...dedupeFigures(dedupe),
    ...waitFigures(waits),
    ...stepFigures(steps),
  ];
  const findings: Finding[] = [
    ...lost,
    ...flows.stuck,
    ...flows.order,
    ...flows.depsSeen,
    ...flows.cascade,
    ...schedule.doubled,
    ...schedule.lost,
    ...limits.concurrency,
    ...limits.groups,
    ...limits.rate,
    ...dedupe.active,
    ...dedupe.pending,
    ...dedupe.throttle,
    ...dedupe.debounce,
    ...waits.wrong,
    ...steps.twice,
    ...steps.mismatched,
    ...overlaps.unexplained,
    ...overlaps.stale,
    ...duplicates,
    ...mismatches,
    ...hung.map((p) => ({
      check: 'hung on stop',
      text: `${p.name} (pid ${p.pid}) did not exit after SIGTERM; SIGKILLed`,
    })),
    ...overlaps.explainedWhy,
    ...producer.committedAnyway.slice(0, 5).map((j) => ({
      check: 'info: enqueue rejected but committed',
      job: j.id,
      text: `ref ${j.ref}`,
    })),
  ];
  return {
    figures,
    findings,
    recovery: recoveryRows(input.faults, input.jobs, ev.byJob),
    crashes: crashGroups(crashed, input.faults),
    failed: figures.some((f) => f.mustBeZero && f.value !== 0),
  };
}

/**
 * What the producer (and the spawners) were told: ids created — by enqueue, enqueueFlow, the
 * producer's follow-ups and the spawners' — dedupe hits, calls that failed, cancels that won.
 */
function tallyProducer(records: ProducerRecord[], jobs: JobRow[], runs: Map<string, RunInfo>) {
  const acknowledged = new Set<string>();
  const failedRefs = new Set<string>();
  const flows = { fan: 0, chain: 0, cascade: 0, jobs: 0 };
  const follows = { producer: 0, spawned: 0, client: 0 };
  let dedupeHits = 0;
  let failedCalls = 0;
  let cancels = 0;
  let requeues = 0;
  for (const r of records) {
    if (r.type === 'cancel' && r.ok) cancels++;
    if (r.type === 'requeue' && r.ok) requeues++;
    if ((r.type === 'enqueue' || r.type === 'flow') && r.error) {
      failedCalls++;
      for (const ref of r.refs) failedRefs.add(ref);
    }
    if (r.type === 'enqueue') {
      for (const res of r.results ?? []) {
        if (res.created) acknowledged.add(res.id);
        else dedupeHits++;
      }
    } else if (r.type === 'flow' && r.result) {
      const ids = Object.values(r.result.jobs);
      for (const id of ids) acknowledged.add(id);
      flows[r.shape as 'fan' | 'chain' | 'cascade']++;
      flows.jobs += ids.length;
    } else if (r.type === 'follow') {
      if (r.error) failedRefs.add(r.ref);
      if (r.result?.created) {
        acknowledged.add(r.result.id);
        follows.producer++;
        if (r.via === 'client') follows.client++;
      }
    }
  }
  for (const run of runs.values()) {
    for (const s of run.spawned) {
      if (!s.created) continue;
      acknowledged.add(s.id);
      follows.spawned++;
    }
  }
  const committedAnyway = jobs.filter((j) => j.ref !== null && failedRefs.has(j.ref));
  return { acknowledged, dedupeHits, failedCalls, cancels, requeues, committedAnyway, flows, follows };
}

type Tally = ReturnType<typeof tallyProducer>;

function flowFigures(producer: Tally, flows: FlowVerdict): Figure[] {
  const { fan, chain, cascade, jobs } = producer.flows;
  const { producer: added, spawned, client } = producer.follows;
  return [
    {
      section: 'flows (SPEC §10)',
      label: 'flows enqueued: fan / chain / cascade (their jobs)',
      value: `${fan} / ${chain} / ${cascade} (${jobs})`,
    },
    {
      label: 'dependents added to existing jobs: by the producer (in a held transaction) / by handlers',
      value: `${added} (${client}) / ${spawned}`,
    },
    { label: '  of which while the dependency was running', value: flows.addedToRunning },
    {
      label: 'cancelled by a failed dependency / brought back by a requeue (roots requeued)',
      value: `${flows.cancelledByDependency} / ${flows.broughtBack} (${producer.requeues})`,
    },
    {
      label: 'dependents stuck (waiting, every dependency done)',
      value: flows.stuck.length,
      mustBeZero: true,
    },
    { label: 'dependency order violated', value: flows.order.length, mustBeZero: true },
    { label: 'ctx.dependencies() wrong', value: flows.depsSeen.length, mustBeZero: true },
    { label: 'cascade wrong', value: flows.cascade.length, mustBeZero: true },
  ];
}

function scheduleFigures(schedule: ScheduleVerdict): Figure[] {
  return [
    {
      section: 'the per-second schedule (SPEC §8)',
      label: 'ticks: with a job / skipped as catchUp allows (catch-up firings)',
      value: `${schedule.withJob} of ${schedule.ticks} / ${schedule.skippedByCatchUp} (${schedule.catchUpFirings})`,
    },
    { label: 'schedule ticks doubled', value: schedule.doubled.length, mustBeZero: true },
    { label: 'schedule ticks lost (beyond catchUp)', value: schedule.lost.length, mustBeZero: true },
  ];
}

function limitFigures(limits: LimitVerdict): Figure[] {
  return [
    ...limits.info.map(
      (q, i): Figure => ({
        ...(i === 0 ? { section: 'queue limits (SPEC §8), as the database counts' } : {}),
        label: `${q.queue} (${q.limit}): jobs / most at once (by handler stamps)`,
        value: `${q.jobs} / ${q.dbPeak} (${q.handlerPeak})`,
      }),
    ),
    { label: 'queue concurrency exceeded', value: limits.concurrency.length, mustBeZero: true },
    { label: 'group concurrency exceeded', value: limits.groups.length, mustBeZero: true },
    { label: 'rate limit exceeded', value: limits.rate.length, mustBeZero: true },
  ];
}

function dedupeFigures(dedupe: DedupeVerdict): Figure[] {
  const { throttle, debounce, pending } = dedupe.calls;
  return [
    {
      section: 'dedupe (SPEC §1.7, §8)',
      label: 'calls (hits): throttle / debounce (replaced) / one-queued',
      value: `${throttle.calls} (${throttle.hits}) / ${debounce.calls} (${debounce.hits}, ${debounce.replaced}) / ${pending.calls} (${pending.hits})`,
    },
    { label: 'dedupe violated: two active jobs for one key', value: dedupe.active.length, mustBeZero: true },
    {
      label: "dedupe violated: two queued or two running ('pending' scope)",
      value: dedupe.pending.length,
      mustBeZero: true,
    },
    {
      label: 'dedupe violated: two jobs within a throttle window',
      value: dedupe.throttle.length,
      mustBeZero: true,
    },
    {
      label: 'dedupe violated: a debounced job ran an older payload',
      value: dedupe.debounce.length,
      mustBeZero: true,
    },
  ];
}

function waitFigures(waits: WaitVerdict): Figure[] {
  return [
    {
      section: 'waitFor (SPEC §9)',
      label: 'calls: resolved / abandoned at shutdown',
      value: `${waits.calls}: ${waits.resolved} / ${waits.abandoned}`,
    },
    { label: 'waitFor wrong', value: waits.wrong.length, mustBeZero: true },
  ];
}

/**
 * Acknowledged but missing, or still active after the drain. (A job still `waiting` is judged by
 * the flow checks: stuck, or waiting behind a dependency that is.)
 */
function lostJobs(acknowledged: Set<string>, ev: Evidence): Finding[] {
  const lost: Finding[] = [];
  for (const id of acknowledged) {
    if (!ev.jobsById.has(id)) {
      lost.push({ check: 'lost job', job: id, text: 'enqueue returned its id but no row exists' });
    }
  }
  for (const j of ev.jobs) {
    if (j.status !== 'pending' && j.status !== 'running') continue;
    const owner = j.worker_id ? `, worker ${j.worker_id}` : '';
    const lease = j.lease_ms === null ? '' : `, lease until ${new Date(j.lease_ms).toISOString()}`;
    lost.push({
      check: 'lost job',
      job: j.id,
      text: `still ${j.status} after the drain (${j.kind}, attempt ${j.attempts}/${j.max_attempts}${owner}${lease})`,
    });
  }
  return lost;
}

/** Every pair of overlapping runs of one job, judged; and whether the older one's outcome counted. */
function overlapChecks(ev: Evidence) {
  let total = 0;
  let explained = 0;
  const unexplained: Finding[] = [];
  const stale: Finding[] = [];
  const why = new Map<string, number>();
  for (const [jobId, list] of ev.byJob) {
    list.forEach((O, i) => {
      for (const N of list.slice(i + 1)) {
        if (O.end <= N.start) continue;
        total++;
        const verdict = judgeOverlap(O, N, ev.faults);
        if (verdict.explained) {
          explained++;
          why.set(verdict.why, (why.get(verdict.why) ?? 0) + 1);
        } else {
          const text = `${O.id} (${O.kind}) still ran when ${N.id} started at ${iso(N.start)}: ${verdict.why}`;
          unexplained.push({ check: 'unexplained overlap', job: jobId, text });
        }
        const late = staleOutcome(O, N, ev.jobsById.get(jobId), ev.ledgerByJob.get(jobId));
        if (late) stale.push({ check: 'stale outcome accepted', job: jobId, text: `${O.id}: ${late}` });
      }
    });
  }
  const explainedWhy = [...why].map(([text, n]) => ({
    check: 'info: explained overlaps',
    text: `${n} × ${text}`,
  }));
  return { total, explained, unexplained, stale, explainedWhy };
}

/** Two runs that completed one job, or a ledger insert that reached the database after the job moved on. */
function duplicateCompletions(ev: Evidence): Finding[] {
  const duplicates: Finding[] = [];
  for (const [jobId, list] of ev.byJob) {
    const completed = list.filter((r) => r.events.some((e) => e.event === 'job:done'));
    if (completed.length > 1) {
      const text = `job:done from ${completed.map((r) => r.id).join(' and ')}`;
      duplicates.push({ check: 'duplicate completion', job: jobId, text });
    }
  }
  for (const r of ev.runs.values()) {
    if (!r.ledgerRefused) continue;
    const holder = ev.ledgerByJob.get(r.job)?.run_id ?? '?';
    duplicates.push({
      check: 'duplicate ledger insert',
      job: r.job,
      text: `${r.id} ran its ctx.transaction function after the job had moved on: its ledger insert reached the database and only the UNIQUE constraint refused it (row held by ${holder})`,
    });
  }
  return duplicates;
}

/** ctx.transaction commits the ledger row and the completion together, or neither. */
function ledgerMismatches(ev: Evidence): Finding[] {
  const mismatches: Finding[] = [];
  const add = (job: string, text: string) => mismatches.push({ check: 'ledger mismatch', job, text });
  for (const j of ev.jobs) {
    const row = ev.ledgerByJob.get(j.id);
    if (j.status === 'done' && j.finish === 'tx') {
      if (!row) add(j.id, 'done without its ledger row');
      else if (row.run_id !== j.result_run)
        add(j.id, `ledger row from ${row.run_id}, result from ${j.result_run}`);
    } else if (row && j.status !== 'done') {
      add(j.id, `ledger row (${row.run_id}) but job is ${j.status}`);
    }
  }
  return mismatches;
}

/** Jobs whose non-transactional side effect happened more than once (informational). */
function repeatedSideEffects(ev: Evidence): { repeated: number; inOverlap: number } {
  let repeated = 0;
  let inOverlap = 0;
  for (const list of ev.byJob.values()) {
    const withEffect = list.filter((r) => r.effect);
    if (withEffect.length < 2) continue;
    repeated++;
    if (withEffect.some((a, i) => withEffect.slice(i + 1).some((b) => a.end > b.start))) inOverlap++;
  }
  return { repeated, inOverlap };
}
