/**
 * Runs one job's handler and writes its outcome: done, retry, dead, cancelled or released —
 * each a compare-and-set on the lease (SPEC §1.2/§1.3), so an outcome of a job this worker no
 * longer owns changes nothing. Writes that fail because the database is away (or read-only
 * right after a failover) are retried while the lease lasts (SPEC §3: a worker survives a
 * database restart).
 *
 * A handler that settled decides the outcome. A handler abandoned after its grace period (a
 * runaway) may still be running: after a deadline its failure is written with the retry held
 * back until its lease would have expired, so no other worker starts the job while the lease
 * could still be this one's; after a stop nothing is written (the job returns through expiry);
 * after a lost lease nothing is written either.
 */
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { computeBackoff } from '../core/backoff.js';
import type { BatchCallbacks } from '../core/batcher.js';
import { errorText } from '../core/error-text.js';
import { toJsonText } from '../core/validate.js';
import { isConnectionError } from '../db/database-error.js';
import { withSession } from '../db/executor.js';
import type { Engine } from '../engine/engine.js';
import { DatabaseError, isPermanent, LeaseLostError } from '../errors.js';
import type { AttemptOutcome, ProcessSpan, Tracing } from '../telemetry/tracing.js';
import type { BackoffOptions, ClaimedJob } from '../types.js';
import type { WorkerEvents } from './events.js';
import type { HandlerOutcome, JobRun } from './job-run.js';
import type { Handler, JobContext } from './options.js';
import { ProgressWriter } from './progress.js';
import { assertOwned, destroySocket, rollBack, statement } from './run-session.js';
import { JobSteps, type StepHooks, type StepOptions } from './steps.js';

export interface ExecutorDeps {
  /** The queue's engine: every outcome is written by its completer. */
  engine: Engine;
  /** §9 the attempt's CONSUMER span comes from here (null: no spans). */
  tracing: Tracing | null;
  /** Completions share a statement with those that finish together (the Worker's `batchCompletions`). */
  batchCompletions: boolean;
  /**
   * A task's retry settings: its own backoff, else the worker's, else the queue's (null); §9 its
   * retryIf (`false` sends the job dead at once). Read only when an attempt fails.
   */
  taskSettings(task: string): {
    backoff: BackoffOptions | null;
    retryIf: ((error: unknown) => boolean) | null;
  };
  emit<E extends keyof WorkerEvents>(event: E, payload: WorkerEvents[E]): void;
  /** `job:start`, its payload made only if someone listens (every job passes here). */
  jobStarted(job: ClaimedJob): void;
  /** `job:done`: counted, and its payload made only if someone listens (every job passes here). */
  jobDone(job: ClaimedJob, result: unknown, durationMs: number): void;
  onError(error: unknown, during: string): void;
  /** The handler settled or was given up on: its slot is free while the outcome is written. */
  onSettled(): void;
  /** The run is over (its outcome written, or dropped); called once, last. */
  onFinished(run: JobRun): void;
}

/**
 * What the executor hands to others for every run of one worker: made once per worker
 * ({@link executorHooks}), so a run allocates no function of its own for them.
 */
export interface ExecutorHooks {
  readonly deps: ExecutorDeps;
  /** The grace period after an abort ended before the handler settled. */
  abandoned(run: JobRun): void;
  /** The answers of batched completions (the batch item is the run). */
  completion: BatchCallbacks<JobRun, boolean>;
}

/** The hooks of a worker's runs (see {@link ExecutorHooks}). */
export function executorHooks(deps: ExecutorDeps): ExecutorHooks {
  const hooks: ExecutorHooks = {
    deps,
    abandoned: (run) => {
      if (run.settleHandler()) afterHandler(run, { kind: 'abandoned' }, hooks);
    },
    completion: {
      resolve(run, ok) {
        end(run, deps, run.span, completed(run, ok, run.resultValue, deps));
      },
      reject(run, error) {
        afterFailedCompletion(run, run.resultJson, run.resultValue, error, deps, run.span);
      },
    },
  };
  return hooks;
}

