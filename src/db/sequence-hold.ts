/**
 * SPEC §11 what holds a sequence key, and what is queued behind it — the one definition, shared
 * by migration 24 (the unique head index, the queued index, the row triggers' WHEN, the advances'
 * lookups) and store/sequences.ts (queue.sequences()). A key's head is its job that is claimable,
 * running, waiting for its retry, delayed or asleep (all `pending`), dead, or waiting for an event
 * (`waiting` with `wait_event` set); its queued jobs are `waiting` for no event. A sequenced job
 * has no dependencies (§10/§11 refuse dependsOn with a sequence), so a sequenced `waiting` job is
 * one or the other.
 *
 * Migration 24's text is built from these: a released migration never changes, so never edit
 * them — a new hold is a new migration with its own definitions (and the store moves to those).
 * `row` is '' or a row reference with its dot ('j.', 'OLD.', 'NEW.'). Written out as the indexes'
 * predicates are, so that a query that uses them matches those indexes.
 */
export const SEQUENCE_HOLDS = (row = ''): string =>
  `(${row}status IN ('pending', 'running', 'dead') OR (${row}status = 'waiting' AND ${row}wait_event IS NOT NULL))`;

/** §11 a key's queued job (behind its head, not yet advanced): `waiting`, for no event. */
export const SEQUENCE_QUEUED = (row = ''): string => `${row}status = 'waiting' AND ${row}wait_event IS NULL`;
