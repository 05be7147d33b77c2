/**
 * The verdict: reads the jobs table, the ledger and every process's records after the run, and
 * checks what SPEC §1 promises under faults — no unexplained overlap of two runs of one job
 * (overlaps.ts), no duplicate completion, no stale outcome accepted, nothing lost, no process
 * crashed or hung — and measures recovery per fault type (recovery.ts).
 */
import type { Fault } from './faults.js';
import type { Proc } from './fleet.js';
import { iso, judgeOverlap, staleOutcome } from './overlaps.js';
import { type ProducerRecord, readRecords } from './records.js';
import { type CrashGroup, crashGroups, type RecoveryRow, recoveryRows } from './recovery.js';
import { loadRuns, type RunInfo, runsByJob } from './runs.js';

/** Kinds whose successful attempt ends in ctx.transaction with a ledger row (workload.ts). */
const TX_KINDS = new Set(['tx', 'tx-hold', 'flaky', 'overrun', 'stubborn-tx', 'runaway']);

/** A row of the jobs table, as the verifier reads it. */
export interface JobRow {
  id: string;
  status: string;
  ref: string | null;
  kind: string | null;
  result_run: string | null;
  last_error: string | null;
  attempts: number;
  max_attempts: number;
  updated_ms: number;
  lease_ms: number | null;
  worker_id: string | null;
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
  const producer = tallyProducer(input.procs, input.jobs);
  const lost = lostJobs(producer.acknowledged, ev);
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
    { label: 'jobs enqueued (acknowledged)', value: producer.acknowledged.size },
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
  ];
  const findings: Finding[] = [
    ...lost,
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

/** What the producer was told: ids created, dedupe hits, calls that failed, cancels that won. */
function tallyProducer(procs: Proc[], jobs: JobRow[]) {
  const records = procs
    .filter((p) => p.role === 'producer')
    .flatMap((p) => readRecords<ProducerRecord>(p.recordsFile));
  const acknowledged = new Set<string>();
  const failedRefs = new Set<string>();
  let dedupeHits = 0;
  let failedCalls = 0;
  let cancels = 0;
  for (const r of records) {
    if (r.type === 'cancel' && r.ok) cancels++;
    if (r.type !== 'enqueue') continue;
    if (r.error) {
      failedCalls++;
      for (const ref of r.refs) failedRefs.add(ref);
    }
    for (const res of r.results ?? []) {
      if (res.created) acknowledged.add(res.id);
      else dedupeHits++;
    }
  }
  const committedAnyway = jobs.filter((j) => j.ref !== null && failedRefs.has(j.ref));
  return { acknowledged, dedupeHits, failedCalls, cancels, committedAnyway };
}

/** Acknowledged but missing, or still active after the drain. */
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
    if (j.status === 'done' && j.kind !== null && TX_KINDS.has(j.kind)) {
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
