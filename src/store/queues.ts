/**
 * Queues (SPEC §8): their configuration (pause, global concurrency and rate limits), and the
 * limited claim — the claim of a paused-or-limited queue's jobs, which the plain claim leaves
 * out. Each statement is defined next to the method that binds its parameters; the quoted
 * schema is spliced once, everything else is a parameter.
 */
import { type JobRow, toClaimedJob } from '../core/job-row.js';
import type { QueueChange } from '../core/queue-args.js';
import type { Executor } from '../db/executor.js';
import type { ClaimedJob } from '../types.js';
import { APPEND_ATTEMPTED_BY, JOB_COLUMN_NAMES, JOB_COLUMNS, TRACE_CONTEXT } from './fragments.js';
import { StatementFamily } from './runner.js';

/** A queue's stored configuration. */
export interface QueueRow {
  name: string;
  paused: boolean;
  concurrency: number | null;
  rate_limit: number | null;
  rate_period_ms: number | null;
  group_concurrency: number | null;
  group_rate_limit: number | null;
  group_rate_period_ms: number | null;
  /** §11 priority aging: all three set, or none. */
  aging_every_ms: number | null;
  aging_step: number | null;
  aging_floor: number | null;
}

const QUEUE_COLUMNS =
  'name, paused, concurrency, rate_limit, rate_period_ms, group_concurrency, group_rate_limit, group_rate_period_ms, ' +
  'aging_every_ms, aging_step, aging_floor';
/**
 * A paused, limited or aging queue: the plain claim leaves it to the limited claim
 * (queues_restricted_idx; migration 19 added aging).
 */
