import { quoteLiteral } from '../db/identifier.js';
import { type PickFilter, pickGroupsSql, pickMixedSql, pickPendingSql, pickQueueSql } from './009-groups.js';
import type { Migration } from './migration.js';

/**
 * SPEC §8 `dedupe: { scope: 'pending' }`: at most one queued and one running job per key. The
 * key lives in a column of its own (`pending_key`), so a key taken this way and a plain
 * `dedupeKey` (one pending *or* running job) never meet.
 *
 * - One queued: a unique index over the pending holders. An enqueue that meets it is a hit.
 * - One running: a unique index over the running holders, and every pick skips a pending job
 *   whose key has a running holder. The index is the proof, the skip is what keeps a claim from
 *   ever meeting it: a key's next pending job can only appear once its previous pending job has
 *   left pending, so a snapshot that sees a pending job of a key sees every claim of that key.
 * - Jobs go back to pending (retry, release, lease expiry, requeue) only under the key's lock
 *   (`pending_holder`), which an enqueue of the key takes too: a job that would be a second
 *   queued one is cancelled as superseded instead, never a unique violation in a worker's write.
 */
export const blocked =
  (s: string): PickFilter =>
  (alias) =>
    `
      -- §8 scope 'pending': not while the key's holder runs (one running per key)
      AND (${alias}.pending_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM ${s}.jobs AS rk   -- through the index of running keyed jobs
            WHERE rk.pending_key = ${alias}.pending_key AND rk.status = 'running' AND rk.pending_key IS NOT NULL))`;

export const pendingScope: Migration = {
  version: 10,
  name: 'pending-scope',
  sql: (s) => `
ALTER TABLE ${s}.jobs ADD COLUMN pending_key text COLLATE "C" CHECK (pending_key <> '');
-- §8 scope 'pending': at most one queued job per key (an enqueue's ON CONFLICT arbiter) …
CREATE UNIQUE INDEX jobs_pending_key_idx ON ${s}.jobs (pending_key)
  WHERE status = 'pending' AND pending_key IS NOT NULL;
-- … and at most one running (the picks' probe)
CREATE UNIQUE INDEX jobs_pending_key_running_idx ON ${s}.jobs (pending_key)
  WHERE status = 'running' AND pending_key IS NOT NULL;

-- §8 the advisory lock of a key of scope 'pending' in this schema (one bigint; two keys that
-- share a hash only wait for each other). Callers that take several take them in this order.
CREATE FUNCTION ${s}.pending_lock_id(p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$ SELECT hashtextextended(${quoteLiteral(`skiplock-pending:${s}:`)} || p_key, 0) $fn$;

-- §8 before job p_id of key p_key goes back to pending: takes the key's lock until the
-- transaction ends (p_wait false: only tries it, and returns 0 when it is taken) and returns
-- the key's queued job, or null when the key has none. The lookup is a statement of its own
-- after the lock, so its snapshot sees every job an earlier holder of the lock wrote (an
-- enqueue of the key takes it too); its row lock waits for a claim or cancel of that job in
-- flight and reads what it left. The caller then supersedes p_id by that job, which takes over
-- (a failed attempt's retry): it runs no earlier than p_not_before, counts at least p_attempts
-- attempts and notes p_note (each null: unchanged).
CREATE FUNCTION ${s}.pending_holder(p_key text, p_id bigint, p_wait boolean,
                                    p_not_before timestamptz, p_attempts integer, p_note text)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $fn$
DECLARE
  holder bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'skiplock needs READ COMMITTED, not %', current_setting('transaction_isolation')
      USING HINT = 'Set default_transaction_isolation to read committed for the role Skiplock connects as.';
  END IF;
  IF p_wait THEN
    PERFORM pg_advisory_xact_lock(${s}.pending_lock_id(p_key));
  ELSIF NOT pg_try_advisory_xact_lock(${s}.pending_lock_id(p_key)) THEN
    RETURN 0;
  END IF;
  SELECT j.id INTO holder FROM ${s}.jobs AS j
  WHERE j.pending_key = p_key AND j.status = 'pending' AND j.pending_key IS NOT NULL AND j.id <> p_id
  FOR NO KEY UPDATE;
  IF holder IS NOT NULL AND (p_not_before IS NOT NULL OR p_attempts IS NOT NULL OR p_note IS NOT NULL) THEN
    UPDATE ${s}.jobs
    SET run_after = greatest(run_after, p_not_before), attempts = greatest(attempts, p_attempts),
        last_error = coalesce(p_note, last_error), updated_at = now()
    WHERE id = holder;
  END IF;
  RETURN holder;
END
$fn$;

${pickGroupsSql(s, 'CREATE OR REPLACE', blocked(s))}

${pickPendingSql(s, 'CREATE OR REPLACE', blocked(s))}
-- The planner costs the running-holder filter's subquery for every candidate row (it cannot
-- know that the OR skips it for jobs without a key), so over a backlog of ~12,000 jobs a claim's
-- cost passed jit_above_cost and every claim was JIT-compiled: 30–120 ms each, a drain of 30,000
-- analyzed jobs at 600–1,500 jobs/s instead of 10,000 (measured). The other picks had it off.
ALTER FUNCTION ${s}.pick_pending(integer, text[], text[]) SET jit = off;

${pickMixedSql(s, 'CREATE OR REPLACE', blocked(s))}

${pickQueueSql(s, 'CREATE OR REPLACE', blocked(s))}
`,
};
