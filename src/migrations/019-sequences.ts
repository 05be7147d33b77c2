import { notifyChannel, quoteLiteral } from '../db/identifier.js';
import {
  type PickFilter,
  pickGroupsSql,
  pickMixedSql,
  pickPendingSql,
  pickQueueSql,
  RESTRICTED,
} from './009-groups.js';
import { blocked } from './010-pending-scope.js';
import { asPlpgsql, probedBlocked } from './016-cached-picks.js';
import { producers } from './017-producers.js';
import { producerFixes } from './018-producer-fixes.js';
import type { Migration } from './migration.js';

/**
 * SPEC §11 sequences (strict per-key FIFO), enforced by the database.
 *
 * A job with a `sequence` key is written `waiting` (the status of §10's dependents: not
 * claimable, not backlog) by a BEFORE INSERT trigger, whatever statement inserts it. A key's
 * jobs leave `waiting` one at a time, in id order, through `sequence_advance` alone; every other
 * transition keeps a job inside {pending, running, dead} (claim, retry, release, reaper, dead,
 * requeue) or takes it out for good (done, cancelled, deleted). A unique index over the key's
 * jobs in {pending, running, dead} is the proof: at most one job of a key is ever claimable,
 * running, waiting for its retry or dead — the head, which holds the key until it is done,
 * cancelled or deleted. The claims are unchanged: a head is an ordinary pending job.
 *
 * Who advances a key, always under the key's advisory lock and from a snapshot taken after it
 * (a statement of its own inside `sequence_advance`, so it sees every job committed before):
 * - the statement that takes the head out (done, cancelled, deleted): an AFTER trigger, in that
 *   statement's transaction (blocking lock; its holders are short transactions of workers);
 * - for jobs that arrive: their insert notes the key in `sequence_arrivals`; the next claim of
 *   any worker runs `sequence_pass`, which try-locks each noted key (never waits: no deadlock),
 *   deletes its notes and advances it. A note committed after that delete stays for the next
 *   pass, so every arrival is seen by an advance whose snapshot holds it. A key whose lock was
 *   taken is left noted, with a wake-up hint.
 * Late commits: ids are drawn at insert. An advance that finds a head that never started and a
 * waiting job with a smaller id (its transaction committed late) puts the head back to waiting
 * and advances the smaller one instead; one that already started runs first, then the late one.
 */

/** The schema's name from its quoted identifier, as migrate() quotes it. */
export function unquote(quoted: string): string {
  if (!/^"(?:[^"]|"")+"$/.test(quoted)) throw new Error(`migration 19: not a quoted identifier: ${quoted}`);
  return quoted.slice(1, -1).replaceAll('""', '"');
}

/** The statuses of a key's head: claimable, running, waiting for its retry, or dead. */
export const SEQUENCE_HELD = `('pending', 'running', 'dead')`;
/** §11 the WHEN of the row triggers on a head that leaves {pending, running, dead} (migrations 19, 22). */
export const HEAD_LEAVES = `OLD.sequence IS NOT NULL AND OLD.status IN ${SEQUENCE_HELD} AND NEW.status NOT IN ${SEQUENCE_HELD}`;
/** §11 the WHEN of the row triggers on a deleted head. */
export const HEAD_DELETED = `OLD.sequence IS NOT NULL AND OLD.status IN ${SEQUENCE_HELD}`;

