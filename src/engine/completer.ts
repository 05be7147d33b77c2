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

/** §11 one job's outcome in a batch, waiting to share a statement with other batches' (see settleBatched). */
class PendingSettle {
  constructor(
    readonly outcome: BatchOutcome,
    readonly position: number,
    readonly batch: SettleGroup,
  ) {}
}

/** §11 one batch's answers as they come back; settles its promise once all are in. */
class SettleGroup {
  readonly answers: SettledStatus[];
  private left: number;
  failed = false;
  constructor(
    size: number,
    readonly resolve: (answers: SettledStatus[]) => void,
    readonly reject: (error: unknown) => void,
  ) {
    this.answers = new Array<SettledStatus>(size);
    this.left = size;
  }
  answer(position: number, status: SettledStatus): void {
    this.answers[position] = status;
    if (--this.left === 0 && !this.failed) this.resolve(this.answers);
  }
  fail(error: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.reject(error);
  }
}

const SETTLE_ANSWERS = {
  resolve(item: PendingSettle, status: SettledStatus) {
    item.batch.answer(item.position, status);
  },
  reject(item: PendingSettle, error: unknown) {
    item.batch.fail(error);
  },
};

export class Completer {
  private readonly batcher: Batcher<Completion, boolean>;
  /** §11 batches' outcomes that finish together share one settleMany (each batch's still in one). */
  private readonly settles: Batcher<PendingSettle, SettledStatus>;

  constructor(private readonly engine: Engine) {
    this.batcher = new Batcher(
      async (items) =>
        (await engine.store.outcome.completeMany(engine.pool, items)).map((value) => ({
          ok: true as const,
          value,
        })),
      { maxBatch: MAX_BATCH, maxConcurrent: 2 },
    );
    this.settles = new Batcher(
      async (items) =>
        (
          await engine.store.outcome.settleMany(
            engine.pool,
            items.map((item) => item.outcome),
          )
        ).map((value) => ({
          ok: true as const,
          value,
        })),
      // a batch's outcomes are never split across two statements
      { maxBatch: MAX_BATCH, maxConcurrent: 2, groupOf: (item) => item.batch },
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

  /**
   * Many completions in one statement; one answer per item, in input order. §11 `uncancelled`:
   * a job whose cancel was requested is left as it is (false).
   */
  completeMany(
    items: readonly { lease: Lease; resultJson: string }[],
    uncancelled = false,
  ): Promise<boolean[]> {
    this.engine.assertOpen();
    return this.engine.store.outcome.completeMany(this.engine.pool, items, uncancelled);
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
   * §11 as {@link settleMany}, sharing the statement with other batches whose outcomes arrive in
   * the same turn of the event loop (about 1,000 rows, two statements in flight); a batch is never
   * split across two statements.
   * One answer per item, in input order; a failed statement rejects every batch in it.
   */
  settleBatched(items: readonly BatchOutcome[]): Promise<SettledStatus[]> {
    this.engine.assertOpen();
    if (items.length === 0) return Promise.resolve([]);
    return new Promise<SettledStatus[]>((resolve, reject) => {
      const group = new SettleGroup(items.length, resolve, reject);
      for (let i = 0; i < items.length; i++)
        this.settles.push(new PendingSettle(items[i] as BatchOutcome, i, group), SETTLE_ANSWERS);
    });
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
    await Promise.all([this.batcher.idle(), this.settles.idle()]);
  }
}
