/**
 * The completer: the one place that writes a claimed job's outcome — done (or deleted, with
 * `retention: { completed: 'delete' }`), retry or dead, cancelled, released — for the Queue's own
 * calls and for every worker. Each write is a compare-and-set on the lease (SPEC §1.2/§1.3): a
 * lease that no longer owns its job changes nothing and is answered `false`/`null`.
 *
 * Completions that arrive together share one statement (a batch per event-loop turn, at most
 * 1,000 rows, two batches in flight), each row still guarded by its own lease; a worker's
 * unstarted jobs are released in one statement on stop. Retention, workflows and telemetry hook
 * in here.
 */
import { type BatchCallbacks, Batcher } from '../core/batcher.js';
import type { Executor } from '../db/executor.js';
import type { BatchOutcome, SettledStatus } from '../store/outcome.js';
import type { Lease } from '../types.js';
import type { EngineCore as Engine } from './engine-core.js';

export type { BatchOutcome, SettledStatus } from '../store/outcome.js';

/** Most completions in one statement. */
const MAX_BATCH = 1_000;

/** A completion to write: the lease and the result as JSON text. */
export interface Completion {
  readonly lease: Lease;
  readonly resultJson: string;
}

export class Completer {
  private readonly batcher: Batcher<Completion, boolean>;

  constructor(private readonly engine: Engine) {
    this.batcher = new Batcher(
      async (items) =>
        (await engine.store.outcome.completeMany(engine.pool, items)).map((value) => ({
          ok: true as const,
          value,
        })),
      { maxBatch: MAX_BATCH, maxConcurrent: 2 },
    );
  }

  /** running → done with `resultJson`, alone, on `db` (the pool, or the caller's transaction). */
  complete(lease: Lease, resultJson: string, db: Executor = this.engine.pool): Promise<boolean> {
    this.engine.assertOpen();
    return this.engine.store.outcome.complete(db, lease, resultJson);
  }

  /** running → done, sharing a statement with the completions that arrive in the same turn. */
  completeBatched(lease: Lease, resultJson: string): Promise<boolean> {
    this.engine.assertOpen();
    return this.batcher.add({ lease, resultJson });
  }

  /**
   * As {@link completeBatched}, for a caller with many: `callbacks` get the item back with its
   * answer (or the error of its batch), and nothing is allocated per item.
   */
  pushCompletion<C extends Completion>(item: C, callbacks: BatchCallbacks<C, boolean>): void {
    this.engine.assertOpen();
    this.batcher.push(item, callbacks as BatchCallbacks<Completion, boolean>);
  }

  /** Many completions in one statement; one answer per item, in input order. */
  completeMany(items: readonly { lease: Lease; resultJson: string }[]): Promise<boolean[]> {
    this.engine.assertOpen();
    return this.engine.store.outcome.completeMany(this.engine.pool, items);
  }

  /**
   * §11 a batch's outcomes in one statement, each row under its own lease; per item what it
   * became, or `unwritten` (lease gone, or left to the single-job statements: see settleMany).
   */
  settleMany(items: readonly BatchOutcome[]): Promise<SettledStatus[]> {
    this.engine.assertOpen();
    return this.engine.store.outcome.settleMany(this.engine.pool, items);
  }

  /**
   * A failed attempt: pending again after `retryInMs`, dead when attempts are spent, or
   * cancelled when cancellation was requested meanwhile; null when the lease no longer owns it.
   * `permanent`: dead at once (a PermanentError, a task's retryIf said no).
   */
  fail(
    lease: Lease,
    errorText: string,
    retryInMs: number,
    permanent = false,
  ): Promise<'pending' | 'dead' | 'cancelled' | null> {
    this.engine.assertOpen();
    return this.engine.store.outcome.fail(this.engine.pool, lease, errorText, retryInMs, permanent);
  }

  /** running → cancelled, for the owner of a job whose cancellation was requested. */
  cancel(lease: Lease, note = 'Cancelled: cancellation was requested while it ran'): Promise<boolean> {
    this.engine.assertOpen();
    return this.engine.store.outcome.cancelRunning(this.engine.pool, lease, note);
  }

  /** running → pending without spending the attempt. */
  release(lease: Lease): Promise<boolean> {
    this.engine.assertOpen();
    return this.engine.store.outcome.release(this.engine.pool, lease);
  }

  /** Releases many leases in one statement (a stopping worker's unstarted jobs). */
  releaseMany(leases: readonly Lease[]): Promise<boolean[]> {
    this.engine.assertOpen();
    return this.engine.store.outcome.releaseMany(this.engine.pool, leases);
  }

  /** Resolves once no batch is in flight. */
  async idle(): Promise<void> {
    await this.batcher.idle();
  }
}
