/**
 * The Worker (SPEC §3): claims jobs of the tasks it has handlers for, runs them with bounded
 * concurrency, keeps their leases alive, enforces deadlines, reaps crashed workers' jobs, wakes
 * on LISTEN/NOTIFY, and stops gracefully.
 *
 *   idle ──start()──▶ running ──stop()──▶ stopping ──▶ stopped
 *
 * While running, four loops cooperate, each with a tick() of its own:
 *   - ClaimLoop: claims up to `concurrency + prefetch` held or running jobs (and with prefetch,
 *     as many again writing their outcome) on a hint, a due timer, the
 *     fallback poll or a freed slot, into the LocalQueue, from which free slots start them;
 *   - LeaseKeeper: renews all leases (held and running) in one statement every leaseMs / 3;
 *   - Reaper: reclaims expired leases every reapIntervalMs (with jitter); Pruner, with
 *     `retention.keepFinishedMs` on the queue: deletes finished jobs past it; Scheduler: fires
 *     due schedules, asleep until the next one is due (maintenance.ts);
 *   - the NotificationListener: LISTEN, reconnecting with backoff (unless `listen: false`).
 */
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { optionsObject, rejectUnknownKeys, requireMs } from '../core/validate.js';
import { isTransientError } from '../db/database-error.js';
import { NotificationListener } from '../db/listener.js';
import { type Engine, engineOf } from '../engine/engine.js';
import { ROOM_HINT } from '../engine/limited-queues.js';
import { claimWithLimits, QUEUE_HINT, roomFreedBy } from '../engine/queues.js';
import { SCHEDULE_HINT } from '../engine/scheduler.js';
import {
  SEQUENCE_BUSY_HINT,
  SEQUENCE_BUSY_RETRY_MS,
  SEQUENCE_HINT,
  SequenceGate,
} from '../engine/sequence-gate.js';
import { SkiplockError } from '../errors.js';
import type { Queue } from '../queue.js';
import { type Tracing, tracing } from '../telemetry/tracing.js';
import type { ClaimedJob } from '../types.js';
import { ClaimLoop } from './claim-loop.js';
import { Dispatcher } from './dispatcher.js';
import { COUNTED, type WorkerEvents, type WorkerStats } from './events.js';

export type { WorkerStats } from './events.js';

import { leaseClockMs } from './job-run.js';
import { LeaseKeeper } from './lease-keeper.js';
import { LeaseLoss } from './lease-loss.js';
import { ListenProbe } from './listen-probe.js';
import { type Pruner, type Reaper, type Scheduler, workerMaintenance } from './maintenance.js';
import { type WorkerOptions, type WorkerSettings, workerQueue, workerSettings } from './options.js';

type State = 'idle' | 'running' | 'stopping' | 'stopped';

/** On stop, past the grace period: time for settled handlers' outcome statements. */
const STOP_WRITE_ALLOWANCE_MS = 2_000;

/** Typed overloads of EventEmitter's methods (declaration merging with the class below). */
export interface Worker {
  on<E extends keyof WorkerEvents>(event: E, listener: (payload: WorkerEvents[E]) => void): this;
  once<E extends keyof WorkerEvents>(event: E, listener: (payload: WorkerEvents[E]) => void): this;
  off<E extends keyof WorkerEvents>(event: E, listener: (payload: WorkerEvents[E]) => void): this;
  emit<E extends keyof WorkerEvents>(event: E, payload: WorkerEvents[E]): boolean;
}

/**
 * Runs handlers for queued jobs.
 *
 * @example
 * const worker = new Worker({
 *   connectionString: process.env.DATABASE_URL,
 *   tasks: {
 *     'email.send': async (payload, { signal }) => sendEmail(payload, { signal }),
 *     'report.build': { handler: buildReport, timeoutMs: 60_000 },
 *   },
 *   concurrency: 20,
 * });
 * worker.on('job:dead', ({ job, error }) => alert(job, error));
 * await worker.start();
 * process.on('SIGTERM', () => worker.stop({ timeoutMs: 30_000 }));
 */
