import { recreate } from './019-sequences.js';
import { steps } from './020-steps.js';
import type { Migration } from './migration.js';

/**
 * §12 `ctx.waitForEvent` cannot suspend a job that holds a key `waiting` would give up. `waiting`
 * is outside every key's hold — the plain dedupe key's unique index covers pending and running
 * jobs (§1.7), a sequence's head is pending, running or dead (§11), scope 'pending''s indexes
 * pending and running (refused since migration 20: 'keyed') — as §10 already says of flows ("a
 * waiting job holds no key"). Suspending such a job anyway broke:
 *
 * - a dedupe key: the key was free while the job waited, so a second enqueue of it made a second
 *   active job; the emit that then made the first one pending violated `jobs_dedupe_key_idx` —
 *   `emitEvent` threw, the event stayed unset, and every job waiting on it (of any key) stayed
 *   waiting; the reaper's timeout pass failed the same way for its whole batch;
 * - a sequence: the head going `waiting` left the key (the trigger of migration 22), whose advance
 *   took the smallest waiting id of the key — the head itself — back to `pending` in the same
 *   statement: the job was claimed and suspended again at once, forever (a busy loop holding a
 *   worker slot), never `waiting` for its event.
 *
 * Both are now refused as scope 'pending' is: 'deduped' (a job with a dedupe key) and 'sequenced'
 * (a job of a sequence), nothing stored (its timeout does not start), the job still running under
 * its lease; the worker raises a ValidationError. The event set or the timeout passed still
 * answers at once (no suspension needed). ctx.sleep is unchanged: a sleeping job is pending,
 * inside every key's hold.
 */
export const heldKeysWait: Migration = {
  version: 23,
  name: 'held-keys-wait',
  sql: (s) => `
${recreate(steps, s, 'step_wait', [
  [
    `  SELECT id, pending_key, cancel_requested_at INTO j FROM ${s}.jobs`,
    `  SELECT id, pending_key, dedupe_key, sequence, cancel_requested_at INTO j FROM ${s}.jobs`,
  ],
  [
    `    state := 'keyed'; RETURN;
  END IF;
  IF j.cancel_requested_at IS NOT NULL THEN`,
    `    state := 'keyed'; RETURN;
  END IF;
  IF j.dedupe_key IS NOT NULL OR j.sequence IS NOT NULL THEN
    -- refused as scope 'pending' is (migration 23): waiting would give up the key
    IF NOT had THEN DELETE FROM ${s}.job_steps AS t WHERE t.job_id = p_id AND t.name = p_name; END IF;
    state := CASE WHEN j.dedupe_key IS NOT NULL THEN 'deduped' ELSE 'sequenced' END; RETURN;
  END IF;
  IF j.cancel_requested_at IS NOT NULL THEN`,
  ],
])}
`,
};
