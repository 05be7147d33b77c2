/**
 * Observability: single jobs, pages, counts (cheap on any table size, §7), throughput, the
 * replica lag, and NOTIFY. Each statement is defined next to the method that binds its
 * parameters; the quoted schema is spliced once, everything else is a parameter.
 */
import { type JobRow, toJob } from '../core/job-row.js';
import type { Executor } from '../db/executor.js';
import type { Job, JobStatus, LiveStatus } from '../types.js';
import {
  ACTIVE,
  COMPLETED_DELETED,
  JOB_COLUMNS,
  MAX_BIGINT,
  PRUNE_STATS_LAG_S,
  PRUNED_AT,
} from './fragments.js';
import { StatementFamily } from './runner.js';

/** Rows counted exactly before `counts()` switches a finished status to an estimate (§7). */
export const EXACT_COUNT_LIMIT = 10_000;

/** Rows one `listPage` examines by primary key at most (a rare status's own rows aside). */
export const LIST_WINDOW = 10_000;

/** Counts by status, with the statuses whose figure is an estimate. */
/** Job list filters; null means any. */
export interface ListFilter {
  status: string | null;
  task: string | null;
  queue: string | null;
  after: string | null;
}

export interface StatusCounts {
  counts: Record<JobStatus, number>;
  estimated: JobStatus[];
}

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function observeSql(s: string) {
  const jobs = `${s}.jobs`;
  const counters = `${s}.counters`;
  return {
    /** §1.9 a hint on the schema's channel (the worker's LISTEN self-check). $1 channel, $2 payload. */
    notify: `SELECT pg_notify($1, $2)`,

    /** One job by id. */
    get: `SELECT ${JOB_COLUMNS} FROM ${jobs} WHERE id = $1`,

    /**
     * §9 waitFor: asks for a completion hint of a job that has not finished (migration 12's
     * trigger sends it with the transition that finishes the job) and returns the job with
     * `hinted`: whether its hint is now set. The row is taken with SKIP LOCKED, never waited for:
     * a job's own ctx.transaction can hold it for long, and a waiter must not hold a pooled
     * connection meanwhile (nor starve the heartbeat of one). A row skipped comes back from the
     * statement's snapshot with `hinted` false: the caller reads it again and asks again. No
     * row: no such job. §1.9 while this statement holds a pending job's row lock, a claim skips
     * the job (SKIP LOCKED) and its worker may go back to sleep: so a pending job hinted here is
     * announced again (`pg_notify` at this statement's commit), or it waited for the slow poll
     * (seen: test/workflows/flows.test.ts, a job unblocked and then waited for).
     * $1 id, $2 channel.
     */
    requestFinishHint: `
      WITH hinted AS (
        UPDATE ${jobs} SET wait_hint = true
        WHERE id = (SELECT id FROM ${jobs}
                    WHERE id = $1 AND wait_hint IS NOT TRUE AND status NOT IN ('done', 'dead', 'cancelled')
                    FOR NO KEY UPDATE SKIP LOCKED)
        RETURNING ${JOB_COLUMNS}, true AS hinted
      )
      SELECT hinted.*, CASE WHEN status = 'pending' THEN pg_notify($2, 'jobs')::text END AS notified FROM hinted
      UNION ALL
      SELECT ${JOB_COLUMNS}, coalesce(wait_hint, false) AS hinted, NULL::text AS notified FROM ${jobs}
      WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM hinted)`,

    /**
     * §1.7 the active job holding a dedupe key (through the unique partial index); §8 else, for a
     * key of scope 'pending', its queued job (the one an enqueue would return), else its running
     * one — each through its own unique index, in that order.
     */
    findActive: `
      (SELECT ${JOB_COLUMNS} FROM ${jobs} WHERE dedupe_key = $1 AND ${ACTIVE})
      UNION ALL
      (SELECT ${JOB_COLUMNS} FROM ${jobs} WHERE pending_key = $1 AND status = 'pending' AND pending_key IS NOT NULL)
      UNION ALL
      (SELECT ${JOB_COLUMNS} FROM ${jobs} WHERE pending_key = $1 AND status = 'running' AND pending_key IS NOT NULL)
      LIMIT 1`,

    /** Newest first, keyset-paged on id; every filter optional. */
    list: `
      SELECT ${JOB_COLUMNS} FROM ${jobs} AS j
      WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR task = $2)
        AND ($3::text IS NULL OR queue = $3) AND ($4::bigint IS NULL OR j.id < $4::bigint)
      ORDER BY j.id DESC -- the table's bigint id, not the text alias of the select list
      LIMIT $5`,

    /**
     * §5/§7 a bounded page, newest first: no filter can make it read the whole table.
     * - A status with a partial index (waiting, pending, running, dead, cancelled) is read through it, at
     *   most $6 + 1 rows; when it has no more than $6 rows they are all the candidates, and the
     *   answer is complete (`scanned_to` null).
     * - Otherwise (no status, `done`, or more than $6 rows of it) the $6 newest rows below the
     *   cursor are examined by primary key, lazily (the scan stops once the page is full), and
     *   filtered; when the page is not full, `scanned_to` is the lowest id of that window if the
     *   window was full (older jobs may still match), else null (the table ran out).
     * The cursor is a bound of the index scan in any plan: `coalesce`, not `$4 IS NULL OR …`,
     * which a generic plan can only apply as a filter. One row with null job columns when the
     * page is empty. $1 status, $2 task, $3 queue (each or null), $4 before id (or null),
     * $5 limit, $6 window.
     */
    listPage: `
      WITH by_status AS MATERIALIZED (
        (SELECT id, task, queue FROM ${jobs} WHERE status = 'waiting' AND $1::text = 'waiting' LIMIT $6::int + 1)
        UNION ALL
        (SELECT id, task, queue FROM ${jobs} WHERE status = 'pending' AND $1::text = 'pending' LIMIT $6::int + 1)
        UNION ALL
        (SELECT id, task, queue FROM ${jobs} WHERE status = 'running' AND $1::text = 'running' LIMIT $6::int + 1)
        UNION ALL
        (SELECT id, task, queue FROM ${jobs} WHERE status = 'dead' AND $1::text = 'dead' LIMIT $6::int + 1)
        UNION ALL
        (SELECT id, task, queue FROM ${jobs} WHERE status = 'cancelled' AND $1::text = 'cancelled' LIMIT $6::int + 1)
      ), whole AS MATERIALIZED (
        SELECT count(*) <= $6::int AND coalesce($1::text IN ('waiting', 'pending', 'running', 'dead', 'cancelled'), false) AS yes
        FROM by_status
      ), matched AS MATERIALIZED (
        (SELECT b.id FROM by_status AS b
         WHERE (SELECT yes FROM whole) AND b.id < coalesce($4::bigint, ${MAX_BIGINT})
           AND ($2::text IS NULL OR b.task = $2) AND ($3::text IS NULL OR b.queue = $3)
         ORDER BY b.id DESC LIMIT $5)
        UNION ALL
        (SELECT w.id FROM (
           SELECT j.id, j.status, j.task, j.queue FROM ${jobs} AS j
           WHERE NOT (SELECT yes FROM whole) AND j.id < coalesce($4::bigint, ${MAX_BIGINT})
           ORDER BY j.id DESC LIMIT $6
         ) AS w
         WHERE ($1::text IS NULL OR w.status = $1) AND ($2::text IS NULL OR w.task = $2)
           AND ($3::text IS NULL OR w.queue = $3)
         ORDER BY w.id DESC LIMIT $5)
      ), page AS (
        SELECT ${JOB_COLUMNS}, j.id AS sort_id FROM ${jobs} AS j
        WHERE j.id = ANY (ARRAY(SELECT id FROM matched))
      ), edge AS (
        SELECT CASE WHEN NOT (SELECT yes FROM whole) AND (SELECT count(*) FROM matched) < $5 THEN (
                 SELECT CASE WHEN count(*) = $6 THEN min(w.id)::text END FROM (
                   SELECT j.id FROM ${jobs} AS j WHERE j.id < coalesce($4::bigint, ${MAX_BIGINT})
                   ORDER BY j.id DESC LIMIT $6) AS w)
               END AS scanned_to
      )
      SELECT edge.scanned_to, page.* FROM edge LEFT JOIN page ON true
      ORDER BY page.sort_id DESC`,

    /**
     * §7 counts without a full-table count: waiting (§10), pending and running exactly through their partial
     * indexes; each finished status exactly up to EXACT_COUNT_LIMIT rows (through jobs_finished_idx and the
     * dead/cancelled indexes: bounded reads), and beyond that an estimate — the index's own row
     * estimate for dead and cancelled, the table's live-row estimate minus the rest for done.
     * Done is not read at all when the statistics collector's live rows (inserts minus deletes)
     * leave at least twice that for it, dead and cancelled are below it, and nothing was pruned in
     * the last minute (the statistics learn of a DELETE up to a minute late: `PRUNED_AT`): a table
     * of a million done jobs costs ops() what an empty one does (W6), a table with few stays exact.
     * `done_deleted`: completions deleted at once (`retention: { completed: 'delete' }`), from
     * their maintained counter (at most 16 rows). $1 schema name. The exact limit is a literal:
     * as a parameter, the generic plan priced its LIMITs at a tenth of the table, and a table of
     * a million done jobs was planned again at every call (~1 ms).
     */
    counts: `
      WITH rel AS (
        SELECT c.oid, c.relname, c.relpages, greatest(c.reltuples, 0)::float8 AS reltuples
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname IN ('jobs', 'jobs_dead_idx', 'jobs_cancelled_idx')
      ), est AS MATERIALIZED (
        SELECT
          -- the planner's own estimate: rows per page at the last VACUUM/ANALYZE times the
          -- table's pages now; before any, the statistics collector's live-row count
          (SELECT CASE WHEN relpages > 0
                       THEN reltuples / relpages * (pg_relation_size(oid) / current_setting('block_size')::float8)
                       ELSE coalesce(pg_stat_get_live_tuples(oid), 0)::float8 END
             FROM rel WHERE relname = 'jobs') AS table_rows,
          (SELECT reltuples FROM rel WHERE relname = 'jobs_dead_idx') AS dead_rows,
          (SELECT reltuples FROM rel WHERE relname = 'jobs_cancelled_idx') AS cancelled_rows,
          (SELECT coalesce(pg_stat_get_live_tuples(oid), 0)::float8 FROM rel WHERE relname = 'jobs') AS live_rows
      ), others AS MATERIALIZED (
        SELECT
          (SELECT count(*) FROM ${jobs} WHERE status = 'waiting') AS waiting,
          (SELECT count(*) FROM ${jobs} WHERE status = 'pending') AS pending,
          (SELECT count(*) FROM ${jobs} WHERE status = 'running') AS running,
          (SELECT count(*) FROM (SELECT 1 FROM ${jobs} WHERE status = 'dead' LIMIT ${EXACT_COUNT_LIMIT}) d) AS dead,
          (SELECT count(*) FROM (SELECT 1 FROM ${jobs} WHERE status = 'cancelled' LIMIT ${EXACT_COUNT_LIMIT}) c) AS cancelled
      ), exact AS MATERIALIZED (
        -- the subquery is evaluated only in the branch taken (an init plan runs when first used)
        SELECT o.*,
               CASE WHEN est.live_rows - o.waiting - o.pending - o.running - o.dead - o.cancelled < 2 * ${EXACT_COUNT_LIMIT}::float8
                         -- dead or cancelled past the limit: what is left of the live rows is not done's
                         OR o.dead >= ${EXACT_COUNT_LIMIT} OR o.cancelled >= ${EXACT_COUNT_LIMIT}
                         -- a prune the statistics may not have seen yet
                         OR EXISTS (SELECT 1 FROM ${counters} WHERE name = '${PRUNED_AT}'
                                    AND n > extract(epoch FROM now()) - ${PRUNE_STATS_LAG_S})
                    THEN (SELECT count(*) FROM (SELECT 1 FROM ${jobs} WHERE status = 'done' LIMIT ${EXACT_COUNT_LIMIT}) d)
                    ELSE ${EXACT_COUNT_LIMIT}::bigint END AS done
        FROM others AS o, est
      )
      SELECT exact.waiting::float8 AS waiting, exact.pending::float8 AS pending, exact.running::float8 AS running,
             CASE WHEN exact.dead < ${EXACT_COUNT_LIMIT} THEN exact.dead::float8
                  ELSE greatest(exact.dead::float8, est.dead_rows) END AS dead,
             CASE WHEN exact.cancelled < ${EXACT_COUNT_LIMIT} THEN exact.cancelled::float8
                  ELSE greatest(exact.cancelled::float8, est.cancelled_rows) END AS cancelled,
             CASE WHEN exact.done < ${EXACT_COUNT_LIMIT} THEN exact.done::float8
                  ELSE greatest(exact.done::float8,
                                est.table_rows - exact.waiting - exact.pending - exact.running - exact.dead - exact.cancelled)
             END AS done,
             (exact.done >= ${EXACT_COUNT_LIMIT}) AS done_estimated, (exact.dead >= ${EXACT_COUNT_LIMIT}) AS dead_estimated,
             (exact.cancelled >= ${EXACT_COUNT_LIMIT}) AS cancelled_estimated,
             (SELECT coalesce(sum(n), 0) FROM ${counters} WHERE name = '${COMPLETED_DELETED}')::float8 AS done_deleted
      FROM exact, est`,

    /**
     * Live jobs by queue and status, §7: one branch per status so each reads only its partial
     * index's rows (a single `status IN (…)` cannot use the partial indexes and scans the table);
     * §10 waiting jobs through jobs_waiting_idx.
     */
    liveByQueue: `
      SELECT queue, 'waiting' AS status, count(*)::float8 AS n FROM ${jobs} WHERE status = 'waiting' GROUP BY queue
      UNION ALL
      SELECT queue, 'pending' AS status, count(*)::float8 AS n FROM ${jobs} WHERE status = 'pending' GROUP BY queue
      UNION ALL
      SELECT queue, 'running' AS status, count(*)::float8 AS n FROM ${jobs} WHERE status = 'running' GROUP BY queue`,

    /**
     * Finished jobs per time bucket over the last $2 ms, through jobs_finished_idx (§7).
     * $1 bucket ms. Bucket starts are epoch milliseconds, aligned to the bucket size.
     */
    finishedPerBucket: `
      SELECT (extract(epoch FROM date_bin($1::float8 * interval '1 millisecond', updated_at,
                                          timestamptz '1970-01-01 00:00:00+00')) * 1000)::float8 AS bucket,
             status, count(*)::float8 AS n
      FROM ${jobs}
      WHERE status IN ('done', 'dead', 'cancelled') AND updated_at > now() - $2::float8 * interval '1 millisecond'
      GROUP BY 1, 2
      ORDER BY 1`,

    /**
     * §7 the rest of ops(), each through a partial index: dead and deadline failures of the
     * last hour, stuck running jobs ($1: stuck threshold in ms), age of the oldest due job.
     */
    opsExtras: `
      SELECT
        (SELECT count(*) FROM ${jobs} WHERE status = 'dead' AND updated_at > now() - interval '1 hour')::float8 AS dead1h,
        (SELECT count(*) FROM ${jobs} WHERE status = 'running'
           AND (lease_until < now() OR run_started_at < now() - $1::float8 * interval '1 millisecond'))::float8 AS stuck_running,
        coalesce(floor(extract(epoch FROM now() - (SELECT min(run_after) FROM ${jobs}
           WHERE status = 'pending' AND run_after <= now()))), 0)::float8 AS oldest_pending_sec,
        (SELECT count(*) FROM ${jobs} WHERE last_error LIKE 'JobDeadlineExceeded%'
           AND updated_at > now() - interval '1 hour')::float8 AS deadline1h`,

    /**
     * §7 replica lag, step 1, on the primary: its WAL position now. Every change committed
     * before this call lies at or before it. Reads no table.
     */
    walPosition: `SELECT pg_current_wal_lsn()::text AS lsn`,

    /**
     * §7 replica lag, step 2, on the read replica (asked again while it is behind): whether it
     * has replayed up to the primary's position $1 (every change committed before ops() began
     * is then visible there), and the age of the last transaction it replayed (null when it has
     * replayed none since it started). A server that is not in recovery is a primary: nothing
     * to replay, caught up (the caller warns). Reads no table.
     */
    replicaLag: `
      SELECT pg_is_in_recovery() AS in_recovery,
             (NOT pg_is_in_recovery() OR pg_last_wal_replay_lsn() >= $1::pg_lsn) AS caught_up,
             greatest(0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)::float8 AS age_ms`,
  };
}

