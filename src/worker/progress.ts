/**
 * `ctx.progress(value)` (SPEC §9): a handler's progress reports, written under its lease and
 * coalesced — the first at once, then at most one write per PROGRESS_INTERVAL_MS per job, each
 * carrying the latest value. A write that finds the row locked (the job's own ctx.transaction,
 * a completion in flight) keeps its value for the next one. Before the job's outcome is written
 * the last value is written too, so a job finishes with the progress its handler last reported.
 * Best effort: a failed write is reported, never thrown at the handler.
 */
import { performance } from 'node:perf_hooks';

/** Shortest time between two progress writes of one job. */
export const PROGRESS_INTERVAL_MS = 250;

export class ProgressWriter {
  private pending: string | null = null;
  private writing: Promise<void> | null = null;
  private lastAt = Number.NEGATIVE_INFINITY;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    /** Writes one value; false when the row was busy or the lease is gone. */
    private readonly write: (json: string) => Promise<boolean>,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** A new value (JSON text): written now, or with the next write. */
  report(json: string): void {
    if (this.closed) return;
    this.pending = json;
    this.schedule();
  }

  /** Writes what is pending now, whatever the interval (the outcome comes next), then stops. */
  async flush(): Promise<void> {
    if (this.closed) return;
    this.clearTimer();
    await this.writing;
    const last = this.pending;
    this.close();
    if (last !== null) await this.attempt(last);
  }

  /** Stops: nothing more is written. */
  close(): void {
    this.closed = true;
    this.pending = null;
    this.clearTimer();
  }

  private schedule(): void {
    if (this.closed || this.writing || this.timer || this.pending === null) return;
    const wait = this.lastAt + PROGRESS_INTERVAL_MS - performance.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.schedule();
      }, wait);
      this.timer.unref?.();
      return;
    }
    const json = this.pending;
    this.pending = null;
    this.lastAt = performance.now();
    this.writing = this.attempt(json).then((stored) => {
      // busy (or the lease is gone): keep it for the next write unless a newer value came
      if (!stored && this.pending === null && !this.closed) this.pending = json;
    });
    void this.writing.finally(() => {
      this.writing = null;
      this.schedule();
    });
  }

  private async attempt(json: string): Promise<boolean> {
    try {
      return await this.write(json);
    } catch (error) {
      this.onError(error);
      return true; // reported; the next report writes again
    }
  }

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