const RESTRICTED = (q: string) =>
  `(${q}.paused OR ${q}.concurrency IS NOT NULL OR ${q}.rate_limit IS NOT NULL
    OR ${q}.group_concurrency IS NOT NULL OR ${q}.group_rate_limit IS NOT NULL OR ${q}.aging_every_ms IS NOT NULL)`;

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function queueSql(s: string) {
  const jobs = `${s}.jobs`;
  const queues = `${s}.queues`;
  const starts = `${s}.queue_starts`;
  return {
    /**
     * §8 configureQueue: one upsert, each setting changed only when given ($2, $3/$4, $5/$6/$7,
     * $8/$9, $10/$11/$12, $13/$14/$15/$16 (§11 aging) flags say which), so concurrent changes of
     * different settings both hold.
     */
    queueConfigure: `
      INSERT INTO ${queues} AS q (${QUEUE_COLUMNS})
      VALUES ($1, coalesce($2::boolean, false), CASE WHEN $3 THEN $4::int END,
              CASE WHEN $5 THEN $6::int END, CASE WHEN $5 THEN $7::int END,
              CASE WHEN $8 THEN $9::int END,
              CASE WHEN $10 THEN $11::int END, CASE WHEN $10 THEN $12::int END,
              CASE WHEN $13 THEN $14::int END, CASE WHEN $13 THEN $15::int END, CASE WHEN $13 THEN $16::int END)
      ON CONFLICT (name) DO UPDATE SET
        paused = coalesce($2::boolean, q.paused),
        concurrency = CASE WHEN $3 THEN $4::int ELSE q.concurrency END,
        rate_limit = CASE WHEN $5 THEN $6::int ELSE q.rate_limit END,
        rate_period_ms = CASE WHEN $5 THEN $7::int ELSE q.rate_period_ms END,
        group_concurrency = CASE WHEN $8 THEN $9::int ELSE q.group_concurrency END,
        group_rate_limit = CASE WHEN $10 THEN $11::int ELSE q.group_rate_limit END,
        group_rate_period_ms = CASE WHEN $10 THEN $12::int ELSE q.group_rate_period_ms END,
        aging_every_ms = CASE WHEN $13 THEN $14::int ELSE q.aging_every_ms END,
        aging_step = CASE WHEN $13 THEN $15::int ELSE q.aging_step END,
        aging_floor = CASE WHEN $13 THEN $16::int ELSE q.aging_floor END,
        updated_at = now()
      RETURNING ${QUEUE_COLUMNS}`,

    /**
     * §8 a queue back to no settings at all (not paused, no limits) keeps no row — queues()
     * then lists it only while it has live jobs — and a queue without a rate limit no start
     * log, without a group rate limit no group start log.
     */
    queueTidy: `
      WITH gone AS (
        DELETE FROM ${queues}
        WHERE name = $1 AND NOT ${RESTRICTED(queues)}
        RETURNING name
      ), group_log AS (
        DELETE FROM ${s}.group_starts
        WHERE queue = $1
          AND NOT EXISTS (SELECT 1 FROM ${queues} WHERE name = $1 AND group_rate_limit IS NOT NULL)
      )
      DELETE FROM ${starts}
      WHERE queue = $1 AND NOT EXISTS (SELECT 1 FROM ${queues} WHERE name = $1 AND rate_limit IS NOT NULL)`,

    queueList: `SELECT ${QUEUE_COLUMNS} FROM ${queues} ORDER BY name`,

    /** The queues the plain claim leaves out: paused or limited (queues_restricted_idx). */
    queueRestricted: `SELECT ${QUEUE_COLUMNS} FROM ${queues} AS q WHERE ${RESTRICTED('q')}`,

    /**
     * §8 one limited claimer per queue at a time, until its transaction ends: the statements
     * after it take a new snapshot, which sees every claim committed before it (exact limits).
     * Tried, never waited for: a claimer that holds it and hangs (a paused process, a partition)
     * must not stall the claims of every other worker.
     */
    queueLock: `SELECT pg_try_advisory_xact_lock(hashtext($1), hashtext($2)) AS locked`,

    /**
     * §1.1/§8 the limited claim, under queueLock: as many jobs as the queue's limits leave room
     * for — its concurrency minus its running jobs (held ones included), its rate limit minus
     * its starts within the period (clock_timestamp(), the instant of this statement: the window slides while claims wait their turn) — in
     * claim order, SKIP LOCKED; each start is logged and the log pruned to the period. A paused
     * or unconfigured queue gets nothing here. §1.2 the outer WHERE re-checks the status; §1.3 a
     * new claim token; §1.4 database time.
     * $1 worker_id, $2 queue, $3 limit, $4 tasks (or null), $5 lease ms, $6 the group this claimer
     * served last (or null), $7 the namespace of the per-group locks pick_groups takes for a
     * queue with groupConcurrency, $8 true when no queue lock is held (groupConcurrency is the
     * queue's only limit). Rows of a group skipped for its lock: one marker row (lock_busy).
     */
    queueClaimLimited: `
      WITH cfg AS MATERIALIZED (
        SELECT concurrency, rate_limit, rate_period_ms, group_rate_limit, group_rate_period_ms,
               aging_every_ms, clock_timestamp() AS t
        FROM ${queues} WHERE name = $2 AND NOT paused
          -- without the queue lock ($8) only a queue whose limit is groupConcurrency alone, or
          -- that has none and ages (§11) (a worker that read its settings before they changed
          -- claims nothing until it re-reads)
          AND NOT ($8::boolean AND (concurrency IS NOT NULL OR rate_limit IS NOT NULL
                                    OR group_rate_limit IS NOT NULL
                                    OR (group_concurrency IS NULL AND aging_every_ms IS NULL)))
      ), free AS MATERIALIZED (
        -- the room its limits leave (least() skips a limit that is not set)
        SELECT least(
          c.concurrency - (SELECT count(*) FROM ${jobs} AS r
                           WHERE r.status = 'running' AND r.queue = $2)::int,
          c.rate_limit - (SELECT count(*) FROM ${starts} AS st
                          WHERE st.queue = $2
                            AND st.at > c.t - c.rate_period_ms * interval '1 millisecond')::int
        ) AS free
        FROM cfg AS c
      ), room AS MATERIALIZED (
        SELECT least($3::int, coalesce(free, $3::int)) AS n FROM free
      ), picked AS MATERIALIZED (
        SELECT p.id AS pick_id, p.ord AS pick_ord FROM ${s}.pick_queue(coalesce((SELECT greatest(0, n) FROM room), 0), $4::text[], $2,
                                                (SELECT t FROM cfg), $6::text, $7::text) WITH ORDINALITY AS p(id, ord)
        WHERE (SELECT aging_every_ms FROM cfg) IS NULL
        UNION ALL
        -- §11 a queue with priority aging: by effective priority (migration 19; only one branch runs)
        SELECT p.id, p.ord FROM ${s}.pick_aged(coalesce((SELECT greatest(0, n) FROM room), 0), $4::text[], $2,
                                               (SELECT t FROM cfg), $6::text, $7::text) WITH ORDINALITY AS p(id, ord)
        WHERE (SELECT aging_every_ms FROM cfg) IS NOT NULL
      ), claimed AS (
        UPDATE ${jobs} SET
          status = 'running', worker_id = $1, attempts = attempts + 1, claims = claims + 1,
          attempted_by = ${APPEND_ATTEMPTED_BY},
          lease_until = (SELECT t FROM cfg) + $5::float8 * interval '1 millisecond',
          run_started_at = (SELECT t FROM cfg), updated_at = (SELECT t FROM cfg), cancel_requested_at = NULL
        WHERE id = ANY (ARRAY(SELECT pick_id FROM picked)) AND (status || '') = 'pending'
        RETURNING ${JOB_COLUMNS}, ${TRACE_CONTEXT}, id AS claim_order_id
      ), logged AS (
        INSERT INTO ${starts} (queue, at)
        SELECT $2, c.t FROM claimed, cfg AS c WHERE c.rate_limit IS NOT NULL
      ), pruned AS (
        DELETE FROM ${starts} AS st USING cfg AS c
        WHERE st.queue = $2 AND st.at <= c.t - coalesce(c.rate_period_ms, 0) * interval '1 millisecond'
      ), group_logged AS (
        INSERT INTO ${s}.group_starts (queue, group_key, at)
        SELECT $2, cl.group_key, c.t FROM claimed AS cl, cfg AS c
        WHERE c.group_rate_limit IS NOT NULL AND cl.group_key IS NOT NULL
      ), group_pruned AS (
        DELETE FROM ${s}.group_starts AS gs USING cfg AS c
        WHERE gs.queue = $2 AND gs.at <= c.t - coalesce(c.group_rate_period_ms, 0) * interval '1 millisecond'
      )
      SELECT ${JOB_COLUMN_NAMES}, trace_context, (SELECT free FROM free) AS room_free, false AS lock_busy,
             picked.pick_ord
      FROM claimed JOIN picked ON picked.pick_id = claimed.claim_order_id
      UNION ALL
      -- pick_groups's marker (id -1): a group was skipped for its lock; the claimer looks again
      SELECT ${JOB_COLUMN_NAMES.split(', ')
        .map((column) => `NULL AS ${column}`)
        .join(', ')}, NULL, NULL, true, 0 FROM picked WHERE picked.pick_id = -1
      ORDER BY pick_ord`,

    /**
     * §8 after a limited claim that took less than it asked for, in its transaction (which sees
     * that claim): the room the queue's limits leave now, and — when its rate window is full, or
     * a group's — ms until the oldest start in that window leaves it (for a group: the soonest
     * of the full groups; it may have no job waiting, and the claim then looks again).
     */
    queueRoom: `
      SELECT least(
               q.concurrency - (SELECT count(*) FROM ${jobs} AS r WHERE r.status = 'running' AND r.queue = q.name)::int,
               q.rate_limit - (SELECT count(*) FROM ${starts} AS st
                               WHERE st.queue = q.name
                                 AND st.at > clock_timestamp() - q.rate_period_ms * interval '1 millisecond')::int
             ) AS room,
             least(
               (SELECT (extract(epoch FROM min(st.at) + q.rate_period_ms * interval '1 millisecond' - clock_timestamp())
                        * 1000)::float8
                FROM ${starts} AS st
                WHERE st.queue = q.name
                  AND st.at > clock_timestamp() - q.rate_period_ms * interval '1 millisecond'
                HAVING count(*) >= q.rate_limit),
               (SELECT min(full_group.ms) FROM (
                  SELECT (extract(epoch FROM min(gs.at) + q.group_rate_period_ms * interval '1 millisecond'
                                              - clock_timestamp()) * 1000)::float8 AS ms
                  FROM ${s}.group_starts AS gs
                  WHERE gs.queue = q.name
                    AND gs.at > clock_timestamp() - q.group_rate_period_ms * interval '1 millisecond'
                  GROUP BY gs.group_key
                  HAVING count(*) >= q.group_rate_limit) AS full_group)
             ) AS wait_ms
      FROM ${queues} AS q WHERE q.name = $1 AND NOT q.paused`,
  };
}