export const sequences: Migration = {
  version: 19,
  name: 'sequences',
  sql: (s) => {
    const channel = quoteLiteral(notifyChannel(unquote(s)));
    return `
ALTER TABLE ${s}.jobs ADD COLUMN sequence text COLLATE "C" CHECK (sequence <> '');
-- §11 the proof: at most one job of a key is claimable, running, retrying or dead
CREATE UNIQUE INDEX jobs_sequence_head_idx ON ${s}.jobs (sequence)
  WHERE sequence IS NOT NULL AND status IN ${SEQUENCE_HELD};
-- §11 a key's queued jobs in id order (the advance's next job, queue.sequences())
CREATE INDEX jobs_sequence_waiting_idx ON ${s}.jobs (sequence, id)
  WHERE sequence IS NOT NULL AND status = 'waiting';

-- §11 keys with jobs inserted since an advance last looked at them (see the header)
CREATE TABLE ${s}.sequence_arrivals (sequence text COLLATE "C" NOT NULL);
CREATE INDEX sequence_arrivals_idx ON ${s}.sequence_arrivals (sequence);

-- §11 the advisory lock of a sequence key in this schema (two keys that share a hash only wait
-- for each other)
CREATE FUNCTION ${s}.sequence_lock_id(p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$ SELECT hashtextextended(${quoteLiteral(`skiplock-sequence:${s}:`)} || p_key, 0) $fn$;

-- §11 under the key's lock (the caller holds it): when the key has no head, its waiting job
-- with the smallest id becomes pending (the wake-up hint of an enqueue); when its head has never
-- started and a smaller id waits (a late commit), the head goes back to waiting, and the
-- trigger of that update advances the smaller one. Returns how many jobs became pending here.
-- Each statement takes its own snapshot (VOLATILE), newer than the caller's lock.
CREATE FUNCTION ${s}.sequence_advance(p_key text) RETURNS integer
LANGUAGE plpgsql VOLATILE SET jit = off AS $fn$
DECLARE
  head record;
  nxt bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'skiplock needs READ COMMITTED, not %', current_setting('transaction_isolation')
      USING HINT = 'Set default_transaction_isolation to read committed for the role Skiplock connects as.';
  END IF;
  -- a next job cancelled while this waited for its row lock: the one after it (a new snapshot)
  FOR round IN 1..100 LOOP
    SELECT j.id INTO nxt FROM ${s}.jobs AS j
    WHERE j.sequence = p_key AND j.status = 'waiting' AND j.sequence IS NOT NULL
    ORDER BY j.sequence, j.id LIMIT 1;
    IF nxt IS NULL THEN RETURN 0; END IF;
    SELECT j.id, j.status, j.claims INTO head FROM ${s}.jobs AS j
    WHERE j.sequence = p_key AND j.status IN ${SEQUENCE_HELD} AND j.sequence IS NOT NULL;
    IF head.id IS NOT NULL THEN
      IF head.status = 'pending' AND head.claims = 0 AND nxt < head.id THEN
        -- the head's row first, never waiting for it: its holder (a claim, or a cancel whose
        -- trigger would wait for this key's lock: a deadlock) decides; the key is noted again,
        -- with a wake-up hint, and the next pass looks at it once that holder is done
        PERFORM 1 FROM ${s}.jobs AS j WHERE j.id = head.id FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
          INSERT INTO ${s}.sequence_arrivals (sequence) VALUES (p_key);
          PERFORM pg_notify(${channel}, 'jobs');
          RETURN 0;
        END IF;
        UPDATE ${s}.jobs SET status = 'waiting', updated_at = now()
        WHERE id = head.id AND status = 'pending' AND claims = 0;
      END IF;
      RETURN 0;
    END IF;
    UPDATE ${s}.jobs SET status = 'pending', updated_at = now() WHERE id = nxt AND status = 'waiting';
    IF FOUND THEN
      PERFORM pg_notify(${channel}, 'jobs');   -- §1.9 the same hint as an enqueue
      RETURN 1;
    END IF;
  END LOOP;
  RETURN 0;
END
$fn$;

-- §11 a head left {pending, running, dead} (done, cancelled, deleted; or back to waiting):
-- the key's next job, in the transaction of the statement that moved it
CREATE FUNCTION ${s}.sequence_left() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $fn$
BEGIN
  PERFORM pg_advisory_xact_lock(${s}.sequence_lock_id(OLD.sequence));
  PERFORM ${s}.sequence_advance(OLD.sequence);
  RETURN NULL;
END
$fn$;
CREATE TRIGGER sequence_left AFTER UPDATE OF status ON ${s}.jobs FOR EACH ROW
  WHEN (${HEAD_LEAVES})
  EXECUTE FUNCTION ${s}.sequence_left();
CREATE TRIGGER sequence_deleted AFTER DELETE ON ${s}.jobs FOR EACH ROW
  WHEN (${HEAD_DELETED})
  EXECUTE FUNCTION ${s}.sequence_left();

-- §11 every insert of a sequenced job, whichever statement makes it: written waiting, and its
-- key noted for the next pass (in the inserting transaction: the note commits with the job)
CREATE FUNCTION ${s}.sequence_arrived() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $fn$
BEGIN
  NEW.status := 'waiting';
  INSERT INTO ${s}.sequence_arrivals (sequence) VALUES (NEW.sequence);
  RETURN NEW;
END
$fn$;
CREATE TRIGGER sequence_arrived BEFORE INSERT ON ${s}.jobs FOR EACH ROW
  WHEN (NEW.sequence IS NOT NULL)
  EXECUTE FUNCTION ${s}.sequence_arrived();

-- §11 run by the claims while any key is noted: up to p_limit noted keys, in key order, each
-- only if its lock is free (try: this never waits for a lock, so it never deadlocks with the
-- triggers above); its notes are deleted, then it is advanced — a note committed after the
-- delete stays for the next pass. A key whose lock was taken stays noted, with a wake-up hint
-- (the holder's transaction is short). Returns how many jobs became pending.
CREATE FUNCTION ${s}.sequence_pass(p_limit integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SET jit = off AS $fn$
DECLARE
  k text;
  moved integer := 0;
  busy boolean := false;
BEGIN
  FOR k IN
    WITH RECURSIVE noted(key) AS (
      (SELECT a.sequence FROM ${s}.sequence_arrivals AS a ORDER BY a.sequence LIMIT 1)
      UNION ALL
      SELECT (SELECT a.sequence FROM ${s}.sequence_arrivals AS a WHERE a.sequence > n.key
              ORDER BY a.sequence LIMIT 1)
      FROM noted AS n WHERE n.key IS NOT NULL
    )
    SELECT key FROM noted WHERE key IS NOT NULL LIMIT p_limit
  LOOP
    IF NOT pg_try_advisory_xact_lock(${s}.sequence_lock_id(k)) THEN
      busy := true;
      CONTINUE;
    END IF;
    DELETE FROM ${s}.sequence_arrivals WHERE sequence = k;
    moved := moved + ${s}.sequence_advance(k);
  END LOOP;
  IF busy THEN
    PERFORM pg_notify(${channel}, 'jobs');
  END IF;
  RETURN moved;
END
$fn$;

${aging(s)}
${sqlProducers(s)}`;
  },
};

