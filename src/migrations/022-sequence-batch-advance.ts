import { createHash } from 'node:crypto';
import { notifyChannel, quoteLiteral } from '../db/identifier.js';
import { HEAD_DELETED, HEAD_LEAVES, recreate, SEQUENCE_HELD, sequences, unquote } from './019-sequences.js';
import type { Migration } from './migration.js';

/**
 * §11 a statement that takes many sequence heads out advances their keys in one set-based
 * statement, not one function call and one UPDATE per row (migration 19's row trigger): the
 * advance's own UPDATE of `jobs` — a table with twenty-odd indexes — cost about 0.2 ms a row
 * when run once per row, against about 25 µs a row run once for the statement (a 1,000-job
 * completion: 195 ms against 41 ms, probe of 2026-12-03).
 *
 * How the statement learns its keys without a transition table (which would copy every updated
 * row of every statement on `jobs`, sequenced or not): an AFTER row trigger, filtered by the same
 * WHEN as before (so an unsequenced row pays nothing: an AFTER trigger's WHEN is read off the
 * row versions the statement already has — a BEFORE row trigger would lock every updated row
 * first, whatever its WHEN), appends the head's key to a transaction-local setting named after
 * the schema; an AFTER statement trigger, which fires after the statement's row triggers (they
 * were queued first), takes the list, clears it, locks the keys in key order (blocking, as
 * before; a pass only tries) and advances them together. With an empty list it returns at once:
 * about 1.4 µs per UPDATE or DELETE statement on `jobs` (100,000 empty UPDATEs, 2026-12-03). A
 * failed statement rolls the setting back with its (sub)transaction.
 *
 * The pass of the claims is set-based too: it tries the noted keys' locks, deletes the notes of
 * those it got (one statement), then advances them (the next statements: a new snapshot that
 * holds every job whose note it deleted).
 *
 * Every note is announced with its own hint, 'sequence' (SEQUENCE_HINT), in the transaction that
 * writes it — an arrival, a key a pass could not lock, a late commit whose head was held — so
 * that a listening worker runs the pass only when a key may be noted (engine/sequence-gate.ts):
 * a queue with no sequenced job pays nothing per claim.
 */

/** The transaction-local setting that carries a statement's leaving keys, one per schema. */
export function leavingSetting(schema: string): string {
  return `skiplock.sequence_left_${createHash('sha1').update(schema).digest('hex').slice(0, 20)}`;
}

