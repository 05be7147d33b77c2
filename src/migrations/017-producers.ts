import { notifyChannel, quoteLiteral } from '../db/identifier.js';
import type { Migration } from './migration.js';

/**
 * SPEC §13 producers in any language: `<schema>.enqueue(task, payload, options)` and
 * `<schema>.enqueue_many(jobs)`, the same rules as `queue.enqueue` / `enqueueMany` written in
 * PL/pgSQL — validation naming the field (SQLSTATE 22023, the field also in the error's column
 * name), the defaults, every dedupe mode, delay and runAt, dependsOn, group, the wake-up hint —
 * for SQL, triggers, and the Python client (clients/python).
 *
 * Why a copy and not the store's statements: a migration is frozen once released, and the
 * store's SQL (src/store/enqueue.ts) keeps changing for speed; generating this function from it
 * would give fresh installs and upgraded ones different functions. So this is its own text, and
 * test/producers/conformance.test.ts runs one table of cases through the library, this function,
 * the Python client and `POST /api/jobs`, comparing every stored column, the answers and the
 * errors' fields: that suite is what keeps them from drifting. The numbers below are frozen
 * copies of src/core/job-spec.ts and validate.ts for the same reason.
 *
 * Security: `enqueue` and `enqueue_many` are SECURITY DEFINER with a fixed search_path, so a role
 * with only USAGE on the schema and EXECUTE on them can enqueue (and nothing else); every name
 * here is schema-qualified, the schema spliced at migration time only, and no input ever becomes
 * SQL text. EXECUTE is revoked from PUBLIC on every function of this migration (docs/producers.md
 * lists the grants). The deferred trigger of migration 15 fires at the producer's COMMIT, outside
 * the definer's context — as the producer's role — so it becomes SECURITY DEFINER too (a trigger
 * function cannot be called directly).
 */

// Frozen copies (see the header): core/job-spec.ts and core/validate.ts as of this migration.
const DEFAULT_QUEUE = 'default';
const DEFAULT_PRIORITY = 100;
const DEFAULT_MAX_ATTEMPTS = 3;
const MAX_MAX_ATTEMPTS = 1_000_000;
const MAX_NAME_LENGTH = 1000;
const MAX_MS = 100 * 365 * 86_400_000;
const MAX_DEPENDENCIES = 10_000;
const MAX_GROUP_BYTES = 200;
const MAX_QUEUE_AND_GROUP_BYTES = 2_400;
const INT4_MIN = -2_147_483_648;
const INT4_MAX = 2_147_483_647;
/** A dedupe hit whose holder finishes between the insert and the lookup tries again (src/engine/enqueuer.ts). */
const MAX_DEDUPE_ROUNDS = 10;

/** The option names of `options` (§3, §8, §10, §11), in the order error messages list them. */
const OPTION_KEYS = [
  'queue',
  'priority',
  'dedupeKey',
  'maxAttempts',
  'runAt',
  'delayMs',
  'timeoutMs',
  'dedupe',
  'group',
  'dependsOn',
  'onDependencyFailure',
  'sequence',
];
const DEDUPE_KEYS = ['scope', 'windowMs', 'replace', 'maxWaitMs'];

/**
 * The ISO 8601 form `runAt` takes (src/admin/enqueue-body.ts checks the same for HTTP): date,
 * time to the minute at least, and the offset — Z or ±hh[:mm]; hours 00–23, no leap second.
 */
const ISO_TIMESTAMP =
  '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\\.[0-9]{1,9})?)?([Zz]|[+-](0[0-9]|1[0-5])(:?[0-5][0-9])?)$';

const textArray = (items: readonly string[]) => `ARRAY[${items.map((k) => `'${k}'`).join(', ')}]::text[]`;

/** The schema's name from its quoted identifier, as migrate() quotes it (`"a""b"` → `a"b`). */
function unquote(quoted: string): string {
  if (!/^"(?:[^"]|"")+"$/.test(quoted)) throw new Error(`migration 17: not a quoted identifier: ${quoted}`);
  return quoted.slice(1, -1).replaceAll('""', '"');
}

/** §1.4 the start time from the database clock (src/store/fragments.ts's RUN_AFTER, frozen). */
const runAfter = (job: string) =>
  `coalesce(${job}.run_at, now() + coalesce(${job}.delay_ms, 0) * interval '1 millisecond')`;