/**
 * §11 every pick skips a pending head whose key still has a note: a job of the key arrived (or
 * committed late, with a smaller id) and no pass has advanced the key since, so the head may be
 * the one the pass puts back to waiting. Read in the pick's snapshot: a pass that deleted the
 * note has not committed yet, so the head is skipped until that pass's decision is visible.
 */
const unnoted =
  (s: string, inner: PickFilter): PickFilter =>
  (alias) =>
    `${inner(alias)}
      -- §11 not a head whose key is noted (a pass has yet to look at its arrivals)
      AND (${alias}.sequence IS NULL OR NOT EXISTS (
            SELECT 1 FROM ${s}.sequence_arrivals AS sa WHERE sa.sequence = ${alias}.sequence OFFSET 0))`;

/** A queue the plain claim leaves to the limited claim (alias q): paused, limited, or aging. */
const RESTRICTED_OR_AGING = `${RESTRICTED} OR q.aging_every_ms IS NOT NULL`;

/**
 * §11 priority aging. A queue with `priorityAging` is claimed by the limited claim (as a paused
 * or limited queue is: the plain picks leave it out by the same one read of the queues table, so
 * every other queue keeps its claim, plan and all), whose pick for it is `pick_aged`: the
 * queue's ungrouped due jobs by effective priority — priority − step·floor(ms waited since
 * run_after / everyMs), not below floor (a job already below floor keeps its priority) — then run_after, id. Within one priority the oldest
 * job has aged most, so the best candidates of a priority are the first ones of the claim index
 * at that priority: one descent per distinct priority of the queue (a skip scan), up to p_limit
 * rows each, read without locks and sorted in memory (levels × p_limit rows); then only the best
 * p_limit are locked, in that order, with SKIP LOCKED (a row another claimer holds is passed by,
 * so the claim may come back short; the next one looks again). Grouped jobs keep their round-robin and
 * their raw priority (pick_groups, as pick_queue calls it).
 */