export class ObserveStatements extends StatementFamily<ReturnType<typeof observeSql>> {
  async notify(db: Executor, payload: string): Promise<void> {
    await this.run(db, this.sql.notify, [this.channel, payload]);
  }

  async get(db: Executor, id: string): Promise<Job | null> {
    const rows = await this.run<JobRow>(db, this.sql.get, [id]);
    return rows[0] ? toJob(rows[0]) : null;
  }

  /**
   * §9 asks for `id`'s completion hint: the job, and whether its hint is set (false: its row was
   * locked; ask again), or null when there is no such job (see requestFinishHint).
   */
  async requestFinishHint(db: Executor, id: string): Promise<{ job: Job; hinted: boolean } | null> {
    const rows = await this.run<JobRow & { hinted: boolean }>(db, this.sql.requestFinishHint, [
      id,
      this.channel,
    ]);
    return rows[0] ? { job: toJob(rows[0]), hinted: rows[0].hinted === true } : null;
  }

  async findActive(db: Executor, dedupeKey: string): Promise<Job | null> {
    const rows = await this.run<JobRow>(db, this.sql.findActive, [dedupeKey]);
    return rows[0] ? toJob(rows[0]) : null;
  }

  async list(db: Executor, filter: ListFilter, limit: number): Promise<Job[]> {
    const rows = await this.run<JobRow>(db, this.sql.list, [
      filter.status,
      filter.task,
      filter.queue,
      filter.after,
      limit,
    ]);
    return rows.map(toJob);
  }

