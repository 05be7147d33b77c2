/**
 * Maintenance services (SPEC §1.5, §7): work any worker may do for the whole queue, safe from
 * many workers at once — each step is a compare-and-set or takes its rows with SKIP LOCKED.
 * One base for all of them: start() schedules tick() every `intervalMs` ± 20 % (so a fleet
 * started together does not act in lockstep; the first tick comes at a random point of the first
 * interval), stop() cancels the next tick and waits for one in flight, and tick() is one step,
 * which tests drive directly, without timers.
 *
 *   stopped ──start()──▶ started ──stop()──▶ stopped
 *
 * The reaper reclaims expired leases; the pruner deletes finished jobs past the retention
 * period (`retention.keepFinishedMs`); the scheduler fires due schedules (SPEC §8), sleeping
 * until the next one is due instead of on a fixed interval, and woken early by a hint.
 */
import type { Engine } from '../engine/engine.js';
import {
  type FiredTick,
  type FiringResult,
  fireDueSchedules,
  nextScheduleInMs,
  type SkippedTicks,
} from '../engine/scheduler.js';

export interface ServiceDeps {
  intervalMs: number;
  onError(error: unknown, during: string): void;
}

export abstract class MaintenanceService {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = true;
  /** wake() came while a step ran: run another one right after it. */
  private again = false;
  /** stop() was called (a long step checks it between batches); start() clears it. */
  protected stopRequested = false;

  constructor(protected readonly deps: ServiceDeps) {}

  /** What the service does, for error reports ("reaping expired leases"). */
  protected abstract readonly doing: string;

  /** One step of the service. Errors are reported, never thrown. */
  protected abstract step(): Promise<void>;

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.stopRequested = false;
    this.schedule(this.firstDelayMs());
  }

  /** Runs a step as soon as possible (after the one in flight, if any). */
  wake(): void {
    if (this.stopped) return;
    if (this.running !== null) {
      this.again = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.schedule(0);
  }

  /** Delay of the first step: a random point of the first interval. */
  protected firstDelayMs(): number {
    return Math.random() * this.deps.intervalMs;
  }

  /** Delay after a step: the interval ± 20 %. */
  protected nextDelayMs(): number {
    return this.deps.intervalMs * (0.8 + Math.random() * 0.4);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopRequested = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  /** Runs one step now. */
  async tick(): Promise<void> {
    try {
      await this.step();
    } catch (error) {
      this.deps.onError(error, this.doing);
    }
  }

  private schedule(delay: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = this.tick().finally(() => {
        this.running = null;
        const again = this.again;
        this.again = false;
        this.schedule(again ? 0 : this.nextDelayMs());
      });
    }, delay);
  }
}

/** Reclaims running jobs whose lease expired (SPEC §1.5). */
export class Reaper extends MaintenanceService {
  protected readonly doing = 'reaping expired leases';

  constructor(
    deps: ServiceDeps,
    private readonly ops: { reap(): Promise<string[]>; onReaped(ids: string[]): void },
  ) {
    super(deps);
  }

  protected async step(): Promise<void> {
    const ids = await this.ops.reap();
    if (ids.length > 0) this.ops.onReaped(ids);
  }
}

/**
 * Deletes finished jobs older than the retention period (SPEC §7), in batches of `batchSize`,
 * each its own short statement that skips rows locked by anyone else; between batches it yields
 * to the event loop and stops as soon as the worker stops.
 */
export class Pruner extends MaintenanceService {
  protected readonly doing = 'pruning finished jobs';

  constructor(
    deps: ServiceDeps,
    private readonly ops: {
      batchSize: number;
      pruneBatch(limit: number): Promise<number>;
      onPruned(deleted: number): void;
    },
  ) {
    super(deps);
  }

  protected async step(): Promise<void> {
    let total = 0;
    for (;;) {
      const deleted = await this.ops.pruneBatch(this.ops.batchSize);
      total += deleted;
      if (deleted < this.ops.batchSize || this.stopRequested) break;
      await new Promise((resolve) => setImmediate(resolve));
    }
    if (total > 0) this.ops.onPruned(total);
  }
}

/** The scheduler re-reads the schedules at least this often (a hint missed while LISTEN was down). */
const SCHEDULER_MAX_SLEEP_MS = 60_000;
/** After an error, the scheduler retries after this long. */
const SCHEDULER_RETRY_MS = 1_000;
/**
 * A due schedule locked by another worker (firing it, or stuck mid-firing): look again after
 * this long, doubling up to a second — never in a loop while the lock is held.
 */