/**
 * Runs the handler, waits for it (or gives up on it), then writes the outcome. §9 with tracing,
 * inside the attempt's CONSUMER span (a new trace linked to the enqueue's), which the outcome
 * ends. What fails is reported (`onError`); `onFinished` ends the run.
 *
 * The common run — the handler returns a value, nothing aborted it, no progress to write — goes
 * from the handler's promise to its written completion through two callbacks and no async
 * frame, no promise and no object of its own but the handler's promise and ctx (each suspended
 * async function kept ~1–2 KB per job: a fifth of a draining worker's allocations, measured with
 * the sampling heap profiler on a 20,000-job drain); every other run ends through
 * {@link finishSlowly}.
 */
export function execute(run: JobRun, handler: Handler, hooks: ExecutorHooks): void {
  const { deps } = hooks;
  try {
    deps.jobStarted(run.job);
    run.span = deps.tracing === null ? null : deps.tracing.process(run.job);
    // A job cancelled while it waited in the local queue starts aborted: its handler never runs.
    run.startedCancelled = run.abortReason === 'cancel';
    const handled = run.startedCancelled
      ? Promise.reject(run.signal.reason)
      : run.span
        ? run.span.run(() => callHandler(run, handler, deps))
        : callHandler(run, handler, deps);
    run.handlerStarted(hooks.abandoned);
    handled.then(
      (value: unknown) => {
        if (run.settleHandler()) handlerReturned(run, value, hooks);
      },
      (error: unknown) => {
        if (run.settleHandler()) afterHandler(run, handlerOutcome(run, { kind: 'error', error }), hooks);
      },
    );
  } catch (error) {
    fail(run, error, deps, run.span, 'unwritten');
  }
}

/** What the handler's outcome becomes once ctx.transaction has committed the completion: that. */
function handlerOutcome(run: JobRun, outcome: HandlerOutcome): HandlerOutcome {
  return run.committed ? { kind: 'committed', value: run.committed.value } : outcome;
}

/**
 * The handler returned `value`. The common case — nothing aborted it, no progress to write, no
 * ctx.transaction — is completed here with nothing allocated for it; the rest goes through
 * {@link afterHandler}.
 */
function handlerReturned(run: JobRun, value: unknown, hooks: ExecutorHooks): void {
  if (
    run.abortReason !== null ||
    run.progressWriter !== null ||
    run.committed ||
    run.writesClosed ||
    run.suspended !== null
  ) {
    afterHandler(run, handlerOutcome(run, { kind: 'result', value }), hooks);
    return;
  }
  const { deps } = hooks;
  try {
    run.clearTimers();
    run.phase = 'writing';
    deps.onSettled();
    const json = resultJson(value, run.job.task);
    if (typeof json !== 'string') {
      const outcome: HandlerOutcome = { kind: 'result', value };
      writeOutcome(run, outcome, deps, run.span).then(
        (ended) => end(run, deps, run.span, ended),
        (error: unknown) => fail(run, error, deps, run.span, 'unwritten'),
      );
      return;
    }
    const { completer } = deps.engine;
    if (deps.batchCompletions) {
      run.resultJson = json;
      run.resultValue = value;
      completer.pushCompletion(run, hooks.completion);
      return;
    }
    const pending = completer.complete(run.job, json);
    run.inFlight = pending;
    pending.then(
      (ok) => {
        run.inFlight = null;
        end(run, deps, run.span, completed(run, ok, value, deps));
      },
      (error: unknown) => {
        run.inFlight = null;
        afterFailedCompletion(run, json, value, error, deps, run.span);
      },
    );
  } catch (error) {
    fail(run, error, deps, run.span, 'unwritten');
  }
}

/** The handler settled (or was given up on) other than the common way: its slot is freed, then its outcome written. */
function afterHandler(run: JobRun, outcome: HandlerOutcome, hooks: ExecutorHooks): void {
  const { deps } = hooks;
  const { span } = run;
  try {
    // §9 what the handler threw is the span's exception (past a deadline: the deadline's error)
    if (
      outcome.kind === 'error' &&
      !run.startedCancelled &&
      run.abortReason !== 'deadline' &&
      run.suspended === null // §12 JobSuspended is no failure
    )
      span?.fail(outcome.error);
    run.clearTimers();
    run.phase = 'writing';
    finishSlowly(run, outcome, deps, span).then(
      (ended) => end(run, deps, span, ended),
      (error: unknown) => fail(run, error, deps, span, 'unwritten'),
    );
  } catch (error) {
    fail(run, error, deps, span, 'unwritten');
  }
}