  /**
   * A bounded page, newest first (see the `listPage` statement): at most `window` rows examined
   * beyond the rows of a rare status. `scannedTo`: the lowest id examined when the page is not
   * full but older jobs may still match; null when the answer is complete.
   */
  async listPage(
    db: Executor,
    filter: ListFilter,
    limit: number,
    window = LIST_WINDOW,
  ): Promise<{ jobs: Job[]; scannedTo: string | null }> {
    const rows = await this.run<JobRow & { scanned_to: string | null }>(db, this.sql.listPage, [
      filter.status,
      filter.task,
      filter.queue,
      filter.after,
      limit,
      window,
    ]);
    return {
      jobs: rows.filter((row) => row.id !== null).map(toJob),
      scannedTo: rows[0]?.scanned_to ?? null,
    };
  }

  async counts(db: Executor): Promise<StatusCounts> {
    const rows = await this.run<Record<string, number | boolean>>(db, this.sql.counts, [this.schema]);
    const row = rows[0] ?? {};
    const counts = {
      waiting: Number(row.waiting ?? 0),
      pending: Number(row.pending ?? 0),
      running: Number(row.running ?? 0),
      // done rows, plus completions deleted at once and counted instead (§7)
      done: Math.round(Number(row.done ?? 0)) + Number(row.done_deleted ?? 0),
      dead: Math.round(Number(row.dead ?? 0)),
      cancelled: Math.round(Number(row.cancelled ?? 0)),
    };
    const estimated: JobStatus[] = [];
    if (row.done_estimated) estimated.push('done');
    if (row.dead_estimated) estimated.push('dead');
    if (row.cancelled_estimated) estimated.push('cancelled');
    return { counts, estimated };
  }