// biome-ignore lint/suspicious/noUnsafeDeclarationMerging: see the interface above.
export class Worker extends EventEmitter {
  /** This worker's id: the owner name in every lease it takes. */
  readonly workerId: string;
  readonly queue: Queue;
  private readonly settings: WorkerSettings;
  private readonly ownsQueue: boolean;
  /** The runs from claim to written outcome: the local queue, the slots, the window. */
  private readonly dispatcher: Dispatcher;
  private readonly claimLoop: ClaimLoop;
  /** §11 one claim loop per batch task (empty without batch tasks). */
  private readonly batchLoops: ClaimLoop[];
  private readonly keeper: LeaseKeeper;
  private readonly leaseLoss: LeaseLoss;
  private readonly reaper: Reaper;
  private readonly pruner: Pruner | null;
  private readonly scheduler: Scheduler;
  private readonly listener: NotificationListener | null;
  private readonly counters: Omit<WorkerStats, 'running' | 'claimed'> = {
    done: 0,
    retried: 0,
    dead: 0,
    cancelled: 0,
    released: 0,
    leaseLost: 0,
    runaway: 0,
  };
  private state: State = 'idle';
  private stopping: Promise<void> | null = null;
  private readonly stopRequested = new AbortController();
  private readonly probe: ListenProbe;
  /** The queue's engine: the worker reaches the database only through it. */
  private readonly engine: Engine;
  /** §11 with LISTEN: when claims may leave out the sequence pass (none without LISTEN). */
  private readonly sequenceGate: SequenceGate | undefined;
  /** §9 consumer spans, or null with `telemetry: false` (the worker's, else its queue's). */
  private readonly tracing: Tracing | null;

