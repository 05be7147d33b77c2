import { notifyChannel, quoteLiteral } from '../db/identifier.js';
import { HEAD_DELETED, HEAD_LEAVES, recreate, unquote } from './019-sequences.js';
import { sequenceBatchAdvance } from './022-sequence-batch-advance.js';
import { heldKeysWait } from './023-held-keys-wait.js';
import type { Migration } from './migration.js';

/**
 * §11 × §12: a sequence's head that suspends on `ctx.waitForEvent` still holds its key.
 *
 * `step_wait` (migration 20) suspends a job as `waiting` with `wait_event` set. For a sequenced
 * head that took it out of {pending, running, dead}: the triggers of migration 22 advanced its key
 * at once, and the advance's next job — the waiting job with the smallest id — was the head
 * itself, made pending again (its `wait_event` still set): the worker reran it at once, it
 * suspended again, and so on until the event came (hundreds of runs a second). With a job of a
 * smaller id committed late (§11), the advance made that one pending instead: it ran beside the
 * suspended head, and `emitEvent` — which makes every waiter pending in one statement — failed on
 * the unique head index (SQLSTATE 23505) for as long as that job held the key, failing the wake of
 * every other job waiting on the event; so did the wake of timed-out waits (forever, behind a
 * dead job). The next run of that key after it also made the suspended head pending.
 *
 * Now a job `waiting` with `wait_event` set is its key's head, as a delayed or retrying one is: the
 * triggers do not fire when a head suspends or is woken (it stays the head), they do when it
 * leaves the wait otherwise (cancelled); the advances never take it as the next job and find it
 * as the head through a partial index of such jobs (empty but for suspended sequenced heads). Its
 * suspension and wake-up need no key lock: an advance's snapshot sees the job either running
 * (before) or suspended (after), the head either way.
 *
 * The pass's hint for keys it found locked is now 'sequence-busy' (SEQUENCE_BUSY_HINT): a
 * listening worker comes back to them after a pause (engine/sequence-gate.ts) instead of at once —
 * a transaction holding a key's lock open (a cancel or a completion in a user's transaction) made
 * every listening worker pass, find it busy and hint the others again, thousands of times a
 * second for as long as it stayed open.
 *
 * Migration 23 had refused ctx.waitForEvent in a sequenced job ('sequenced') for the same bug;
 * `step_wait` is recreated without that refusal (a job with a dedupe key is still refused:
 * 'deduped').
 */

/** A suspended head: waiting for an event (migration 20), of row `r`. */
const suspended = (r: string) => `(${r}.status = 'waiting' AND ${r}.wait_event IS NOT NULL)`;

export const sequenceSuspendedHead: Migration = {
  version: 24,
  name: 'sequence-suspended-head',
  sql: (s) => {
    const channel = quoteLiteral(notifyChannel(unquote(s)));
    const held = (r: string) => `${r}.status IN ('pending', 'running', 'dead')`;
    const leaves = `(${HEAD_LEAVES}) AND NOT ${suspended('NEW')}
    OR OLD.sequence IS NOT NULL AND ${suspended('OLD')} AND NOT ${held('NEW')} AND NOT ${suspended('NEW')}`;
    const deleted = `(${HEAD_DELETED}) OR OLD.sequence IS NOT NULL AND ${suspended('OLD')}`;
    return `
-- §11 the suspended heads of sequences (in practice empty: found by the advances by key)
CREATE INDEX jobs_sequence_suspended_idx ON ${s}.jobs (sequence)
  WHERE sequence IS NOT NULL AND status = 'waiting' AND wait_event IS NOT NULL;

DROP TRIGGER sequence_leaving ON ${s}.jobs;
DROP TRIGGER sequence_leaving_deleted ON ${s}.jobs;
CREATE TRIGGER sequence_leaving AFTER UPDATE OF status ON ${s}.jobs FOR EACH ROW
  WHEN (${leaves})
  EXECUTE FUNCTION ${s}.sequence_leaving();
CREATE TRIGGER sequence_leaving_deleted AFTER DELETE ON ${s}.jobs FOR EACH ROW
  WHEN (${deleted})
  EXECUTE FUNCTION ${s}.sequence_leaving();

${recreate(sequenceBatchAdvance, s, 'sequence_pass', [
  [
    `    PERFORM pg_notify(${channel}, 'sequence');   -- keys left noted: a pass must come back`,
    `    PERFORM pg_notify(${channel}, 'sequence-busy');   -- keys left noted: a pass must come back, after a pause`,
  ],
])}

${recreate(heldKeysWait, s, 'step_wait', [
  [`  IF j.dedupe_key IS NOT NULL OR j.sequence IS NOT NULL THEN`, `  IF j.dedupe_key IS NOT NULL THEN`],
  [
    `    state := CASE WHEN j.dedupe_key IS NOT NULL THEN 'deduped' ELSE 'sequenced' END; RETURN;`,
    `    state := 'deduped'; RETURN;`,
  ],
])}

${recreate(sequenceBatchAdvance, s, 'sequence_advance', [
  [
    `    WHERE j.sequence = p_key AND j.status = 'waiting' AND j.sequence IS NOT NULL
    ORDER BY j.sequence, j.id LIMIT 1;`,
    `    WHERE j.sequence = p_key AND j.status = 'waiting' AND j.sequence IS NOT NULL AND j.wait_event IS NULL
    ORDER BY j.sequence, j.id LIMIT 1;`,
  ],
  [
    `    SELECT j.id, j.status, j.claims INTO head FROM ${s}.jobs AS j
    WHERE j.sequence = p_key AND j.status IN ('pending', 'running', 'dead') AND j.sequence IS NOT NULL;`,
    `    SELECT h.id, h.status, h.claims INTO head FROM (
      (SELECT j.id, j.status, j.claims FROM ${s}.jobs AS j
       WHERE j.sequence = p_key AND j.status IN ('pending', 'running', 'dead') AND j.sequence IS NOT NULL)
      UNION ALL
      -- §12 a head suspended waiting for an event holds its key (migration 24)
      (SELECT j.id, j.status, j.claims FROM ${s}.jobs AS j
       WHERE j.sequence = p_key AND ${suspended('j')} AND j.sequence IS NOT NULL)
      LIMIT 1) AS h;`,
  ],
])}

${recreate(sequenceBatchAdvance, s, 'sequence_advance_many', [
  [
    `      WHERE j.sequence = u.key AND j.status = 'waiting' AND j.sequence IS NOT NULL
      ORDER BY j.sequence, j.id LIMIT 1) AS n`,
    `      WHERE j.sequence = u.key AND j.status = 'waiting' AND j.sequence IS NOT NULL AND j.wait_event IS NULL
      ORDER BY j.sequence, j.id LIMIT 1) AS n`,
  ],
  [
    `      SELECT j.id, j.status, j.claims FROM ${s}.jobs AS j
      WHERE j.sequence = u.key AND j.status IN ('pending', 'running', 'dead') AND j.sequence IS NOT NULL) AS h ON true`,
    `      (SELECT j.id, j.status, j.claims FROM ${s}.jobs AS j
       WHERE j.sequence = u.key AND j.status IN ('pending', 'running', 'dead') AND j.sequence IS NOT NULL)
      UNION ALL
      -- §12 a head suspended waiting for an event holds its key (migration 24)
      (SELECT j.id, j.status, j.claims FROM ${s}.jobs AS j
       WHERE j.sequence = u.key AND ${suspended('j')} AND j.sequence IS NOT NULL)
      LIMIT 1) AS h ON true`,
  ],
])}
`;
  },
};