  async liveByQueue(db: Executor): Promise<{ queue: string; status: LiveStatus; count: number }[]> {
    const rows = await this.run<{ queue: string; status: LiveStatus; n: number }>(
      db,
      this.sql.liveByQueue,
      [],
    );
    return rows.map((row) => ({ queue: row.queue, status: row.status, count: Number(row.n) }));
  }

  async finishedPerBucket(
    db: Executor,
    bucketMs: number,
    windowMs: number,
  ): Promise<{ bucket: number; status: 'done' | 'dead' | 'cancelled'; count: number }[]> {
    const rows = await this.run<{ bucket: number; status: 'done' | 'dead' | 'cancelled'; n: number }>(
      db,
      this.sql.finishedPerBucket,
      [bucketMs, windowMs],
    );
    return rows.map((row) => ({ bucket: Number(row.bucket), status: row.status, count: Number(row.n) }));
  }

  async opsExtras(
    db: Executor,
    stuckAfterMs: number,
  ): Promise<{ dead1h: number; stuckRunning: number; oldestPendingSec: number; deadline1h: number }> {
    const rows = await this.run<Record<string, number>>(db, this.sql.opsExtras, [stuckAfterMs]);
    const row = rows[0] ?? {};
    return {
      dead1h: Number(row.dead1h ?? 0),
      stuckRunning: Number(row.stuck_running ?? 0),
      oldestPendingSec: Number(row.oldest_pending_sec ?? 0),
      deadline1h: Number(row.deadline1h ?? 0),
    };
  }

  /** The primary's WAL position now (`pg_lsn` as text): step 1 of the replica lag. */
  async walPosition(db: Executor): Promise<string> {
    const rows = await this.run<{ lsn: string }>(db, this.sql.walPosition, []);
    return String(rows[0]?.lsn);
  }

  /**
   * Step 2 of the replica lag, on the replica: whether it has replayed up to the primary's
   * position `primaryLsn`, the age in ms of the last transaction it replayed (null when none
   * since it started), and whether it is a replica at all.
   */
  async replicaLag(
    db: Executor,
    primaryLsn: string,
  ): Promise<{ inRecovery: boolean; caughtUp: boolean; ageMs: number | null }> {
    const rows = await this.run<{ in_recovery: boolean; caught_up: boolean; age_ms: number | null }>(
      db,
      this.sql.replicaLag,
      [primaryLsn],
    );
    const age = rows[0]?.age_ms;
    return {
      inRecovery: rows[0]?.in_recovery === true,
      caughtUp: rows[0]?.caught_up === true,
      ageMs: age === null || age === undefined ? null : Math.ceil(Number(age)),
    };
  }
}
