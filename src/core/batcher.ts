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

export interface BatcherOptions<I = unknown> {
  maxBatch: number;
  maxConcurrent: number;
  /**
   * With no flush in flight, flush at the end of the current job (a microtask) rather than the
   * next turn of the event loop: a lone call goes out at once (W3: enqueue → handler latency),
   * calls made together (a loop, a Promise.all) still share one flush, and calls that arrive
   * while one is in flight wait for the next as before.
   */
  eager?: boolean;
  /**
   * Items of one group (pushed one after another) are never split across two flushes: a flush
   * that would cut a group takes the rest of it too (so it may exceed `maxBatch` by one group).
   */
  groupOf?: (item: I) => unknown;
}

/**
 * What a caller of {@link Batcher.push} is told: one object for every item (no promise or
 * closure per item); each gets its own item back.
 */
export interface BatchCallbacks<I, O> {
  resolve(item: I, value: O): void;
  reject(item: I, error: unknown): void;
}

/** The promise of an add(), waiting for its item's outcome. */
class Pending<O> {
  constructor(
    readonly resolve: (value: O) => void,
    readonly reject: (error: unknown) => void,
  ) {}
}

/** How a waiting item is answered: the callbacks of push(), or the promise of add(). */
type Answer<I, O> = BatchCallbacks<I, O> | Pending<O>;

export class Batcher<I, O> {
  private readonly flush: (items: I[]) => Promise<Settled<O>[]>;
  private readonly options: BatcherOptions<I>;
  /** Items waiting for the next flush, and beside each (same position) how it is answered. */
  private items: I[] = [];
  private answers: Answer<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;
  private readonly idleWaiters: (() => void)[] = [];

  constructor(flush: (items: I[]) => Promise<Settled<O>[]>, options: BatcherOptions<I>) {
    this.flush = flush;
    this.options = options;
  }

  /** Adds one item to the next batch; resolves with its own result. */
  add(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.items.push(item);
      this.answers.push(new Pending(resolve, reject));
      this.schedule();
    });
  }

  /**
   * Adds one item to the next batch; `callbacks` are called with it and its own result (or
   * error). For a caller that makes many: nothing is allocated per item but its place in the
   * queue.
   */
  push(item: I, callbacks: BatchCallbacks<I, O>): void {
    this.items.push(item);
    this.answers.push(callbacks);
    this.schedule();
  }

  /** Items waiting or being written. */
  get size(): number {
    return this.items.length + this.inFlight;
  }

  /** Resolves when nothing is waiting or in flight. */
  async idle(): Promise<void> {
    if (this.items.length === 0 && this.inFlight === 0) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.options.maxConcurrent) return;
    this.scheduled = true;
    if (this.options.eager && this.inFlight === 0) {
      queueMicrotask(this.flushScheduled);
      return;
    }
    // One turn of the event loop gathers the calls made together (a Promise.all, a burst).
    setImmediate(this.flushScheduled);
  }

  private readonly flushScheduled = (): void => {
    this.scheduled = false;
    this.drain();
  };

  private drain(): void {
    while (this.items.length > 0 && this.inFlight < this.options.maxConcurrent) {
      let items: I[];
      let answers: Answer<I, O>[];
      if (this.items.length <= this.options.maxBatch) {
        items = this.items;
        answers = this.answers;
        this.items = [];
        this.answers = [];
      } else {
        const cut = this.cutAt();
        items = this.items.splice(0, cut);
        answers = this.answers.splice(0, cut);
      }
      this.inFlight++;
      void this.run(items, answers);
    }
  }

  /** Where a flush of the waiting items ends: at `maxBatch`, or after the group that spans it. */
  private cutAt(): number {
    let cut = this.options.maxBatch;
    const { groupOf } = this.options;
    if (!groupOf) return cut;
    const last = groupOf(this.items[cut - 1] as I);
    while (cut < this.items.length && groupOf(this.items[cut] as I) === last) cut++;
    return cut;
  }

  private async run(items: I[], answers: Answer<I, O>[]): Promise<void> {
    try {
      const results = await this.flush(items);
      for (let i = 0; i < items.length; i++) {
        const result = results[i];
        if (result?.ok) settle(items[i] as I, answers[i] as Answer<I, O>, true, result.value);
        else
          settle(
            items[i] as I,
            answers[i] as Answer<I, O>,
            false,
            result ? result.error : new Error('batch flush returned no result for this item'),
          );
      }
    } catch (error) {
      for (let i = 0; i < items.length; i++) settle(items[i] as I, answers[i] as Answer<I, O>, false, error);
    } finally {
      this.inFlight--;
      if (this.items.length > 0) this.drain();
      else if (this.inFlight === 0) for (const wake of this.idleWaiters.splice(0)) wake();
    }
  }
}

/** Tells one waiting caller its item's outcome (callbacks report their own failures: they must not throw). */
function settle<I, O>(item: I, answer: Answer<I, O>, ok: boolean, outcome: unknown): void {
  if (answer instanceof Pending) {
    if (ok) answer.resolve(outcome as O);
    else answer.reject(outcome);
    return;
  }
  try {
    if (ok) answer.resolve(item, outcome as O);
    else answer.reject(item, outcome);
  } catch {
    // a callback that throws must not settle the rest of its batch twice
  }
}