export class QueueStatements extends StatementFamily<ReturnType<typeof queueSql>> {
  async configure(db: Executor, name: string, change: QueueChange): Promise<QueueRow> {
    const rows = await this.run<QueueRow>(db, this.sql.queueConfigure, [
      name,
      change.paused ?? null,
      change.concurrency !== undefined,
      change.concurrency ?? null,
      change.rateLimit !== undefined,
      change.rateLimit?.limit ?? null,
      change.rateLimit?.periodMs ?? null,
      change.groupConcurrency !== undefined,
      change.groupConcurrency ?? null,
      change.groupRateLimit !== undefined,
      change.groupRateLimit?.limit ?? null,
      change.groupRateLimit?.periodMs ?? null,
      change.priorityAging !== undefined,
      change.priorityAging?.everyMs ?? null,
      change.priorityAging?.step ?? null,
      change.priorityAging?.floor ?? null,
    ]);
    return rows[0] as QueueRow;
  }

  async tidy(db: Executor, name: string): Promise<void> {
    await this.run(db, this.sql.queueTidy, [name]);
  }

  list(db: Executor): Promise<QueueRow[]> {
    return this.run<QueueRow>(db, this.sql.queueList, []);
  }

  restricted(db: Executor): Promise<QueueRow[]> {
    return this.run<QueueRow>(db, this.sql.queueRestricted, []);
  }

