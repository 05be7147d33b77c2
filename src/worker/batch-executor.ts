/**
 * §11 runs one batch: the handler gets the items of its jobs at once, and every job's outcome is
 * written in one statement (`settleMany`), each row guarded by its own lease (SPEC §1.2/§1.3).
 *
 * What the handler's outcome becomes, per job whose lease the worker still holds (a job whose
 * lease was lost is never written: `lease:lost` was reported when it was found):
 *   - nothing returned: done, result null;
 *   - an array with one entry per item: an `Error` fails that job alone (retry with its own
 *     backoff, dead by its own attempts, dead at once for a PermanentError or a retryIf that says
 *     no), any other value is its result;
 *   - a throw, or any other return value (an array of another length): every job fails with it;
 *   - past its deadline: every job fails with JobDeadlineExceeded (a runaway's retry held back
 *     until its leases would have expired, as for one job);
 *   - aborted by a stop or a lost lease: a handler that threw gives its jobs back (attempt not
 *     spent); one that returned did the work, and its outcomes are written; a runaway keeps its
 *     jobs (nothing written; they return when their leases expire).
 * A job cancelled while the batch ran ends `cancelled` whatever the handler returned for it.
 * Jobs whose payload fails the task's schema never reach the handler: they go dead at once.
 * Events stay per job (`job:start`, `job:done`, `job:retry`, …).
 */
import { performance } from 'node:perf_hooks';
import { computeBackoff } from '../core/backoff.js';
import { errorText } from '../core/error-text.js';
import type { BatchOutcome, SettledStatus } from '../engine/completer.js';
import { isPermanent } from '../errors.js';
import type { BatchContext } from '../task-types.js';
import type { AttemptOutcome } from '../telemetry/tracing.js';
import type { BatchRun } from './batch-run.js';
import { type ExecutorDeps, resultJson, retryable, retryWanted } from './job-executor.js';
import type { JobRun } from './job-run.js';
import type { BatchEntry } from './options.js';

/** What the batch handler did, as far as the worker knows. */
type BatchHandlerOutcome =
  | { kind: 'result'; value: unknown }
  | { kind: 'error'; error: unknown }
  | { kind: 'abandoned' };

/** One job's planned outcome: done with a value, or failed with an error. */
type Plan =
  | { run: JobRun; done: true; value: unknown; json: string }
  | { run: JobRun; done: false; error: unknown };

/** The context of a batch handler: its signal only (per-job tools belong to single jobs). */
class BatchHandlerContext implements BatchContext {
  readonly #batch: BatchRun;
  constructor(batch: BatchRun) {
    this.#batch = batch;
  }
  get signal(): AbortSignal {
    return this.#batch.signal;
  }
}

/** Runs the batch's handler, then writes every job's outcome; reports what fails, and finishes each run. */
export function executeBatch(batch: BatchRun, entry: BatchEntry, deps: ExecutorDeps): void {
  runBatch(batch, entry, deps).then(
    (ended) => finishAll(batch, deps, ended),
    (error: unknown) => {
      deps.onError(error, `running a batch of task "${batch.task}"`);
      finishAll(batch, deps, 'unwritten');
    },
  );
}

async function runBatch(batch: BatchRun, entry: BatchEntry, deps: ExecutorDeps): Promise<AttemptOutcome> {
  const jobs = batch.members.map((member) => member.job);
  for (const job of jobs) deps.jobStarted(job);
  batch.span = deps.tracing === null ? null : deps.tracing.processBatch(jobs);
  const { items, rejected } = await entry.prepare(jobs);
  const outcome: BatchHandlerOutcome =
    items.length === 0 ? { kind: 'result', value: undefined } : await callHandler(batch, entry, items);
  if (outcome.kind === 'error' && batch.abortReason !== 'deadline') batch.span?.fail(outcome.error);
  // every job's slot is free while the outcomes are written
  for (const member of batch.members) {
    if (member.phase === 'running') member.phase = 'writing';
    deps.onSettled();
  }
  const owned = batch.owned();
  if (outcome.kind === 'abandoned' && batch.abortReason !== 'deadline') {
    // stop or lost lease: the handler may still run, so its jobs are never handed on while their
    // leases could be ours — nothing is written; they come back when the leases expire
    for (const run of owned) {
      deps.emit('job:runaway', {
        job: run.job,
        reason: batch.abortReason === 'shutdown' ? 'stop' : 'lost',
        graceMs: batch.graceMs,
      });
    }
    return 'abandoned';
  }
  if (outcome.kind === 'error' && (batch.abortReason === 'shutdown' || batch.abortReason === 'lost'))
    return releaseAll(batch, owned, deps);
  const plans = planOutcomes(batch, owned, outcome, items.length, rejected);
  return writePlans(batch, plans, outcome.kind === 'abandoned', deps);
}

