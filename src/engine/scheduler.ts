/**
 * Schedules (SPEC §8) without a leader: the schedule lives in its row, and any worker fires a
 * due tick by locking the row with SKIP LOCKED, inserting that tick's job and advancing the row's
 * next run in one transaction — so each tick enqueues exactly one job however many workers race
 * for it, and a worker that dies mid-way leaves the row as it was (its transaction rolls back).
 * Ticks come from the cron expression in the schedule's time zone (core/cron.ts), anchored in
 * database time.
 */
import { type CronSpec, dueTicks, nextTick } from '../core/cron.js';
import { parseCatchUp, type ScheduleSpec, toSchedule } from '../core/schedule-spec.js';
import { inTransaction } from '../db/executor.js';
import type { Schedule } from '../types.js';
import type { Engine } from './engine.js';

/** The NOTIFY payload that makes running workers re-arm their scheduler at once. */
export const SCHEDULE_HINT = 'schedules';
/** Schedules fired per transaction; more due ones are fired by the next step right away. */
const DUE_BATCH = 20;
/** With `catchUp: 'none'`, a tick later than this is missed, not run. */
export const ON_TIME_MS = 60_000;

export interface FiredTick {
  name: string;
  tick: Date;
  jobId: string;
}

export interface SkippedTicks {
  name: string;
  /** 'overlap': the previous tick's job is still active; 'missed': older than catchUp allows. */
  reason: 'overlap' | 'missed';
  /** The latest tick skipped. */
  tick: Date;
}

/** The job's dedupe key of one tick: unique per schedule and tick (§8). */
export function tickKey(name: string, tick: Date): string {
  return `skiplock:schedule:${name}:${tick.toISOString()}`;
}

/**
 * Creates or updates a schedule (idempotent). A new schedule's first run is its first tick after
 * now; a changed cron or time zone runs from its first tick after now and after the last tick
 * fired. Computed under the row's lock (when the row exists), so a firing that commits
 * meanwhile cannot be repeated by it.
 */
export async function upsertSchedule(engine: Engine, spec: ScheduleSpec): Promise<Schedule> {
  const { store } = engine;
  const row = await inTransaction(engine.pool, async (tx) => {
    const current = await store.schedule.lockOne(tx, spec.name);
    const nowMs = current?.now_ms ?? (await store.schedule.databaseNow(tx));
    const nextRunAt = nextRunAfter(spec, new Date(nowMs), current?.last_run_at ?? null);
    return store.schedule.upsert(tx, { ...spec, nextRunAt });
  });
  await hint(engine);
  return toSchedule(row);
}

/**
 * The first tick after `now` on the forward walk from the last tick fired: inside a fall-back
 * overlap, "the first tick after now" alone could be the second occurrence of a time that
 * already ran (core/cron.ts).
 */
export function nextRunAfter(spec: CronSpec, now: Date, lastRunMs: number | null): Date {
  if (lastRunMs === null || lastRunMs > now.getTime()) return nextTick(spec, now);
  return dueTicks(spec, new Date(lastRunMs + 1), now, 0).next;
}

export async function removeSchedule(engine: Engine, name: string): Promise<boolean> {
  const removed = await engine.store.schedule.remove(engine.pool, name);
  if (removed) await hint(engine);
  return removed;
}

/** Schedules by name after `after`, at most `limit` (every one, page by page, without a limit). */
export async function listSchedules(
  engine: Engine,
  after: string,
  limit: number | null,
): Promise<Schedule[]> {
  const page = 1_000;
  const all: Schedule[] = [];
  let cursor = after;
  for (;;) {
    const want = limit === null ? page : Math.min(page, limit - all.length);
    const rows = await engine.read((db) => engine.store.schedule.list(db, cursor, want));
    all.push(...rows.map(toSchedule));
    if (rows.length < want || (limit !== null && all.length >= limit)) return all;
    cursor = rows.at(-1)?.name as string;
  }
}

export function pauseSchedule(engine: Engine, name: string): Promise<boolean> {
  return engine.store.schedule.pause(engine.pool, name);
}

/** Resumes a paused schedule from its next tick after now: ticks missed while paused do not run. */
export async function resumeSchedule(engine: Engine, name: string): Promise<boolean> {
  const resumed = await inTransaction(engine.pool, async (tx) => {
    const row = await engine.store.schedule.lockOne(tx, name);
    if (row === null) return false;
    return engine.store.schedule.resume(tx, name, nextRunAfter(row, new Date(row.now_ms), row.last_run_at));
  });
  if (resumed) await hint(engine);
  return resumed;
}

