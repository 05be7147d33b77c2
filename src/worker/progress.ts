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

  /** Takes the value not yet written (ctx.transaction writes it in its own transaction). */
  take(): string | null {
    const json = this.pending;
    this.pending = null;
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
    const last = this.take();
    if (last !== null && this.sink.writable()) await this.attempt(last, true);
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
      const json = this.pending;
      const reports = this.reports;
      this.pending = null;
      this.lastAt = performance.now();
      const stored = await this.attempt(json, false);
      // busy: keep it for the next write unless a newer value came (or was taken)
      if (!stored && this.reports === reports) this.pending = json;
    }
  }

  private async attempt(json: string, wait: boolean): Promise<boolean> {
    try {
      return await this.sink.write(json, wait);
    } catch (error) {
      this.sink.onError(error);
      return true; // reported; the next report writes again
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
