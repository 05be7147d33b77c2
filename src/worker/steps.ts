/**
 * A run's durable steps (SPEC §12): ctx.step, ctx.sleep and ctx.waitForEvent of one attempt.
 *
 * Made on the handler's first call (a job that uses none pays nothing): the job's stored steps
 * are read once (one statement shared with the other jobs that start using steps in the same
 * turn); a step found there answers its stored value without running `fn`. A new step's value
 * is checkpointed under the lease (one fenced INSERT shared with the steps that finish in the
 * same turn) and ctx.step resolves only after that committed; with `{ transaction: true }` `fn`
 * runs in a transaction that holds the job's row and commits with the checkpoint.
 *
 *   step:   stored? → its value │ fn() → JSON (§1.11) → checkpoint committed → the value as stored
 *   sleep:  stored and past? → resolves │ step_sleep: past → resolves; else pending at the
 *           instant, JobSuspended
 *   wait:   answered? → its value │ step_wait: set → {payload}; timed out → null; else waiting
 *           for the event, JobSuspended
 */
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { toJsonText } from '../core/validate.js';
import { withSession } from '../db/executor.js';
import type { Engine } from '../engine/engine.js';
import { checkStepName } from '../engine/step-admin.js';
import { type LoadedSteps, NOT_WRITTEN, type StepRow, WRITTEN_RENEWED } from '../engine/steps.js';
import { JobSuspended, LeaseLostError, ValidationError } from '../errors.js';
import type { JobRun } from './job-run.js';
import { assertOwned, destroySocket, rollBack, statement } from './run-session.js';

/** Longest sleep or wait (100 years, as delays elsewhere). */
const MAX_MS = 100 * 365 * 86_400_000;

/** Options of ctx.step. */
export interface StepOptions {
  /** Run `fn` in one transaction that also records the step: its writes happen exactly once. */
  transaction?: boolean;
}

/** Notified when a run is suspended (the worker's wake-up timer, events, tracing). */
export interface StepHooks {
  /** A step answered (stored before, or new) — §9 a span event per step. */
  onStep?(run: JobRun, name: string, kind: 'step' | 'sleep' | 'event', replayed: boolean): void;
}

export class JobSteps {
  private readonly run: JobRun;
  private readonly engine: Engine;
  private readonly hooks: StepHooks;
  private stored: Map<string, StepRow> | null = null;
  private loading: Promise<LoadedSteps> | null = null;
  private nowMs = Number.NaN;
  private loadedAt = 0;
  /** Names used by this run (a repeated name is a ValidationError). */
  private readonly used = new Set<string>();

  constructor(run: JobRun, engine: Engine, hooks: StepHooks) {
    this.run = run;
    this.engine = engine;
    this.hooks = hooks;
  }

  async step<T>(
    name: string,
    fn: (client: pg.PoolClient) => Promise<T> | T,
    options?: StepOptions,
  ): Promise<T> {
    this.assertNoTransaction('ctx.step');
    this.claimName(name, 'step name');
    if (typeof fn !== 'function') throw new ValidationError('fn', 'must be a function');
    const found = await this.storedStep(name, 'step');
    if (found) {
      this.hooks.onStep?.(this.run, name, 'step', true);
      return parseValue(found.value) as T;
    }
    assertOwned(this.run);
    const json = options?.transaction ? await this.inTransaction(name, fn) : await this.checkpoint(name, fn);
    this.hooks.onStep?.(this.run, name, 'step', false);
    return JSON.parse(json) as T;
  }

  async sleep(name: string, duration: number | { until: Date }): Promise<void> {
    this.assertNoTransaction('ctx.sleep');
    this.claimName(name, 'step name');
    let until: Date | null = null;
    let ms: number | null = null;
    if (typeof duration === 'number') {
      if (!Number.isFinite(duration) || duration < 0 || duration > MAX_MS)
        throw new ValidationError('ms', `must be a number of milliseconds from 0 to ${MAX_MS}`);
      ms = duration;
    } else if (duration && duration.until instanceof Date && Number.isFinite(duration.until.getTime())) {
      until = duration.until;
    } else {
      throw new ValidationError(
        'sleep',
        'must be a number of milliseconds or { until: Date } with a valid date',
      );
    }
    const found = await this.storedStep(name, 'sleep');
    // §1.4 past the stored instant by the database's clock (read with the steps): at once
    if (found?.wake_at != null && found.wake_at <= this.databaseNow()) {
      this.hooks.onStep?.(this.run, name, 'sleep', true);
      return;
    }
    assertOwned(this.run);
    const { state, wakeAt } = await this.engine.steps.sleep(this.run.job, name, until, ms);
    this.afterSuspend(state, name, 'sleep');
    const at = wakeAt === null ? null : new Date(wakeAt);
    if (state === 'resolved') {
      this.hooks.onStep?.(this.run, name, 'sleep', false);
      return;
    }
    this.run.suspended = { kind: 'sleep', until: at, event: null };
    throw new JobSuspended(this.run.job.id, 'sleep', at, null);
  }