export interface FiringResult {
  fired: FiredTick[];
  skipped: SkippedTicks[];
  /** Schedules whose firing failed: their due ticks were skipped (the error says why). */
  failed: { name: string; error: unknown }[];
  /** As many rows as one batch takes were due: more may be. */
  more: boolean;
  /** How many due rows this step locked (0 with rows due: another worker is firing them). */
  locked: number;
}

/**
 * One step of the scheduler: fires every due schedule this worker can lock (up to DUE_BATCH per
 * transaction), each with the ticks its `catchUp` and `overlap` allow. Each schedule fires under
 * a savepoint: one whose firing fails (a statement error) has its due ticks skipped and its next
 * run advanced, so it can neither hold back the others nor fail again at every step.
 */
export async function fireDueSchedules(engine: Engine): Promise<FiringResult> {
  engine.assertOpen();
  const { store } = engine;
  return inTransaction(engine.pool, async (tx) => {
    const result: FiringResult = { fired: [], skipped: [], failed: [], more: false, locked: 0 };
    const rows = await store.schedule.lockDue(tx, DUE_BATCH);
    result.locked = rows.length;
    result.more = rows.length === DUE_BATCH;
    // overlap: false — read after the locks, in a statement of its own (see scheduleLastActive)
    const active = await store.schedule.lastActive(
      tx,
      rows.filter((row) => !row.overlap).map((row) => row.name),
    );
    for (const row of rows) {
      const spec: CronSpec = { cron: row.cron, tz: row.tz };
      const lastActive = active.has(row.name);
      const { run, skip, next } = ticksToRun(spec, { ...row, last_active: lastActive }, new Date(row.now_ms));
      await tx.query('SAVEPOINT skiplock_fire');
      try {
        const jobs = await store.schedule.fire(
          tx,
          row.name,
          run.map((at) => ({ at, dedupeKey: tickKey(row.name, at) })),
          next,
        );
        await tx.query('RELEASE SAVEPOINT skiplock_fire');
        if (skip) result.skipped.push({ name: row.name, ...skip });
        for (const job of jobs) {
          const tick = run.find((at) => tickKey(row.name, at) === job.dedupeKey);
          if (tick) result.fired.push({ name: row.name, tick, jobId: job.id });
        }
      } catch (error) {
        await tx.query('ROLLBACK TO SAVEPOINT skiplock_fire');
        await store.schedule.fire(tx, row.name, [], next); // skip these ticks, advance
        result.failed.push({ name: row.name, error });
      }
    }
    return result;
  });
}

/** The due ticks of a locked row that run now (oldest first), what is skipped, and its next run. */
function ticksToRun(
  spec: CronSpec,
  row: { next_run_at: number; catch_up: string; overlap: boolean; last_active: boolean },
  now: Date,
): { run: Date[]; skip: Omit<SkippedTicks, 'name'> | null; next: Date } {
  const catchUp = parseCatchUp(row.catch_up);
  const keep = row.overlap && typeof catchUp === 'number' ? catchUp : 1;
  // One tick more than may run: the latest one skipped for catchUp, if any.
  const { ticks, next } = dueTicks(spec, new Date(row.next_run_at), now, keep + 1);
  const latest = ticks.at(-1);
  if (latest === undefined) return { run: [], skip: null, next };
  if (!row.overlap && row.last_active) return { run: [], skip: { reason: 'overlap', tick: latest }, next };
  if (catchUp === 'none' && now.getTime() - latest.getTime() > ON_TIME_MS) {
    return { run: [], skip: { reason: 'missed', tick: latest }, next };
  }
  const skipped = ticks.length > keep ? ticks[0] : undefined;
  return { run: ticks.slice(-keep), skip: skipped ? { reason: 'missed', tick: skipped } : null, next };
}

/** Milliseconds (database time) until the earliest active schedule is due; null when none. */
export function nextScheduleInMs(engine: Engine): Promise<number | null> {
  engine.assertOpen();
  return engine.store.schedule.nextDueInMs(engine.pool);
}

/** The hint of a schedule change: running workers re-arm their scheduler (a minute late without it). */
function hint(engine: Engine): Promise<void> {
  return engine.hint(SCHEDULE_HINT, 'schedule');
}
