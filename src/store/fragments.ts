/**
 * SQL fragments shared by the statement families of this folder: the columns of a job row, the
 * lease guard of every owner transition, and the pieces of the dedupe and counter statements.
 */

/** A timestamp as epoch milliseconds (float8): the driver reads a number, not a date string to parse. */
export const MS = (column: string) => `floor(extract(epoch FROM ${column}) * 1000)::float8 AS ${column}`;

/**
 * The columns of every job-returning statement, in the shape of `JobRow` (id as text,
 * timestamps as epoch ms, attempted_by as JSON: the driver's date and array parsers were ~5 % of
 * a worker's CPU while draining a backlog).
 */
export const JOB_COLUMNS =
  'id::text AS id, queue, task, status, priority, payload, result, coalesce(dedupe_key, pending_key) AS dedupe_key, ' +
  'attempts, max_attempts, ' +
  `${MS('run_after')}, ${MS('lease_until')}, worker_id, ${MS('run_started_at')}, timeout_ms, last_error, ` +
  `${MS('cancel_requested_at')}, ${MS('created_at')}, ${MS('updated_at')}, array_to_json(attempted_by) AS attempted_by, ` +
  'claims::text AS claims, group_key, progress, flow_id::text AS flow_id, flow_ref';

/** A timestamp as epoch microseconds (int8, exact; the driver reads it as a decimal string). */
const MICROS = (column: string) => `(date_part('epoch', ${column}) * 1000000)::int8`;

/**
 * What the plain claim returns per job, in the order of `ClaimedColumns` (src/core/job-row.ts),
 * read as arrays: the columns that vary from job to job, and the claim's own time once
 * (`run_started_at` = `updated_at` = now(), `lease_until` = now() + the lease), so a claim of
 * 1,000 jobs sends and parses 14 columns a row, not 26. Whatever is rare on a first attempt —
 * dedupe and group keys, flow, progress, result, last error, a history longer than this claim
 * — travels as one JSON array that is NULL when all of it is empty (§9 the trace context apart:
 * it is read only by a worker that traces).
 */
export const CLAIMED_COLUMNS =
  'id::text AS id, queue, task, priority, payload, attempts, max_attempts, timeout_ms, claims::text AS claims, ' +
  `${MICROS('run_after')} AS run_after_us, ${MICROS('created_at')} AS created_at_us, ${MICROS('now()')} AS now_us, ` +
  'trace_context::text AS trace_context, ' +
  'CASE WHEN dedupe_key IS NULL AND pending_key IS NULL AND group_key IS NULL AND flow_id IS NULL AND progress IS NULL ' +
  'AND result IS NULL AND last_error IS NULL AND cardinality(attempted_by) = 1 THEN NULL ' +
  'ELSE json_build_array(coalesce(dedupe_key, pending_key), group_key, flow_id, flow_ref, progress, result, last_error, attempted_by)::text END AS extra';

/**
 * §9 what a claim returns besides {@link JOB_COLUMNS}: the job's stored trace context, as text
 * (JSON.parse'd only by a worker that traces; NULL for jobs nobody traced).
 */
export const TRACE_CONTEXT = 'trace_context::text AS trace_context';

/** The output names of {@link JOB_COLUMNS}, for a statement that selects them from a CTE. */
export const JOB_COLUMN_NAMES =
  'id, queue, task, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after, ' +
  'lease_until, worker_id, run_started_at, timeout_ms, last_error, cancel_requested_at, created_at, ' +
  'updated_at, attempted_by, claims, group_key, progress, flow_id, flow_ref';

/**
 * §8 scope 'pending': the key's queued job, found under the key's lock (`pending_holder`,
 * migration 10) for a job that may go back to pending — as CTE `holder` (job_id, id) over the
 * rows of `source` (id, pending_key, and what `takeOver` reads, as `k`), taken in the lock order,
 * before the UPDATE locks a job's row. `wait` false: the lock is only tried, and id 0 says it was
 * taken. `takeOver`: what the queued job takes over from a superseded one (run no earlier than,
 * attempts at least, note), in SQL over `k`.
 */
