/**
 * Schedules (SPEC §8): the idempotent upsert, pause and resume, and the scheduler's step — due
 * rows locked with SKIP LOCKED, then each one's tick jobs inserted and its next run advanced by
 * one statement, inside one transaction. Each statement is defined next to the method that binds
 * its parameters; the quoted schema is spliced once, everything else is a parameter.
 */
import type { ScheduleFields, ScheduleRow } from '../core/schedule-spec.js';
import type { Executor } from '../db/executor.js';
import { MS, ON_DEDUPE_CONFLICT } from './fragments.js';
import { StatementFamily } from './runner.js';

/** What the upsert writes: the definition, and the next run for a new or re-timed schedule. */
export type ScheduleWrite = ScheduleFields & { nextRunAt: Date };

const COLUMNS =
  'name, cron, tz, task, payload, queue, priority, max_attempts, timeout_ms, overlap, catch_up, paused, ' +
  `${MS('next_run_at')}, ${MS('last_run_at')}, last_job_id::text AS last_job_id, ${MS('created_at')}, ${MS('updated_at')}`;

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function scheduleSql(s: string) {
  const schedules = `${s}.schedules`;
  const jobs = `${s}.jobs`;
  return {
    /** §1.4 database time, to anchor tick computations (`ms`: epoch milliseconds). */
    scheduleDatabaseNow: `SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms`,

    /**
     * §8 idempotent upsert: many processes may run it at once for one name (ON CONFLICT takes
     * the row lock; the last writer's definition stands). An unchanged cron and time zone keep
     * the stored next run, so a deploy never drops or repeats a due tick; `paused` and the run
     * history are never touched. $12 next run (epoch ms) applies to a new or re-timed schedule.
     */
    scheduleUpsert: `
      INSERT INTO ${schedules} AS sc
        (name, cron, tz, task, payload, queue, priority, max_attempts, timeout_ms, overlap, catch_up, next_run_at)
      VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, to_timestamp($12::float8 / 1000))
      ON CONFLICT (name) DO UPDATE SET
        cron = EXCLUDED.cron, tz = EXCLUDED.tz, task = EXCLUDED.task, payload = EXCLUDED.payload,
        queue = EXCLUDED.queue, priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
        timeout_ms = EXCLUDED.timeout_ms, overlap = EXCLUDED.overlap, catch_up = EXCLUDED.catch_up,
        next_run_at = CASE WHEN sc.cron = EXCLUDED.cron AND sc.tz = EXCLUDED.tz
                           THEN sc.next_run_at ELSE EXCLUDED.next_run_at END,
        updated_at = now()
      RETURNING ${COLUMNS}`,

    /** §8 removes a schedule; jobs it already enqueued stay. */
    scheduleRemove: `DELETE FROM ${schedules} WHERE name = $1 RETURNING name`,

    /** Schedules by name after $1 (keyset), at most $2: a bounded read. */
    scheduleList: `SELECT ${COLUMNS} FROM ${schedules} WHERE name > $1 ORDER BY name LIMIT $2`,

    /** §8 pause: the scheduler skips the row (its partial index leaves it out). */
    schedulePause: `UPDATE ${schedules} SET paused = true, updated_at = now() WHERE name = $1 RETURNING name`,

    /**
     * For an upsert or a resume: the row's cron, its last tick fired and the database's now
     * (clock_timestamp: the lock may have been waited for), locked against a concurrent firing.
     */
    scheduleLockOne: `
      SELECT cron, tz, paused, ${MS('last_run_at')},
             floor(extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now_ms
      FROM ${schedules} WHERE name = $1 FOR UPDATE`,

    /**
     * §8 resume: the next run is recomputed from now ($2), so ticks missed while paused are
     * not caught up (pausing is deliberate). A schedule that was not paused keeps its next run.
     */
    scheduleResume: `
      UPDATE ${schedules} SET paused = false, updated_at = now(),
        next_run_at = CASE WHEN paused THEN to_timestamp($2::float8 / 1000) ELSE next_run_at END
      WHERE name = $1 RETURNING name`,

    /**
     * §8 the scheduler's claim: due, active schedule rows, locked with SKIP LOCKED so workers
     * racing for one tick never wait and exactly one of them fires it; with the database's now.
     * A row that another scheduler fired after this statement's snapshot is re-checked on its
     * latest version by the lock (a tick fired meanwhile is not due any more), but a subquery
     * here would read that firing's job from the older snapshot (not there): whether the last
     * job is active is read by scheduleLastActive, after the locks.
     */
    scheduleLockDue: `
      SELECT ${COLUMNS}, floor(extract(epoch FROM now()) * 1000)::float8 AS now_ms
      FROM ${schedules} AS sc
      WHERE NOT paused AND next_run_at <= now()
      ORDER BY next_run_at
      LIMIT $1
      FOR UPDATE OF sc SKIP LOCKED`,

    /**
     * §8 overlap: false — of the schedules $1, locked by this transaction's scheduleLockDue (so
     * their last job cannot change), those whose last job is still active. A statement of its
     * own after the locks: its snapshot sees the job of a firing that committed while the lock
     * statement ran.
     */
    scheduleLastActive: `
      SELECT sc.name FROM ${schedules} AS sc
      WHERE sc.name = ANY ($1::text[])
        AND EXISTS (SELECT 1 FROM ${jobs} AS j
                    WHERE j.id = sc.last_job_id AND j.status IN ('pending', 'running'))`,

    /**
     * §8 fires one schedule, under the row lock lockDue took: inserts one job per tick ($2
     * dedupe keys and $3 run times, oldest first; the key is unique per schedule and tick, so
     * even a second firing could not add a job while the first is active), §1.9 NOTIFY when any
     * was inserted, and advances the next run ($4) — all committed together. $5 the channel.
     */
    scheduleFire: `
      WITH ticks AS (
        SELECT t.dedupe_key, t.run_after, t.ord
        FROM unnest($2::text[], $3::float8[]) WITH ORDINALITY AS t(dedupe_key, run_after, ord)
      ), ins AS (
        INSERT INTO ${jobs} (queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms)
        SELECT sc.queue, sc.task, sc.payload, sc.priority, t.dedupe_key, sc.max_attempts,
               to_timestamp(t.run_after / 1000), sc.timeout_ms
        FROM ${schedules} AS sc, ticks AS t
        WHERE sc.name = $1
        ORDER BY t.ord
        ${ON_DEDUPE_CONFLICT}
        RETURNING id, dedupe_key
      ), notified AS (
        SELECT pg_notify($5, 'jobs') FROM (SELECT 1 FROM ins LIMIT 1) AS any_inserted
      ), advanced AS (
        UPDATE ${schedules} SET
          next_run_at = to_timestamp($4::float8 / 1000),
          -- the latest tick that enqueued a job (not one that met a dedupe conflict)
          last_run_at = coalesce((SELECT to_timestamp(max(t.run_after) / 1000)
                                  FROM ticks AS t JOIN ins ON ins.dedupe_key = t.dedupe_key), last_run_at),
          last_job_id = coalesce((SELECT id FROM ins ORDER BY id DESC LIMIT 1), last_job_id)
        WHERE name = $1
        RETURNING name
      )
      SELECT ins.id::text AS id, ins.dedupe_key, (SELECT count(*) FROM notified) AS notified,
             (SELECT count(*) FROM advanced) AS advanced
      FROM (SELECT 1) AS one LEFT JOIN ins ON true`,

    /** The scheduler's timer: ms (database time) until the earliest active schedule is due; null if none. */
    scheduleNextDueInMs: `
      SELECT (extract(epoch FROM min(next_run_at) - now()) * 1000)::float8 AS ms
      FROM ${schedules} WHERE NOT paused`,
  };
}

