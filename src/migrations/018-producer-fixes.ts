import { notifyChannel, quoteLiteral } from '../db/identifier.js';
import type { Migration } from './migration.js';

/**
 * The review of the producers (issue 25): migration 17's SQL functions replaced where they were
 * wrong or open to misuse. Migration 17 is released and never changes; each function here is
 * `CREATE OR REPLACE`d whole (its own text, as migration 17's header explains), and
 * test/producers/conformance.test.ts holds them to the library again.
 *
 * - **The commit trigger of dependencies** (`dependencies_committed`, migration 15, made SECURITY
 *   DEFINER by migration 17) could be attached by any role to a table of its own — PUBLIC had
 *   EXECUTE on it — and then ran as the schema's owner on rows that role wrote: locking and
 *   rewriting the jobs it named. EXECUTE is revoked from PUBLIC on it and on the other trigger
 *   functions (a trigger fires without it: EXECUTE is checked when a trigger is created), and it
 *   refuses to run for anything but its own AFTER INSERT row trigger on `dependency_checks`.
 * - **One key order**: the smallest unknown option is `min(key COLLATE "C")` (code point order,
 *   as the library and HTTP now name it); enqueue_many's one-INSERT path inserts in
 *   `dedupe_key COLLATE "C"` order, as the library's batch INSERT and both job-by-job paths
 *   (src/core/key-order.ts).
 * - **enqueue_many with dependsOn** writes its jobs and edges in one statement each
 *   (`producer_insert_dependents`, set-based), and a call is capped: at most 100,000 jobs and
 *   1,000,000 dependsOn entries in all when any has one (core/job-spec.ts's dependentCallSize),
 *   refused before any element is checked.
 * - **dedupeKey** is at most 2,400 bytes in UTF-8 (one B-tree entry holds 2,704).
 * - **Payload numbers** JavaScript cannot hold (beyond ±(2^1024 − 2^970), which a worker's
 *   JSON.parse reads as ±Infinity) are refused, the field the path to the first such number.
 * - **Long names** are refused by their size in bytes before anything reads them: a task (or
 *   queue, key, group) of more than 3,000 bytes is more than 1,000 UTF-16 units whatever it holds.
 *
 * `producer_spec` becomes `producer_check` (one more argument: the size of a task too long to
 * convert) and is dropped.
 */

// Frozen copies, as in migration 17 (core/job-spec.ts and core/validate.ts as of this migration).
const DEFAULT_QUEUE = 'default';
const DEFAULT_PRIORITY = 100;
const DEFAULT_MAX_ATTEMPTS = 3;
const MAX_MAX_ATTEMPTS = 1_000_000;
const MAX_NAME_LENGTH = 1000;
/** A string of more UTF-8 bytes than this is more than MAX_NAME_LENGTH UTF-16 units (3 bytes a unit at most). */
const MAX_NAME_BYTES = 3 * MAX_NAME_LENGTH;
const MAX_DEPENDENCIES = 10_000;
const MAX_GROUP_BYTES = 200;
const MAX_QUEUE_AND_GROUP_BYTES = 2_400;
const MAX_DEDUPE_KEY_BYTES = 2_400;
const MAX_DEPENDENT_CALL_JOBS = 100_000;
const MAX_DEPENDENT_CALL_EDGES = 1_000_000;
const INT4_MIN = -2_147_483_648;
const INT4_MAX = 2_147_483_647;
/**
 * The smallest magnitude a float64 rounds up to Infinity: 2^1024 − 2^970, halfway between the
 * largest double and 2^1024 (round half to even goes up). JSON.parse reads it as Infinity.
 */
const DOUBLE_OVERFLOW = (2n ** 1024n - 2n ** 970n).toString();

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

const textArray = (items: readonly string[]) => `ARRAY[${items.map((k) => `'${k}'`).join(', ')}]::text[]`;

/** The schema's name from its quoted identifier, as migrate() quotes it (`"a""b"` → `a"b`). */
function unquote(quoted: string): string {
  if (!/^"(?:[^"]|"")+"$/.test(quoted)) throw new Error(`migration 18: not a quoted identifier: ${quoted}`);
  return quoted.slice(1, -1).replaceAll('""', '"');
}

/** §1.4 the start time from the database clock (src/store/fragments.ts's RUN_AFTER, frozen). */
const runAfter = (job: string) =>
  `coalesce(${job}.run_at, now() + coalesce(${job}.delay_ms, 0) * interval '1 millisecond')`;