/** The checks: one function per kind of value, then the job (core/validate.ts, core/job-spec.ts). */
const validation = (s: string) => `
-- §13 a producer's job, checked and with its defaults applied (core/job-spec.ts's NewJob).
-- dedupe_scope null: the plain mode (one active job per key, or no key).
CREATE TYPE ${s}.producer_job AS (
  task text, payload jsonb, queue text, priority integer, dedupe_key text, max_attempts integer,
  run_at timestamptz, delay_ms float8, timeout_ms integer, group_key text,
  dedupe_scope text, window_ms float8, replace boolean, max_wait_ms float8,
  depends_on bigint[], run_on_dependency_failure boolean
);

-- §1.11 bad input: SQLSTATE 22023 naming the field (in the message and as the error's column),
-- raised before anything is written
CREATE FUNCTION ${s}.producer_invalid(p_field text, p_message text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = p_field || ': ' || p_message, COLUMN = p_field,
    HINT = 'Nothing was enqueued. Like any error, this one aborts the transaction it happened in: roll it back (or enqueue inside a savepoint).';
END
$fn$;

-- a JSON value for an error message, as the library's describe() writes it
CREATE FUNCTION ${s}.producer_describe(p_value jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT CASE jsonb_typeof(p_value)
    WHEN 'string' THEN to_jsonb(CASE WHEN char_length(p_value #>> '{}') > 60
                                     THEN left(p_value #>> '{}', 60) || '…' ELSE p_value #>> '{}' END)::text
    WHEN 'number' THEN trim_scale((p_value #>> '{}')::numeric)::text
    WHEN 'boolean' THEN p_value #>> '{}'
    WHEN 'array' THEN 'an array'
    WHEN 'object' THEN 'a object'
    ELSE 'null' END
$fn$;

-- a name (task, queue, dedupe key, group): a non-empty string of at most ${MAX_NAME_LENGTH} characters,
-- counted as JavaScript counts them (UTF-16: a character beyond U+FFFF counts twice)
CREATE FUNCTION ${s}.producer_name(p_value jsonb, p_field text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  t text;
  n bigint;
BEGIN
  IF p_value IS NULL OR jsonb_typeof(p_value) <> 'string' THEN
    PERFORM ${s}.producer_invalid(p_field, 'must be a non-empty string, got ' || ${s}.producer_describe(p_value));
  END IF;
  t := p_value #>> '{}';
  IF t = '' THEN
    PERFORM ${s}.producer_invalid(p_field, 'must be a non-empty string, got ""');
  END IF;
  n := char_length(t);
  IF n > ${MAX_NAME_LENGTH / 2} THEN
    n := n + (SELECT count(*) FROM regexp_split_to_table(t, '') AS c WHERE ascii(c) > 65535);
    IF n > ${MAX_NAME_LENGTH} THEN
      PERFORM ${s}.producer_invalid(p_field, 'must be at most ${MAX_NAME_LENGTH} characters, got ' || n);
    END IF;
  END IF;
  RETURN t;
END
$fn$;

-- an integer within [p_min, p_max] (int4 at most)
CREATE FUNCTION ${s}.producer_int(p_value jsonb, p_field text, p_min bigint, p_max bigint) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  n numeric;
BEGIN
  IF jsonb_typeof(p_value) = 'number' THEN
    n := (p_value #>> '{}')::numeric;
  END IF;
  IF n IS NULL OR n <> trunc(n) THEN
    PERFORM ${s}.producer_invalid(p_field, 'must be an integer, got ' || ${s}.producer_describe(p_value));
  END IF;
  IF n < p_min OR n > p_max THEN
    PERFORM ${s}.producer_invalid(p_field, format('must be between %s and %s, got %s', p_min, p_max, trunc(n)));
  END IF;
  RETURN n::integer;
END
$fn$;

-- a duration: a non-negative number of milliseconds up to a hundred years, rounded; at least
-- 1 ms after rounding when p_positive
CREATE FUNCTION ${s}.producer_ms(p_value jsonb, p_field text, p_positive boolean) RETURNS float8
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  n numeric;
BEGIN
  IF jsonb_typeof(p_value) IS DISTINCT FROM 'number' THEN
    PERFORM ${s}.producer_invalid(p_field, 'must be a finite number of milliseconds, got ' || ${s}.producer_describe(p_value));
  END IF;
  n := (p_value #>> '{}')::numeric;
  IF n < 0 THEN
    PERFORM ${s}.producer_invalid(p_field, 'must not be negative, got ' || trim_scale(n));
  END IF;
  IF n > ${MAX_MS} THEN
    PERFORM ${s}.producer_invalid(p_field, 'must be at most ${MAX_MS} ms, got ' || trim_scale(n));
  END IF;
  IF p_positive AND round(n) < 1 THEN
    PERFORM ${s}.producer_invalid(p_field, 'must be at least 1 ms, got ' || trim_scale(n));
  END IF;
  RETURN round(n)::float8;
END
$fn$;

-- a job id: a positive int8 as a decimal string, or a number up to 2^53 - 1 (a JavaScript safe integer)
CREATE FUNCTION ${s}.producer_job_id(p_value jsonb, p_field text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  n numeric;
BEGIN
  IF jsonb_typeof(p_value) = 'number' THEN
    n := (p_value #>> '{}')::numeric;
    IF n = trunc(n) AND n >= 1 AND n <= 9007199254740991 THEN
      RETURN n::bigint;
    END IF;
  ELSIF jsonb_typeof(p_value) = 'string' AND (p_value #>> '{}') ~ '^[1-9][0-9]{0,18}$'
        AND (p_value #>> '{}')::numeric <= 9223372036854775807 THEN
    RETURN (p_value #>> '{}')::bigint;
  END IF;
  PERFORM ${s}.producer_invalid(p_field,
    'must be a job id (a positive integer as a string, like "42"), got ' || ${s}.producer_describe(p_value));
  RETURN NULL;
END
$fn$;

-- an absolute start: an ISO 8601 timestamp with its offset (a time without one would mean
-- whatever the session's TimeZone is), in the years 1 to 9999 (UTC)
CREATE FUNCTION ${s}.producer_run_at(p_value jsonb, p_field text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  t timestamptz;
  y numeric;
BEGIN
  IF jsonb_typeof(p_value) IS DISTINCT FROM 'string'
     OR (p_value #>> '{}') !~ ${quoteLiteral(ISO_TIMESTAMP)} THEN
    PERFORM ${s}.producer_invalid(p_field,
      'must be an ISO 8601 timestamp with its time zone offset, like "2026-12-03T09:00:00Z", got ' || ${s}.producer_describe(p_value));
  END IF;
  BEGIN
    t := (p_value #>> '{}')::timestamptz;
  EXCEPTION WHEN data_exception THEN
    PERFORM ${s}.producer_invalid(p_field, 'is not a valid date and time, got ' || ${s}.producer_describe(p_value));
  END;
  y := extract(year FROM t AT TIME ZONE 'UTC');
  IF y < 1 OR y > 9999 THEN
    PERFORM ${s}.producer_invalid(p_field, 'must be between the years 1 and 9999, got ' || ${s}.producer_describe(p_value));
  END IF;
  RETURN t;
END
$fn$;

-- §8 dedupe: { scope, windowMs, replace, maxWaitMs } into p_job (core/job-spec.ts's dedupeMode)
CREATE FUNCTION ${s}.producer_dedupe(p_job ${s}.producer_job, p_mode jsonb, p_options jsonb, p_at text)
RETURNS ${s}.producer_job
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  k text;
  scope text;
  window_ms float8;
  max_wait_ms float8;
  replace boolean;
BEGIN
  IF jsonb_typeof(p_mode) <> 'object' THEN
    PERFORM ${s}.producer_invalid(p_at || 'dedupe', 'must be a plain object, got ' || ${s}.producer_describe(p_mode));
  END IF;
  IF (p_mode - ${textArray(DEDUPE_KEYS)}) <> '{}'::jsonb THEN
    SELECT min(key) INTO k FROM jsonb_object_keys(p_mode - ${textArray(DEDUPE_KEYS)}) AS key;
    PERFORM ${s}.producer_invalid(p_at || 'dedupe.' || k, 'is not a known option (known: ${DEDUPE_KEYS.join(', ')})');
  END IF;
  IF coalesce(jsonb_typeof(p_options -> 'dedupeKey'), 'null') = 'null' THEN
    PERFORM ${s}.producer_invalid(p_at || 'dedupe', 'needs a dedupeKey: it says how that key dedupes');
  END IF;
  IF p_mode ? 'scope' AND p_mode -> 'scope' NOT IN ('"active"'::jsonb, '"pending"'::jsonb) THEN
    PERFORM ${s}.producer_invalid(p_at || 'dedupe.scope', 'must be ''active'' or ''pending'', got ' || (p_mode -> 'scope')::text);
  END IF;
  scope := coalesce(p_mode ->> 'scope', 'active');
  IF p_mode ? 'replace' AND jsonb_typeof(p_mode -> 'replace') <> 'boolean' THEN
    PERFORM ${s}.producer_invalid(p_at || 'dedupe.replace', 'must be true or false, got ' || (p_mode -> 'replace')::text);
  END IF;
  IF p_mode ? 'windowMs' THEN
    window_ms := ${s}.producer_ms(p_mode -> 'windowMs', p_at || 'dedupe.windowMs', true);
  END IF;
  IF p_mode ? 'maxWaitMs' THEN
    max_wait_ms := ${s}.producer_ms(p_mode -> 'maxWaitMs', p_at || 'dedupe.maxWaitMs', true);
  END IF;
  replace := coalesce(p_mode -> 'replace' = 'true'::jsonb, false);
  IF replace AND window_ms IS NOT NULL THEN
    PERFORM ${s}.producer_invalid(p_at || 'dedupe.windowMs', 'cannot be combined with replace: throttle or debounce, not both');
  END IF;
  IF max_wait_ms IS NOT NULL AND NOT replace THEN
    PERFORM ${s}.producer_invalid(p_at || 'dedupe.maxWaitMs', 'only applies with replace: true (debounce)');
  END IF;
  IF scope = 'pending' AND (window_ms IS NOT NULL OR replace) THEN
    PERFORM ${s}.producer_invalid(p_at || 'dedupe.scope', format(
      '''pending'' cannot be combined with %s: leave scope out (''active'') to throttle or debounce',
      CASE WHEN window_ms IS NOT NULL THEN 'windowMs' ELSE 'replace' END));
  END IF;
  IF scope = 'active' AND window_ms IS NULL AND NOT replace THEN
    RETURN p_job; -- the plain mode
  END IF;
  p_job.dedupe_scope := scope;
  p_job.window_ms := window_ms;
  p_job.replace := replace;
  p_job.max_wait_ms := max_wait_ms;
  RETURN p_job;
END
$fn$;

-- §13 one job checked as core/job-spec.ts's toNewJob checks it, in the same order (the first
-- fault is the one reported), with its defaults. p_container names the options object in errors
-- ('options', or 'jobs[3]' in a batch), p_at prefixes the fields ('', or 'jobs[3].').
CREATE FUNCTION ${s}.producer_spec(p_task jsonb, p_payload jsonb, p_options jsonb, p_container text, p_at text)
RETURNS ${s}.producer_job
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  o jsonb := coalesce(p_options, '{}'::jsonb);
  job ${s}.producer_job;
  k text;
  v jsonb;
  n integer;
  group_bytes integer;
  queue_bytes integer;
BEGIN
  IF jsonb_typeof(o) <> 'object' THEN
    PERFORM ${s}.producer_invalid(p_container, 'must be a plain object, got ' || ${s}.producer_describe(o));
  END IF;
  IF (o - ${textArray(OPTION_KEYS)}) <> '{}'::jsonb THEN
    SELECT min(key) INTO k FROM jsonb_object_keys(o - ${textArray(OPTION_KEYS)}) AS key;
    PERFORM ${s}.producer_invalid(p_container || '.' || k, 'is not a known option (known: ${OPTION_KEYS.join(', ')})');
  END IF;
  -- §11 sequences do not exist yet (issue 23): the name is known, a value is refused. Enabling
  -- them is this one place: check the key as a name and carry it to the insert.
  IF coalesce(jsonb_typeof(o -> 'sequence'), 'null') <> 'null' THEN
    PERFORM ${s}.producer_invalid(p_at || 'sequence',
      'sequences are not available yet in this version of Skiplock (SPEC §11): leave sequence out');
  END IF;
  IF o ? 'runAt' AND o ? 'delayMs' THEN
    PERFORM ${s}.producer_invalid(p_at || 'runAt', 'give either runAt or delayMs, not both');
  END IF;
  -- §10 dependsOn: job ids, repeats dropped (the first stays), none = no dependencies
  v := o -> 'dependsOn';
  IF coalesce(jsonb_typeof(v), 'null') <> 'null' THEN
    IF jsonb_typeof(v) <> 'array' THEN
      PERFORM ${s}.producer_invalid(p_at || 'dependsOn', 'must be an array of job ids, got ' || ${s}.producer_describe(v));
    END IF;
    n := jsonb_array_length(v);
    IF n > ${MAX_DEPENDENCIES} THEN
      PERFORM ${s}.producer_invalid(p_at || 'dependsOn', 'must have at most ${MAX_DEPENDENCIES} entries, got ' || n);
    END IF;
    -- each entry checked in order (the first bad one is reported), then the repeats dropped
    SELECT array_agg(d.id ORDER BY d.first) INTO job.depends_on FROM (
      SELECT ${s}.producer_job_id(e.value, p_at || 'dependsOn[' || (e.ord - 1) || ']') AS id, min(e.ord) AS first
      FROM jsonb_array_elements(v) WITH ORDINALITY AS e(value, ord)
      GROUP BY 1) AS d;
    IF job.depends_on IS NOT NULL
       AND (coalesce(jsonb_typeof(o -> 'dedupeKey'), 'null') <> 'null' OR coalesce(jsonb_typeof(o -> 'dedupe'), 'null') <> 'null') THEN
      PERFORM ${s}.producer_invalid(p_at || 'dependsOn',
        'cannot be combined with dedupeKey or dedupe: a waiting job holds no key (enqueue the dependent without one)');
    END IF;
  END IF;
  job.task := ${s}.producer_name(p_task, p_at || 'task');
  job.payload := coalesce(p_payload, 'null'::jsonb);
  job.queue := CASE WHEN o ? 'queue' THEN ${s}.producer_name(o -> 'queue', p_at || 'queue') ELSE '${DEFAULT_QUEUE}' END;
  job.priority := CASE WHEN o ? 'priority'
    THEN ${s}.producer_int(o -> 'priority', p_at || 'priority', ${INT4_MIN}, ${INT4_MAX}) ELSE ${DEFAULT_PRIORITY} END;
  IF coalesce(jsonb_typeof(o -> 'dedupeKey'), 'null') <> 'null' THEN
    job.dedupe_key := ${s}.producer_name(o -> 'dedupeKey', p_at || 'dedupeKey');
  END IF;
  job.max_attempts := CASE WHEN o ? 'maxAttempts'
    THEN ${s}.producer_int(o -> 'maxAttempts', p_at || 'maxAttempts', 1, ${MAX_MAX_ATTEMPTS}) ELSE ${DEFAULT_MAX_ATTEMPTS} END;
  IF o ? 'runAt' THEN
    job.run_at := ${s}.producer_run_at(o -> 'runAt', p_at || 'runAt');
  END IF;
  IF o ? 'delayMs' THEN
    job.delay_ms := ${s}.producer_ms(o -> 'delayMs', p_at || 'delayMs', false);
  END IF;
  IF coalesce(jsonb_typeof(o -> 'timeoutMs'), 'null') <> 'null' THEN
    job.timeout_ms := ${s}.producer_int(o -> 'timeoutMs', p_at || 'timeoutMs', 1, ${INT4_MAX});
  END IF;
  -- §8 group: at most ${MAX_GROUP_BYTES} bytes, and with the queue name within one index entry
  IF coalesce(jsonb_typeof(o -> 'group'), 'null') <> 'null' THEN
    job.group_key := ${s}.producer_name(o -> 'group', p_at || 'group');
    group_bytes := octet_length(convert_to(job.group_key, 'UTF8'));
    IF group_bytes > ${MAX_GROUP_BYTES} THEN
      PERFORM ${s}.producer_invalid(p_at || 'group',
        format('must be at most ${MAX_GROUP_BYTES} bytes in UTF-8, got %s bytes', group_bytes));
    END IF;
    queue_bytes := octet_length(convert_to(job.queue, 'UTF8'));
    IF queue_bytes + group_bytes > ${MAX_QUEUE_AND_GROUP_BYTES} THEN
      PERFORM ${s}.producer_invalid(p_at || 'queue', format(
        'with a group, the queue name must be at most %s bytes in UTF-8 (it is indexed with the group), got %s',
        ${MAX_QUEUE_AND_GROUP_BYTES} - group_bytes, queue_bytes));
    END IF;
  END IF;
  IF coalesce(jsonb_typeof(o -> 'dedupe'), 'null') <> 'null' THEN
    job := ${s}.producer_dedupe(job, o -> 'dedupe', o, p_at);
  END IF;
  v := o -> 'onDependencyFailure';
  IF v IS NULL OR v IN ('null'::jsonb, '"cancel"'::jsonb) THEN
    job.run_on_dependency_failure := false;
  ELSIF v = '"run"'::jsonb THEN
    job.run_on_dependency_failure := true;
  ELSE
    PERFORM ${s}.producer_invalid(p_at || 'onDependencyFailure',
      'must be ''cancel'' or ''run'', got ' || ${s}.producer_describe(v));
  END IF;
  job.replace := coalesce(job.replace, false);
  RETURN job;
END
$fn$;
`;