/** Calls the handler and waits for it to settle, or to be abandoned after an abort and its grace period. */
function callHandler(
  batch: BatchRun,
  entry: BatchEntry,
  items: Parameters<BatchEntry['handler']>[0],
): Promise<BatchHandlerOutcome> {
  return new Promise<BatchHandlerOutcome>((resolve) => {
    batch.watchAbandon(() => {
      if (batch.settle()) resolve({ kind: 'abandoned' });
    });
    let handled: Promise<unknown>;
    try {
      const ctx = new BatchHandlerContext(batch);
      const call = () => entry.handler(items, ctx);
      handled = Promise.resolve(batch.span ? batch.span.run(call) : call());
    } catch (error) {
      handled = Promise.reject(error);
    }
    handled.then(
      (value) => {
        if (batch.settle()) resolve({ kind: 'result', value });
      },
      (error: unknown) => {
        if (batch.settle()) resolve({ kind: 'error', error });
      },
    );
  });
}

/** Each owned job's planned outcome (see the header). */
function planOutcomes(
  batch: BatchRun,
  owned: readonly JobRun[],
  outcome: BatchHandlerOutcome,
  itemCount: number,
  rejected: ReadonlyMap<number, Error>,
): Plan[] {
  const mine = new Set(owned);
  let shared: unknown = null; // an error every job of the batch fails with
  if (batch.abortReason === 'deadline') {
    shared = batch.deadlineError(outcome.kind === 'abandoned');
    batch.span?.fail(shared);
  } else if (outcome.kind === 'error') {
    shared = outcome.error;
  } else if (outcome.kind === 'result') {
    const value = outcome.value;
    if (value !== undefined && value !== null && !(Array.isArray(value) && value.length === itemCount)) {
      shared = new Error(
        `The batch handler of task "${batch.task}" returned ${describe(value)} for a batch of ${itemCount} job(s): ` +
          'return nothing (every job done), or an array with one outcome per item, in order',
      );
      batch.span?.fail(shared);
    }
  }
  const results = outcome.kind === 'result' && Array.isArray(outcome.value) ? outcome.value : null;
  const plans: Plan[] = [];
  let item = 0; // the handler's items skip the rejected jobs
  for (let i = 0; i < batch.members.length; i++) {
    const run = batch.members[i] as JobRun;
    const ownError = rejected.get(i);
    const index = ownError === undefined ? item++ : -1;
    if (!mine.has(run)) continue;
    if (ownError !== undefined) {
      plans.push({ run, done: false, error: ownError });
      continue;
    }
    if (shared !== null) {
      plans.push({ run, done: false, error: shared });
      continue;
    }
    const value = results === null ? null : results[index];
    if (value instanceof Error) {
      plans.push({ run, done: false, error: value });
      continue;
    }
    const json = resultJson(value, run.job.task);
    if (typeof json === 'string') plans.push({ run, done: true, value, json });
    else plans.push({ run, done: false, error: json });
  }
  return plans;
}