export const sequenceBatchAdvance: Migration = {
  version: 22,
  name: 'sequence-batch-advance',
  sql: (s) => {
    const schema = unquote(s);
    const channel = quoteLiteral(notifyChannel(schema));
    const setting = quoteLiteral(leavingSetting(schema));
    return `
-- §11 an arrival's note is announced (SEQUENCE_HINT: a listening worker's next claim runs the pass)
${recreate(sequences, s, 'sequence_arrived', [
  [
    `  INSERT INTO ${s}.sequence_arrivals (sequence) VALUES (NEW.sequence);\n`,
    `  INSERT INTO ${s}.sequence_arrivals (sequence) VALUES (NEW.sequence);\n  PERFORM pg_notify(${channel}, 'sequence');\n`,
  ],
])}
${recreate(sequences, s, 'sequence_advance', [
  [
    `          INSERT INTO ${s}.sequence_arrivals (sequence) VALUES (p_key);\n          PERFORM pg_notify(${channel}, 'jobs');`,
    `          INSERT INTO ${s}.sequence_arrivals (sequence) VALUES (p_key);\n          PERFORM pg_notify(${channel}, 'sequence');`,
  ],
])}

DROP TRIGGER sequence_left ON ${s}.jobs;
DROP TRIGGER sequence_deleted ON ${s}.jobs;
DROP FUNCTION ${s}.sequence_left();

-- §11 under the locks of all p_keys (the caller holds them), each key without a head gets its
-- waiting job with the smallest id pending, in one UPDATE; a key with a head that never started
-- behind a smaller waiting id (a late commit), and a key whose next job left waiting while this
-- waited for its row (its row re-checked by the UPDATE), go through sequence_advance, one by one
-- (rare). Its statements take their own snapshots (VOLATILE), newer than the caller's locks.
-- Returns how many jobs became pending, with one wake-up hint for them all.
CREATE FUNCTION ${s}.sequence_advance_many(p_keys text[]) RETURNS integer
LANGUAGE plpgsql VOLATILE SET jit = off AS $fn$
DECLARE
  moved integer;
  slow text[];
  k text;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'skiplock needs READ COMMITTED, not %', current_setting('transaction_isolation')
      USING HINT = 'Set default_transaction_isolation to read committed for the role Skiplock connects as.';
  END IF;
  WITH c AS (
    SELECT u.key, n.id AS nxt, h.id AS head, h.status AS head_status, h.claims AS head_claims
    FROM unnest(p_keys) AS u(key)
    CROSS JOIN LATERAL (
      SELECT j.id FROM ${s}.jobs AS j
      WHERE j.sequence = u.key AND j.status = 'waiting' AND j.sequence IS NOT NULL
      ORDER BY j.sequence, j.id LIMIT 1) AS n
    LEFT JOIN LATERAL (
      SELECT j.id, j.status, j.claims FROM ${s}.jobs AS j
      WHERE j.sequence = u.key AND j.status IN ${SEQUENCE_HELD} AND j.sequence IS NOT NULL) AS h ON true
  ), m AS (
    UPDATE ${s}.jobs AS j SET status = 'pending', updated_at = now()
    FROM c WHERE c.head IS NULL AND j.id = c.nxt AND j.status = 'waiting'
    RETURNING j.sequence
  )
  SELECT (SELECT count(*) FROM m),
         array(SELECT c.key FROM c
               WHERE CASE WHEN c.head IS NULL THEN NOT EXISTS (SELECT 1 FROM m WHERE m.sequence = c.key)
                          ELSE c.head_status = 'pending' AND c.head_claims = 0 AND c.nxt < c.head END
               ORDER BY c.key)
  INTO moved, slow;
  IF moved > 0 THEN
    PERFORM pg_notify(${channel}, 'jobs');   -- §1.9 the same hint as an enqueue
  END IF;
  FOREACH k IN ARRAY slow LOOP
    moved := moved + ${s}.sequence_advance(k);
  END LOOP;
  RETURN moved;
END
$fn$;

-- §11 a head left {pending, running, dead} (done, cancelled, deleted; or back to waiting): its
-- key joins this statement's list (see the header; the WHEN keeps every other row free)
CREATE FUNCTION ${s}.sequence_leaving() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM set_config(${setting}, coalesce(current_setting(${setting}, true), '') || to_json(OLD.sequence)::text || ',', true);
  RETURN NULL;
END
$fn$;
CREATE TRIGGER sequence_leaving AFTER UPDATE OF status ON ${s}.jobs FOR EACH ROW
  WHEN (${HEAD_LEAVES})
  EXECUTE FUNCTION ${s}.sequence_leaving();
CREATE TRIGGER sequence_leaving_deleted AFTER DELETE ON ${s}.jobs FOR EACH ROW
  WHEN (${HEAD_DELETED})
  EXECUTE FUNCTION ${s}.sequence_leaving();

-- §11 at the end of the statement, after its row triggers, in its transaction: the keys it took
-- heads from, locked in key order (blocking; the holders are short transactions, and a pass
-- never waits), then advanced together. Without a WHEN: a statement trigger's WHEN is read when
-- the statement ends, before its row triggers have listed anything.
CREATE FUNCTION ${s}.sequence_left() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $fn$
DECLARE
  list text := current_setting(${setting}, true);
  keys text[];
BEGIN
  IF list IS NULL OR list = '' THEN RETURN NULL; END IF;
  PERFORM set_config(${setting}, '', true);
  SELECT array_agg(DISTINCT e.key COLLATE "C" ORDER BY e.key COLLATE "C") INTO keys
  FROM json_array_elements_text(('[' || left(list, -1) || ']')::json) AS e(key);
  PERFORM pg_advisory_xact_lock(${s}.sequence_lock_id(u.key)) FROM unnest(keys) AS u(key);
  PERFORM ${s}.sequence_advance_many(keys);
  RETURN NULL;
END
$fn$;
CREATE TRIGGER sequence_left AFTER UPDATE ON ${s}.jobs FOR EACH STATEMENT
  EXECUTE FUNCTION ${s}.sequence_left();
CREATE TRIGGER sequence_deleted AFTER DELETE ON ${s}.jobs FOR EACH STATEMENT
  EXECUTE FUNCTION ${s}.sequence_left();

-- §11 run by the claims while any key is noted: up to p_limit noted keys, in key order, each
-- only if its lock is free (a try: never waits, so never deadlocks with the triggers); the
-- notes of the keys it got are deleted (one statement), then those keys are advanced together
-- (later statements: a note committed after the delete stays for the next pass). A key whose
-- lock was taken stays noted, with a wake-up hint (the holder's transaction is short).
CREATE OR REPLACE FUNCTION ${s}.sequence_pass(p_limit integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SET jit = off AS $fn$
DECLARE
  got text[];
  busy boolean;
BEGIN
  WITH RECURSIVE noted(key) AS (
    (SELECT a.sequence FROM ${s}.sequence_arrivals AS a ORDER BY a.sequence LIMIT 1)
    UNION ALL
    SELECT (SELECT a.sequence FROM ${s}.sequence_arrivals AS a WHERE a.sequence > n.key
            ORDER BY a.sequence LIMIT 1)
    FROM noted AS n WHERE n.key IS NOT NULL
  ), tried AS (
    SELECT t.key, pg_try_advisory_xact_lock(${s}.sequence_lock_id(t.key)) AS locked
    FROM (SELECT key FROM noted WHERE key IS NOT NULL LIMIT p_limit) AS t
  )
  SELECT array_agg(key ORDER BY key) FILTER (WHERE locked), coalesce(bool_or(NOT locked), false)
  INTO got, busy FROM tried;
  IF busy THEN
    PERFORM pg_notify(${channel}, 'sequence');   -- keys left noted: a pass must come back
  END IF;
  IF got IS NULL THEN RETURN 0; END IF;
  DELETE FROM ${s}.sequence_arrivals WHERE sequence = ANY (got);
  RETURN ${s}.sequence_advance_many(got);
END
$fn$;
`;
  },
};
