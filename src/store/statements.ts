/**
 * Every SQL statement on the jobs table. The quoted schema is spliced here, once per Queue;
 * everything else is a parameter. Each statement names the SPEC §1 invariant it keeps.
 */

import { quoteLiteral } from '../db/identifier.js';

/** A timestamp as epoch milliseconds (float8): the driver reads a number, not a date string to parse. */
const MS = (column: string) => `floor(extract(epoch FROM ${column}) * 1000)::float8 AS ${column}`;

/**
 * The columns of every job-returning statement, in the shape of `JobRow` (id as text,
 * timestamps as epoch ms, attempted_by as JSON: the driver's date and array parsers were ~5 % of
 * a worker's CPU while draining a backlog).
 */
export const JOB_COLUMNS =
  'id::text AS id, queue, task, status, priority, payload, result, dedupe_key, attempts, max_attempts, ' +
  `${MS('run_after')}, ${MS('lease_until')}, worker_id, ${MS('run_started_at')}, timeout_ms, last_error, ` +
  `${MS('cancel_requested_at')}, ${MS('created_at')}, ${MS('updated_at')}, array_to_json(attempted_by) AS attempted_by, ` +
  'claims::text AS claims';

/** The output names of {@link JOB_COLUMNS}, for a statement that selects them from a CTE. */
const JOB_COLUMN_NAMES =
  'id, queue, task, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after, ' +
  'lease_until, worker_id, run_started_at, timeout_ms, last_error, cancel_requested_at, created_at, ' +
  'updated_at, attempted_by, claims';

/** Active statuses, as SQL: the dedupe index covers exactly these (§1.7). */
const ACTIVE = `status IN ('pending', 'running')`;
/** Conflict target of the partial unique dedupe index; must repeat its predicate to infer it. */
const ON_DEDUPE_CONFLICT = `ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND ${ACTIVE} DO NOTHING`;
/** §1.4 start time from the database clock: an absolute runAt, else now() + delay. */
const RUN_AFTER = (runAt: string, delayMs: string) =>
  `coalesce(${runAt}::timestamptz, now() + coalesce(${delayMs}::float8, 0) * interval '1 millisecond')`;
/**
 * `status = 'running'` for the batch statements, written so the planner cannot match it to the
 * partial running index: a prepared statement's generic plan otherwise scans that whole index
 * (every completed job leaves a dead entry there until vacuum) instead of fetching the batch's
 * rows by primary key — measured: a 500-row completion went from ~15 ms to ~90 ms after the
 * fifth execution, when the generic plan took over (scratch run, bench W2 drain loop).
 */
const OPAQUE_RUNNING = `(j.status || '') = 'running'`;
/** Above every job id: the open end of a keyset cursor. */
const MAX_BIGINT = '9223372036854775807';
/**
 * §1.2/§1.3 compare-and-set guard of every owner transition: status, and all four fields of the
 * lease — the claim token (`claims`, which no other claim of the job ever gets) closes ABA
 * through release() and requeue(), which give back or reset `attempts`.
 */
const LEASE_GUARD = `id = $1 AND status = 'running' AND worker_id = $2 AND attempts = $3 AND claims = $4::bigint`;
/**
 * SPEC §2: the worker ids of a job's claims, oldest first, the last 25; $1 is the new one. A row
 * from before migration 3 starts its history with the worker_id it kept.
 */
const HISTORY = `(CASE WHEN cardinality(attempted_by) = 0 AND worker_id IS NOT NULL THEN ARRAY[worker_id] ELSE attempted_by END)`;
const APPEND_ATTEMPTED_BY = `(${HISTORY} || $1::text)[greatest(1, cardinality(${HISTORY}) - 23):]`;

/** The counter of completions deleted by `retention: { completed: 'delete' }` (migration 4). */
export const COMPLETED_DELETED = 'completed_deleted';
/** Shards of a counter: the completing session's backend pid modulo this. */
const COUNTER_SHARDS = 16;