export const HOLDER = (
  s: string,
  source: string,
  wait: boolean,
  takeOver = 'NULL::timestamptz, NULL::int, NULL::text',
) => `holder AS MATERIALIZED (
        SELECT k.id AS job_id, ${s}.pending_holder(k.pending_key, k.id, ${wait}, ${takeOver}) AS id
        FROM (SELECT src.* FROM ${source} AS src WHERE src.pending_key IS NOT NULL
              ORDER BY ${s}.pending_lock_id(src.pending_key) OFFSET 0) AS k
      )`;
/**
 * §8 what the queued job notes when it takes over from job `from` (ids and counts as SQL), whose
 * attempt `attempt` ended with `error`.
 */
export const TOOK_OVER = (from: string, attempt: string, error: string) =>
  `format('Took over from job %s (superseded after attempt %s): %s', ${from}, ${attempt}, ${error})`;
/** §8 what a job superseded by `holder` (an id) notes in last_error; `key` its pending_key. */
export const SUPERSEDED = (holder: string, key: string) =>
  `format('Superseded: job %s was already queued for dedupe key %s (scope ''pending''), so this job was cancelled instead of going back to the queue', ${holder}, ${key})`;

/**
 * §10 running → done unblocks the completed jobs' dependents in the completing statement's
 * transaction, as CTE `unblocked` over CTE `done` (the completed jobs: id, has_dependents): one
 * call of `unblock_dependents` (migration 15) for the batch's jobs that have any, made once the
 * statement holds them all. Its statements take snapshots of their own, newer than those locks,
 * so they see every edge to the jobs — also one whose enqueue committed while this statement
 * waited for a job's row lock, which this statement's own snapshot would miss (EvalPlanQual
 * re-checks only the locked row). A batch without dependents makes no call (§7). The statement
 * must read `unblocked` (a CTE that nothing reads is not run); `channel` is its NOTIFY channel
 * parameter.
 */
export const UNBLOCK = (s: string, done: string, channel: string) => `unblocked AS (
        SELECT ${s}.unblock_dependents(array_agg(f.id), ${channel}::text) AS woken
        FROM ${done} AS f WHERE f.has_dependents HAVING count(*) > 0
      )`;

/**
 * §10 a row a statement locked is the version its snapshot read (`alias`: its alias there):
 * false when a transaction that committed after the snapshot changed it — the lock then
 * re-checks the latest version (EvalPlanQual), against tables still read as of the snapshot.
 * The commit of a dependent marks its dependencies in a new version (migration 15), so a
 * statement that decides from `job_dependencies` whether a job is needed keeps one it sees
 * changed. Read only for jobs with dependents (the others are never marked unseen).
 */
export const UNCHANGED_SINCE_SNAPSHOT = (s: string, alias: string) =>
  `(NOT ${alias}.has_dependents OR ${alias}.xmin = (SELECT v.xmin FROM ${s}.jobs AS v WHERE v.id = ${alias}.id))`;

/** Active statuses, as SQL: the dedupe index covers exactly these (§1.7). */
export const ACTIVE = `status IN ('pending', 'running')`;
/** Conflict target of the partial unique dedupe index; must repeat its predicate to infer it. */
export const ON_DEDUPE_CONFLICT = `ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND ${ACTIVE} DO NOTHING`;
/** §1.4 start time from the database clock: an absolute runAt, else now() + delay. */
export const RUN_AFTER = (runAt: string, delayMs: string) =>
  `coalesce(${runAt}::timestamptz, now() + coalesce(${delayMs}::float8, 0) * interval '1 millisecond')`;
/**
 * `status = 'running'` for the batch statements, written so the planner cannot match it to the
 * partial running index: a prepared statement's generic plan otherwise scans that whole index
 * (every completed job leaves a dead entry there until vacuum) instead of fetching the batch's
 * rows by primary key — measured: a 500-row completion went from ~15 ms to ~90 ms after the
 * fifth execution, when the generic plan took over (scratch run, bench W2 drain loop).
 */
