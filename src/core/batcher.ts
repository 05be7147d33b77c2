/**
 * Automatic batching of concurrent calls, like a DataLoader: calls that arrive while a batch
 * is being written wait for the next one, so N callers share one statement and one commit
 * instead of N. An idle batcher adds no delay beyond one turn of the event loop.
 *
 * - at most `maxBatch` items per flush;
 * - at most `maxConcurrent` flushes in flight (commits of overlapping flushes can share a WAL
 *   flush in PostgreSQL's group commit);
 * - each caller gets its own result or its own error (the flush returns one per item).
 */

/** One item's outcome of a flush. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

export interface BatcherOptions {
  maxBatch: number;
  maxConcurrent: number;
}

/**
 * What a caller of {@link Batcher.push} is told: one object for every item (no promise or
 * closure per item); each gets its own item back.
 */
export interface BatchCallbacks<I, O> {
  resolve(item: I, value: O): void;
  reject(item: I, error: unknown): void;
}

interface Waiting<I, O> {
  item: I;
  /** Set for push(): the callbacks, called with the item. */
  callbacks: BatchCallbacks<I, O> | null;
  resolve: ((value: O) => void) | null;
  reject: ((error: unknown) => void) | null;
}

export class Batcher<I, O> {
  private readonly flush: (items: I[]) => Promise<Settled<O>[]>;
  private readonly options: BatcherOptions;
  private queue: Waiting<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;
  private readonly idleWaiters: (() => void)[] = [];

  constructor(flush: (items: I[]) => Promise<Settled<O>[]>, options: BatcherOptions) {
    this.flush = flush;
    this.options = options;
  }

  /** Adds one item to the next batch; resolves with its own result. */
  add(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, callbacks: null, resolve, reject });
      this.schedule();
    });
  }

  /**
   * Adds one item to the next batch; `callbacks` are called with it and its own result (or
   * error). For a caller that makes many: nothing is allocated per item but its place in the
   * queue.
   */
  push(item: I, callbacks: BatchCallbacks<I, O>): void {
    this.queue.push({ item, callbacks, resolve: null, reject: null });
    this.schedule();
  }

  /** Items waiting or being written. */
  get size(): number {
    return this.queue.length + this.inFlight;
  }

  /** Resolves when nothing is waiting or in flight. */
  async idle(): Promise<void> {
    if (this.queue.length === 0 && this.inFlight === 0) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.options.maxConcurrent) return;
    this.scheduled = true;
    // One turn of the event loop gathers the calls made together (a Promise.all, a burst).
    setImmediate(() => {
      this.scheduled = false;
      this.drain();
    });
  }

  private drain(): void {
    while (this.queue.length > 0 && this.inFlight < this.options.maxConcurrent) {
      const batch = this.queue.splice(0, this.options.maxBatch);
      this.inFlight++;
      void this.run(batch);
    }
  }

  private async run(batch: Waiting<I, O>[]): Promise<void> {
    try {
      const results = await this.flush(batch.map((w) => w.item));
      batch.forEach((waiting, i) => {
        const result = results[i];
        if (result?.ok) settle(waiting, true, result.value);
        else
          settle(
            waiting,
            false,
            result ? result.error : new Error('batch flush returned no result for this item'),
          );
      });
    } catch (error) {
      for (const waiting of batch) settle(waiting, false, error);
    } finally {
      this.inFlight--;
      if (this.queue.length > 0) this.drain();
      else if (this.inFlight === 0) for (const wake of this.idleWaiters.splice(0)) wake();
    }
  }
}

/** Tells one waiting caller its item's outcome (callbacks report their own failures: they must not throw). */
function settle<I, O>(waiting: Waiting<I, O>, ok: boolean, outcome: unknown): void {
  const { callbacks } = waiting;
  if (callbacks === null) {
    if (ok) waiting.resolve?.(outcome as O);
    else waiting.reject?.(outcome);
    return;
  }
  try {
    if (ok) callbacks.resolve(waiting.item, outcome as O);
    else callbacks.reject(waiting.item, outcome);
  } catch {
    // a callback that throws must not settle the rest of its batch twice
  }
}