/** The writes: one job by its dedupe mode, jobs with dependencies, and the two public functions. */
const writes = (s: string, channel: string) => {
  const SEQ = `${quoteLiteral(`${s}.jobs_id_seq`)}::regclass`;
  return `
-- §1.7 the plain insert: ON CONFLICT on the partial unique index (never check-then-insert); a hit
-- is answered by the active holder, read by a new statement (a new snapshot: it sees a holder
-- that committed while the insert waited for it); a holder that finished in between: again.
-- o_notify: a pending job went in (§1.9: the caller sends the hint, once).
CREATE FUNCTION ${s}.producer_insert_plain(p_job ${s}.producer_job, p_id bigint,
                                          OUT o_id bigint, OUT o_created boolean, OUT o_notify boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  FOR round IN 1..${MAX_DEDUPE_ROUNDS} LOOP
    INSERT INTO ${s}.jobs (id, queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms, group_key)
    VALUES (coalesce(p_id, nextval(${SEQ})), p_job.queue, p_job.task, p_job.payload, p_job.priority,
            p_job.dedupe_key, p_job.max_attempts, ${runAfter('p_job')}, p_job.timeout_ms, p_job.group_key)
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING
    RETURNING ${s}.jobs.id INTO o_id;
    IF o_id IS NOT NULL THEN
      o_created := true;
      o_notify := true;
      RETURN;
    END IF;
    SELECT h.id INTO o_id FROM ${s}.jobs AS h
    WHERE h.dedupe_key = p_job.dedupe_key AND h.status IN ('pending', 'running');
    IF o_id IS NOT NULL THEN
      o_created := false;
      o_notify := false;
      RETURN;
    END IF;
    p_id := NULL; -- its holder finished meanwhile: again, with an id of its own
  END LOOP;
  RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = format(
    'Enqueue with dedupeKey %s kept conflicting with jobs that finished before they could be read; retry the call',
    to_jsonb(p_job.dedupe_key));
END
$fn$;

-- §1.7/§8 one job without dependencies, by its dedupe mode (src/engine/enqueuer.ts's
-- insertWithMode): scope 'pending', debounce (replace), throttle (windowMs), else plain (with
-- the id p_id when given: a batch draws its ids in input order, as the library's batch INSERT)
CREATE FUNCTION ${s}.producer_insert(p_job ${s}.producer_job, p_id bigint,
                                    OUT o_id bigint, OUT o_created boolean, OUT o_notify boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  taken boolean;
  holder bigint;
BEGIN
  IF p_job.dedupe_scope IS NULL THEN
    SELECT w.o_id, w.o_created, w.o_notify INTO o_id, o_created, o_notify FROM ${s}.producer_insert_plain(p_job, p_id) AS w;
    RETURN;
  END IF;
  IF p_job.dedupe_scope = 'pending' THEN
    -- §8 scope 'pending': under the key's lock (migration 10), a queued job of the key is a hit;
    -- a running one is not (this one waits for it)
    PERFORM pg_advisory_xact_lock(${s}.pending_lock_id(p_job.dedupe_key));
    FOR round IN 1..${MAX_DEDUPE_ROUNDS} LOOP
      INSERT INTO ${s}.jobs (queue, task, payload, priority, pending_key, max_attempts, run_after, timeout_ms, group_key)
      VALUES (p_job.queue, p_job.task, p_job.payload, p_job.priority, p_job.dedupe_key, p_job.max_attempts,
              ${runAfter('p_job')}, p_job.timeout_ms, p_job.group_key)
      ON CONFLICT (pending_key) WHERE status = 'pending' AND pending_key IS NOT NULL DO NOTHING
      RETURNING ${s}.jobs.id INTO o_id;
      IF o_id IS NOT NULL THEN
        o_created := true;
        o_notify := true;
        RETURN;
      END IF;
      SELECT h.id INTO o_id FROM ${s}.jobs AS h
      WHERE h.pending_key = p_job.dedupe_key AND h.status = 'pending';
      IF o_id IS NOT NULL THEN
        o_created := false;
        o_notify := false;
        RETURN;
      END IF;
    END LOOP;
  ELSIF p_job.replace THEN
    -- §8 debounce: a pending holder of the same task, queue and group that has not run yet takes
    -- this payload, priority and run time (never past its created_at + maxWaitMs); a running one
    -- is left alone
    FOR round IN 1..${MAX_DEDUPE_ROUNDS} LOOP
      INSERT INTO ${s}.jobs AS cur (queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms, group_key)
      VALUES (p_job.queue, p_job.task, p_job.payload, p_job.priority, p_job.dedupe_key, p_job.max_attempts,
              least(${runAfter('p_job')}, now() + p_job.max_wait_ms * interval '1 millisecond'), p_job.timeout_ms,
              p_job.group_key)
      ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running')
      DO UPDATE SET payload = EXCLUDED.payload, priority = EXCLUDED.priority,
        run_after = least(${runAfter('p_job')}, cur.created_at + p_job.max_wait_ms * interval '1 millisecond'),
        updated_at = now()
      WHERE cur.status = 'pending' AND cur.attempts = 0 AND cur.task = EXCLUDED.task AND cur.queue = EXCLUDED.queue
        AND cur.group_key IS NOT DISTINCT FROM EXCLUDED.group_key
      RETURNING cur.id, (cur.xmax = 0) INTO o_id, o_created;
      IF o_id IS NOT NULL THEN
        o_notify := true; -- inserted or replaced: a row changed
        RETURN;
      END IF;
      SELECT h.id INTO o_id FROM ${s}.jobs AS h
      WHERE h.dedupe_key = p_job.dedupe_key AND h.status IN ('pending', 'running');
      IF o_id IS NOT NULL THEN
        o_created := false;
        o_notify := false;
        RETURN;
      END IF;
    END LOOP;
  ELSE
    -- §8 throttle: the key's window row locked until the transaction ends (throttled enqueues of
    -- one key decide one at a time); while it holds, its holder is the answer, finished or not;
    -- else the plain insert, and a new holder restarts the window (§1.4 the clock's time)
    INSERT INTO ${s}.dedupe_windows AS w (key, until, job_id) VALUES (p_job.dedupe_key, '-infinity', 0)
    ON CONFLICT (key) DO UPDATE SET key = w.key
    RETURNING (w.until > clock_timestamp()), w.job_id INTO taken, holder;
    IF taken THEN
      o_id := holder;
      o_created := false;
      o_notify := false;
      RETURN;
    END IF;
    SELECT w.o_id, w.o_created, w.o_notify INTO o_id, o_created, o_notify FROM ${s}.producer_insert_plain(p_job, NULL) AS w;
    IF o_created THEN
      UPDATE ${s}.dedupe_windows
      SET until = clock_timestamp() + p_job.window_ms * interval '1 millisecond', job_id = o_id
      WHERE key = p_job.dedupe_key;
    END IF;
    RETURN;
  END IF;
  RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = format(
    'Enqueue with dedupeKey %s kept conflicting with jobs that finished before they could be read; retry the call',
    to_jsonb(p_job.dedupe_key));
END
$fn$;

-- §10 jobs of which some depend on existing jobs (src/engine/flows.ts's enqueueDependent), in
-- input order: the jobs depended on are held FOR KEY SHARE in id order until the transaction
-- ends (not deleted meanwhile; nobody waits for it); one that does not exist is a 22023 naming
-- p_at[i] || 'dependsOn'. Ids are drawn after the hold, so every dependency is older than the
-- new jobs. A job with dependencies goes in waiting, its counter at their number; its
-- transaction's commit decides (migration 15: one dependency_checks row for the call). A job
-- without goes in pending, with the wake-up hint. Each joins its dependencies' flow when they
-- all belong to one. Returns the ids.
CREATE FUNCTION ${s}.producer_insert_dependents(p_jobs ${s}.producer_job[], p_at text[]) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  held bigint[];
  held_flows uuid[];
  missing bigint;
  flows uuid[];
  ids bigint[] := '{}';
  waiting bigint[] := '{}';
  deps integer;
  pending boolean := false;
  job ${s}.producer_job;
BEGIN
  SELECT coalesce(array_agg(h.id ORDER BY h.id), '{}'), coalesce(array_agg(h.flow_id ORDER BY h.id), '{}')
  INTO held, held_flows
  FROM (SELECT j.id, j.flow_id FROM ${s}.jobs AS j
        WHERE j.id = ANY (ARRAY(SELECT DISTINCT d FROM unnest(p_jobs) AS x CROSS JOIN LATERAL unnest(x.depends_on) AS d))
        ORDER BY j.id FOR KEY SHARE) AS h;
  FOR i IN 1..cardinality(p_jobs) LOOP
    SELECT u.d INTO missing FROM unnest(p_jobs[i].depends_on) WITH ORDINALITY AS u(d, k)
    WHERE u.d <> ALL (held) ORDER BY u.k LIMIT 1;
    IF missing IS NOT NULL THEN
      PERFORM ${s}.producer_invalid(p_at[i] || 'dependsOn',
        format('job %s does not exist (it may have been deleted by retention)', missing));
    END IF;
  END LOOP;
  FOR i IN 1..cardinality(p_jobs) LOOP
    job := p_jobs[i];
    deps := coalesce(cardinality(job.depends_on), 0);
    SELECT array_agg(DISTINCT f.flow) INTO flows FROM unnest(held, held_flows) AS f(id, flow)
    WHERE f.id = ANY (job.depends_on);
    ids[i] := nextval(${SEQ});
    INSERT INTO ${s}.jobs (id, queue, task, payload, priority, max_attempts, run_after, timeout_ms, group_key,
                           status, deps_left, deps_total, run_on_dependency_failure, flow_id)
    VALUES (ids[i], job.queue, job.task, job.payload, job.priority, job.max_attempts, ${runAfter('job')},
            job.timeout_ms, job.group_key, CASE WHEN deps > 0 THEN 'waiting' ELSE 'pending' END, deps, deps,
            job.run_on_dependency_failure, CASE WHEN cardinality(flows) = 1 THEN flows[1] END);
    IF deps > 0 THEN
      INSERT INTO ${s}.job_dependencies (job_id, depends_on) SELECT ids[i], d FROM unnest(job.depends_on) AS d;
      waiting := waiting || ids[i];
    ELSE
      pending := true;
    END IF;
  END LOOP;
  IF cardinality(waiting) > 0 THEN
    INSERT INTO ${s}.dependency_checks (job_ids, first_id) VALUES (waiting, ids[1]);
  END IF;
  IF pending THEN
    PERFORM pg_notify(${channel}, 'jobs'); -- §1.9 a job went in pending
  END IF;
  RETURN ids;
END
$fn$;

-- §13 the SQL producer: the same job, answer and hint as queue.enqueue(task, payload, options),
-- in the caller's transaction (§1.6: it exists iff that commits; §1.9 the NOTIFY is delivered at
-- that commit, one per transaction, none for a dedupe hit)
CREATE FUNCTION ${s}.enqueue(task text, payload jsonb, options jsonb DEFAULT '{}'::jsonb,
                             OUT id bigint, OUT created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  job ${s}.producer_job;
  notify boolean;
BEGIN
  job := ${s}.producer_spec(to_jsonb(enqueue.task), enqueue.payload, enqueue.options, 'options', '');
  IF job.depends_on IS NOT NULL THEN
    id := (${s}.producer_insert_dependents(ARRAY[job], ARRAY['']))[1];
    created := true;
    RETURN;
  END IF;
  SELECT w.o_id, w.o_created, w.o_notify INTO id, created, notify FROM ${s}.producer_insert(job, NULL) AS w;
  IF notify THEN
    PERFORM pg_notify(${channel}, 'jobs');
  END IF;
END
$fn$;

-- §13 many jobs in one call, as queue.enqueueMany(specs): each element { task, payload,
-- ...options }; all checked before any is written (one bad element: 22023 naming jobs[i].field,
-- nothing written); one row per element, in input order; a dedupe key repeated in the call: the
-- first element's job; one wake-up hint for the call
CREATE FUNCTION ${s}.enqueue_many(jobs jsonb) RETURNS TABLE (id bigint, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  specs ${s}.producer_job[] := '{}';
  at text[] := '{}';
  e jsonb;
  n integer;
  keyed integer;
  ids bigint[];
  made boolean[];
  hint boolean := false;
  k integer;
  one_id bigint;
  one_created boolean;
  one_notify boolean;
BEGIN
  IF jsonb_typeof(enqueue_many.jobs) IS DISTINCT FROM 'array' THEN
    PERFORM ${s}.producer_invalid('jobs',
      'must be an array of { task, payload, ...options }, got ' || ${s}.producer_describe(enqueue_many.jobs));
  END IF;
  n := jsonb_array_length(enqueue_many.jobs);
  FOR i IN 1..n LOOP
    e := enqueue_many.jobs -> (i - 1);
    IF jsonb_typeof(e) <> 'object' THEN
      PERFORM ${s}.producer_invalid(format('jobs[%s]', i - 1), 'must be an object { task, payload, ...options }');
    END IF;
    at[i] := format('jobs[%s].', i - 1);
    specs[i] := ${s}.producer_spec(e -> 'task', e -> 'payload', e - 'task' - 'payload', format('jobs[%s]', i - 1), at[i]);
  END LOOP;
  IF n = 0 THEN
    RETURN;
  END IF;
  -- §10 jobs with dependencies go in with their edges, in a call without dedupe keys
  IF EXISTS (SELECT 1 FROM unnest(specs) AS x WHERE x.depends_on IS NOT NULL) THEN
    SELECT min(x.ordinality) INTO keyed FROM unnest(specs) WITH ORDINALITY AS x WHERE x.dedupe_key IS NOT NULL;
    IF keyed IS NOT NULL THEN
      PERFORM ${s}.producer_invalid(at[keyed] || 'dedupeKey',
        'cannot be in one enqueue_many call with jobs that have dependsOn: enqueue them in two calls');
    END IF;
    RETURN QUERY SELECT d.id, true FROM unnest(${s}.producer_insert_dependents(specs, at)) WITH ORDINALITY AS d(id, k) ORDER BY d.k;
    RETURN;
  END IF;
  made := array_fill(NULL::boolean, ARRAY[n]);
  IF EXISTS (SELECT 1 FROM unnest(specs) AS x WHERE x.dedupe_scope IS NOT NULL) THEN
    -- §8 with a dedupe mode, job by job as the library does (insertWithMode): the locks of keys
    -- of scope 'pending' first, all in the one lock order; then in its dedupe-key order (§3: two
    -- calls that share keys wait for each other in one order; jobs without a key first, keys by
    -- code point), a repeated key's first element first, each id drawn at its insert
    PERFORM pg_advisory_xact_lock(l.lock_id) FROM (
      SELECT DISTINCT ${s}.pending_lock_id(x.dedupe_key) AS lock_id FROM unnest(specs) AS x
      WHERE x.dedupe_scope = 'pending' ORDER BY 1 OFFSET 0) AS l;
    ids := array_fill(NULL::bigint, ARRAY[n]);
    FOR k IN SELECT x.ordinality FROM unnest(specs) WITH ORDINALITY AS x
             ORDER BY x.dedupe_key COLLATE "C" NULLS FIRST, x.ordinality LOOP
      SELECT r.o_id, r.o_created, r.o_notify INTO one_id, one_created, one_notify
      FROM ${s}.producer_insert(specs[k], NULL) AS r;
      ids[k] := one_id;
      made[k] := one_created;
      hint := hint OR one_notify;
    END LOOP;
  ELSE
    -- §1.7 the library's batch INSERT: ids drawn in input order (claim order among equals follows
    -- the input), one INSERT in dedupe-key order (§3) that skips conflicts — a key repeated in
    -- the call: its first element goes in —; a job that met a holder then takes the single
    -- path (a new statement: it answers with the holder, or inserts when the holder finished)
    ids := ARRAY(SELECT nextval(${SEQ}) FROM generate_series(1, n));
    WITH input AS (
      SELECT x.*, ids[x.ordinality::int] AS new_id FROM unnest(specs) WITH ORDINALITY AS x
    ), ins AS (
      INSERT INTO ${s}.jobs (id, queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms, group_key)
      SELECT i.new_id, i.queue, i.task, i.payload, i.priority, i.dedupe_key, i.max_attempts, ${runAfter('i')},
             i.timeout_ms, i.group_key
      FROM input AS i ORDER BY i.dedupe_key, i.ordinality
      ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING
      RETURNING ${s}.jobs.id
    )
    SELECT array_agg(ins.id IS NOT NULL ORDER BY i.ordinality) INTO made
    FROM input AS i LEFT JOIN ins ON ins.id = i.new_id;
    hint := true = ANY (made);
    FOR k IN SELECT x.ordinality FROM unnest(specs) WITH ORDINALITY AS x
             WHERE NOT made[x.ordinality::int] ORDER BY x.dedupe_key, x.ordinality LOOP
      SELECT r.o_id, r.o_created, r.o_notify INTO one_id, one_created, one_notify
      FROM ${s}.producer_insert_plain(specs[k], NULL) AS r;
      ids[k] := one_id;
      made[k] := one_created;
      hint := hint OR one_notify;
    END LOOP;
  END IF;
  IF hint THEN
    PERFORM pg_notify(${channel}, 'jobs'); -- §1.9 one hint for the call
  END IF;
  RETURN QUERY SELECT u.i, u.c FROM unnest(ids, made) WITH ORDINALITY AS u(i, c, k) ORDER BY u.k;
END
$fn$;
`;
};