/** A short description of a value a batch handler should not have returned. */
function describe(value: unknown): string {
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** Writes the plans in one statement, then what it left to the single-job statements; emits per job. */
async function writePlans(
  batch: BatchRun,
  plans: readonly Plan[],
  abandoned: boolean,
  deps: ExecutorDeps,
): Promise<AttemptOutcome> {
  const { completer } = deps.engine;
  const { backoff, retryIf } = deps.taskSettings(batch.task);
  const durationMs = batch.durationMs;
  const outcomes: BatchOutcome[] = plans.map((plan) => {
    const lease = plan.run.job;
    if (plan.done) return { lease, kind: 'done', resultJson: plan.json };
    let retryInMs = backoff
      ? computeBackoff(lease.attempt, backoff.baseMs, backoff.capMs, backoff.jitter)
      : deps.engine.retryDelay(lease.attempt);
    // A runaway may still be running: no retry may start while its lease could still be ours.
    if (abandoned) retryInMs = Math.max(retryInMs, Math.ceil(plan.run.leaseRemainingMs()));
    const permanent = isPermanent(plan.error) || !retryWanted(plan.error, retryIf, deps);
    return { lease, kind: 'fail', errorText: errorText(plan.error), retryInMs, permanent };
  });
  // one statement, shared with other batches that finish in the same turn
  const statuses = await persist(batch, deps, 'writing the outcomes of a batch', () =>
    completer.settleBatched(outcomes),
  );
  if (statuses === undefined) return 'unwritten';
  const tally = new Set<AttemptOutcome>();
  // left to the single-job statements: completions that delete their row (one statement for
  // all), retries of keys of scope 'pending'; a lost lease answers false / null there too
  const completions: number[] = [];
  for (let i = 0; i < plans.length; i++) {
    const plan = plans[i] as Plan;
    const outcome = outcomes[i] as BatchOutcome;
    const status = statuses[i] as SettledStatus;
    if (status !== 'unwritten') {
      tally.add(announce(plan, outcome, status, durationMs, false, deps));
    } else if (outcome.kind === 'done') {
      completions.push(i);
    } else {
      const failed = await persist(batch, deps, 'recording a failure', () =>
        completer.fail(outcome.lease, outcome.errorText, outcome.retryInMs, outcome.permanent),
      );
      tally.add(
        failed === undefined
          ? 'unwritten'
          : announce(plan, outcome, failed ?? 'unwritten', durationMs, true, deps),
      );
    }
  }
  if (completions.length > 0) {
    // never a job whose cancel was requested (a cancel that committed after the batch
    // statement): those answer false here, and the batch statement, run again for them, writes
    // them cancelled (or finds their lease gone)
    const answers = await persist(batch, deps, 'completing jobs of a batch', () =>
      completer.completeMany(
        completions.map((i) => outcomes[i] as BatchOutcome & { kind: 'done' }),
        true,
      ),
    );
    const again = completions.filter((_, k) => answers !== undefined && !answers[k]);
    const settled =
      again.length === 0
        ? []
        : await persist(batch, deps, 'writing the outcomes of a batch', () =>
            completer.settleBatched(again.map((i) => outcomes[i] as BatchOutcome)),
          );
    for (let k = 0; k < completions.length; k++) {
      const i = completions[k] as number;
      let status: SettledStatus = 'done';
      if (answers === undefined) status = 'unwritten';
      else if (!answers[k]) status = settled?.[again.indexOf(i)] ?? 'unwritten';
      if (answers === undefined || (!answers[k] && settled === undefined)) tally.add('unwritten');
      else
        tally.add(announce(plans[i] as Plan, outcomes[i] as BatchOutcome, status, durationMs, false, deps));
    }
  }
  return tally.size === 1 ? ([...tally][0] as AttemptOutcome) : 'mixed';
}

/** Emits one job's event for what was written (`unwritten` here: its lease was gone). */
function announce(
  plan: Plan,
  outcome: BatchOutcome,
  status: SettledStatus,
  durationMs: number,
  alone: boolean,
  deps: ExecutorDeps,
): AttemptOutcome {
  const { job } = plan.run;
  switch (status) {
    case 'done':
      deps.jobDone(job, plan.done ? plan.value : null, durationMs);
      return 'done';
    case 'pending':
      deps.emit('job:retry', {
        job,
        error: plan.done ? null : plan.error,
        retryInMs: outcome.kind === 'fail' ? outcome.retryInMs : 0,
        durationMs,
      });
      return 'retry';
    case 'dead':
      deps.emit('job:dead', { job, error: plan.done ? null : plan.error, durationMs });
      return 'dead';
    case 'cancelled':
      // the batch statement cancels only on request; the single fail also when superseded (§8)
      if (alone && plan.run.abortReason !== 'cancel')
        deps.emit('job:cancelled', {
          job,
          durationMs,
          reason: 'superseded',
          error: plan.done ? null : plan.error,
        });
      else deps.emit('job:cancelled', { job, durationMs, reason: 'cancel' });
      return 'cancelled';
    case 'unwritten':
      deps.emit('lease:lost', { job });
      return 'lease_lost';
  }
}

/** Stop or a lost lease, and the handler threw: its jobs go back without spending the attempt. */
async function releaseAll(
  batch: BatchRun,
  owned: readonly JobRun[],
  deps: ExecutorDeps,
): Promise<AttemptOutcome> {
  if (owned.length === 0) return 'lease_lost';
  const leases = owned.map((run) => run.job);
  const released = await persist(batch, deps, 'releasing the jobs of a batch', () =>
    deps.engine.completer.releaseMany(leases),
  );
  if (released === undefined) return 'unwritten';
  owned.forEach((run, i) => {
    if (released[i]) deps.emit('job:released', { job: run.job });
    else deps.emit('lease:lost', { job: run.job });
  });
  return 'released';
}

/**
 * Runs a write, retrying while the database is unreachable and the batch's earliest lease still
 * lasts; `undefined` when it gave up (the reaper recovers the jobs when their leases expire).
 */
async function persist<T>(
  batch: BatchRun,
  deps: ExecutorDeps,
  during: string,
  write: () => Promise<T>,
): Promise<T | undefined> {
  const first = batch.members[0] as JobRun;
  for (let attempt = 0; ; attempt++) {
    if (batch.writesClosed) return undefined;
    try {
      const pending = write();
      for (const member of batch.members) member.inFlight = pending;
      return await pending;
    } catch (error) {
      const delay = Math.min(2_000, 100 * 2 ** attempt);
      if (!retryable(error) || batch.writesClosed || performance.now() + delay >= batch.leaseDeadline) {
        deps.onError(
          error,
          `${during} (task "${batch.task}"); the reaper will recover its jobs when their leases expire`,
        );
        return undefined;
      }
      deps.onError(error, `${during} (task "${batch.task}"); retrying in ${delay} ms`);
      await first.sleep(delay);
    } finally {
      for (const member of batch.members) member.inFlight = null;
    }
  }
}

/** The batch is over: its span ended, and every job's run finished (once). */
function finishAll(batch: BatchRun, deps: ExecutorDeps, ended: AttemptOutcome): void {
  if (batch.finished) return;
  batch.finished = true;
  try {
    batch.span?.end(ended);
  } finally {
    for (const member of batch.members) {
      try {
        deps.onFinished(member);
      } catch (error) {
        deps.onError(error, `finishing job ${member.job.id} of a batch`);
      }
    }
  }
}