export const OPAQUE_RUNNING = `(j.status || '') = 'running'`;
/** Above every job id: the open end of a keyset cursor. */
export const MAX_BIGINT = '9223372036854775807';
/**
 * §1.2/§1.3 compare-and-set guard of every owner transition: status, and all four fields of the
 * lease — the claim token (`claims`, which no other claim of the job ever gets) closes ABA
 * through release() and requeue(), which give back or reset `attempts`.
 */
export const LEASE_GUARD = `id = $1 AND status = 'running' AND worker_id = $2 AND attempts = $3 AND claims = $4::bigint`;
/**
 * SPEC §2: the worker ids of a job's claims, oldest first, the last 25; $1 is the new one. A row
 * from before migration 3 starts its history with the worker_id it kept.
 */
const HISTORY = `(CASE WHEN cardinality(attempted_by) = 0 AND worker_id IS NOT NULL THEN ARRAY[worker_id] ELSE attempted_by END)`;
export const APPEND_ATTEMPTED_BY = `(${HISTORY} || $1::text)[greatest(1, cardinality(${HISTORY}) - 23):]`;

/** The counter of completions deleted by `retention: { completed: 'delete' }` (migration 4). */
export const COMPLETED_DELETED = 'completed_deleted';
/**
 * §7 when finished jobs were last pruned (epoch seconds, one row per shard): the live-row count
 * of the statistics collector learns of a DELETE up to a minute later, so `counts()` counts done
 * rows exactly for that long after a prune instead of trusting it (src/store/observe.ts).
 */
export const PRUNED_AT = 'pruned_at';
/** Seconds after a prune during which `counts()` does not trust the statistics' live rows. */
export const PRUNE_STATS_LAG_S = 60;

/**
 * §7 in a pruning statement whose deleted rows are CTE `deleted`: notes the time of the prune
 * when it deleted any (a data-modifying CTE runs whether or not it is read).
 */
export const notePrune = (s: string) => `
        INSERT INTO ${s}.counters AS c (name, shard, n)
        SELECT '${PRUNED_AT}', pg_backend_pid() % ${COUNTER_SHARDS}, floor(extract(epoch FROM now()))::bigint
        FROM (SELECT 1 FROM deleted LIMIT 1) AS any_deleted
        ON CONFLICT (name, shard) DO UPDATE SET n = excluded.n
        RETURNING 1`;

/** Shards of a counter: the completing session's backend pid modulo this. */
export const COUNTER_SHARDS = 16;

/**
 * §7 adds the rows of CTE `source` to the completed-and-deleted counter of `s.counters`, in the
 * deleting statement's own transaction (so the count is exact: a rolled-back completion counts
 * nothing).
 */
export const countDeleted = (s: string, source: string) => `
        INSERT INTO ${s}.counters AS c (name, shard, n)
        SELECT '${COMPLETED_DELETED}', pg_backend_pid() % ${COUNTER_SHARDS}, count(*) FROM ${source} HAVING count(*) > 0
        ON CONFLICT (name, shard) DO UPDATE SET n = c.n + excluded.n
        RETURNING 1`;

/**
 * §11 the pass that advances the keys of sequences whose jobs arrived (migrations 19, 22), run
 * as a statement of its own just before a claim (so the claim's snapshot sees the jobs it made
 * pending) — by every claim of `queue.claim`, and by a worker's claims while a sequence hint or
 * its fallback interval says a key may be noted (engine/sequence-gate.ts): one look at
 * `sequence_arrivals`, empty unless sequences are in use, and then at most 32 keys, each under
 * its advisory lock only until the statement (or the caller's transaction) ends. No row: no key
 * was noted.
 */
export const SEQUENCE_PASS = (s: string) =>
  `SELECT ${s}.sequence_pass(32) AS moved WHERE EXISTS (SELECT 1 FROM ${s}.sequence_arrivals)`;