/** Grants: only what docs/producers.md lists; and migration 15's commit trigger as its owner. */
const privileges = (s: string) => `
REVOKE ALL ON FUNCTION ${s}.enqueue(text, jsonb, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.enqueue_many(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_invalid(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_describe(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_name(jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_int(jsonb, text, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_ms(jsonb, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_job_id(jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_run_at(jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_dedupe(${s}.producer_job, jsonb, jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_spec(jsonb, jsonb, jsonb, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_insert_plain(${s}.producer_job, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_insert(${s}.producer_job, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_insert_dependents(${s}.producer_job[], text[]) FROM PUBLIC;

-- §10 the commit of a write of dependents runs as the jobs' owner: a producer with only EXECUTE
-- on enqueue commits it too (a deferred trigger fires as whoever commits)
ALTER FUNCTION ${s}.dependencies_committed() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ${s}.enqueue(text, jsonb, jsonb) IS
  'Skiplock: enqueue one job in the current transaction, as queue.enqueue(task, payload, options) does. Returns (id, created); created = false: a dedupe hit, id is the holder. Bad input: SQLSTATE 22023 naming the field. See docs/producers.md.';
COMMENT ON FUNCTION ${s}.enqueue_many(jsonb) IS
  'Skiplock: enqueue a JSON array of { task, payload, ...options } in the current transaction, as queue.enqueueMany does. One (id, created) row per element, in input order. See docs/producers.md.';
`;

export const producers: Migration = {
  version: 17,
  name: 'producers',
  sql: (s) => {
    const channel = quoteLiteral(notifyChannel(unquote(s)));
    return `${validation(s)}\n${writes(s, channel)}\n${privileges(s)}`;
  },
};
