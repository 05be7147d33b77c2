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

/** Creates or updates a schedule (idempotent); its first run is the first tick after now. */
export async function upsertSchedule(engine: Engine, spec: ScheduleSpec): Promise<Schedule> {
  const { store, pool } = engine;
  const nowMs = await store.schedule.databaseNow(pool);
  const row = await store.schedule.upsert(pool, { ...spec, nextRunAt: nextTick(spec, new Date(nowMs)) });
  await hint(engine);
  return toSchedule(row);
}

export async function removeSchedule(engine: Engine, name: string): Promise<boolean> {
  const removed = await engine.store.schedule.remove(engine.pool, name);
  if (removed) await hint(engine);
  return removed;
}

export async function listSchedules(engine: Engine): Promise<Schedule[]> {
  return (await engine.read((db) => engine.store.schedule.list(db))).map(toSchedule);
}

export function pauseSchedule(engine: Engine, name: string): Promise<boolean> {
  return engine.store.schedule.pause(engine.pool, name);
}

/** Resumes a paused schedule from its next tick after now: ticks missed while paused do not run. */
export async function resumeSchedule(engine: Engine, name: string): Promise<boolean> {
  const resumed = await inTransaction(engine.pool, async (tx) => {
    const row = await engine.store.schedule.lockOne(tx, name);
    if (row === null) return false;
    return engine.store.schedule.resume(tx, name, nextTick(row, new Date(row.now_ms)));
  });
  if (resumed) await hint(engine);
  return resumed;
}

/**
 * One step of the scheduler: fires every due schedule this worker can lock (up to DUE_BATCH per
 * transaction), each with the ticks its `catchUp` and `overlap` allow.
 */
export async function fireDueSchedules(
  engine: Engine,
): Promise<{ fired: FiredTick[]; skipped: SkippedTicks[]; more: boolean }> {
  engine.assertOpen();
  const { store } = engine;
  return inTransaction(engine.pool, async (tx) => {
    const fired: FiredTick[] = [];
    const skipped: SkippedTicks[] = [];
    const rows = await store.schedule.lockDue(tx, DUE_BATCH);
    for (const row of rows) {
      const spec: CronSpec = { cron: row.cron, tz: row.tz };
      const { run, skip, next } = ticksToRun(spec, row, new Date(row.now_ms));
      if (skip) skipped.push({ name: row.name, ...skip });
      const jobs = await store.schedule.fire(
        tx,
        row.name,
        run.map((at) => ({ at, dedupeKey: tickKey(row.name, at) })),
        next,
      );
      for (const job of jobs) {
        const tick = run.find((at) => tickKey(row.name, at) === job.dedupeKey);
        if (tick) fired.push({ name: row.name, tick, jobId: job.id });
      }
    }
    return { fired, skipped, more: rows.length === DUE_BATCH };
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

async function hint(engine: Engine): Promise<void> {
  try {
    await engine.store.observe.notify(engine.pool, SCHEDULE_HINT);
  } catch (error) {
    // The change is committed; workers still see it by their next poll (at most a minute).
    engine.settings.logger?.warn?.(
      { err: error, schema: engine.schema },
      'skiplock: sending the schedule hint failed',
    );
  }
}
