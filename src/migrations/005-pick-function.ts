import type { Migration } from './migration.js';

/**
 * SPEC §1.1/§7 the claim's pick, as a function that always walks `jobs_claim_idx` in claim order.
 *
 * Planned inline, the pick's plan depends on the table's statistics. On a table that was never
 * analyzed (a new schema, a burst enqueued before autovacuum got to it) PostgreSQL estimates one
 * pending row, and the generic plan of the prepared claim bitmap-scans every pending row and
 * sorts them — on every claim: 20 ms instead of 7 ms per 200-row claim with a 50,000-job backlog
 * (measured with the W2 benchmark; 62 ms for the pick alone in EXPLAIN ANALYZE, with the sort
 * spilling to disk), growing with the backlog. Inside this function sorting and bitmap scans are
 * off, so the only plan left is the ordered walk of the partial claim index, which stops after
 * `p_limit` rows whatever the statistics say. LANGUAGE sql with SET clauses is never inlined:
 * the settings hold for exactly this query.
 */
export const pickFunction: Migration = {
  version: 5,
  name: 'pick-function',
  sql: (s) => `
CREATE FUNCTION ${s}.pick_pending(p_limit integer, p_tasks text[], p_queues text[])
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
  ORDER BY priority, run_after, id
  LIMIT p_limit
  FOR UPDATE SKIP LOCKED
$fn$;
`,
};
