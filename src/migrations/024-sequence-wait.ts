import { notifyChannel, quoteLiteral } from '../db/identifier.js';
import { SEQUENCE_HOLDS, SEQUENCE_QUEUED } from '../db/sequence-hold.js';
import { recreate, SEQUENCE_HELD, unquote } from './019-sequences.js';
import { sequenceBatchAdvance } from './022-sequence-batch-advance.js';
import { heldKeysWait } from './023-held-keys-wait.js';
import type { Migration } from './migration.js';

/**
 * §11/§12 a sequence's head that waits for an event holds its key (issue 24: "a suspended head
 * holds its sequence"), as a sleeping one does (pending). Until now a key's hold was the statuses
 * {pending, running, dead} (migration 19), and `waiting` was the status of its queued jobs: a head
 * suspended by `ctx.waitForEvent` left its key, whose advance took the smallest waiting id — the
 * head itself — back to pending, in a loop; migration 23 therefore refused the wait ('sequenced').
 *
 * The hold becomes {pending, running, dead} or `waiting` with `wait_event` set (SEQUENCE_HOLDS,
 * db/sequence-hold.ts); a key's queued jobs are `waiting` with no `wait_event` (SEQUENCE_QUEUED).
 * A sequenced job has no dependencies (refused with dependsOn, §10/§11), so a sequenced `waiting`
 * job is one or the other. Recreated with the new predicates: the unique index (the proof: at most one job of a key
 * holds it, now counting an event waiter), the queued index, the two row triggers that list a
 * leaving head (running → waiting for an event no longer leaves; an event waiter cancelled or
 * deleted does; its wake by the emit or the timeout — waiting → pending — does not; they also
 * watch `wait_event`, so no update can take a head out of the hold unseen), and the advances'
 * lookups of a key's head and next job (`sequence_advance` and `sequence_advance_many`, from
 * migration 22's text). `step_wait` (from migration 23's text) no longer refuses a sequenced job;
 * a job with a dedupe key is still refused ('deduped').
 *
 * Data a version before 23 may have left is repaired first (with the old row triggers dropped,
 * whose advance would undo it), else the new unique index, an emit or the reaper's timeout pass
 * would fail on it (SQLSTATE 23505, for every waiter of the event):
 * - a job of a key that never started, pending beside the key's suspended head that had started
 *   (a late commit version 22's advance took past the head): back to waiting behind the head, as
 *   §11 says a late commit runs right after the job that started;
 * - a sequenced job waiting for an event beside a holder of its key that has started (running,
 *   dead, pending again), or behind another such waiter: it joins its key's queue (`wait_event`
 *   cleared; its wait stays registered in `job_steps`, so its next run finds the event set, or its
 *   timeout passed, or waits again);
 * - a job with a dedupe key waiting for an event (refused since 23): its key, which it did not
 *   hold while waiting, may be held by another job now; it gives the key up.
 *
 * Also: the pass's hint for keys it found locked is now 'sequence-busy' (SEQUENCE_BUSY_HINT): a
 * listening worker comes back to them after a pause (engine/sequence-gate.ts) instead of at once
 * — a transaction holding a key's lock open (a cancel or a completion in a user's transaction)
 * made every listening worker pass, find it busy and hint the others again, thousands of times a
 * second for as long as it stayed open.
 */

/** §11 the WHEN of the row triggers on a head that leaves the hold (migration 24). */
export const HEAD_LEAVES_24 = `OLD.sequence IS NOT NULL AND ${SEQUENCE_HOLDS('OLD.')} AND NOT ${SEQUENCE_HOLDS('NEW.')}`;
/** §11 the WHEN of the row trigger on a deleted head (migration 24). */
export const HEAD_DELETED_24 = `OLD.sequence IS NOT NULL AND ${SEQUENCE_HOLDS('OLD.')}`;