export class ScheduleStatements extends StatementFamily<ReturnType<typeof scheduleSql>> {
  async databaseNow(db: Executor): Promise<number> {
    const rows = await this.run<{ ms: number }>(db, this.sql.scheduleDatabaseNow, []);
    return Number(rows[0]?.ms);
  }

  async upsert(db: Executor, w: ScheduleWrite): Promise<ScheduleRow> {
    const rows = await this.run<ScheduleRow>(db, this.sql.scheduleUpsert, [
      w.name,
      w.cron,
      w.tz,
      w.task,
      w.payloadJson,
      w.queue,
      w.priority,
      w.maxAttempts,
      w.timeoutMs,
      w.overlap,
      w.catchUp,
      w.nextRunAt.getTime(),
    ]);
    return rows[0] as ScheduleRow;
  }

  async remove(db: Executor, name: string): Promise<boolean> {
    return (await this.run(db, this.sql.scheduleRemove, [name])).length > 0;
  }

  list(db: Executor, after: string, limit: number): Promise<ScheduleRow[]> {
    return this.run<ScheduleRow>(db, this.sql.scheduleList, [after, limit]);
  }

  async pause(db: Executor, name: string): Promise<boolean> {
    return (await this.run(db, this.sql.schedulePause, [name])).length > 0;
  }

  async lockOne(
    db: Executor,
    name: string,
  ): Promise<{
    cron: string;
    tz: string;
    paused: boolean;
    last_run_at: number | null;
    now_ms: number;
  } | null> {
    const rows = await this.run<{
      cron: string;
      tz: string;
      paused: boolean;
      last_run_at: number | null;
      now_ms: number;
    }>(db, this.sql.scheduleLockOne, [name]);
    return rows[0] ?? null;
  }

  async resume(db: Executor, name: string, nextRunAt: Date): Promise<boolean> {
    return (await this.run(db, this.sql.scheduleResume, [name, nextRunAt.getTime()])).length > 0;
  }

  lockDue(db: Executor, limit: number): Promise<(ScheduleRow & { now_ms: number })[]> {
    return this.run(db, this.sql.scheduleLockDue, [limit]);
  }

  /** Of the schedules `names` (locked by this transaction), those whose last job is active. */
  async lastActive(db: Executor, names: readonly string[]): Promise<Set<string>> {
    if (names.length === 0) return new Set();
    const rows = await this.run<{ name: string }>(db, this.sql.scheduleLastActive, [names]);
    return new Set(rows.map((row) => row.name));
  }

  /** Fires one locked schedule: the jobs inserted (id, dedupe key), oldest tick first. */
  async fire(
    db: Executor,
    name: string,
    ticks: readonly { dedupeKey: string; at: Date }[],
    nextRunAt: Date,
  ): Promise<{ id: string; dedupeKey: string }[]> {
    const rows = await this.run<{ id: string | null; dedupe_key: string | null }>(db, this.sql.scheduleFire, [
      name,
      ticks.map((t) => t.dedupeKey),
      ticks.map((t) => t.at.getTime()),
      nextRunAt.getTime(),
      this.channel,
    ]);
    return rows
      .filter((row) => row.id !== null)
      .map((row) => ({ id: String(row.id), dedupeKey: String(row.dedupe_key) }));
  }

  async nextDueInMs(db: Executor): Promise<number | null> {
    const rows = await this.run<{ ms: number | null }>(db, this.sql.scheduleNextDueInMs, []);
    const ms = rows[0]?.ms;
    return ms === null || ms === undefined ? null : Math.max(0, Number(ms));
  }
}