  constructor(options: WorkerOptions) {
    super();
    this.settings = workerSettings(options);
    this.workerId = this.settings.workerId;
    const { queue, owns } = workerQueue(options, this.settings);
    this.queue = queue;
    this.ownsQueue = owns;
    const { settings } = this;
    const engine = engineOf(this.queue, false);
    this.engine = engine;
    this.tracing = (settings.telemetry ?? engine.settings.telemetry) ? tracing() : null;
    // half the fallback poll: a lost hint leaves a noted key for at most about one poll
    this.sequenceGate = settings.listen ? new SequenceGate(settings.pollIntervalMs / 2) : undefined;
    const onError = (error: unknown, during: string) => this.reportError(error, during);
    this.dispatcher = new Dispatcher({
      settings,
      engine,
      tracing: this.tracing,
      running: () => this.state === 'running',
      emit: (event, payload) => {
        this.count(event);
        // A job of a limited queue left `running`: room for another one (§8).
        const { job } = payload as { job?: ClaimedJob };
        if (job && event !== 'job:start' && roomFreedBy(engine, job.queue, this.state === 'running'))
          this.wake();
        // A retry of ours becomes due after its backoff: wake for it even if no hint comes.
        if (event === 'job:retry') this.wakeIn((payload as WorkerEvents['job:retry']).retryInMs);
        if (event === 'job:suspended') this.suspended(payload as WorkerEvents['job:suspended']);
        this.emit(event, payload);
      },
      jobStarted: (job) => {
        if (this.listenerCount('job:start') > 0) this.emit('job:start', { job });
      },
      jobDone: (job, result, durationMs) => {
        this.counters.done++;
        if (roomFreedBy(engine, job.queue, this.state === 'running')) this.wake();
        if (this.listenerCount('job:done') > 0) this.emit('job:done', { job, result, durationMs });
      },
      onError,
      onLeaseExpired: (run) => this.leaseLoss.expired(run),
      onFreed: () => {
        this.claimLoop.slotFreed();
        for (const loop of this.batchLoops) loop.slotFreed();
      },
      jumpsQueue: (job) => engine.limits.has(job.queue),
    });
    const single = settings.taskNames.length > 0;
    this.claimLoop = new ClaimLoop({
      // a worker of batch tasks only: its main loop claims nothing (and sends nothing)
      claim: single
        ? (limit) =>
            claimWithLimits(engine, {
              workerId: this.workerId,
              onError,
              limit,
              idle: this.dispatcher.limitedRoom(),
              leaseMs: settings.leaseMs,
              tasks: settings.taskNames,
              queues: settings.queues,
              sequences: this.sequenceGate,
            })
        : async () => [],
      nextDueInMs: single
        ? (sinceMs) => engine.nextDueInMs(settings.taskNames, settings.queues, sinceMs)
        : async () => null,
      freeSlots: () => this.dispatcher.capacity(),
      reserve: (n) => this.dispatcher.reserve(n, false),
      unreserve: (n) => this.dispatcher.unreserve(n, false),
      accept: (jobs, sentAt) => this.dispatcher.accept(jobs, sentAt),
      giveBack: (jobs) => this.giveBack(jobs),
      onError,
      pollIntervalMs: settings.pollIntervalMs,
    });
    this.batchLoops = settings.batchTaskNames.map((task) => this.batchLoop(task, onError));
    this.leaseLoss = new LeaseLoss({
      dispatcher: this.dispatcher,
      running: () => this.state === 'running',
      lost: (job, wasRunning) => {
        this.count('lease:lost');
        if (wasRunning)
          settings.logger?.warn?.({ jobId: job.id, workerId: this.workerId }, 'skiplock: lease lost');
        this.emit('lease:lost', { job });
      },
      release: (jobs, doing) => this.release(jobs, doing),
    });
    this.keeper = new LeaseKeeper({
      intervalMs: Math.max(50, Math.floor(settings.leaseMs / 3)),
      runs: () => this.dispatcher.runs.values(),
      clockMs: leaseClockMs(settings.leaseMs),
      renew: (runs) =>
        engine.renewLeases(
          this.workerId,
          runs.map((run) => run.job),
          settings.leaseMs,
        ),
      onLost: (run) => this.leaseLoss.lost(run),
      onCancelRequested: (run) => run.abort('cancel'),
      onError,
    });
    const services = workerMaintenance(engine, settings.reapIntervalMs, {
      onError,
      onReaped: (ids) => {
        this.emit('reaped', { ids });
        this.wake();
      },
      onPruned: (deleted) => this.emit('pruned', { deleted }),
      onFired: (fired, skipped) => {
        for (const { name, tick, jobId } of fired) this.emit('schedule:fired', { name, tick, jobId });
        for (const skip of skipped) this.emit('schedule:skipped', skip);
      },
    });
    ({ reaper: this.reaper, pruner: this.pruner, scheduler: this.scheduler } = services);
    this.probe = new ListenProbe({
      workerId: this.workerId,
      send: (token) => engine.notify(token),
      onUnreachable: (message) => {
        this.settings.logger?.warn?.({ workerId: this.workerId }, message);
        this.emit('warning', { code: 'LISTEN_UNREACHABLE', message });
      },
      onError,
    });
    this.listener = settings.listen
      ? new NotificationListener({
          clientConfig: engine.clientConfig,
          channel: engine.channel,
          onNotification: (payload) => this.notified(payload),
          onConnected: (reconnected) => this.listening(reconnected),
          onError: (error) => onError(error, 'listening for notifications (reconnecting)'),
        })
      : null;
  }