  async waitForEvent(
    name: string,
    eventName: string,
    options?: { timeoutMs?: number },
  ): Promise<{ payload: unknown } | null> {
    this.assertNoTransaction('ctx.waitForEvent');
    this.claimName(name, 'step name');
    checkName(eventName, 'eventName');
    const timeoutMs = options?.timeoutMs ?? null;
    if (timeoutMs !== null && (!Number.isFinite(timeoutMs) || timeoutMs < 0 || timeoutMs > MAX_MS))
      throw new ValidationError('timeoutMs', `must be a number of milliseconds from 0 to ${MAX_MS}`);
    const found = await this.storedStep(name, 'event');
    if (found?.resolved) {
      this.hooks.onStep?.(this.run, name, 'event', true);
      return parseValue(found.value) as { payload: unknown } | null;
    }
    assertOwned(this.run);
    const { state, valueJson } = await this.engine.steps.wait(this.run.job, name, eventName, timeoutMs);
    this.afterSuspend(state, name, 'event');
    if (state === 'resolved' || state === 'set' || state === 'timeout') {
      this.hooks.onStep?.(this.run, name, 'event', state === 'resolved');
      return parseValue(valueJson) as { payload: unknown } | null;
    }
    const until = found?.wake_at != null ? new Date(found.wake_at) : null;
    const timeout = until ?? (timeoutMs === null ? null : new Date(Date.now() + timeoutMs));
    this.run.suspended = { kind: 'event', until: timeout, event: eventName };
    throw new JobSuspended(this.run.job.id, 'event', timeout, eventName);
  }

  /** The answers a sleep or wait shares: the lease gone, a name of another kind, a keyed job, a cancel. */
  private afterSuspend(state: string, name: string, kind: 'sleep' | 'event'): void {
    const { job } = this.run;
    if (state === 'lost') throw new LeaseLostError(job.id);
    if (state === 'kind') throw kindError(name, kind);
    if (state === 'keyed')
      throw new ValidationError(
        kind === 'sleep' ? 'ctx.sleep' : 'ctx.waitForEvent',
        `job ${job.id} holds a dedupe key of scope 'pending', which it cannot keep while suspended: use ctx.step only, or another dedupe scope`,
      );
    // §12 waiting would give up the key (migration 23): refused, nothing stored
    if (state === 'deduped')
      throw new ValidationError(
        'ctx.waitForEvent',
        `job ${job.id} holds a dedupe key, which a waiting job does not hold (another job of the key could be enqueued meanwhile): use ctx.sleep or ctx.step, or enqueue the job without a dedupe key`,
      );
    if (state === 'cancelled') {
      this.run.suspended = { kind: 'cancelled', until: null, event: null };
      throw this.run.signal.aborted ? this.run.signal.reason : new JobSuspended(job.id, kind, null, null);
    }
  }

  /**
   * A step, sleep or wait writes on a pool connection under the job's row lock: inside the job's
   * own open transaction (ctx.transaction, or a `{ transaction: true }` step's fn) that lock is
   * held by the handler itself, and the write would wait for it forever.
   */
  private assertNoTransaction(field: string): void {
    if (this.run.transaction !== 'none')
      throw new ValidationError(
        field,
        "ctx.step cannot run inside ctx.transaction or a transactional step: the job's row is locked by that transaction; call it before or after",
      );
  }

  /** Marks `name` used by this run; a repeat is a ValidationError (put a loop's index in the name). */
  private claimName(name: string, field: string): void {
    checkName(name, field);
    if (this.used.has(name))
      throw new ValidationError(
        field,
        `"${name}" was already used by this run: step names must be unique within a run (put a loop's index in the name)`,
      );
    this.used.add(name);
  }

