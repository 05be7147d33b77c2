/**
 * The worker's runs from claim to written outcome: it takes what a claim brought into the local
 * queue, starts held runs while slots are free (at most `concurrency` handlers at once), frees a
 * slot when a handler settles (its outcome is written meanwhile), and says how much a claim may
 * take (at most `concurrency + prefetch` runs held or running, and as many again writing their
 * outcome). On stop it hands back the runs still
 * held, and waits for the others.
 */
import type { Engine } from '../engine/engine.js';
import type { Tracing } from '../telemetry/tracing.js';
import type { ClaimedJob } from '../types.js';
import { executeBatch } from './batch-executor.js';
import { BatchRun } from './batch-run.js';
import type { WorkerEvents } from './events.js';
import { type ExecutorHooks, execute, executorHooks } from './job-executor.js';
import { JobRun } from './job-run.js';
import { LocalQueue } from './local-queue.js';
import type { WorkerSettings } from './options.js';

/** Most jobs one claim statement takes. */
const MAX_CLAIM_BATCH = 1_000;

export interface DispatcherDeps {
  settings: WorkerSettings;
  engine: Engine;
  /** §9 consumer spans, or null when this worker records none. */
  tracing: Tracing | null;
  /** True while the worker runs (nothing starts, nothing is claimed while it stops). */
  running(): boolean;
  /** Counts, reports and emits a job's event. */
  emit<E extends keyof WorkerEvents>(event: E, payload: WorkerEvents[E]): void;
  /** `job:start` (the payload made only for listeners). */
  jobStarted(job: ClaimedJob): void;
  /** `job:done`: counted, reported, emitted (the payload made only for listeners). */
  jobDone(job: ClaimedJob, result: unknown, durationMs: number): void;
  onError(error: unknown, during: string): void;
  /** A run's local lease deadline passed (the lease clock, a look at its signal, a write). */
  onLeaseExpired(run: JobRun): void;
  /** A slot or a place in the window was freed: claim again if work may be waiting. */
  onFreed(): void;
  /** Whether a claimed job goes ahead of the held ones (a limited queue's job, §8). */
  jumpsQueue(job: ClaimedJob): boolean;
}

export class Dispatcher {
  /**
   * Every claim this worker holds, held (not started), running or writing its outcome: each
   * claim is a run of its own, so an old claim of a job still winding down never hides the new
   * one.
   */
  readonly runs = new Set<JobRun>();
  /** Claimed ahead of free slots, waiting to start (prefetch). */
  private readonly localQueue = new LocalQueue();
  /** Handlers running now (runs in phase 'running'): at most `concurrency`. */
  private executing = 0;
  /** Waiting for every started run to finish (stop()). */
  private readonly idleWaiters = new Set<() => void>();
  /** What every run's executor is given: one object for all (no closures per job). */
  private readonly hooks: ExecutorHooks;
  /** A run's local lease deadline passed (shared by every run). */
  private readonly leaseExpired: (run: JobRun) => void;
  /** Handlers abandoned on stop that may still run: nothing is written for them after stop(). */
  readonly runaways = new Set<JobRun>();
  /** Jobs claimed since start. */
  claimed = 0;
  /** Runs started and not yet finished (running, or writing their outcome). */
  private live = 0;
  /**
   * Slots held by batch claims in flight (their jobs start at once on arrival): no held job
   * starts in them, and no other claim counts them as free. One count for every claim loop.
   */
  private reservedBatch = 0;
  /** Jobs asked for by the main loop's claim in flight (they join the local queue on arrival). */
  private reservedHeld = 0;

  constructor(private readonly deps: DispatcherDeps) {
    const { settings, engine } = deps;
    this.leaseExpired = (run) => deps.onLeaseExpired(run);
    this.hooks = executorHooks({
      engine,
      tracing: deps.tracing,
      batchCompletions: settings.batchCompletions,
      taskSettings: (task) => {
        const found = settings.tasks.get(task);
        return { backoff: found?.backoff ?? settings.backoff, retryIf: found?.retryIf ?? null };
      },
      emit: deps.emit,
      jobStarted: deps.jobStarted,
      jobDone: deps.jobDone,
      onError: deps.onError,
      // The handler settled (or was given up on): its slot starts the next held job while the
      // outcome is written, and the next claim may overlap that write (see capacity()).
      onSettled: () => {
        this.executing--;
        this.dispatch();
        deps.onFreed();
      },
      onFinished: (run) => this.finished(run),
    });
  }