const SCHEDULER_LOCKED_MS = 100;

/**
 * Fires due schedules (SPEC §8): each step fires what is due, then sleeps until the earliest
 * next run (database time, a few ms late rather than early), at most a minute; a hint
 * (`schedule`, `unschedule`, `resumeSchedule` from any process) wakes it at once.
 */
export class Scheduler extends MaintenanceService {
  protected readonly doing = 'firing due schedules';
  private sleepMs = 0;
  /** Consecutive steps that found due schedules but could lock none of them. */
  private lockedOut = 0;

  constructor(
    deps: Omit<ServiceDeps, 'intervalMs'>,
    private readonly ops: {
      fire(): Promise<FiringResult>;
      nextDueInMs(): Promise<number | null>;
      onFired(fired: FiredTick[], skipped: SkippedTicks[]): void;
    },
  ) {
    super({ ...deps, intervalMs: SCHEDULER_MAX_SLEEP_MS });
  }

  protected override firstDelayMs(): number {
    return 0;
  }

  protected override nextDelayMs(): number {
    return this.sleepMs;
  }

  protected async step(): Promise<void> {
    this.sleepMs = SCHEDULER_RETRY_MS; // unless the step gets to say otherwise
    let locked = 0;
    for (;;) {
      const result = await this.ops.fire();
      locked += result.locked;
      if (result.fired.length > 0 || result.skipped.length > 0)
        this.ops.onFired(result.fired, result.skipped);
      for (const { name, error } of result.failed) {
        this.deps.onError(error, `firing schedule ${JSON.stringify(name)} (its due ticks were skipped)`);
      }
      if (!result.more || this.stopRequested) break;
    }
    const dueInMs = await this.ops.nextDueInMs();
    if (dueInMs !== null && dueInMs <= 0 && locked === 0) {
      // Due, but locked by another worker: it fires them (or its lock ends); do not spin.
      this.sleepMs = Math.min(1_000, SCHEDULER_LOCKED_MS * 2 ** this.lockedOut++);
      return;
    }
    this.lockedOut = 0;
    this.sleepMs = dueInMs === null ? SCHEDULER_MAX_SLEEP_MS : Math.min(SCHEDULER_MAX_SLEEP_MS, dueInMs + 2);
  }
}

/** How often a worker prunes, at least (a tiny keepFinishedMs must not make it poll in a loop). */
const MIN_PRUNE_INTERVAL_MS = 1_000;
/** How often a worker prunes, at most (retention.keepFinishedMs: at least that often). */
const PRUNE_INTERVAL_MS = 60_000;
/** Finished jobs deleted per pruning statement: short transactions, small WAL bursts. */
const PRUNE_BATCH = 1_000;

/** A worker's maintenance services: the reaper, and the pruner when the queue keeps finished jobs for a time. */
export function workerMaintenance(
  engine: Engine,
  reapIntervalMs: number,
  hooks: {
    onError(error: unknown, during: string): void;
    onReaped(ids: string[]): void;
    onPruned(deleted: number): void;
    onFired(fired: FiredTick[], skipped: SkippedTicks[]): void;
  },
): { reaper: Reaper; pruner: Pruner | null; scheduler: Scheduler } {
  const { onError } = hooks;
  const reaper = new Reaper(
    { intervalMs: reapIntervalMs, onError },
    {
      // §12 the same pass wakes the event waits whose timeout passed (with the wake-up hint)
      reap: async () => {
        const ids = await engine.reap();
        await engine.steps.wakeTimedOut();
        return ids;
      },
      onReaped: hooks.onReaped,
    },
  );
  const scheduler = new Scheduler(
    { onError },
    {
      fire: () => fireDueSchedules(engine),
      nextDueInMs: () => nextScheduleInMs(engine),
      onFired: hooks.onFired,
    },
  );
  const { keepFinishedMs } = engine.settings.retention;
  if (keepFinishedMs === null) return { reaper, pruner: null, scheduler };
  const intervalMs = Math.max(MIN_PRUNE_INTERVAL_MS, Math.min(keepFinishedMs, PRUNE_INTERVAL_MS));
  const pruner = new Pruner(
    { intervalMs, onError },
    { batchSize: PRUNE_BATCH, pruneBatch: (limit) => engine.pruneFinished(limit), onPruned: hooks.onPruned },
  );
  return { reaper, pruner, scheduler };
}