/** The statements of one schema. */
export type Statements = ReturnType<typeof buildStatements>;

/** Builds the statements of the schema whose quoted identifier is `s`. */
export function buildStatements(s: string) {
  const jobs = `${s}.jobs`;
  const counters = `${s}.counters`;
  /**
   * §7 adds the rows of CTE `source` to the completed-and-deleted counter, in the deleting
   * statement's own transaction (so the count is exact: a rolled-back completion counts nothing).
   */
  const countDeleted = (source: string) => `
        INSERT INTO ${counters} AS c (name, shard, n)
        SELECT '${COMPLETED_DELETED}', pg_backend_pid() % ${COUNTER_SHARDS}, count(*) FROM ${source} HAVING count(*) > 0
        ON CONFLICT (name, shard) DO UPDATE SET n = c.n + excluded.n
        RETURNING 1`;
  return {
    /**
     * §1.7 dedupe through the partial unique index (ON CONFLICT, never check-then-insert);
     * §1.9 one pg_notify in the inserting transaction, and none for a dedupe hit.
     * $1 queue, $2 task, $3 payload, $4 priority, $5 dedupe_key, $6 max_attempts, $7 run_at,
     * $8 delay_ms, $9 timeout_ms, $10 channel.
     */
    insertOne: `
      WITH ins AS (
        INSERT INTO ${jobs} (queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms)
        VALUES ($1, $2, $3::jsonb, $4, $5, $6, ${RUN_AFTER('$7', '$8')}, $9)
        ${ON_DEDUPE_CONFLICT}
        RETURNING id
      )
      SELECT id::text AS id, pg_notify($10, 'jobs') FROM ins`,

    /**
     * §1.7 as above for a whole batch in one INSERT (unnest of parallel arrays); ids are drawn
     * first so each input row learns whether it was inserted. §1.9 one NOTIFY for the batch,
     * in its transaction — or none when $10 is null (the caller then hints after the commit).
     */
    insertMany: `
      WITH input AS MATERIALIZED (
        SELECT nextval(${quoteLiteral(`${s}.jobs_id_seq`)}::regclass) AS id, t.*
        FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[],
                    $7::timestamptz[], $8::float8[], $9::int[])
             WITH ORDINALITY AS t(queue, task, payload, priority, dedupe_key, max_attempts,
                                  run_at, delay_ms, timeout_ms, ord)
      ), ins AS (
        INSERT INTO ${jobs} (id, queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms)
        SELECT id, queue, task, payload::jsonb, priority, dedupe_key, max_attempts,
               ${RUN_AFTER('run_at', 'delay_ms')}, timeout_ms
        -- §3 rows go in dedupe-key order: two batches that share keys wait for each other in
        -- one order and never deadlock (a key repeated in the batch: its first entry wins)
        FROM input ORDER BY dedupe_key, ord
        ${ON_DEDUPE_CONFLICT}
        RETURNING id
      ), notified AS (
        SELECT pg_notify($10, 'jobs') FROM (SELECT 1 FROM ins LIMIT 1) AS any_inserted WHERE $10::text IS NOT NULL
      )
      SELECT input.id::text AS id, (ins.id IS NOT NULL) AS created,
             (SELECT count(*) FROM notified) AS notified
      FROM input LEFT JOIN ins ON ins.id = input.id
      ORDER BY input.ord`,

    /** §1.7 the active holders of some dedupe keys (after an insert met a conflict). */
    activeIdsByKey: `
      SELECT id::text AS id, dedupe_key FROM ${jobs}
      WHERE dedupe_key = ANY($1::text[]) AND ${ACTIVE}`,

    /**
     * §1.1 one statement: pick with FOR UPDATE SKIP LOCKED (`pick_pending`, migration 5: always
     * the ordered walk of the claim index, whatever the statistics) and claim in the same
     * UPDATE; §1.2 the outer WHERE re-checks the status; §1.3 a new claim token (`claims` + 1,
     * never reused); §1.4 lease and run_after in database time.
     * Rows come back in claim order (microsecond run_after, numeric id).
     * $1 worker_id, $2 limit, $3 tasks (or null), $4 queues (or null), $5 lease ms.
     */
    claim: `
      WITH picked AS MATERIALIZED (
        SELECT p.id FROM ${s}.pick_pending($2::int, $3::text[], $4::text[]) AS p(id)
      )
      , claimed AS (
        UPDATE ${jobs} SET
          status = 'running', worker_id = $1, attempts = attempts + 1, claims = claims + 1,
          attempted_by = ${APPEND_ATTEMPTED_BY},
          lease_until = now() + $5::float8 * interval '1 millisecond',
          run_started_at = now(), updated_at = now(), cancel_requested_at = NULL
        -- by primary key whatever the statistics (a status test the planner can match to a
        -- partial index made it scan every pending row on a never-analyzed table)
        WHERE id = ANY (ARRAY(SELECT id FROM picked)) AND (status || '') = 'pending'
        RETURNING ${JOB_COLUMNS}, run_after AS claim_order_at, id AS claim_order_id
      )
      SELECT ${JOB_COLUMN_NAMES} FROM claimed ORDER BY priority, claim_order_at, claim_order_id`,

    /** §1.2/§1.3 running → done, only under the lease (all four fields). $5 result. */
    complete: `
      UPDATE ${jobs} SET status = 'done', result = $5::jsonb, lease_until = NULL, worker_id = NULL,
                         updated_at = now()
      WHERE ${LEASE_GUARD}
      RETURNING id`,

    /**
     * §1.2/§1.3 running → deleted (`retention: { completed: 'delete' }`), only under the lease;
     * §7 counted in the same transaction. A deleted job keeps no result.
     */
    completeDelete: `
      WITH done AS (
        DELETE FROM ${jobs} WHERE ${LEASE_GUARD}
        RETURNING id
      ), counted AS (${countDeleted('done')}
      )
      SELECT id::text AS id, (SELECT count(*) FROM counted) AS counted FROM done`,

    /**
     * §1.2/§1.3 as completeMany, deleting instead of keeping a done row; §7 counted in the same
     * statement. $1 ids, $2 worker ids, $3 attempts, $4 tokens.
     */
    completeManyDelete: `
      WITH done AS (
        DELETE FROM ${jobs} AS j
        USING unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[]) AS c(id, worker_id, attempt, token)
        WHERE j.id = c.id AND ${OPAQUE_RUNNING} AND j.worker_id = c.worker_id AND j.attempts = c.attempt
          AND j.claims = c.token
        RETURNING j.id, c.token
      ), counted AS (${countDeleted('done')}
      )
      SELECT id::text AS id, token::text AS token, (SELECT count(*) FROM counted) AS counted FROM done`,

    /**
     * §1.2/§1.3 many completions in one statement, each row guarded by its own lease: a lease
     * that no longer owns its job completes nothing. Returns the (id, token) of each lease that
     * completed, so a stale and a live lease of one job get their own answers. Rows are found by
     * primary key (see OPAQUE_RUNNING).
     * $1 ids, $2 worker ids, $3 attempts, $4 tokens, $5 results (JSON text).
     */
    completeMany: `
      UPDATE ${jobs} AS j SET status = 'done', result = c.result::jsonb, lease_until = NULL, worker_id = NULL,
                              updated_at = now()
      FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::text[])
           AS c(id, worker_id, attempt, token, result)
      WHERE j.id = c.id AND ${OPAQUE_RUNNING} AND j.worker_id = c.worker_id AND j.attempts = c.attempt
        AND j.claims = c.token
      RETURNING j.id::text AS id, c.token::text AS token`,

    /**
     * §1.2/§1.3 running → pending (retry at now() + $5 ms, §1.4) or dead when attempts are
     * spent (§1.8, keeping last_error); cancelled instead when cancellation was requested
     * meanwhile, so a failing handler cannot make a cancelled job run again. §2 worker_id only
     * while running. $5 error text, $6 retry delay ms.
     */
    fail: `
      UPDATE ${jobs} SET
        status = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                      WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
        run_after = CASE WHEN attempts >= max_attempts OR cancel_requested_at IS NOT NULL THEN run_after
                         ELSE now() + $6::float8 * interval '1 millisecond' END,
        last_error = $5, lease_until = NULL, worker_id = NULL, updated_at = now()
      WHERE ${LEASE_GUARD}
      RETURNING status`,

    /**
     * §1.3 heartbeat for the lease's owner only; §1.4 database time. Touches only lease_until
     * (no indexed column), so it can be a HOT update.
     */
    renewLease: `
      UPDATE ${jobs} SET lease_until = now() + $5::float8 * interval '1 millisecond'
      WHERE ${LEASE_GUARD}
      RETURNING id`,

    /**
     * §1.3 the heartbeat of a whole worker in one statement: renews each lease it still holds,
     * in database time (§1.4), and reports per lease `renewed`, or `owned` without `renewed`
     * (busy: the row is locked by another transaction — e.g. the job's own ctx.transaction — and
     * was skipped, never waited for, so one locked row cannot stall every lease of the worker),
     * or neither (lost). Also reports whether cancellation was requested, so a lost NOTIFY
     * cannot hide a cancel. Rows are locked in id order (no deadlock with other batches).
     * $1 worker_id, $2 ids, $3 attempts, $4 tokens, $5 lease ms.
     */
    renewLeases: `
      WITH held AS MATERIALIZED (
        SELECT l.id, l.attempt, l.token FROM unnest($2::bigint[], $3::int[], $4::bigint[]) AS l(id, attempt, token)
      ), locked AS MATERIALIZED (
        SELECT j.id FROM ${jobs} AS j JOIN held AS h ON j.id = h.id
        WHERE ${OPAQUE_RUNNING} AND j.worker_id = $1 AND j.attempts = h.attempt AND j.claims = h.token
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
      ), renewed AS (
        UPDATE ${jobs} AS j SET lease_until = now() + $5::float8 * interval '1 millisecond'
        FROM locked WHERE j.id = locked.id
        RETURNING j.id, j.claims, (j.cancel_requested_at IS NOT NULL) AS cancel_requested
      )
      SELECT h.id::text AS id, h.token::text AS token, (r.id IS NOT NULL) AS renewed,
             coalesce(r.cancel_requested, false) AS cancel_requested,
             (r.id IS NOT NULL OR EXISTS (
                SELECT 1 FROM ${jobs} AS j
                WHERE j.id = h.id AND ${OPAQUE_RUNNING} AND j.worker_id = $1 AND j.claims = h.token
             )) AS owned
      FROM held AS h LEFT JOIN renewed AS r ON r.id = h.id AND r.claims = h.token -- per claim, not per job`,

    /**
     * §1.2/§1.3 locks the job's row under its lease, inside the caller's transaction (the
     * worker's ctx.transaction, before the handler's function runs): no row means the lease is
     * gone. While the lock is held nobody can reap or complete the job.
     */
    lockLease: `SELECT id FROM ${jobs} WHERE ${LEASE_GUARD} FOR NO KEY UPDATE`,

    /**
     * §1.2/§1.3 running → cancelled for the owner of a job whose cancellation was requested,
     * once its handler has been aborted. $5 note stored as last_error.
     */
    cancelRunning: `
      UPDATE ${jobs} SET status = 'cancelled', lease_until = NULL, worker_id = NULL, last_error = $5,
                         updated_at = now()
      WHERE ${LEASE_GUARD} AND cancel_requested_at IS NOT NULL
      RETURNING id`,

    /**
     * §1.4/§1.9 milliseconds (database time) until the earliest pending job of these tasks and
     * queues becomes due, for the worker's wake-up timer; null when none is waiting.
     */
    nextDueInMs: `
      SELECT extract(epoch FROM min(run_after) - now()) * 1000 AS ms FROM ${jobs}
      WHERE status = 'pending' AND run_after > now()
        AND ($1::text[] IS NULL OR task = ANY($1::text[]))
        AND ($2::text[] IS NULL OR queue = ANY($2::text[]))`,

    /**
     * §1.3 running → pending without spending the attempt (shutdown); the claim token is not
     * given back, so this lease stays dead forever. A job whose cancellation was requested ends
     * cancelled instead of running again. $5 channel.
     */
    release: `
      WITH released AS (
        UPDATE ${jobs} SET
          status = CASE WHEN cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
          attempts = attempts - 1, lease_until = NULL, worker_id = NULL, run_started_at = NULL,
          updated_at = now()
        WHERE ${LEASE_GUARD}
        RETURNING id, status
      )
      -- §1.9 a job put back wakes an idle worker (a rolling deploy hands work over at once)
      SELECT id, CASE WHEN status = 'pending' THEN pg_notify($5, 'jobs') END AS notified FROM released`,

    /**
     * §1.3 release for many leases in one statement (a stopping worker's held jobs): each row
     * guarded by its own lease, rows found by primary key (see OPAQUE_RUNNING); §1.9 one NOTIFY
     * when any job went back to pending. Returns the (id, token) of each lease released.
     * $1 ids, $2 worker ids, $3 attempts, $4 tokens, $5 channel.
     */
    releaseMany: `
      WITH released AS (
        UPDATE ${jobs} AS j SET
          status = CASE WHEN j.cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
          attempts = j.attempts - 1, lease_until = NULL, worker_id = NULL, run_started_at = NULL,
          updated_at = now()
        FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[]) AS r(id, worker_id, attempt, token)
        WHERE j.id = r.id AND ${OPAQUE_RUNNING} AND j.worker_id = r.worker_id AND j.attempts = r.attempt
          AND j.claims = r.token
        RETURNING j.id, r.token, j.status
      ), notified AS (
        SELECT pg_notify($5, 'jobs') FROM (SELECT 1 FROM released WHERE status = 'pending' LIMIT 1) AS any_pending
      )
      SELECT id::text AS id, token::text AS token, (SELECT count(*) FROM notified) AS notified FROM released`,

    /**
     * §1.5 recovery by lease ownership: only leases expired in database time (§1.4) are
     * reclaimed; SKIP LOCKED so concurrent reapers never block each other or an owner that is
     * finishing; the outer WHERE re-checks (§1.2). A crash spends the attempt (poison jobs die).
     * $1 channel.
     */
    reap: `
      WITH expired AS MATERIALIZED (
        SELECT id FROM ${jobs}
        WHERE status = 'running' AND lease_until < now()
        FOR UPDATE SKIP LOCKED
      ), reaped AS (
        UPDATE ${jobs} SET
          status = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                        WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
          run_after = now(),
          last_error = format('LeaseExpired: the lease of worker %s on attempt %s of %s expired at %s; the job was reclaimed',
                              worker_id, attempts, max_attempts, lease_until),
          lease_until = NULL, worker_id = NULL, updated_at = now()
        WHERE id IN (SELECT id FROM expired) AND status = 'running' AND lease_until < now()
        RETURNING id, status
      ), notified AS (
        -- §1.9 jobs back to pending wake idle workers (not only the reaping one)
        SELECT pg_notify($1, 'jobs') FROM (SELECT 1 FROM reaped WHERE status = 'pending' LIMIT 1) AS any_pending
      )
      SELECT id::text AS id, (SELECT count(*) FROM notified) AS notified FROM reaped`,

    /**
     * §1.2 dead → pending with attempts reset (§1.8); §1.9 wakes workers. One statement that
     * locks the row first and decides on the locked (latest committed) status, so "unknown",
     * "not dead: it is <status>" and "requeued" are one answer from the primary, never a read
     * followed by a write. No row: unknown id; `after` null: the transition did not apply.
     * $1 id, $2 channel.
     */
    requeue: `
      WITH target AS MATERIALIZED (
        SELECT id, status FROM ${jobs} WHERE id = $1 FOR UPDATE
      ), requeued AS (
        UPDATE ${jobs} AS j SET
          status = 'pending', attempts = 0, run_after = now(), lease_until = NULL, worker_id = NULL,
          run_started_at = NULL, cancel_requested_at = NULL, updated_at = now()
        FROM target AS t
        WHERE j.id = t.id AND t.status = 'dead'
        RETURNING j.id, j.status
      )
      SELECT t.status AS before, r.status AS after,
             CASE WHEN r.id IS NOT NULL THEN pg_notify($2, 'jobs') END AS notified
      FROM target AS t LEFT JOIN requeued AS r ON r.id = t.id`,

    /**
     * §1.2 one keyset batch of dead → pending (attempts reset, §1.8), optionally of one task;
     * SKIP LOCKED so it never waits on a row another transition holds; §1.9 one NOTIFY.
     * $1 task (or null), $2 after id, $3 batch size, $4 channel.
     */
    requeueDeadBatch: `
      WITH picked AS MATERIALIZED (
        SELECT id FROM ${jobs}
        WHERE status = 'dead' AND ($1::text IS NULL OR task = $1) AND id > $2::bigint
        ORDER BY id LIMIT $3
        FOR UPDATE SKIP LOCKED
      ), requeued AS (
        UPDATE ${jobs} SET
          status = 'pending', attempts = 0, run_after = now(), lease_until = NULL, worker_id = NULL,
          run_started_at = NULL, cancel_requested_at = NULL, updated_at = now()
        WHERE id IN (SELECT id FROM picked) AND status = 'dead'
        RETURNING id
      ), notified AS (
        SELECT pg_notify($4, 'jobs') FROM (SELECT 1 FROM requeued LIMIT 1) AS any_requeued
      )
      SELECT (SELECT count(*) FROM requeued)::int AS requeued,
             (SELECT max(id) FROM picked)::text AS last_id,
             (SELECT array_agg(id::text) FROM picked) AS ids,
             (SELECT count(*) FROM notified) AS notified`,

    /** The ids of one keyset batch of dead jobs (the one-by-one fallback of requeueDeadBatch). */
    deadIds: `
      SELECT j.id::text AS id FROM ${jobs} AS j
      WHERE j.status = 'dead' AND ($1::text IS NULL OR j.task = $1) AND j.id > $2::bigint
      ORDER BY j.id LIMIT $3 -- the bigint id, not the text alias`,

    /**
     * §1.2 pending → cancelled at once; running → cancellation requested (flag, plus a NOTIFY
     * that the owning worker acts on). Finished jobs are left alone. The row is locked first and
     * the transition decided on the locked (latest committed) status, so the status before and
     * after come from one statement on the primary: no row is an unknown id, `after` null a job
     * already finished (`before` says how), `before` running a cancellation requested.
     * $1 id, $2 channel.
     */
    cancel: `
      WITH target AS MATERIALIZED (
        SELECT id, status FROM ${jobs} WHERE id = $1 FOR UPDATE
      ), cancelled AS (
        UPDATE ${jobs} AS j SET
          status = CASE WHEN t.status = 'pending' THEN 'cancelled' ELSE j.status END,
          cancel_requested_at = CASE WHEN t.status = 'running' THEN coalesce(j.cancel_requested_at, now())
                                     ELSE j.cancel_requested_at END,
          updated_at = now()
        FROM target AS t
        WHERE j.id = t.id AND t.status IN ('pending', 'running')
        RETURNING j.id, j.status
      )
      SELECT t.status AS before, c.status AS after,
             CASE WHEN c.status = 'running' THEN pg_notify($2, 'cancel:' || c.id) END AS notified
      FROM target AS t LEFT JOIN cancelled AS c ON c.id = t.id`,

    /**
     * Deletes one keyset batch of finished jobs (never an active one) older than $2 ms, after
     * id $3: many short transactions instead of one long one.
     */
    pruneBatch: `
      WITH victims AS (
        SELECT id FROM ${jobs}
        WHERE id > $3::bigint AND status = ANY($1::text[])
          AND updated_at < now() - $2::float8 * interval '1 millisecond'
        ORDER BY id
        LIMIT $4
      ), deleted AS (
        DELETE FROM ${jobs} WHERE id IN (SELECT id FROM victims) AND status = ANY($1::text[])
          AND updated_at < now() - $2::float8 * interval '1 millisecond' -- re-checked on a row changed meanwhile
        RETURNING id
      )
      SELECT count(*)::int AS deleted, (SELECT max(id) FROM victims)::text AS last_id FROM deleted`,

    /**
     * §7 the background pruner (`retention.keepFinishedMs`): deletes up to $2 finished jobs last
     * updated more than $1 ms ago, oldest first, through jobs_finished_idx — cheap when nothing
     * is old enough, never a scan of the table. SKIP LOCKED: it never waits on a row someone
     * else holds (a requeue, an admin action), nor makes them wait; a row that changed before
     * its lock was taken is re-checked by the lock itself (only a still-finished, still-old row
     * is deleted).
     */
    pruneFinished: `
      WITH victims AS MATERIALIZED (
        SELECT id FROM ${jobs}
        WHERE status IN ('done', 'dead', 'cancelled')
          AND updated_at < now() - $1::float8 * interval '1 millisecond'
        ORDER BY updated_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      ), deleted AS (
        DELETE FROM ${jobs} WHERE id IN (SELECT id FROM victims) RETURNING id
      )
      SELECT count(*)::int AS deleted FROM deleted`,

    /** §1.9 a hint on the schema's channel (the worker's LISTEN self-check). $1 channel, $2 payload. */
    notify: `SELECT pg_notify($1, $2)`,

    /** One job by id. */
    get: `SELECT ${JOB_COLUMNS} FROM ${jobs} WHERE id = $1`,

    /** §1.7 the active job holding a dedupe key (through the unique partial index). */
    findActive: `SELECT ${JOB_COLUMNS} FROM ${jobs} WHERE dedupe_key = $1 AND ${ACTIVE}`,

    /** Newest first, keyset-paged on id; every filter optional. */
    list: `
      SELECT ${JOB_COLUMNS} FROM ${jobs} AS j
      WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR task = $2)
        AND ($3::text IS NULL OR queue = $3) AND ($4::bigint IS NULL OR j.id < $4::bigint)
      ORDER BY j.id DESC -- the table's bigint id, not the text alias of the select list
      LIMIT $5`,

    /**
     * §5/§7 a bounded page, newest first: no filter can make it read the whole table.
     * - A status with a partial index (pending, running, dead, cancelled) is read through it, at
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
        (SELECT id, task, queue FROM ${jobs} WHERE status = 'pending' AND $1::text = 'pending' LIMIT $6::int + 1)
        UNION ALL
        (SELECT id, task, queue FROM ${jobs} WHERE status = 'running' AND $1::text = 'running' LIMIT $6::int + 1)
        UNION ALL
        (SELECT id, task, queue FROM ${jobs} WHERE status = 'dead' AND $1::text = 'dead' LIMIT $6::int + 1)
        UNION ALL
        (SELECT id, task, queue FROM ${jobs} WHERE status = 'cancelled' AND $1::text = 'cancelled' LIMIT $6::int + 1)
      ), whole AS MATERIALIZED (
        SELECT count(*) <= $6::int AND coalesce($1::text IN ('pending', 'running', 'dead', 'cancelled'), false) AS yes
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
     * §7 counts without a full-table count: pending and running exactly through their partial
     * indexes; each finished status exactly up to $1 rows (through jobs_finished_idx and the
     * dead/cancelled indexes: bounded reads), and beyond that an estimate — the index's own row
     * estimate for dead and cancelled, the table's live-row estimate minus the rest for done.
     * `done_deleted`: completions deleted at once (`retention: { completed: 'delete' }`), from
     * their maintained counter (at most 16 rows). $1 exact limit, $2 schema name.
     */
    counts: `
      WITH rel AS (
        SELECT c.oid, c.relname, c.relpages, greatest(c.reltuples, 0)::float8 AS reltuples
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $2 AND c.relname IN ('jobs', 'jobs_dead_idx', 'jobs_cancelled_idx')
      ), est AS MATERIALIZED (
        SELECT
          -- the planner's own estimate: rows per page at the last VACUUM/ANALYZE times the
          -- table's pages now; before any, the statistics collector's live-row count
          (SELECT CASE WHEN relpages > 0
                       THEN reltuples / relpages * (pg_relation_size(oid) / current_setting('block_size')::float8)
                       ELSE coalesce(pg_stat_get_live_tuples(oid), 0)::float8 END
             FROM rel WHERE relname = 'jobs') AS table_rows,
          (SELECT reltuples FROM rel WHERE relname = 'jobs_dead_idx') AS dead_rows,
          (SELECT reltuples FROM rel WHERE relname = 'jobs_cancelled_idx') AS cancelled_rows
      ), exact AS MATERIALIZED (
        SELECT
          (SELECT count(*) FROM ${jobs} WHERE status = 'pending') AS pending,
          (SELECT count(*) FROM ${jobs} WHERE status = 'running') AS running,
          (SELECT count(*) FROM (SELECT 1 FROM ${jobs} WHERE status = 'done' LIMIT $1) d) AS done,
          (SELECT count(*) FROM (SELECT 1 FROM ${jobs} WHERE status = 'dead' LIMIT $1) d) AS dead,
          (SELECT count(*) FROM (SELECT 1 FROM ${jobs} WHERE status = 'cancelled' LIMIT $1) c) AS cancelled
      )
      SELECT exact.pending::float8 AS pending, exact.running::float8 AS running,
             CASE WHEN exact.dead < $1 THEN exact.dead::float8
                  ELSE greatest(exact.dead::float8, est.dead_rows) END AS dead,
             CASE WHEN exact.cancelled < $1 THEN exact.cancelled::float8
                  ELSE greatest(exact.cancelled::float8, est.cancelled_rows) END AS cancelled,
             CASE WHEN exact.done < $1 THEN exact.done::float8
                  ELSE greatest(exact.done::float8,
                                est.table_rows - exact.pending - exact.running - exact.dead - exact.cancelled)
             END AS done,
             (exact.done >= $1) AS done_estimated, (exact.dead >= $1) AS dead_estimated,
             (exact.cancelled >= $1) AS cancelled_estimated,
             (SELECT coalesce(sum(n), 0) FROM ${counters} WHERE name = '${COMPLETED_DELETED}')::float8 AS done_deleted
      FROM exact, est`,

    /**
     * Live jobs by queue and status, §7: one branch per status so each reads only its partial
     * index's rows (a single `status IN (…)` cannot use the partial indexes and scans the table).
     */
    liveByQueue: `
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
     * §7 replica lag, step 2, on the read replica: 0 once it has replayed up to the primary's
     * position $1 (every change committed before ops() began is visible there), else the age
     * of the last transaction it replayed — how old its view may be; null when it cannot tell
     * (behind, and no transaction replayed since it started). A server that is not in recovery
     * is a primary: nothing to replay, lag 0 (the caller warns). Reads no table.
     */
    replicaLag: `
      SELECT pg_is_in_recovery() AS in_recovery,
             CASE WHEN NOT pg_is_in_recovery() THEN 0
                  WHEN pg_last_wal_replay_lsn() >= $1::pg_lsn THEN 0
                  ELSE greatest(0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)
             END::float8 AS lag_ms`,
  };
}
