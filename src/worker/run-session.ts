/**
 * What a run's own database sessions share (ctx.transaction, and ctx.step with
 * `{ transaction: true }`): the ownership check before and after the caller's function, and the
 * rollback that renews the lease the open transaction kept the heartbeat from renewing.
 */
import { performance } from 'node:perf_hooks';
import { isDriverError, type SessionExecutor } from '../db/executor.js';
import type { Engine } from '../engine/engine.js';
import { LeaseLostError, WorkerStoppingError } from '../errors.js';
import type { JobRun } from './job-run.js';

/**
 * Throws unless this run may still write: its signal not aborted (deadline, cancel, lost, stop),
 * its local lease deadline not passed (a paused or cut-off process learns it here, without
 * asking the database), and stop() not resolved.
 */
export function assertOwned(run: JobRun): void {
  if (run.writesClosed) throw new WorkerStoppingError();
  if (run.checkLease()) throw new LeaseLostError(run.job.id);
  if (run.signal.aborted) throw run.signal.reason;
}

/**
 * Rolls ctx.transaction back. While its row was locked the heartbeat could not move
 * lease_until: the lease is renewed now, on this session, before the handler goes on — or found
 * gone (then the run is aborted as lost). A session that cannot even roll back is dead, and the
 * lock with it: the lease is what the database last confirmed (expired at once if that passed).
 */
export async function rollBack(
  run: JobRun,
  session: SessionExecutor,
  store: Engine['store'],
  markBroken: (error: unknown) => void,
): Promise<void> {
  const wasOpen = run.transaction === 'open';
  run.setTransaction('none');
  try {
    await session.query('ROLLBACK');
  } catch (rollbackError) {
    markBroken(rollbackError);
    if (wasOpen) run.revertToConfirmed();
    return;
  }
  if (!wasOpen || run.leaseExpired) return;
  const sentAt = performance.now();
  try {
    if (await store.lease.renewLease(session, run.job, run.leaseMs)) run.armLease(sentAt);
    else run.expireNow(); // someone else owns the job now
  } catch (error) {
    if (isDriverError(error)) markBroken(error);
    run.revertToConfirmed();
  }
}

export function destroySocket(session: unknown): void {
  (session as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
}

export async function statement(
  session: { query(text: string): Promise<unknown> },
  text: string,
  markBroken: (error: unknown) => void,
): Promise<void> {
  try {
    await session.query(text);
  } catch (error) {
    if (isDriverError(error)) markBroken(error);
    throw error;
  }
}
