/**
 * `ctx.progress(value)` (SPEC §9): a handler's progress reports, written under its lease and
 * coalesced — the first at once, then at most one write per PROGRESS_INTERVAL_MS per job, each
 * carrying the latest value, one write in flight at a time.
 *
 * - A write also renews the lease (it is a compare-and-set on it, like the heartbeat): the row
 *   lock it holds for a moment can make a heartbeat skip the row, and that beat's renewal is
 *   this write's.
 * - A write takes the row with SKIP LOCKED: a row locked by another transaction is not waited
 *   for; the value is kept for the next write. While the job's own ctx.transaction is open
 *   nothing is written: the transaction writes the latest value itself before it completes.
 * - When the handler settles, the last value is written (waiting for the row) before the
 *   outcome. When the handler is abandoned, the run stopped or the lease lost, nothing more is
 *   written: a runaway's reports go nowhere.
 * Best effort: a failed write is reported, never thrown at the handler.
 */
import { performance } from 'node:perf_hooks';

/** Shortest time between two progress writes of one job. */
export const PROGRESS_INTERVAL_MS = 250;
/** Extra wait before the next write after a failed one. */
const ERROR_PAUSE_MS = 1_750;

export interface ProgressSink {
  /**
   * Writes one value under the lease; `wait`: wait for a locked row instead of skipping it.
   * False when nothing was written (the row was busy, or the lease is gone).
   */
  write(json: string, wait: boolean): Promise<boolean>;
  /** Whether the run may write now (running, lease held, no ctx.transaction open). */
  writable(): boolean;
  onError(error: unknown): void;
}

export class ProgressWriter {
  private pending: string | null = null;
  /** Counts reports: a failed write gives its value back only if no newer one came since. */
  private reports = 0;
  /** The write in flight (its value is still the latest unless a report came since). */
  private inFlight: { json: string; reports: number } | null = null;
  private loop: Promise<void> | null = null;
  private lastAt = Number.NEGATIVE_INFINITY;
  private closed = false;
  private sleeper: { timer: NodeJS.Timeout; resolve: () => void } | null = null;

  constructor(private readonly sink: ProgressSink) {}

  /** A new value (JSON text): written now, or with the next write. */
  report(json: string): void {
    if (this.closed) return;
    this.pending = json;
    this.reports++;
    this.loop ??= this.drain().finally(() => {
      this.loop = null;
    });
  }

  /**
   * Takes the latest value not known to be written — the pending one, else the one of a write
   * still in flight (which may yet find the row completed) — for ctx.transaction to write in its
   * own transaction.
   */
  take(): string | null {
    const json = this.pending ?? this.inFlight?.json ?? null;
    this.pending = null;
    this.inFlight = null; // taken: its failure gives nothing back
    return json;
  }

  /** Gives back a value {@link take}n by a transaction that rolled back, unless a newer one came. */
  restore(json: string | null): void {
    if (json !== null && this.pending === null && !this.closed) this.pending = json;
  }

  /**
   * The handler settled: stops the coalescing, waits for a write in flight, then writes the
   * last value (if one is still unwritten and the run may write) — before the outcome.
   */
  async finish(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wakeUp();
    await this.loop;
    const last = this.pending;
    this.pending = null;
    if (last === null || !this.sink.writable()) return;
    // one retry: the outcome comes next, and this is the value the job keeps
    if (!(await this.attempt(last, true)) && this.sink.writable()) await this.attempt(last, true);
  }

  /** Resolves when no write of this writer is in flight any more (stop() waits for it). */
  async idle(): Promise<void> {
    await this.loop;
  }

  /** Stops: nothing more is written (a write in flight completes on its own). */
  close(): void {
    this.closed = true;
    this.pending = null;
    this.wakeUp();
  }

  private async drain(): Promise<void> {
    while (!this.closed && this.pending !== null && this.sink.writable()) {
      const wait = this.lastAt + PROGRESS_INTERVAL_MS - performance.now();
      if (wait > 0) {
        await this.sleep(wait);
        continue; // closed, or the run changed while asleep: look again
      }
      const flight = { json: this.pending, reports: this.reports };
      this.pending = null;
      this.inFlight = flight;
      this.lastAt = performance.now();
      const stored = await this.attempt(flight.json, false);
      if (this.inFlight !== flight) continue; // taken by ctx.transaction meanwhile
      this.inFlight = null;
      // busy, or failed: keep it for the next write unless a newer value came
      if (!stored && this.reports === flight.reports) this.pending = flight.json;
    }
  }

  /** One write; false when it did not store the value (busy, lease gone, or failed: reported). */
  private async attempt(json: string, wait: boolean): Promise<boolean> {
    try {
      return await this.sink.write(json, wait);
    } catch (error) {
      this.sink.onError(error);
      this.lastAt = performance.now() + ERROR_PAUSE_MS; // the database is away: not every 250 ms
      return false;
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.sleeper = null;
        resolve();
      }, ms);
      this.sleeper = { timer, resolve };
    });
  }

  private wakeUp(): void {
    if (!this.sleeper) return;
    clearTimeout(this.sleeper.timer);
    this.sleeper.resolve();
    this.sleeper = null;
  }
}