  /** Runs started and not yet finished (running, or writing their outcome). */
  get active(): number {
    return this.live;
  }

  /**
   * How many more jobs a claim may take now: up to `concurrency + prefetch` claims held or
   * running; runs writing their outcome count only beyond as many again (with `prefetch` > 0).
   * So the next claim
   * overlaps the write of the last outcomes instead of waiting for it: a drain that counted them
   * alternated claim and write, never both at once (measured: 51 % of the drain claiming only,
   * 32 % writing only, 0 % both). Nothing while stopping. A small gap is left for later while
   * jobs still wait locally, so claims come in batches rather than one per freed slot.
   */
  capacity(): number {
    if (!this.deps.running()) return 0;
    const { concurrency, prefetch } = this.deps.settings;
    const window = concurrency + prefetch;
    // `prefetch: 0` keeps its promise (docs/worker.md): no job is claimed while an outcome is
    // still unwritten, so a crash in the next job can never cost one that already succeeded
    const writing = prefetch === 0 ? 0 : this.live - this.executing;
    const room =
      window - (this.runs.size - Math.min(writing, window)) - this.reservedBatch - this.reservedHeld;
    if (this.localQueue.size > 0 && room < Math.max(1, Math.floor(window / 4))) return 0;
    return Math.min(room, MAX_CLAIM_BATCH);
  }

  /**
   * How many jobs of limited queues (§8) a claim may take now: the slots without a handler, and
   * at least one — such jobs go ahead of every held job, so one starts at the next free slot
   * even while a backlog keeps every slot busy (they are never left waiting behind it).
   */
  limitedRoom(): number {
    if (!this.deps.running()) return 0;
    return Math.max(1, this.deps.settings.concurrency - this.executing - this.reservedBatch);
  }

  /**
   * Holds `n` slots while a claim for them is in flight, `batch` for a batch task's claim (its
   * jobs start at once), else the main loop's (its jobs are held first). Synchronous, with the
   * measure of the room, so that several claim loops never take the same slots (SPEC §11).
   */
  reserve(n: number, batch: boolean): void {
    if (batch) this.reservedBatch += n;
    else this.reservedHeld += n;
  }

  /** Gives back what reserve() held (the claim's jobs are accepted right after, or it failed). */
  unreserve(n: number, batch: boolean): void {
    if (batch) this.reservedBatch -= n;
    else this.reservedHeld -= n;
    // after the claim's jobs are accepted (same turn): what it did not use starts held jobs
    queueMicrotask(() => {
      this.dispatch();
      this.deps.onFreed();
    });
  }

  /** Claimed jobs join the local queue (their leases run from `sentAt`), then free slots start them. */
  accept(jobs: ClaimedJob[], sentAt: number): void {
    const { settings } = this.deps;
    const runs = new Array<JobRun>(jobs.length);
    let urgent = 0;
    // one options object for the whole claim (JobRun copies what it needs)
    const options = {
      timeoutMs: null as number | null,
      leaseMs: settings.leaseMs,
      graceMs: settings.abortGraceMs,
      claimSentAt: sentAt,
      onLeaseExpired: this.leaseExpired,
    };
    for (let i = 0; i < jobs.length; i++) {
      const job = jobs[i] as ClaimedJob;
      options.timeoutMs = job.timeoutMs ?? settings.tasks.get(job.task)?.timeoutMs ?? null;
      const run = new JobRun(job, options);
      this.runs.add(run);
      runs[i] = run;
      if (this.deps.jumpsQueue(job)) urgent++;
    }
    this.claimed += runs.length;
    if (urgent > 0) {
      this.localQueue.pushFront(runs.filter((run) => this.deps.jumpsQueue(run.job)));
      this.localQueue.push(runs.filter((run) => !this.deps.jumpsQueue(run.job)));
    } else {
      this.localQueue.push(runs);
    }
    this.dispatch();
  }