const aging = (s: string) => `
ALTER TABLE ${s}.queues
  ADD COLUMN aging_every_ms integer CHECK (aging_every_ms >= 1),
  ADD COLUMN aging_step integer CHECK (aging_step >= 1),
  ADD COLUMN aging_floor integer,
  ADD CHECK ((aging_every_ms IS NULL) = (aging_step IS NULL) AND (aging_every_ms IS NULL) = (aging_floor IS NULL));
DROP INDEX ${s}.queues_restricted_idx;
CREATE INDEX queues_restricted_idx ON ${s}.queues (name) WHERE ${RESTRICTED_OR_AGING.replaceAll('q.', '')};

${asPlpgsql(pickPendingSql(s, 'CREATE OR REPLACE', unnoted(s, probedBlocked(s)), 'FOR NO KEY UPDATE', RESTRICTED_OR_AGING))}

${asPlpgsql(pickMixedSql(s, 'CREATE OR REPLACE', unnoted(s, probedBlocked(s)), 'FOR NO KEY UPDATE', RESTRICTED_OR_AGING))}

${asPlpgsql(pickQueueSql(s, 'CREATE OR REPLACE', unnoted(s, probedBlocked(s)), 'FOR NO KEY UPDATE'))}

${pickGroupsSql(s, 'CREATE OR REPLACE', unnoted(s, blocked(s)), 'FOR NO KEY UPDATE')}

-- §11 the limited claim's pick for a queue with priority aging (see the header of migration 19)
CREATE FUNCTION ${s}.pick_aged(p_limit integer, p_tasks text[], p_queue text, p_at timestamptz,
                               p_after text, p_lock text)
RETURNS SETOF bigint
LANGUAGE plpgsql
VOLATILE
SET enable_bitmapscan = off
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
  RETURN QUERY
  WITH cfg AS MATERIALIZED (
    SELECT q.aging_every_ms::float8 AS every_ms, q.aging_step AS step, q.aging_floor AS floor_at
    FROM ${s}.queues AS q WHERE q.name = p_queue AND q.aging_every_ms IS NOT NULL
  ), levels AS MATERIALIZED (
    -- the queue's distinct priorities among its ungrouped pending jobs, one descent each
    WITH RECURSIVE lv(priority) AS (
      (SELECT j.priority FROM ${s}.jobs AS j
       WHERE j.status = 'pending' AND j.group_key IS NULL AND j.queue = p_queue
       ORDER BY j.priority LIMIT 1)
      UNION ALL
      SELECT (SELECT j.priority FROM ${s}.jobs AS j
              WHERE j.status = 'pending' AND j.group_key IS NULL AND j.queue = p_queue AND j.priority > lv.priority
              ORDER BY j.priority LIMIT 1)
      FROM lv WHERE lv.priority IS NOT NULL
    )
    SELECT lv.priority FROM lv WHERE lv.priority IS NOT NULL
  ), plain AS MATERIALIZED (
    -- aging never lifts a job: one already below floor keeps its priority
    SELECT c.id, least(l.priority::bigint, greatest(cfg.floor_at::bigint,
                          l.priority - cfg.step::bigint * floor(extract(epoch FROM now() - c.run_after) * 1000 / cfg.every_ms)::bigint)) AS eff,
           c.run_after
    FROM cfg CROSS JOIN levels AS l
    CROSS JOIN LATERAL (
      SELECT j.id, j.run_after FROM ${s}.jobs AS j
      WHERE j.status = 'pending' AND j.group_key IS NULL AND j.queue = p_queue AND j.priority = l.priority
        AND j.run_after <= now() AND (p_tasks IS NULL OR j.task = ANY (p_tasks))${unnoted(s, probedBlocked(s))('j')}
      ORDER BY j.priority, j.run_after, j.id
      LIMIT p_limit
    ) AS c
  ), locked AS MATERIALIZED (
    -- the candidates were read without locks; only the best p_limit are locked, in order,
    -- passing by rows another claimer holds (the status is re-checked on the locked row)
    SELECT j.id, p.eff, p.run_after
    FROM plain AS p JOIN ${s}.jobs AS j ON j.id = p.id
    WHERE j.status = 'pending'
    ORDER BY p.eff, p.run_after, p.id
    LIMIT p_limit
    FOR NO KEY UPDATE OF j SKIP LOCKED
  ), grouped AS MATERIALIZED (
    SELECT g.o_id AS id, g.o_priority::bigint AS eff, g.o_rnk AS rnk, g.o_seq AS seq, g.o_run_after AS run_after
    FROM ${s}.queues AS q
    CROSS JOIN LATERAL ${s}.pick_groups(p_limit, p_tasks, p_queue, q.group_concurrency,
                                        q.group_rate_limit, q.group_rate_period_ms, p_at, p_after, p_lock) AS g
    WHERE q.name = p_queue
      AND EXISTS (SELECT 1 FROM ${s}.jobs AS j
                  WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.queue = p_queue)
  )
  (SELECT x.id FROM (
     SELECT p.id, p.eff, 1 AS rnk, (row_number() OVER (ORDER BY p.eff, p.run_after, p.id))::int AS seq, p.run_after
     FROM locked AS p
     UNION ALL
     SELECT g.id, g.eff, g.rnk, g.seq, g.run_after FROM grouped AS g WHERE g.id <> -1
   ) AS x
   ORDER BY x.eff, x.rnk, x.seq, x.run_after, x.id
   LIMIT p_limit)
  UNION ALL
  -- pick_groups's marker: a group skipped for its lock (the claim looks again shortly)
  SELECT -1::bigint WHERE EXISTS (SELECT 1 FROM grouped AS g WHERE g.id = -1);
END
$fn$;
`;

/** Longest sequence key in UTF-8 bytes (a frozen copy of core/job-spec.ts's MAX_SEQUENCE_BYTES). */
const MAX_SEQUENCE_BYTES = 200;