  /** The stored step `name` (loading the job's steps on the first call), checked to be of `kind`. */
  private async storedStep(name: string, kind: StepRow['kind']): Promise<StepRow | undefined> {
    if (this.stored === null) {
      this.loading ??= this.engine.steps.load(this.run.job.id);
      const sentAt = performance.now();
      const loaded = await this.loading;
      if (this.stored === null) {
        this.stored = new Map(loaded.rows.map((row) => [row.name, row]));
        this.nowMs = loaded.nowMs;
        this.loadedAt = sentAt;
      }
    }
    const found = this.stored.get(name);
    if (found && found.kind !== kind) throw kindError(name, kind);
    return found;
  }

  /** The database's now() (§1.4) as of the load, moved on by the time elapsed here since. */
  private databaseNow(): number {
    return Number.isNaN(this.nowMs) ? Number.NaN : this.nowMs + (performance.now() - this.loadedAt);
  }

  /** Runs `fn`, then checkpoints its value under the lease; the value's JSON text. */
  private async checkpoint<T>(name: string, fn: (client: pg.PoolClient) => Promise<T> | T): Promise<string> {
    const value = await (fn as () => Promise<T> | T)();
    const json = toJsonText(value, `step "${name}"`);
    assertOwned(this.run);
    const sentAt = performance.now();
    const written = await this.engine.steps.write({
      lease: this.run.job,
      name,
      valueJson: json,
      leaseMs: this.run.leaseMs,
    });
    if (written === NOT_WRITTEN) throw new LeaseLostError(this.run.job.id);
    if (written === WRITTEN_RENEWED) this.run.armLease(sentAt);
    return json;
  }

  /**
   * `fn` in one transaction that holds the job's row under the lease (no row: the lease is gone,
   * and `fn` never runs) and commits with the checkpoint; ownership is checked again before COMMIT.
   */
  private async inTransaction<T>(
    name: string,
    fn: (client: pg.PoolClient) => Promise<T> | T,
  ): Promise<string> {
    const run = this.run;
    if (run.transaction !== 'none')
      throw new ValidationError('ctx.step', 'a transaction of this job is already open');
    const { pool, store } = this.engine;
    this.engine.assertOpen();
    return withSession(pool, async (session, markBroken) => {
      const onSessionError = () => {
        if (run.transaction !== 'open') return;
        run.setTransaction('none');
        run.revertToConfirmed();
      };
      session.on?.('error', onSessionError);
      try {
        await statement(session, 'BEGIN', markBroken);
        let json: string;
        let sentAt: number;
        let written: number;
        try {
          if (!(await store.lease.lockLease(session, run.job))) throw new LeaseLostError(run.job.id);
          run.setTransaction('open', () => {
            markBroken(new LeaseLostError(run.job.id));
            destroySocket(session);
          });
          const value = await fn(session as unknown as pg.PoolClient);
          json = toJsonText(value, `step "${name}"`);
          assertOwned(run);
          sentAt = performance.now();
          const item = { lease: run.job, name, valueJson: json, leaseMs: run.leaseMs };
          written = await this.engine.steps.writeOn(session, item);
          if (written === NOT_WRITTEN) throw new LeaseLostError(run.job.id);
          assertOwned(run);
        } catch (error) {
          await rollBack(run, session, store, markBroken);
          throw error;
        }
        run.setTransaction('committing');
        try {
          await statement(session, 'COMMIT', markBroken);
        } finally {
          run.setTransaction('none');
        }
        // the lock held by the transaction may have moved the local deadline provisionally (the
        // heartbeat skipped the row): back to what the database confirmed, unless this renewed it
        if (written === WRITTEN_RENEWED) run.armLease(sentAt);
        else run.revertToConfirmed();
        return json;
      } finally {
        session.off?.('error', onSessionError);
      }
    });
  }
}

function checkName(name: unknown, field: string): void {
  checkStepName(name, field);
}

function kindError(name: string, kind: string): ValidationError {
  return new ValidationError(
    'step name',
    `"${name}" is stored for this job as another kind of step than ${kind}: give each step, sleep and wait its own name`,
  );
}

function parseValue(text: string | null): unknown {
  return text === null ? null : JSON.parse(text);
}