  /**
   * Starts claiming. Resolves after the first claim pass. While the database is unreachable it
   * keeps trying (100 ms doubling to 5 s, each failure reported as an 'error' event), so a worker
   * started during an outage or a failover simply waits for it; it rejects (and cleans up) at once
   * on what no retry can fix — NotMigratedError, bad credentials, an unknown database. A stop()
   * meanwhile ends the wait and start() resolves.
   */
  async start(): Promise<void> {
    if (this.state !== 'idle')
      throw new SkiplockError('ERR_VALIDATION', `start(): the worker is already ${this.state}`);
    this.state = 'running';
    try {
      await this.tracing?.ready(); // §9 whether @opentelemetry/api is there, known before any job runs
      await this.listener?.start();
      // stop() meanwhile: its drain has run (or is running) — start nothing it would not stop
      if (this.state !== 'running') return;
      this.keeper.start();
      this.reaper.start();
      this.pruner?.start();
      this.scheduler.start();
      for (let failures = 0; ; failures++) {
        try {
          // every loop's first claim at once (a batch task's first claim never waits maxWaitMs)
          await Promise.all([this.claimLoop.start(), ...this.batchLoops.map((loop) => loop.start())]);
          break;
        } catch (error) {
          await this.stopClaiming();
          if (!isTransientError(error) || this.state !== 'running') throw error;
          const delay = Math.round(Math.min(5_000, 100 * 2 ** failures) * (0.75 + Math.random() * 0.5));
          this.reportError(error, `starting: the database is unreachable; retrying in ${delay} ms`);
          await sleep(delay, undefined, { signal: this.stopRequested.signal }).catch(() => undefined);
          if (this.state !== 'running') return; // stop() was called meanwhile
        }
      }
    } catch (error) {
      if (this.state === 'running') {
        await this.shutdown();
        this.state = 'stopped';
      }
      throw error;
    }
    this.settings.logger?.info?.(
      {
        workerId: this.workerId,
        tasks: [...this.settings.tasks.keys()],
        concurrency: this.settings.concurrency,
        listen: this.settings.listen,
      },
      'skiplock worker started',
    );
  }