  /** Tries the queue's limited-claim lock for the rest of the transaction on `tx`; false if taken. */
  async tryLock(tx: Executor, queue: string): Promise<boolean> {
    const rows = await this.run<{ locked: boolean }>(tx, this.sql.queueLock, [
      `skiplock-queue:${this.schema}`,
      queue,
    ]);
    return rows[0]?.locked === true;
  }

  /**
   * The limited claim; `roomLeft`: the room the queue's limits leave after it (null when it
   * claimed nothing, and so returned no row to say it on).
   */
  async claimLimited(
    tx: Executor,
    workerId: string,
    queue: string,
    limit: number,
    tasks: string[] | null,
    leaseMs: number,
    afterGroup: string | null = null,
    withoutQueueLock = false,
  ): Promise<{ jobs: ClaimedJob[]; roomLeft: number | null; lockBusy: boolean }> {
    const all = await this.run<JobRow & { room_free: number | null; lock_busy: boolean }>(
      tx,
      this.sql.queueClaimLimited,
      [workerId, queue, limit, tasks, leaseMs, afterGroup, `skiplock-group:${this.schema}`, withoutQueueLock],
    );
    const rows = all.filter((row) => !row.lock_busy);
    const free = rows[0]?.room_free;
    return {
      lockBusy: rows.length < all.length,
      jobs: rows.map(toClaimedJob),
      roomLeft: rows.length === 0 || free === null || free === undefined ? null : Number(free) - rows.length,
    };
  }

  /** The room a queue's limits leave now, and ms until a full rate window has room (else null). */
  async room(db: Executor, queue: string): Promise<{ room: number; waitMs: number | null }> {
    const rows = await this.run<{ room: number | null; wait_ms: number | null }>(db, this.sql.queueRoom, [
      queue,
    ]);
    const row = rows[0];
    if (!row) return { room: 0, waitMs: null }; // paused or unconfigured meanwhile
    return {
      room: row.room === null ? 0 : Math.max(0, Number(row.room)),
      waitMs: row.wait_ms === null ? null : Math.max(0, Number(row.wait_ms)),
    };
  }
}
