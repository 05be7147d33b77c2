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

interface Waiting<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
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
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
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
        if (result?.ok) waiting.resolve(result.value);
        else
          waiting.reject(result ? result.error : new Error('batch flush returned no result for this item'));
      });
    } catch (error) {
      for (const waiting of batch) waiting.reject(error);
    } finally {
      this.inFlight--;
      if (this.queue.length > 0) this.drain();
      else if (this.inFlight === 0) for (const wake of this.idleWaiters.splice(0)) wake();
    }
  }
}