/** The first write of a completion failed: written again alone ({@link completeAgain}), then the run ends. */
function afterFailedCompletion(
  run: JobRun,
  json: string,
  value: unknown,
  error: unknown,
  deps: ExecutorDeps,
  span: ProcessSpan | null,
): void {
  completeAgain(run, json, error, deps).then(
    (ok) => end(run, deps, span, completed(run, ok, value, deps)),
    (thrown: unknown) => fail(run, thrown, deps, span, 'unwritten'),
  );
}

/** The completion's answer: its event, and how the attempt ended. */
function completed(run: JobRun, ok: boolean | undefined, value: unknown, deps: ExecutorDeps): AttemptOutcome {
  const { job } = run;
  if (ok) deps.jobDone(job, value, run.durationMs);
  else if (ok === false) deps.emit('lease:lost', { job });
  return written(ok, 'done');
}

/** The first write of a completion failed (the database away?): again, alone, while the lease lasts. */
async function completeAgain(
  run: JobRun,
  json: string,
  error: unknown,
  deps: ExecutorDeps,
): Promise<boolean | undefined> {
  const delay = 100;
  if (!retryable(error) || run.writesClosed || performance.now() + delay >= run.leaseDeadline) {
    deps.onError(
      error,
      `completing a job (job ${run.job.id}); the reaper will recover it when its lease expires`,
    );
    return undefined;
  }
  deps.onError(error, `completing a job (job ${run.job.id}); retrying in ${delay} ms`);
  await run.sleep(delay);
  return persist(run, deps, 'completing a job', () => deps.engine.completer.complete(run.job, json));
}

/** Every run but the common one, from its handler's outcome to the written outcome. */
async function finishSlowly(
  run: JobRun,
  outcome: HandlerOutcome,
  deps: ExecutorDeps,
  span: ProcessSpan | null,
): Promise<AttemptOutcome> {
  if (outcome.kind === 'abandoned' && run.abortReason) {
    deps.emit('job:runaway', {
      job: run.job,
      reason: run.abortReason === 'shutdown' ? 'stop' : run.abortReason,
      graceMs: run.graceMsSetting,
    });
    // A runaway may still commit its ctx.transaction: wait for it to end before the slot is
    // freed, so its outcome is known (a lease check refuses it after a stop or a loss, and a
    // lost lease cuts its connection, so this wait is bounded by the lease).
    if (run.transaction === 'open' || run.transaction === 'committing') await run.transactionSettled();
  }
  deps.onSettled();
  // §9 the last progress reported goes in before the outcome (a runaway's never: it may go on)
  if (run.progressWriter !== null) {
    if (outcome.kind !== 'abandoned' && !run.committed && run.suspended === null)
      await run.progressWriter.finish();
    else run.progressWriter.close();
  }
  const final = run.committed ? { kind: 'committed' as const, value: run.committed.value } : outcome;
  return writeOutcome(run, final, deps, span);
}

/** The run is over: its span ended with how it ended, and the dispatcher told. */
function end(run: JobRun, deps: ExecutorDeps, span: ProcessSpan | null, ended: AttemptOutcome): void {
  try {
    span?.end(ended);
  } finally {
    deps.onFinished(run);
  }
}

/** Something failed that no outcome covers: reported, and the run ends. */
function fail(
  run: JobRun,
  error: unknown,
  deps: ExecutorDeps,
  span: ProcessSpan | null,
  ended: AttemptOutcome,
): void {
  try {
    deps.onError(error, `running job ${run.job.id}`);
  } finally {
    end(run, deps, span, ended);
  }
}

/**
 * A handler's ctx: one object per job, its functions made only when read (most handlers never
 * use them) and bound to the run, so `const { signal, progress } = ctx` works as before.
 */
class RunContext implements JobContext {
  readonly #run: JobRun;
  readonly #deps: ExecutorDeps;

  constructor(run: JobRun, deps: ExecutorDeps) {
    this.#run = run;
    this.#deps = deps;
  }

  get job(): ClaimedJob {
    return this.#run.job;
  }

