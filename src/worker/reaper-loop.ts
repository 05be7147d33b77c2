/**
 * Every worker reaps expired leases now and then (SPEC §1.5): reaping is a compare-and-set
 * with SKIP LOCKED, so many workers reaping at once is safe. Jitter keeps a fleet of workers
 * from reaping in lockstep.
 */
export interface ReaperDeps {
  intervalMs: number;
  reap(): Promise<string[]>;
  onReaped(ids: string[]): void;
  onError(error: unknown, during: string): void;
}

export class ReaperLoop {
  private readonly deps: ReaperDeps;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = true;

  constructor(deps: ReaperDeps) {
    this.deps = deps;
  }

  start(): void {
    this.stopped = false;
    this.schedule(Math.random() * this.deps.intervalMs); // spread a fleet's first reaps
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  /** Reaps once now. */
  async tick(): Promise<void> {
    try {
      const ids = await this.deps.reap();
      if (ids.length > 0) this.deps.onReaped(ids);
    } catch (error) {
      this.deps.onError(error, 'reaping expired leases');
    }
  }

  private schedule(delay: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = this.tick().finally(() => {
        this.running = null;
        this.schedule(this.deps.intervalMs * (0.8 + Math.random() * 0.4));
      });
    }, delay);
  }
}