const checks = (s: string) => `
-- §1.11 a name longer than any name can be, refused by its size alone (nothing reads it)
CREATE FUNCTION ${s}.producer_too_long(p_field text, p_bytes bigint) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  PERFORM ${s}.producer_invalid(p_field,
    format('must be at most ${MAX_NAME_LENGTH} characters, got a string of %s bytes', p_bytes));
  RETURN NULL;
END
$fn$;

-- a name (task, queue, dedupe key, group): a non-empty string of at most ${MAX_NAME_LENGTH} characters,
-- counted as JavaScript counts them (UTF-16: a character beyond U+FFFF counts twice); one of
-- more than ${MAX_NAME_BYTES} bytes is refused by its size before it is counted
CREATE OR REPLACE FUNCTION ${s}.producer_name(p_value jsonb, p_field text) RETURNS text
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
  IF octet_length(t) > ${MAX_NAME_BYTES} THEN
    RETURN ${s}.producer_too_long(p_field, octet_length(t));
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

-- §1.11 a payload a worker can read: JSON numbers beyond what a double holds (JSON.parse would
-- read ±Infinity) are refused, the field the path to the first one (in jsonb's order: arrays by
-- index, object keys shortest first); one jsonpath pass (C) when there is none
CREATE FUNCTION ${s}.producer_payload(p_payload jsonb, p_field text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  found_path text;
  bad_number jsonb;
  digits text;
BEGIN
  IF p_payload IS NULL THEN
    RETURN 'null'::jsonb;
  END IF;
  IF NOT jsonb_path_exists(p_payload,
       ${quoteLiteral(`$.** ? (@.type() == "number" && (@ >= ${DOUBLE_OVERFLOW} || @ <= -${DOUBLE_OVERFLOW}))`)}) THEN
    RETURN p_payload;
  END IF;
  WITH RECURSIVE walk(v, path, ord) AS (
    SELECT p_payload, ''::text, ARRAY[]::bigint[]
    UNION ALL
    SELECT c.v, w.path || c.step, w.ord || c.n
    FROM walk AS w CROSS JOIN LATERAL (
      SELECT e.value AS v, e.n,
             CASE WHEN e.key ~ '^[A-Za-z_$][A-Za-z0-9_$]*$' THEN '.' || e.key
                  ELSE '[' || to_jsonb(e.key)::text || ']' END AS step
      FROM jsonb_each(CASE WHEN jsonb_typeof(w.v) = 'object' THEN w.v END) WITH ORDINALITY AS e(key, value, n)
      UNION ALL
      SELECT a.value, a.n, '[' || (a.n - 1) || ']'
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(w.v) = 'array' THEN w.v END) WITH ORDINALITY AS a(value, n)
    ) AS c
  )
  SELECT w.path, w.v INTO found_path, bad_number FROM walk AS w
  WHERE jsonb_typeof(w.v) = 'number'
    AND abs((w.v #>> '{}')::numeric) >= ${DOUBLE_OVERFLOW}::numeric
  ORDER BY w.ord LIMIT 1;
  digits := bad_number #>> '{}';
  IF length(digits) > 24 THEN
    digits := left(digits, 12) || '…(' || length(digits) || ' characters)';
  END IF;
  PERFORM ${s}.producer_invalid(p_field || found_path, format(
    'must be a number a double can hold (JavaScript would read %s), got %s: send it as a string instead',
    CASE WHEN (bad_number #>> '{}')::numeric > 0 THEN 'Infinity' ELSE '-Infinity' END, digits));
  RETURN NULL;
END
$fn$;

-- §8 dedupe: { scope, windowMs, replace, maxWaitMs } into p_job (core/job-spec.ts's dedupeMode);
-- several unknown keys: the smallest by code point is named
CREATE OR REPLACE FUNCTION ${s}.producer_dedupe(p_job ${s}.producer_job, p_mode jsonb, p_options jsonb, p_at text)
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
    SELECT min(key COLLATE "C") INTO k FROM jsonb_object_keys(p_mode - ${textArray(DEDUPE_KEYS)}) AS key;
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
-- fault is the one reported), with its defaults (migration 17's producer_spec, reviewed).
-- p_task_bytes: the size of a task too long to be converted to jsonb (p_task is then null), or
-- null. p_container names the options object in errors ('options', or 'jobs[3]' in a batch),
-- p_at prefixes the fields ('', or 'jobs[3].').
CREATE FUNCTION ${s}.producer_check(p_task jsonb, p_task_bytes bigint, p_payload jsonb, p_options jsonb,
                                    p_container text, p_at text)
RETURNS ${s}.producer_job
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  o jsonb := coalesce(p_options, '{}'::jsonb);
  job ${s}.producer_job;
  k text;
  v jsonb;
  n integer;
  key_bytes integer;
  group_bytes integer;
  queue_bytes integer;
BEGIN
  IF jsonb_typeof(o) <> 'object' THEN
    PERFORM ${s}.producer_invalid(p_container, 'must be a plain object, got ' || ${s}.producer_describe(o));
  END IF;
  -- several unknown keys: the smallest by code point (core/key-order.ts), as every producer names it
  IF (o - ${textArray(OPTION_KEYS)}) <> '{}'::jsonb THEN
    SELECT min(key COLLATE "C") INTO k FROM jsonb_object_keys(o - ${textArray(OPTION_KEYS)}) AS key;
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
  job.task := CASE WHEN p_task_bytes IS NOT NULL THEN ${s}.producer_too_long(p_at || 'task', p_task_bytes)
                   ELSE ${s}.producer_name(p_task, p_at || 'task') END;
  job.payload := ${s}.producer_payload(p_payload, p_at || 'payload');
  job.queue := CASE WHEN o ? 'queue' THEN ${s}.producer_name(o -> 'queue', p_at || 'queue') ELSE '${DEFAULT_QUEUE}' END;
  job.priority := CASE WHEN o ? 'priority'
    THEN ${s}.producer_int(o -> 'priority', p_at || 'priority', ${INT4_MIN}, ${INT4_MAX}) ELSE ${DEFAULT_PRIORITY} END;
  -- §1.7 a dedupe key is one B-tree index entry: at most ${MAX_DEDUPE_KEY_BYTES} bytes (an entry holds 2,704)
  IF coalesce(jsonb_typeof(o -> 'dedupeKey'), 'null') <> 'null' THEN
    job.dedupe_key := ${s}.producer_name(o -> 'dedupeKey', p_at || 'dedupeKey');
    key_bytes := octet_length(convert_to(job.dedupe_key, 'UTF8'));
    IF key_bytes > ${MAX_DEDUPE_KEY_BYTES} THEN
      PERFORM ${s}.producer_invalid(p_at || 'dedupeKey',
        format('must be at most ${MAX_DEDUPE_KEY_BYTES} bytes in UTF-8 (it is one index entry), got %s bytes', key_bytes));
    END IF;
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

DROP FUNCTION ${s}.producer_spec(jsonb, jsonb, jsonb, text, text);
`;