  /**
   * §11 how many jobs of a batch task a claim may take now: the slots no handler runs in and no
   * held job waits for — a batch takes `items.length` of the worker's concurrency, and starts at
   * once (batches are never held). With room for several full batches, a whole number of them
   * (at most 1,000 jobs): one statement claims them, and each batch is still claimed in one
   * statement; with less, what is free.
   */
  batchRoom(maxSize: number): number {
    if (!this.deps.running()) return 0;
    const free =
      this.deps.settings.concurrency -
      this.executing -
      this.localQueue.size -
      this.reservedBatch -
      this.reservedHeld;
    if (free < maxSize) return Math.max(0, free);
    return Math.max(maxSize, Math.floor(Math.min(free, MAX_CLAIM_BATCH) / maxSize) * maxSize);
  }

  /**
   * §11 starts a batch of `task`'s jobs at once, one claim's worth: a run per job (each lease
   * renewed, clocked and written as its own), one handler call for all of them.
   */
  startBatch(task: string, jobs: ClaimedJob[], sentAt: number): void {
    const { settings } = this.deps;
    const entry = settings.tasks.get(task);
    const batchEntry = entry?.batch;
    if (!batchEntry) throw new Error(`No batch handler for task "${task}" in this worker`);
    const options = {
      timeoutMs: null,
      leaseMs: settings.leaseMs,
      graceMs: settings.abortGraceMs,
      claimSentAt: sentAt,
      onLeaseExpired: this.leaseExpired,
    };
    const members = jobs.map((job) => new JobRun(job, options));
    for (const run of members) this.runs.add(run);
    this.claimed += members.length;
    // the task's timeout bounds the call, else the tightest of its jobs' own
    let timeoutMs = entry?.timeoutMs ?? null;
    if (timeoutMs === null)
      for (const job of jobs)
        if (job.timeoutMs !== null) timeoutMs = Math.min(timeoutMs ?? job.timeoutMs, job.timeoutMs);
    const batch = new BatchRun(task, members, timeoutMs, settings.abortGraceMs);
    batch.start();
    this.executing += members.length;
    this.live += members.length;
    // it reports what fails, and ends every run in finished()
    executeBatch(batch, batchEntry, this.hooks.deps);
  }

  /**
   * A held run's lease is gone before it started: it is never started here (the database hands
   * it to another worker once the lease has expired there too).
   */
  drop(run: JobRun): void {
    run.finish();
    this.runs.delete(run);
    this.deps.onFreed();
  }

  /** Stops starting runs; returns the ones still held, removed, for the caller to give back. */
  closeHeld(): JobRun[] {
    const held = this.localQueue.close();
    for (const run of held) {
      this.runs.delete(run);
      run.finish();
    }
    return held;
  }

  /** Waits up to `ms` for every run to finish; true when they all did. */
  async allSettled(ms: number): Promise<boolean> {
    if (this.live > 0) {
      let timer: NodeJS.Timeout | undefined;
      let wake!: () => void;
      await new Promise<void>((resolve) => {
        wake = resolve;
        this.idleWaiters.add(wake);
        timer = setTimeout(resolve, ms);
      });
      this.idleWaiters.delete(wake);
      clearTimeout(timer);
    }
    return this.live === 0 && this.runs.size === 0;
  }

  /** Starts held jobs while slots are free. */
  private dispatch(): void {
    // slots held for a batch claim in flight are taken: its jobs start at once when they come
    while (this.executing + this.reservedBatch < this.deps.settings.concurrency && this.deps.running()) {
      const run = this.localQueue.take();
      if (run === null) return;
      this.start(run);
    }
  }

  /** Starts a held run's handler in a free slot. */
  private start(run: JobRun): void {
    const { job } = run;
    const task = this.deps.settings.tasks.get(job.task);
    run.start();
    this.executing++;
    this.live++;
    const handler =
      task?.handler ??
      (() => {
        throw new Error(`No handler for task "${job.task}" in this worker`);
      });
    // it reports what fails, and ends in finished()
    execute(run, handler, this.hooks);
  }

  /** A run is over: its outcome written or dropped. */
  private finished(run: JobRun): void {
    if (run.phase === 'running') {
      this.executing--; // execute() failed before the handler settled
      this.dispatch();
    }
    if (run.runaway && run.abortReason === 'shutdown') this.runaways.add(run);
    else run.finish();
    this.live--;
    this.runs.delete(run);
    if (this.live === 0) for (const wake of this.idleWaiters) wake();
    this.deps.onFreed();
  }
}
