/**
 * Admin operations: the explaining variants of requeue and cancel (one statement each, the
 * reason read from its result), and operations over many jobs, each a series of short
 * keyset-batched transactions so that none holds locks or a snapshot for long: requeueing dead
 * jobs and deleting finished ones.
 */
import { ConflictError, DatabaseError, DedupeConflictError, NotFoundError } from '../errors.js';
import type { CancelOutcome, RequeueOutcome } from '../types.js';
import type { Engine } from './engine.js';

const REQUEUE_BATCH = 1_000;
const PRUNE_BATCH = 5_000;

/**
 * dead → pending (or waiting, §10), or why not: NotFoundError (no such job), ConflictError (it is
 * not dead).
 */
export async function requeueOrThrow(
  engine: Engine,
  id: string,
  resetSteps = false,
): Promise<RequeueOutcome> {
  const transition = await engine.requeue(id, resetSteps);
  if (transition === null) throw new NotFoundError(`No job with id ${id}`);
  if (transition.after === null) {
    throw new ConflictError(
      id,
      transition.before,
      `Job ${id} is ${transition.before}: only dead jobs can be requeued`,
    );
  }
  return { id, status: transition.after === 'waiting' ? 'waiting' : 'pending' };
}

/** Cancels, or says why not: NotFoundError (no such job), ConflictError (already finished). */
export async function cancelOrThrow(engine: Engine, id: string): Promise<CancelOutcome> {
  const transition = await engine.cancel(id);
  if (transition === null) throw new NotFoundError(`No job with id ${id}`);
  if (transition.after !== 'cancelled' && transition.after !== 'running') {
    throw new ConflictError(
      id,
      transition.before,
      `Job ${id} is ${transition.before}: only waiting, pending or running jobs (and the dead head of a sequence) can be cancelled`,
    );
  }
  return { id, status: transition.after, wasRunning: transition.before === 'running' };
}

/**
 * Requeues every dead job (of one `task`, if given) in batches of 1,000. A batch holding a dedupe
 * key that an active job took again is redone one job at a time, skipping those jobs.
 */
export async function requeueDead(
  engine: Engine,
  task: string | null,
  onProgress?: (progress: { requeued: number; skipped: number }) => void,
): Promise<{ requeued: number; skipped: number }> {
  const { store, pool } = engine;
  const totals = { requeued: 0, skipped: 0 };
  let after = '0';
  for (;;) {
    let batch: { requeued: number; lastId: string | null };
    try {
      const tried = await store.admin.requeueDeadBatch(pool, task, after, REQUEUE_BATCH);
      // §8 a key of scope 'pending' whose lock was taken: this batch one job at a time
      batch = tried.busy ? await requeueOneByOne(engine, task, after, totals) : tried;
    } catch (error) {
      if (!(error instanceof DatabaseError && error.sqlState === '23505')) throw error;
      batch = await requeueOneByOne(engine, task, after, totals);
    }
    if (batch.lastId === null) return totals;
    totals.requeued += batch.requeued;
    onProgress?.({ ...totals });
    after = batch.lastId;
  }
}

/**
 * Fallback of requeueDead for a batch holding a taken dedupe key (or a key of scope 'pending'
 * whose lock was taken): one job at a time.
 */
async function requeueOneByOne(
  engine: Engine,
  task: string | null,
  after: string,
  totals: { skipped: number },
): Promise<{ requeued: number; lastId: string | null }> {
  const { store, pool } = engine;
  const ids = await store.admin.deadIds(pool, task, after, REQUEUE_BATCH);
  let requeued = 0;
  for (const id of ids) {
    try {
      // §10 pending, or waiting for a dependency that is not done: requeued either way
      const after = (await store.admin.requeue(pool, id))?.after;
      if (after !== null && after !== undefined) requeued++;
    } catch (error) {
      if (!(error instanceof DedupeConflictError)) throw error;
      totals.skipped++;
    }
  }
  return { requeued, lastId: ids.at(-1) ?? null };
}

/** Deletes finished jobs of `statuses` older than `olderThanMs`, 5,000 per transaction; returns the total. */
export async function prune(
  engine: Engine,
  statuses: string[],
  olderThanMs: number,
  onProgress?: (deleted: number) => void,
): Promise<number> {
  let total = 0;
  let after = '0';
  for (;;) {
    const { deleted, lastId } = await engine.store.admin.pruneBatch(
      engine.pool,
      statuses,
      olderThanMs,
      after,
      PRUNE_BATCH,
    );
    total += deleted;
    if (deleted > 0) onProgress?.(total);
    if (lastId === null) {
      // §12 and the events past the cut-off that no waiting job needs
      await engine.store.steps.pruneEvents(engine.pool, olderThanMs);
      return total;
    }
    after = lastId;
  }
}