const writes = (s: string, channel: string) => {
  const SEQ = `${quoteLiteral(`${s}.jobs_id_seq`)}::regclass`;
  return `
-- §10 jobs of which some depend on existing jobs (src/engine/flows.ts's enqueueDependent), in
-- input order, each step one statement for the whole call: the jobs depended on are held FOR KEY
-- SHARE in id order until the transaction ends (not deleted meanwhile; nobody waits for it); the
-- first job (in input order) with one that does not exist is a 22023 naming p_at[i] ||
-- 'dependsOn'. Ids are drawn after the hold, in input order, so every dependency is older than
-- the new jobs. A job with dependencies goes in waiting, its counter at their number; its
-- transaction's commit decides (migration 15: one dependency_checks row for the call). A job
-- without goes in pending, with the wake-up hint. Each joins its dependencies' flow when they
-- all belong to one. Returns the ids.
CREATE OR REPLACE FUNCTION ${s}.producer_insert_dependents(p_jobs ${s}.producer_job[], p_at text[]) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  held bigint[];
  held_flows uuid[];
  bad integer;
  missing bigint;
  ids bigint[];
  waiting bigint[];
  pending boolean;
BEGIN
  SELECT coalesce(array_agg(h.id ORDER BY h.id), '{}'), coalesce(array_agg(h.flow_id ORDER BY h.id), '{}')
  INTO held, held_flows
  FROM (SELECT j.id, j.flow_id FROM ${s}.jobs AS j
        WHERE j.id = ANY (ARRAY(SELECT DISTINCT d FROM unnest(p_jobs) AS x CROSS JOIN LATERAL unnest(x.depends_on) AS d))
        ORDER BY j.id FOR KEY SHARE) AS h;
  SELECT e.k, e.d INTO bad, missing
  FROM (SELECT x.ordinality::int AS k, u.d, u.n FROM unnest(p_jobs) WITH ORDINALITY AS x
        CROSS JOIN LATERAL unnest(x.depends_on) WITH ORDINALITY AS u(d, n)) AS e
  WHERE NOT EXISTS (SELECT 1 FROM unnest(held) AS h(id) WHERE h.id = e.d)
  ORDER BY e.k, e.n LIMIT 1;
  IF bad IS NOT NULL THEN
    PERFORM ${s}.producer_invalid(p_at[bad] || 'dependsOn',
      format('job %s does not exist (it may have been deleted by retention)', missing));
  END IF;
  ids := ARRAY(SELECT nextval(${SEQ}) FROM generate_series(1, cardinality(p_jobs)));
  WITH x AS (
    SELECT j.*, j.ordinality::int AS k, coalesce(cardinality(j.depends_on), 0) AS deps
    FROM unnest(p_jobs) WITH ORDINALITY AS j
  ), flows AS (
    -- the one flow all of a job's dependencies belong to (none counts as one), else none
    SELECT x.k, CASE WHEN count(DISTINCT coalesce(h.flow::text, '')) = 1 THEN min(h.flow::text)::uuid END AS flow
    FROM x CROSS JOIN LATERAL unnest(x.depends_on) AS d(id)
    JOIN unnest(held, held_flows) AS h(id, flow) ON h.id = d.id
    GROUP BY x.k
  )
  INSERT INTO ${s}.jobs (id, queue, task, payload, priority, max_attempts, run_after, timeout_ms, group_key,
                         status, deps_left, deps_total, run_on_dependency_failure, flow_id)
  SELECT ids[x.k], x.queue, x.task, x.payload, x.priority, x.max_attempts, ${runAfter('x')}, x.timeout_ms,
         x.group_key, CASE WHEN x.deps > 0 THEN 'waiting' ELSE 'pending' END, x.deps, x.deps,
         x.run_on_dependency_failure, flows.flow
  FROM x LEFT JOIN flows ON flows.k = x.k
  ORDER BY x.k;
  INSERT INTO ${s}.job_dependencies (job_id, depends_on)
  SELECT ids[x.ordinality::int], d FROM unnest(p_jobs) WITH ORDINALITY AS x CROSS JOIN LATERAL unnest(x.depends_on) AS d;
  SELECT array_agg(ids[x.ordinality::int] ORDER BY x.ordinality) FILTER (WHERE cardinality(x.depends_on) > 0),
         coalesce(bool_or(coalesce(cardinality(x.depends_on), 0) = 0), false)
  INTO waiting, pending
  FROM unnest(p_jobs) WITH ORDINALITY AS x;
  IF waiting IS NOT NULL THEN
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
-- that commit, one per transaction, none for a dedupe hit). A task longer than any name can be
-- is not converted (its size says enough).
CREATE OR REPLACE FUNCTION ${s}.enqueue(task text, payload jsonb, options jsonb DEFAULT '{}'::jsonb,
                                        OUT id bigint, OUT created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  job ${s}.producer_job;
  notify boolean;
  long_task bigint := CASE WHEN octet_length(enqueue.task) > ${MAX_NAME_BYTES} THEN octet_length(enqueue.task) END;
BEGIN
  job := ${s}.producer_check(CASE WHEN long_task IS NULL THEN to_jsonb(enqueue.task) END, long_task,
                             enqueue.payload, enqueue.options, 'options', '');
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
-- ...options }; a call with dependsOn of more than ${MAX_DEPENDENT_CALL_JOBS} jobs or ${MAX_DEPENDENT_CALL_EDGES} dependsOn entries
-- is refused first; all checked before any is written (one bad element: 22023 naming
-- jobs[i].field, nothing written); one row per element, in input order; a dedupe key repeated in
-- the call: the first element's job; one wake-up hint for the call
CREATE OR REPLACE FUNCTION ${s}.enqueue_many(jobs jsonb) RETURNS TABLE (id bigint, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  specs ${s}.producer_job[] := '{}';
  at text[] := '{}';
  e jsonb;
  n integer;
  edges bigint;
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
  -- §10 the size of a call with dependencies (core/job-spec.ts's dependentCallSize), before any element
  SELECT coalesce(sum(CASE WHEN jsonb_typeof(x.value -> 'dependsOn') = 'array'
                           THEN jsonb_array_length(x.value -> 'dependsOn') END), 0)
  INTO edges FROM jsonb_array_elements(enqueue_many.jobs) AS x;
  IF edges > 0 AND n > ${MAX_DEPENDENT_CALL_JOBS} THEN
    PERFORM ${s}.producer_invalid('jobs',
      format('must hold at most ${MAX_DEPENDENT_CALL_JOBS} jobs in a call with dependsOn, got %s: split the call', n));
  END IF;
  IF edges > ${MAX_DEPENDENT_CALL_EDGES} THEN
    PERFORM ${s}.producer_invalid('jobs',
      format('must hold at most ${MAX_DEPENDENT_CALL_EDGES} dependsOn entries in all in one call, got %s: split the call', edges));
  END IF;
  FOR i IN 1..n LOOP
    e := enqueue_many.jobs -> (i - 1);
    IF jsonb_typeof(e) <> 'object' THEN
      PERFORM ${s}.producer_invalid(format('jobs[%s]', i - 1), 'must be an object { task, payload, ...options }');
    END IF;
    at[i] := format('jobs[%s].', i - 1);
    specs[i] := ${s}.producer_check(e -> 'task', NULL, e -> 'payload', e - 'task' - 'payload', format('jobs[%s]', i - 1), at[i]);
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
    -- the input), one INSERT in dedupe-key order (§3, code point order as the library's) that
    -- skips conflicts — a key repeated in the call: its first element goes in —; a job that met
    -- a holder then takes the single path (a new statement: it answers with the holder, or
    -- inserts when the holder finished)
    ids := ARRAY(SELECT nextval(${SEQ}) FROM generate_series(1, n));
    WITH input AS (
      SELECT x.*, ids[x.ordinality::int] AS new_id FROM unnest(specs) WITH ORDINALITY AS x
    ), ins AS (
      INSERT INTO ${s}.jobs (id, queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms, group_key)
      SELECT i.new_id, i.queue, i.task, i.payload, i.priority, i.dedupe_key, i.max_attempts, ${runAfter('i')},
             i.timeout_ms, i.group_key
      FROM input AS i ORDER BY i.dedupe_key COLLATE "C", i.ordinality
      ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING
      RETURNING ${s}.jobs.id
    )
    SELECT array_agg(ins.id IS NOT NULL ORDER BY i.ordinality) INTO made
    FROM input AS i LEFT JOIN ins ON ins.id = i.new_id;
    hint := true = ANY (made);
    FOR k IN SELECT x.ordinality FROM unnest(specs) WITH ORDINALITY AS x
             WHERE NOT made[x.ordinality::int] ORDER BY x.dedupe_key COLLATE "C", x.ordinality LOOP
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

/**
 * §10 migration 15's commit trigger, unchanged in what it does, guarded: it runs as the schema's
 * owner (migration 17), so it acts only as the AFTER INSERT row trigger of dependency_checks.
 */
const committedTrigger = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.dependencies_committed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
DECLARE
  woken integer;
  channel text := 'skiplock:' || TG_TABLE_SCHEMA;
BEGIN
  -- only as the trigger this migration's schema made, on its own table: on any other table the
  -- owner's rights would act on rows someone else wrote
  IF TG_RELID IS DISTINCT FROM ${quoteLiteral(`${s}.dependency_checks`)}::regclass
     OR TG_OP <> 'INSERT' OR TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'ROW' THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('%s.dependencies_committed() runs only as the trigger of %s.dependency_checks, not on %s',
                       ${quoteLiteral(unquote(s))}, ${quoteLiteral(unquote(s))}, TG_RELID::regclass),
      HINT = 'It is Skiplock''s own commit trigger of jobs with dependencies: drop the trigger that calls it.';
  END IF;
  IF octet_length(channel) > 63 THEN
    channel := 'skiplock:' || left(encode(sha256(convert_to(TG_TABLE_SCHEMA, 'UTF8')), 'hex'), 40);
  END IF;
  -- the existing dependencies, in id order (as every other locker of several jobs): a
  -- transition in flight is waited for, and its outcome is what the statements below read
  PERFORM 1 FROM ${s}.jobs AS p
  WHERE p.id IN (SELECT d.depends_on FROM ${s}.job_dependencies AS d
                 WHERE d.job_id = ANY (NEW.job_ids) AND d.depends_on < NEW.first_id)
  ORDER BY p.id FOR NO KEY UPDATE;
  -- marked, each once, in a new row version even when already marked (see the prunes)
  UPDATE ${s}.jobs AS p SET has_dependents = true
  WHERE p.id IN (SELECT d.depends_on FROM ${s}.job_dependencies AS d
                 WHERE d.job_id = ANY (NEW.job_ids) AND d.depends_on < NEW.first_id);
  -- each job's counter from its dependencies' statuses as they are now: an edge is satisfied
  -- while its dependency is done (or, for onDependencyFailure 'run', dead or cancelled), the
  -- counter the transitions of migration 14 move; a failed one cancels it. A job whose status
  -- this transaction changed meanwhile (a cascade, a cancel) keeps it, with its counter exact.
  WITH decided AS (
    SELECT c.id, c.status AS was,
           count(*) FILTER (WHERE NOT (p.status = 'done'
                                       OR (c.run_on_dependency_failure AND p.status IN ('dead', 'cancelled'))))::int AS left_now,
           min(p.id) FILTER (WHERE p.status IN ('dead', 'cancelled') AND NOT c.run_on_dependency_failure) AS failed_id
    FROM ${s}.jobs AS c
    JOIN ${s}.job_dependencies AS d ON d.job_id = c.id
    JOIN ${s}.jobs AS p ON p.id = d.depends_on
    WHERE c.id = ANY (NEW.job_ids)
    GROUP BY c.id, c.status
  ), changed AS (
    UPDATE ${s}.jobs AS c SET
      deps_left = k.left_now,
      status = CASE WHEN k.was <> 'waiting' THEN c.status
                    WHEN k.failed_id IS NOT NULL THEN 'cancelled'
                    WHEN k.left_now = 0 THEN 'pending'
                    ELSE 'waiting' END,
      cancelled_by = CASE WHEN k.was = 'waiting' AND k.failed_id IS NOT NULL THEN k.failed_id ELSE c.cancelled_by END,
      last_error = CASE WHEN k.was = 'waiting' AND k.failed_id IS NOT NULL
                        THEN format('Cancelled: job %s, which it depends on, is %s (onDependencyFailure ''cancel'')%s',
                                    k.failed_id, f.status,
                                    -- only a dead job can be requeued (SPEC §3)
                                    CASE WHEN f.status = 'dead'
                                         THEN format('; requeueing job %s brings this job back', k.failed_id)
                                         ELSE '' END)
                        ELSE c.last_error END,
      -- due from when it was unblocked at the latest (§2 claim order)
      run_after = CASE WHEN k.was = 'waiting' AND k.failed_id IS NULL AND k.left_now = 0
                       THEN greatest(c.run_after, now()) ELSE c.run_after END,
      updated_at = CASE WHEN k.was = 'waiting' AND (k.failed_id IS NOT NULL OR k.left_now = 0) THEN now()
                        ELSE c.updated_at END
    FROM decided AS k LEFT JOIN ${s}.jobs AS f ON f.id = k.failed_id
    WHERE c.id = k.id
    RETURNING c.status, k.was
  )
  SELECT count(*) FILTER (WHERE status = 'pending' AND was = 'waiting') INTO woken FROM changed;
  IF woken > 0 THEN
    PERFORM pg_notify(channel, 'jobs');   -- §1.9 the same hint as an enqueue
  END IF;
  DELETE FROM ${s}.dependency_checks WHERE id = NEW.id;
  RETURN NULL;
END
$fn$;
`;

/** Grants: the new helpers like migration 17's; the trigger functions the owner's alone. */
const privileges = (s: string) => `
REVOKE ALL ON FUNCTION ${s}.producer_too_long(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_payload(jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.producer_check(jsonb, bigint, jsonb, jsonb, text, text) FROM PUBLIC;
-- a trigger fires without EXECUTE on its function (checked only when a trigger is created): no
-- one else may attach these to a table
REVOKE ALL ON FUNCTION ${s}.dependencies_committed() FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.dependency_changed() FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.dependencies_deleted() FROM PUBLIC;
REVOKE ALL ON FUNCTION ${s}.notify_finished() FROM PUBLIC;
`;

export const producerFixes: Migration = {
  version: 18,
  name: 'producer-fixes',
  sql: (s) => {
    const channel = quoteLiteral(notifyChannel(unquote(s)));
    return `${checks(s)}\n${writes(s, channel)}\n${committedTrigger(s)}\n${privileges(s)}`;
  },
};
