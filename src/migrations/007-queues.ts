import type { Migration } from './migration.js';

/**
 * SPEC §8 queues: pause and global limits, per queue name (a queue needs a row only once it is
 * configured). `queue_starts` logs the starts of rate-limited queues over their period (a
 * sliding window, pruned by the claims that read it). The claim's pick leaves out every queue
 * that is paused or limited: those are claimed by the limited claim, one claimer at a time per
 * queue; a queue without a row is claimed as before.
 */
export const queues: Migration = {
  version: 7,
  name: 'queues',
  sql: (s) => `
CREATE TABLE ${s}.queues (
  name           text        PRIMARY KEY CHECK (name <> ''),
  paused         boolean     NOT NULL DEFAULT false,
  concurrency    integer     CHECK (concurrency >= 1),
  rate_limit     integer     CHECK (rate_limit >= 1),
  rate_period_ms integer     CHECK (rate_period_ms >= 1),
  updated_at     timestamptz NOT NULL DEFAULT now(),
  CHECK ((rate_limit IS NULL) = (rate_period_ms IS NULL))
);
-- The queues the plain claim leaves out (a handful of rows: read once per claim).
CREATE INDEX queues_restricted_idx ON ${s}.queues (name)
  WHERE paused OR concurrency IS NOT NULL OR rate_limit IS NOT NULL;

CREATE TABLE ${s}.queue_starts (
  queue text        NOT NULL,
  at    timestamptz NOT NULL
);
CREATE INDEX queue_starts_idx ON ${s}.queue_starts (queue, at);

CREATE OR REPLACE FUNCTION ${s}.pick_pending(p_limit integer, p_tasks text[], p_queues text[])
RETURNS SETOF bigint
LANGUAGE sql
VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
AS $fn$
  SELECT id FROM ${s}.jobs
  WHERE status = 'pending' AND run_after <= now()
    AND (p_tasks IS NULL OR task = ANY (p_tasks))
    AND (p_queues IS NULL OR queue = ANY (p_queues))
    -- §8 paused and limited queues are not claimed here (read once per call: an init plan)
    AND queue <> ALL (ARRAY(SELECT q.name FROM ${s}.queues AS q
                            WHERE q.paused OR q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL))
  ORDER BY priority, run_after, id
  LIMIT p_limit
  FOR UPDATE SKIP LOCKED
$fn$;

-- §8 the limited claim's pick: one queue's due jobs in claim order, always the ordered walk of
-- the claim index (as pick_pending: never a sequential scan of the table or a sort).
CREATE FUNCTION ${s}.pick_queue(p_limit integer, p_tasks text[], p_queue text)
RETURNS SETOF bigint
LANGUAGE sql
VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $fn$
  SELECT id FROM ${s}.jobs
  WHERE status = 'pending' AND run_after <= now() AND queue = p_queue
    AND (p_tasks IS NULL OR task = ANY (p_tasks))
  ORDER BY priority, run_after, id
  LIMIT p_limit
  FOR UPDATE SKIP LOCKED
$fn$;
`,
};