  /**
   * Stops gracefully (SPEC §3): claims nothing more and gives back at once what it claimed but
   * has not started; waits up to `timeoutMs` (default 30 s) for running jobs; then aborts their
   * signals (`WorkerStoppingError`) and waits `abortGraceMs`. A handler that settled meanwhile
   * decides its job's fate (its result completes it; an error releases it without spending the
   * attempt); one still running is a runaway that keeps its job — the lease is no longer renewed
   * and the job comes back when it expires, never while the handler may still run elsewhere —
   * and nothing is written for it after stop() resolves. When it resolves no timer or connection
   * of the worker is left open. Safe to call more than once.
   */
  stop(options: { timeoutMs?: number } = {}): Promise<void> {
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['timeoutMs'], 'options');
    const timeoutMs = opts.timeoutMs === undefined ? 30_000 : requireMs(opts.timeoutMs, 'timeoutMs');
    if (this.state === 'idle') {
      this.state = 'stopped';
      return this.ownsQueue ? this.queue.close() : Promise.resolve();
    }
    this.stopRequested.abort(); // ends start()'s wait between attempts
    this.stopping ??= this.drain(timeoutMs);
    return this.stopping;
  }

  /** Counters since start, and the jobs running now (started, outcome not yet written). */
  stats(): WorkerStats {
    return { running: this.dispatcher.active, claimed: this.dispatcher.claimed, ...this.counters };
  }

  /** The jobs this worker is running now (not those claimed ahead and still waiting to start). */
  runningJobs(): ClaimedJob[] {
    return [...this.dispatcher.runs.values()].filter((run) => run.phase !== 'held').map((run) => run.job);
  }

  /** Loops' single steps, for tests and for callers that need determinism. */
  readonly tick = {
    claim: async () => {
      await this.claimLoop.tick();
      for (const loop of this.batchLoops) await loop.tick();
    },
    renewLeases: () => this.keeper.tick(),
    reap: () => this.reaper.tick(),
    prune: () => this.pruner?.tick() ?? Promise.resolve(),
    schedule: () => this.scheduler.tick(),
  };

  private async drain(timeoutMs: number): Promise<void> {
    this.state = 'stopping';
    await this.stopClaiming(); // a claim in flight gives its jobs back
    const { runs, runaways } = this.dispatcher;
    await this.giveBack(this.dispatcher.closeHeld().map((run) => run.job));
    await this.reaper.stop();
    await this.pruner?.stop();
    await this.scheduler.stop();
    if (!(await this.dispatcher.allSettled(timeoutMs))) {
      for (const run of runs.values()) run.abort('shutdown');
      // Settled handlers write their outcome now; runaways are abandoned after the grace period.
      const grace = this.settings.abortGraceMs + STOP_WRITE_ALLOWANCE_MS;
      if (!(await this.dispatcher.allSettled(grace))) {
        // Outcome writes still retrying (the database away): the reaper recovers those jobs.
        for (const run of runs.values()) run.closeWrites();
        await Promise.all([...runs.values()].map((run) => run.inFlight?.catch(() => undefined)));
        await this.engine.completer.idle(); // batched completions have no promise of their own
      }
    }
    for (const run of runs.values()) run.closeWrites();
    for (const run of runaways) run.closeWrites();
    await Promise.all([...runaways].map((run) => run.inFlight?.catch(() => undefined)));
    // §9 a progress write in flight renews the lease: none may land after stop() resolves
    await Promise.all([...runs.values(), ...runaways].map((run) => run.progressWriter?.idle()));
    await this.shutdown();
    this.state = 'stopped';
    this.settings.logger?.info?.({ workerId: this.workerId, ...this.counters }, 'skiplock worker stopped');
  }

  /** Jobs claimed but never started, on stop: back to pending at once in one statement, attempt not spent. */
  private async giveBack(jobs: ClaimedJob[]): Promise<void> {
    if (jobs.length > 0) await this.release(jobs, `giving back ${jobs.length} unstarted job(s) on stop`);
  }

  /**
   * Releases unstarted jobs in one statement (attempt not spent) and emits `job:released` for
   * each one released; false for a job whose lease was gone, null when the statement failed
   * (reported; the leases expire and the reaper returns those jobs).
   */
  private async release(jobs: ClaimedJob[], doing: string): Promise<boolean[] | null> {
    let released: boolean[];
    try {
      this.engine.assertOpen();
      released = await this.engine.completer.releaseMany(jobs);
    } catch (error) {
      this.reportError(error, `${doing} (their leases will expire)`);
      return null;
    }
    jobs.forEach((job, i) => {
      if (!released[i]) return;
      this.count('job:released');
      this.emit('job:released', { job });
    });
    return released;
  }

  private async shutdown(): Promise<void> {
    this.probe.stop();
    await this.stopClaiming();
    await this.reaper.stop();
    await this.pruner?.stop();
    await this.scheduler.stop();
    await this.keeper.stop();
    if (this.waitTimer) clearTimeout(this.waitTimer);
    this.waitTimer = null;
    this.waitTimerAt = Number.POSITIVE_INFINITY;
    for (const run of this.dispatcher.runs.values()) run.finish();
    for (const run of this.dispatcher.runaways) run.finish();
    await this.listener?.stop();
    if (this.ownsQueue) await this.queue.close();
  }

  /**
   * §12 the timeouts of the event waits this worker suspended (epoch ms), a min-heap: the
   * earliest is armed; each is dropped once its instant passed (a wait answered earlier by an
   * emit costs one wake statement that finds nothing).
   */
  private readonly waitTimeouts = new MinHeap();
  private waitTimer: NodeJS.Timeout | null = null;
  private waitTimerAt = Number.POSITIVE_INFINITY;

  /**
   * §12 a job of ours was suspended: a sleep wakes this worker's claim loop at its instant (the
   * wake-up timer of §1.9); an event wait's timeout wakes the timed-out waits then (the reaper's
   * pass does it too, for waits whose worker went away).
   */
  private suspended({ kind, until }: WorkerEvents['job:suspended']): void {
    if (until === null || this.state !== 'running') return;
    const ms = Math.max(0, until.getTime() - Date.now());
    if (kind === 'sleep') {
      this.claimLoop.wakeIn(ms + 1);
      return;
    }
    this.waitTimeouts.push(until.getTime());
    this.armWaitTimer();
  }

  private armWaitTimer(): void {
    const next = this.waitTimeouts.peek();
    if (next === undefined || this.state !== 'running') return;
    if (this.waitTimer && this.waitTimerAt <= next) return; // already armed as early
    if (this.waitTimer) clearTimeout(this.waitTimer);
    this.waitTimerAt = next;
    this.waitTimer = setTimeout(
      () => {
        this.waitTimer = null;
        this.waitTimerAt = Number.POSITIVE_INFINITY;
        const now = Date.now();
        while ((this.waitTimeouts.peek() ?? Number.POSITIVE_INFINITY) <= now) this.waitTimeouts.pop();
        this.engine.steps.wakeTimedOut().then(
          () => this.armWaitTimer(),
          (error: unknown) => this.reportError(error, 'waking event waits whose timeout passed'),
        );
      },
      Math.min(Math.max(0, next - Date.now()) + 1, 2_147_483_647),
    );
  }

  private count(event: keyof WorkerEvents): void {
    const key = COUNTED[event as keyof typeof COUNTED];
    if (key) this.counters[key]++;
  }

  private notified(payload: string): void {
    if (payload.startsWith('cancel:')) {
      const id = payload.slice('cancel:'.length);
      // a held job starts already aborted (its handler never runs); a running one is aborted
      for (const run of this.dispatcher.runs.values())
        if (run.job.id === id && (run.phase === 'held' || run.phase === 'running')) run.abort('cancel');
    } else if (payload === SCHEDULE_HINT) {
      this.scheduler.wake();
    } else if (payload === QUEUE_HINT) {
      this.engine.limits.invalidate(); // a pause, a resume or a new limit: read them again
      this.wake();
    } else if (payload === ROOM_HINT) {
      this.wake(); // a job of a limited queue finished somewhere
    } else if (payload === SEQUENCE_HINT) {
      this.sequenceGate?.dirty(); // a sequence key was noted: the next claims run the pass
      this.wake();
    } else if (payload === SEQUENCE_BUSY_HINT) {
      // keys left noted behind another transaction's lock: pass again after a pause
      this.sequenceGate?.dirty();
      this.claimLoop.wakeIn(SEQUENCE_BUSY_RETRY_MS);
      for (const loop of this.batchLoops) loop.wakeIn(SEQUENCE_BUSY_RETRY_MS);
    } else if (!this.probe.heard(payload)) {
      this.wake();
    }
  }

  /** LISTEN is in place: claim what was enqueued while nobody listened, and self-check. */
  private listening(reconnected: boolean): void {
    this.emit('listen:connected', { reconnected });
    this.sequenceGate?.dirty(); // keys noted while nobody listened: the next claim's pass sees them
    if (reconnected) {
      this.wake();
      this.scheduler.wake(); // a schedule change may have been missed meanwhile
    }
    if (this.state === 'running') this.probe.send();
  }

  /** A hint that jobs may be waiting: every claim loop looks (the main one, each batch task's). */
  private wake(): void {
    this.claimLoop.wake();
    for (const loop of this.batchLoops) loop.wake();
  }

  /** A job of ours becomes due in `ms`: every claim loop wakes then. */
  private wakeIn(ms: number): void {
    this.claimLoop.wakeIn(ms);
    for (const loop of this.batchLoops) loop.wakeIn(ms);
  }

  private async stopClaiming(): Promise<void> {
    await Promise.all([this.claimLoop.stop(), ...this.batchLoops.map((loop) => loop.stop())]);
  }

  /**
   * §11 the claim loop of a batch task: one statement claims its jobs for as many batches of
   * `maxSize` as the free slots allow (at most 1,000 jobs; §8 limits count each job), which start
   * at once, each batch's jobs from that one statement.
   * After a claim that came back short, the next one first waits `maxWaitMs` for a trickle of
   * jobs to gather (cut short by stop()); after a full one it claims again at once while room
   * lasts.
   */
  private batchLoop(task: string, onError: (error: unknown, during: string) => void): ClaimLoop {
    const { settings, engine } = this;
    const entry = settings.tasks.get(task)?.batch;
    if (!entry) throw new Error(`task "${task}" is not a batch task`);
    const tasks = [task];
    // the first claim never waits (start() is not held up by maxWaitMs)
    let short = false;
    // how many of the last claim's jobs each of its statements took (accept() follows claim())
    let statements: number[] = [];
    const loop: ClaimLoop = new ClaimLoop({
      // the wait comes before the room is measured, reserved and the claim sent: the leases of
      // what it brings run from the claim, not from the start of the wait
      beforeClaim: async () => {
        if (short && entry.maxWaitMs > 0)
          await sleep(entry.maxWaitMs, undefined, { signal: this.stopRequested.signal }).catch(
            () => undefined,
          );
      },
      reserve: (n) => this.dispatcher.reserve(n, true),
      unreserve: (n) => this.dispatcher.unreserve(n, true),
      claim: async (limit) => {
        const result = await claimWithLimits(engine, {
          workerId: this.workerId,
          onError,
          limit,
          idle: limit,
          leaseMs: settings.leaseMs,
          tasks,
          queues: settings.queues,
          sequences: this.sequenceGate,
        });
        short = result.jobs.length < limit;
        statements = result.statements;
        return { jobs: result.jobs, waitMs: result.waitMs, leftWork: result.leftWork || !short };
      },
      nextDueInMs: (sinceMs) => engine.nextDueInMs(tasks, settings.queues, sinceMs),
      freeSlots: () => this.dispatcher.batchRoom(entry.maxSize),
      accept: (jobs, sentAt) => {
        // one claim may bring several batches' worth: each batch takes up to maxSize of them, all
        // from one claim statement (a limited queue's, or the plain one), in its claim order
        const counts = statements.reduce((a, b) => a + b, 0) === jobs.length ? statements : [jobs.length];
        let start = 0;
        for (const count of counts) {
          const end = start + count;
          for (let from = start; from < end; from += entry.maxSize) {
            try {
              this.dispatcher.startBatch(task, jobs.slice(from, Math.min(end, from + entry.maxSize)), sentAt);
            } catch (error) {
              onError(error, `starting a batch of task "${task}"`);
            }
          }
          start = end;
        }
        loop.slotFreed(); // room left: the next batch at once
      },
      giveBack: (jobs) => this.giveBack(jobs),
      onError,
      pollIntervalMs: settings.pollIntervalMs,
    });
    return loop;
  }

  private reportError(error: unknown, during: string): void {
    const err = error instanceof Error ? error : new Error(String(error));
    this.settings.logger?.error?.({ err, during, workerId: this.workerId }, `skiplock: ${during} failed`);
    if (this.listenerCount('error') > 0) this.emit('error', { error: err, during });
  }
}

/** A binary min-heap of numbers (the wait timeouts: push and pop in O(log n), no spread). */
export class MinHeap {
  private readonly items: number[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): number | undefined {
    return this.items[0];
  }

  push(value: number): void {
    const a = this.items;
    a.push(value);
    let i = a.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if ((a[parent] as number) <= value) break;
      a[i] = a[parent] as number;
      i = parent;
    }
    a[i] = value;
  }

  pop(): number | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length === 0 || last === undefined) return top;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= a.length) break;
      const r = l + 1;
      const c = r < a.length && (a[r] as number) < (a[l] as number) ? r : l;
      if ((a[c] as number) >= last) break;
      a[i] = a[c] as number;
      i = c;
    }
    a[i] = last;
    return top;
  }
}