/**
 * One function as the migration that last wrote it wrote it (their texts are frozen), to be
 * recreated here with a few edits: each edit must match exactly once.
 */
export function recreate(
  from: Migration,
  s: string,
  name: string,
  edits: readonly [string, string][],
): string {
  const all = from.sql(s);
  let start = all.indexOf(`CREATE FUNCTION ${s}.${name}(`);
  if (start < 0) start = all.indexOf(`CREATE OR REPLACE FUNCTION ${s}.${name}(`);
  const end = all.indexOf('\n$fn$;', start);
  if (start < 0 || end < 0)
    throw new Error(`migration 19: function ${name} not found in migration ${from.version}`);
  let text = all
    .slice(start, end + '\n$fn$;'.length)
    .replace(/^CREATE FUNCTION/, 'CREATE OR REPLACE FUNCTION');
  for (const [before, after] of edits) {
    const at = text.indexOf(before);
    if (at < 0 || text.indexOf(before, at + 1) >= 0) {
      throw new Error(`migration 19: edit of ${name} does not match exactly once: ${before}`);
    }
    text = text.replace(before, after);
  }
  return text;
}

/**
 * §13 the SQL producers of migration 17 take `sequence` (they refused it): checked as the
 * library checks it (a name of at most MAX_SEQUENCE_BYTES bytes, not with dedupe options or
 * dependsOn) and written with the job. Their other rules are unchanged: the functions are
 * recreated from the text of the migration that last wrote them (17 or 18) with only these edits (the conformance suite compares them
 * with the library).
 */
const sqlProducers = (s: string) => `
ALTER TYPE ${s}.producer_job ADD ATTRIBUTE sequence text;

${recreate(producerFixes, s, 'producer_check', [
  [
    `  -- §11 sequences do not exist yet (issue 23): the name is known, a value is refused. Enabling
  -- them is this one place: check the key as a name and carry it to the insert.
  IF coalesce(jsonb_typeof(o -> 'sequence'), 'null') <> 'null' THEN
    PERFORM ${s}.producer_invalid(p_at || 'sequence',
      'sequences are not available yet in this version of Skiplock (SPEC §11): leave sequence out');
  END IF;
`,
    '',
  ],
  [
    `  job.task := CASE WHEN p_task_bytes IS NOT NULL`,
    `  -- §11 sequence: a name of at most ${MAX_SEQUENCE_BYTES} bytes, not with dedupe options or dependsOn
  IF coalesce(jsonb_typeof(o -> 'sequence'), 'null') <> 'null' THEN
    job.sequence := ${s}.producer_name(o -> 'sequence', p_at || 'sequence');
    IF octet_length(convert_to(job.sequence, 'UTF8')) > ${MAX_SEQUENCE_BYTES} THEN
      PERFORM ${s}.producer_invalid(p_at || 'sequence',
        format('must be at most ${MAX_SEQUENCE_BYTES} bytes in UTF-8, got %s bytes', octet_length(convert_to(job.sequence, 'UTF8'))));
    END IF;
    IF coalesce(jsonb_typeof(o -> 'dedupeKey'), 'null') <> 'null' OR coalesce(jsonb_typeof(o -> 'dedupe'), 'null') <> 'null' THEN
      PERFORM ${s}.producer_invalid(p_at || 'sequence',
        'cannot be combined with dedupeKey or dedupe: a job queued behind its sequence holds no key (enqueue it without one)');
    END IF;
    IF job.depends_on IS NOT NULL THEN
      PERFORM ${s}.producer_invalid(p_at || 'sequence',
        'cannot be combined with dependsOn in this version: a sequence already orders its jobs (enqueue the job without dependsOn, or without sequence)');
    END IF;
  END IF;
  job.task := CASE WHEN p_task_bytes IS NOT NULL`,
  ],
])}

${recreate(producers, s, 'producer_insert_plain', [
  [
    'max_attempts, run_after, timeout_ms, group_key)\n',
    'max_attempts, run_after, timeout_ms, group_key, sequence)\n',
  ],
  ['p_job.timeout_ms, p_job.group_key)', 'p_job.timeout_ms, p_job.group_key, p_job.sequence)'],
])}

${recreate(producerFixes, s, 'enqueue_many', [
  [
    'max_attempts, run_after, timeout_ms, group_key)\n      SELECT',
    'max_attempts, run_after, timeout_ms, group_key, sequence)\n      SELECT',
  ],
  ['             i.timeout_ms, i.group_key\n', '             i.timeout_ms, i.group_key, i.sequence\n'],
])}
`;