  /** Made when first read: most handlers never look at it. */
  get signal(): AbortSignal {
    return this.#run.signal;
  }

  get transaction(): JobContext['transaction'] {
    const run = this.#run;
    const { engine } = this.#deps;
    return (fn) => completeInTransaction(run, engine, fn);
  }

  get dependencies(): JobContext['dependencies'] {
    const run = this.#run;
    const { engine } = this.#deps;
    return () => engine.flows.dependencies(run.job.id);
  }

  /** §12 durable steps: made on first use (a job that uses none pays nothing). */
  get step(): JobContext['step'] {
    const steps = runSteps(this.#run, this.#deps);
    const step = (name: string, fn: (client: pg.PoolClient) => unknown, options?: StepOptions) =>
      steps.step(name, fn, options);
    return step as JobContext['step'];
  }

  get sleep(): JobContext['sleep'] {
    const steps = runSteps(this.#run, this.#deps);
    return (name: string, duration: number | { until: Date }) => steps.sleep(name, duration);
  }

  get waitForEvent(): JobContext['waitForEvent'] {
    const steps = runSteps(this.#run, this.#deps);
    return (name: string, eventName: string, options?: { timeoutMs?: number }) =>
      steps.waitForEvent(name, eventName, options);
  }

  get progress(): JobContext['progress'] {
    const run = this.#run;
    const deps = this.#deps;
    return (value) => {
      const json = toJsonText(value, 'progress');
      // a runaway (abandoned, or the worker stopped) or a lost lease: its reports go nowhere
      if (run.phase !== 'running' || run.writesClosed || run.leaseExpired || run.abortReason === 'lost')
        return;
      run.progressWriter ??= progressWriter(run, deps);
      run.progressWriter.report(json);
    };
  }
}

/** §12 each run's steps, made on the handler's first step, sleep or wait (gone with the run). */
const stepsOfRun = new WeakMap<JobRun, JobSteps>();

function runSteps(run: JobRun, deps: ExecutorDeps): JobSteps {
  let steps = stepsOfRun.get(run);
  if (steps === undefined) {
    steps = new JobSteps(run, deps.engine, STEP_HOOKS);
    stepsOfRun.set(run, steps);
  }
  return steps;
}

/** §9 each step an event of the attempt's span. */
const STEP_HOOKS: StepHooks = {
  onStep: (run, name, kind, replayed) => run.span?.step(name, kind, replayed),
};

/** The handler's call: its promise (a value or a synchronous throw made one). */
function callHandler(run: JobRun, handler: Handler, deps: ExecutorDeps): Promise<unknown> {
  try {
    return Promise.resolve(handler(run.job.payload, new RunContext(run, deps)));
  } catch (error) {
    return Promise.reject(error);
  }
}

/** §9 whether ctx.progress may write now: the lease held, no ctx.transaction open. */
function progressWritable(run: JobRun): boolean {
  return (
    !run.writesClosed &&
    !run.leaseExpired &&
    run.abortReason !== 'lost' &&
    run.transaction === 'none' &&
    !run.committed &&
    run.phase !== 'finished'
  );
}

function progressWriter(run: JobRun, deps: ExecutorDeps): ProgressWriter {
  const { store, pool } = deps.engine;
  return new ProgressWriter({
    write: async (json, wait) => {
      const sentAt = performance.now();
      const stored = await store.lease.writeProgress(pool, run.job, json, run.leaseMs, wait);
      if (stored && !run.writesClosed) run.armLease(sentAt); // it renewed the lease too
      return stored;
    },
    writable: () => progressWritable(run),
    onError: (error) => deps.onError(error, `writing the progress of job ${run.job.id}`),
  });
}

/**
 * ctx.transaction: the handler's writes and the job's completion in one transaction. The job's
 * row is locked under the lease *before* `fn` runs (no row: the lease is gone, and `fn` never
 * runs), and ownership is checked again before the completion and COMMIT.
 */
async function completeInTransaction<T>(
  run: JobRun,
  engine: Engine,
  fn: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  if (run.transactionUsed) throw new Error('ctx.transaction() may be called once per job');
  run.transactionUsed = true;
  assertOwned(run);
  engine.assertOpen();
  const { pool, store, completer } = engine;
  const value = await withSession(pool, async (session, markBroken) => {
    // The row lock is what makes the job ours while the transaction is open: if the session
    // dies then, the lock is gone and the job may be reaped at once — the lease ends now.
    const onSessionError = () => {
      if (run.transaction !== 'open') return;
      run.setTransaction('none');
      run.revertToConfirmed();
    };
    session.on?.('error', onSessionError);
    let lastProgress: string | null = null;
    try {
      await statement(session, 'BEGIN', markBroken);
      let result: T;
      try {
        if (!(await store.lease.lockLease(session, run.job))) throw new LeaseLostError(run.job.id);
        run.setTransaction('open', () => {
          markBroken(new LeaseLostError(run.job.id));
          destroySocket(session);
        });
        result = await fn(session as unknown as pg.PoolClient);
        assertOwned(run); // deadline, cancel, lost or stop while fn ran: roll back
        const resultJson = toJsonText(result, 'result');
        // §9 the latest progress commits with the completion (the row is locked: nothing else
        // could write it meanwhile)
        lastProgress = run.progressWriter?.take() ?? null;
        if (lastProgress !== null) {
          await store.lease.writeProgress(session, run.job, lastProgress, run.leaseMs, true);
        }
        if (!(await completer.complete(run.job, resultJson, session))) throw new LeaseLostError(run.job.id);
        assertOwned(run);
      } catch (error) {
        run.progressWriter?.restore(lastProgress);
        await rollBack(run, session, store, markBroken);
        throw error;
      }
      run.setTransaction('committing');
      const commit = statement(session, 'COMMIT', markBroken);
      run.inFlight = commit;
      try {
        await commit;
      } catch (error) {
        run.setTransaction('none'); // a lease deadline that passed meanwhile is acted on now
        throw error;
      } finally {
        run.inFlight = null;
      }
      run.committed = { value: result };
      run.setTransaction('committed');
      return result;
    } finally {
      session.off?.('error', onSessionError);
    }
  });
  run.committed = { value };
  return value;
}

/** Writes the attempt's outcome and says how it ended (`skiplock.outcome` of its span). */
async function writeOutcome(
  run: JobRun,
  outcome: HandlerOutcome,
  deps: ExecutorDeps,
  span: ProcessSpan | null,
): Promise<AttemptOutcome> {
  const { job } = run;
  const { completer } = deps.engine;
  const durationMs = run.durationMs;
  if (outcome.kind === 'committed') {
    deps.jobDone(job, outcome.value, durationMs);
    return 'done';
  }
  // §12 suspended by ctx.sleep / ctx.waitForEvent: the database holds the job already
  if (run.suspended !== null) {
    const { kind, until, event } = run.suspended;
    if (kind === 'cancelled') {
      deps.emit('job:cancelled', { job, durationMs, reason: 'cancel' });
      return 'cancelled';
    }
    deps.emit('job:suspended', { job, kind, until, event, durationMs });
    return 'suspended';
  }
  if (run.abortReason === 'lost') return 'lease_lost'; // lease:lost was reported when it was detected
  if (run.abortReason === 'shutdown') {
    // Stopping: a runaway keeps the job until its lease expires (nothing written); a handler
    // that settled with an error gives the job back without spending the attempt; one that
    // returned a value did the work and completes.
    if (outcome.kind === 'abandoned') return 'abandoned';
    if (outcome.kind === 'error') {
      const released = await persist(run, deps, 'releasing a job on stop', () => completer.release(job));
      if (released) deps.emit('job:released', { job });
      else if (released === false) deps.emit('lease:lost', { job });
      return written(released, 'released');
    }
  }
  if (run.abortReason === 'cancel') {
    const ok = await persist(run, deps, 'recording a cancellation', () => completer.cancel(job));
    if (ok) deps.emit('job:cancelled', { job, durationMs, reason: 'cancel' });
    else if (ok === false) deps.emit('lease:lost', { job });
    return written(ok, 'cancelled');
  }
  let error: unknown;
  if (run.abortReason === 'deadline') {
    error = run.deadlineError(outcome.kind === 'abandoned');
    span?.fail(error);
  } else if (outcome.kind === 'error') {
    error = outcome.error;
  } else if (outcome.kind === 'result') {
    const result = resultJson(outcome.value, job.task);
    if (typeof result === 'string') {
      const ok = await persist(run, deps, 'completing a job', () =>
        deps.batchCompletions ? completer.completeBatched(job, result) : completer.complete(job, result),
      );
      if (ok) deps.jobDone(job, outcome.value, durationMs);
      else if (ok === false) deps.emit('lease:lost', { job });
      return written(ok, 'done');
    }
    error = result;
    span?.fail(error);
  }
  const { backoff, retryIf } = deps.taskSettings(job.task);
  let retryInMs = backoff
    ? computeBackoff(job.attempt, backoff.baseMs, backoff.capMs, backoff.jitter)
    : deps.engine.retryDelay(job.attempt);
  // A runaway may still be running: no retry may start while its lease could still be ours.
  if (outcome.kind === 'abandoned') retryInMs = Math.max(retryInMs, Math.ceil(run.leaseRemainingMs()));
  // §9 no retry for a PermanentError, or when the task's retryIf says no
  const permanent = isPermanent(error) || !retryWanted(error, retryIf, deps);
  const status = await persist(run, deps, 'recording a failure', () =>
    completer.fail(job, errorText(error), retryInMs, permanent),
  );
  if (status === 'pending') {
    deps.emit('job:retry', { job, error, retryInMs, durationMs });
    return 'retry';
  }
  if (status === 'dead') deps.emit('job:dead', { job, error, durationMs });
  else if (status === 'cancelled')
    deps.emit('job:cancelled', { job, durationMs, reason: 'superseded', error });
  else if (status === null) deps.emit('lease:lost', { job });
  return status === undefined ? 'unwritten' : status === null ? 'lease_lost' : status;
}

/** A write's answer as an outcome: `ok` when it was written, else the lease was gone or it gave up. */
function written(answer: boolean | undefined, ok: AttemptOutcome): AttemptOutcome {
  return answer === true ? ok : answer === false ? 'lease_lost' : 'unwritten';
}

/** The task's retryIf on `error` (true without one); one that throws is reported, and retries. */
export function retryWanted(
  error: unknown,
  retryIf: ((error: unknown) => boolean) | null,
  deps: ExecutorDeps,
): boolean {
  if (retryIf === null) return true;
  try {
    return retryIf(error) !== false;
  } catch (thrown) {
    deps.onError(thrown, "calling the task's retryIf");
    return true;
  }
}

/** A handler's result as JSON text, or the error that fails the attempt when JSON cannot hold it. */
export function resultJson(value: unknown, task: string): string | Error {
  try {
    return toJsonText(value, 'result');
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    return new Error(
      `The handler of task "${task}" returned a value that cannot be stored as JSON (${reason})`,
    );
  }
}

/** SQLSTATEs after which the same write can simply run again. */
export function retryable(error: unknown): boolean {
  if (isConnectionError(error)) return true;
  // deadlock, serialization failure, read-only (a standby promoted a moment ago, or a failover
  // that reconnected us to the old primary)
  return error instanceof DatabaseError && /^(40P01|40001|25006)$/.test(error.sqlState ?? '');
}

/**
 * Runs a write, retrying while the database is unreachable and the lease still lasts. Returns
 * the write's value, or `undefined` when it gave up (the reaper will recover the job).
 */
async function persist<T>(
  run: JobRun,
  deps: ExecutorDeps,
  during: string,
  write: () => Promise<T>,
): Promise<T | undefined> {
  for (let attempt = 0; ; attempt++) {
    if (run.writesClosed) return undefined;
    try {
      const pending = write();
      run.inFlight = pending;
      return await pending;
    } catch (error) {
      const delay = Math.min(2_000, 100 * 2 ** attempt);
      if (!retryable(error) || run.writesClosed || performance.now() + delay >= run.leaseDeadline) {
        deps.onError(
          error,
          `${during} (job ${run.job.id}); the reaper will recover it when its lease expires`,
        );
        return undefined;
      }
      deps.onError(error, `${during} (job ${run.job.id}); retrying in ${delay} ms`);
      await run.sleep(delay);
    } finally {
      run.inFlight = null;
    }
  }
}
