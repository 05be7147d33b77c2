/**
 * Runs one job's handler and writes its outcome: done, retry, dead or cancelled — each a
 * compare-and-set on the lease (SPEC §1.2/§1.3), so an outcome of a job this worker no longer
 * owns changes nothing. Writes that fail because the database is away are retried while the
 * lease lasts (SPEC §3: a worker survives a database restart).
 */
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { computeBackoff } from '../core/backoff.js';
import { toJsonText } from '../core/validate.js';
import { isConnectionError } from '../db/database-error.js';
import { DatabaseError, LeaseLostError } from '../errors.js';
import type { Queue } from '../queue.js';
import type { BackoffOptions, ClaimedJob } from '../types.js';
import type { WorkerEvents } from './events.js';
import type { HandlerOutcome, JobRun } from './job-run.js';
import type { Handler, JobContext } from './options.js';

export interface ExecutorDeps {
  queue: Queue;
  /** Completes one job: through the worker's completion batcher, or queue.complete. */
  complete(lease: ClaimedJob, result: unknown): Promise<boolean>;
  backoff: BackoffOptions | null;
  emit<E extends keyof WorkerEvents>(event: E, payload: WorkerEvents[E]): void;
  onError(error: unknown, during: string): void;
}

/** Runs the handler, waits for it (or gives up on it), then writes the outcome. */
export async function execute(run: JobRun, handler: Handler, deps: ExecutorDeps): Promise<void> {
  deps.emit('job:start', { job: run.job });
  const settled = callHandler(run, handler, deps.queue);
  const outcome = await Promise.race([settled, run.abandoned]);
  run.clearTimers();
  if (run.released) return; // stop() put it back; nothing to write
  run.phase = 'writing';
  if (outcome.kind === 'abandoned' && run.abortReason && run.abortReason !== 'shutdown') {
    deps.emit('job:runaway', {
      job: run.job,
      reason: run.abortReason,
      graceMs: run.graceMsSetting,
    });
  }
  await writeOutcome(run, outcome, deps);
}

function callHandler(run: JobRun, handler: Handler, queue: Queue): Promise<HandlerOutcome> {
  const ctx: JobContext = {
    job: run.job,
    signal: run.signal,
    transaction: (fn) => completeInTransaction(run, queue, fn),
  };
  return (async (): Promise<HandlerOutcome> => {
    try {
      const value = await handler(run.job.payload, ctx);
      return run.committed ? { kind: 'committed', value: run.committed.value } : { kind: 'result', value };
    } catch (error) {
      return run.committed ? { kind: 'committed', value: run.committed.value } : { kind: 'error', error };
    }
  })();
}

/** ctx.transaction: the handler's writes and the job's completion in one transaction. */
async function completeInTransaction<T>(
  run: JobRun,
  queue: Queue,
  fn: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  if (run.transactionUsed) throw new Error('ctx.transaction() may be called once per job');
  run.transactionUsed = true;
  const value = await queue.transaction(async (client) => {
    const result = await fn(client);
    if (run.signal.aborted) throw run.signal.reason; // deadline, cancel or lost: roll back
    if (!(await queue.complete(run.job, result, { client }))) throw new LeaseLostError(run.job.id);
    return result;
  });
  run.committed = { value };
  return value;
}

async function writeOutcome(run: JobRun, outcome: HandlerOutcome, deps: ExecutorDeps): Promise<void> {
  const { job } = run;
  const durationMs = run.durationMs;
  if (run.abortReason === 'lost') return; // lease:lost was reported when it was detected
  if (outcome.kind === 'committed') {
    deps.emit('job:done', { job, result: outcome.value, durationMs });
    return;
  }
  if (run.abortReason === 'cancel') {
    const ok = await persist(run, deps, 'recording a cancellation', () =>
      deps.queue.completeCancellation(job),
    );
    if (ok) deps.emit('job:cancelled', { job, durationMs });
    else if (ok === false) deps.emit('lease:lost', { job });
    return;
  }
  let error: unknown;
  if (run.abortReason === 'deadline') {
    error = run.deadlineError(outcome.kind === 'abandoned');
  } else if (outcome.kind === 'error') {
    error = outcome.error;
  } else if (outcome.kind === 'result') {
    const unserialisable = resultProblem(outcome.value, job.task);
    if (!unserialisable) {
      const ok = await persist(run, deps, 'completing a job', () => deps.complete(job, outcome.value));
      if (ok) deps.emit('job:done', { job, result: outcome.value, durationMs });
      else if (ok === false) deps.emit('lease:lost', { job });
      return;
    }
    error = unserialisable;
  }
  const retryInMs = deps.backoff
    ? computeBackoff(job.attempt, deps.backoff.baseMs, deps.backoff.capMs, deps.backoff.jitter)
    : deps.queue.retryDelay(job.attempt);
  const status = await persist(run, deps, 'recording a failure', () =>
    deps.queue.fail(job, error, { retryInMs }),
  );
  if (status === 'pending') {
    deps.emit('job:retry', { job, error, retryInMs, durationMs });
  } else if (status === 'dead') deps.emit('job:dead', { job, error, durationMs });
  else if (status === 'cancelled') deps.emit('job:cancelled', { job, durationMs });
  else if (status === null) deps.emit('lease:lost', { job });
}

/** A handler result that cannot be stored as JSON, as the error that fails the attempt. */
function resultProblem(value: unknown, task: string): Error | null {
  try {
    toJsonText(value, 'result');
    return null;
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    return new Error(
      `The handler of task "${task}" returned a value that cannot be stored as JSON (${reason})`,
    );
  }
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
    try {
      return await write();
    } catch (error) {
      // The database away, or a deadlock/serialization failure: the write can simply run again.
      const retryable =
        isConnectionError(error) ||
        (error instanceof DatabaseError && /^40(P01|001)$/.test(error.sqlState ?? ''));
      const delay = Math.min(2_000, 100 * 2 ** attempt);
      if (!retryable || run.writesCancelled || performance.now() + delay >= run.leaseExpiresAt) {
        deps.onError(
          error,
          `${during} (job ${run.job.id}); the reaper will recover it when its lease expires`,
        );
        return undefined;
      }
      deps.onError(error, `${during} (job ${run.job.id}); retrying in ${delay} ms`);
      await run.sleep(delay);
      if (run.writesCancelled) return undefined;
    }
  }
}