export const sequenceWait: Migration = {
  version: 24,
  name: 'sequence-wait',
  sql: (s) => {
    const channel = quoteLiteral(notifyChannel(unquote(s)));
    return `
-- data earlier versions may have left (see the header), repaired with the old row triggers gone
-- (their advance would undo the repair; the statement trigger finds no key listed)
DROP TRIGGER sequence_leaving ON ${s}.jobs;
DROP TRIGGER sequence_leaving_deleted ON ${s}.jobs;
-- a job of a key that never started, pending beside the key's suspended head, which had started
-- (a late commit that version 22's advance took past the head): it waits behind the head again,
-- as §11 says it runs right after it
UPDATE ${s}.jobs AS j SET status = 'waiting', updated_at = now()
WHERE j.sequence IS NOT NULL AND j.status = 'pending' AND j.claims = 0 AND j.wait_event IS NULL
  AND EXISTS (SELECT 1 FROM ${s}.jobs AS x
              WHERE x.sequence = j.sequence AND x.status = 'waiting' AND x.wait_event IS NOT NULL
                AND x.claims > 0);
-- an event waiter beside its key's holder (one that has started: running, dead, or pending again),
-- or behind another event waiter of its key, joins the queue
UPDATE ${s}.jobs AS j SET wait_event = NULL, wait_timeout = NULL, updated_at = now()
WHERE j.sequence IS NOT NULL AND j.status = 'waiting' AND j.wait_event IS NOT NULL
  AND EXISTS (SELECT 1 FROM ${s}.jobs AS h
              WHERE h.sequence = j.sequence AND h.id <> j.id
                AND (h.status IN ${SEQUENCE_HELD}
                     OR (h.status = 'waiting' AND h.wait_event IS NOT NULL AND h.id < j.id)));
-- §12 a job with a dedupe key waiting for an event (versions 20–22; refused since 23): its key
-- was not held while it waited, so another job may hold it now and the emit that wakes it would
-- break the key's index (failing for every waiter of the event); it gives the key up
UPDATE ${s}.jobs SET dedupe_key = NULL, updated_at = now()
WHERE status = 'waiting' AND wait_event IS NOT NULL AND dedupe_key IS NOT NULL;

-- §11 the proof: at most one job of a key holds it (claimable, running, retrying, dead, or
-- waiting for an event)
CREATE UNIQUE INDEX jobs_sequence_head_24_idx ON ${s}.jobs (sequence)
  WHERE sequence IS NOT NULL AND ${SEQUENCE_HOLDS()};
DROP INDEX ${s}.jobs_sequence_head_idx;
ALTER INDEX ${s}.jobs_sequence_head_24_idx RENAME TO jobs_sequence_head_idx;
-- §11 a key's queued jobs in id order (the advance's next job, queue.sequences())
CREATE INDEX jobs_sequence_waiting_24_idx ON ${s}.jobs (sequence, id)
  WHERE sequence IS NOT NULL AND ${SEQUENCE_QUEUED()};
DROP INDEX ${s}.jobs_sequence_waiting_idx;
ALTER INDEX ${s}.jobs_sequence_waiting_24_idx RENAME TO jobs_sequence_waiting_idx;

-- §11 a head left the hold (done, cancelled, deleted; or back to waiting by a late commit): its
-- key joins this statement's list (migration 22's functions, new WHENs)
CREATE TRIGGER sequence_leaving AFTER UPDATE OF status, wait_event ON ${s}.jobs FOR EACH ROW
  WHEN (${HEAD_LEAVES_24})
  EXECUTE FUNCTION ${s}.sequence_leaving();
CREATE TRIGGER sequence_leaving_deleted AFTER DELETE ON ${s}.jobs FOR EACH ROW
  WHEN (${HEAD_DELETED_24})
  EXECUTE FUNCTION ${s}.sequence_leaving();

${recreate(sequenceBatchAdvance, s, 'sequence_advance', [
  [
    `    WHERE j.sequence = p_key AND j.status = 'waiting' AND j.sequence IS NOT NULL`,
    `    WHERE j.sequence = p_key AND ${SEQUENCE_QUEUED('j.')} AND j.sequence IS NOT NULL`,
  ],
  [
    `    WHERE j.sequence = p_key AND j.status IN ${SEQUENCE_HELD} AND j.sequence IS NOT NULL;`,
    `    WHERE j.sequence = p_key AND ${SEQUENCE_HOLDS('j.')} AND j.sequence IS NOT NULL;`,
  ],
  [`WHERE id = nxt AND status = 'waiting';`, `WHERE id = nxt AND ${SEQUENCE_QUEUED()};`],
])}

${recreate(sequenceBatchAdvance, s, 'sequence_advance_many', [
  [
    `      WHERE j.sequence = u.key AND j.status = 'waiting' AND j.sequence IS NOT NULL`,
    `      WHERE j.sequence = u.key AND ${SEQUENCE_QUEUED('j.')} AND j.sequence IS NOT NULL`,
  ],
  [
    `      WHERE j.sequence = u.key AND j.status IN ${SEQUENCE_HELD} AND j.sequence IS NOT NULL) AS h ON true`,
    `      WHERE j.sequence = u.key AND ${SEQUENCE_HOLDS('j.')} AND j.sequence IS NOT NULL) AS h ON true`,
  ],
  [
    `FROM c WHERE c.head IS NULL AND j.id = c.nxt AND j.status = 'waiting'`,
    `FROM c WHERE c.head IS NULL AND j.id = c.nxt AND ${SEQUENCE_QUEUED('j.')}`,
  ],
])}

-- §12 a sequenced job may wait for an event (it holds its key meanwhile); a deduped one may not
${recreate(heldKeysWait, s, 'step_wait', [
  [`  IF j.dedupe_key IS NOT NULL OR j.sequence IS NOT NULL THEN`, `  IF j.dedupe_key IS NOT NULL THEN`],
  [
    `    state := CASE WHEN j.dedupe_key IS NOT NULL THEN 'deduped' ELSE 'sequenced' END; RETURN;`,
    `    state := 'deduped'; RETURN;`,
  ],
])}

-- §11 keys a pass found locked: the 'sequence-busy' hint (a listening worker comes back after a pause)
${recreate(sequenceBatchAdvance, s, 'sequence_pass', [
  [
    `    PERFORM pg_notify(${channel}, 'sequence');   -- keys left noted: a pass must come back`,
    `    PERFORM pg_notify(${channel}, 'sequence-busy');   -- keys left noted: a pass must come back, after a pause`,
  ],
])}
`;
  },
};
