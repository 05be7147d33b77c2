/**
 * Claim: the one-statement pick-and-claim (§1.1) and the next due time of pending jobs. Each
 * statement is defined next to the method that binds its parameters; the quoted schema is spliced
 * once, everything else is a parameter.
 */
import { type ClaimedColumns, claimedJobsInPickOrder } from '../core/job-row.js';
import type { Executor } from '../db/executor.js';
import type { ClaimedJob } from '../types.js';
import { APPEND_ATTEMPTED_BY, CLAIMED_COLUMNS, SEQUENCE_PASS } from './fragments.js';
import { StatementFamily } from './runner.js';

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function claimSql(s: string) {
  const jobs = `${s}.jobs`;
  return {
    /** §11 the claims' sequence pass (fragments.ts; ClaimStatements.sequencePass). */
    sequencePass: SEQUENCE_PASS(s),

    /**
     * §1.1 one statement: pick with FOR UPDATE SKIP LOCKED (`pick_pending`, migration 5: always
     * the ordered walk of the claim index, whatever the statistics) and claim in the same
     * UPDATE; §1.2 the outer WHERE re-checks the status; §1.3 a new claim token (`claims` + 1,
     * never reused); §1.4 lease and run_after in database time.
     * Each row is the lean CLAIMED_COLUMNS (read as an array) and, for a grouped pick, its
     * position in it; the caller puts them in the pick's order (priority, run_after, id; with
     * group keys, round by round), so a worker that holds some back starts the first ones first
     * — sorting the plain case in SQL, or joining it to the pick, cost more than the rows'
     * nearly-sorted order costs to sort in Node. §9 each row brings its stored trace context (as
     * text: parsed only by a worker that traces) for the attempt's span.
     * $1 worker_id, $2 limit, $3 tasks (or null), $4 queues (or null), $5 lease ms, $6 the group
     * this claimer served last in each queue (JSON { queue: group }: round-robin starts after it).
     */
    claim: `
      WITH grouped AS MATERIALIZED (
        -- §8 is any grouped job due? (one descent of an index that is empty when groups are not used)
        SELECT EXISTS (SELECT 1 FROM ${jobs} AS g
                       WHERE g.status = 'pending' AND g.group_key IS NOT NULL AND g.run_after <= now()) AS due
      ), picked AS MATERIALIZED (
        -- §8 only then: the pick that takes grouped jobs round-robin (migration 9), in its order
        SELECT p.id AS pick_id, p.ord AS pick_ord
        FROM ${s}.pick_mixed($2::int, $3::text[], $4::text[], $6::jsonb) WITH ORDINALITY AS p(id, ord)
        WHERE (SELECT due FROM grouped)
      ), claimed AS (
        UPDATE ${jobs} SET
          status = 'running', worker_id = $1, attempts = attempts + 1, claims = claims + 1,
          attempted_by = ${APPEND_ATTEMPTED_BY},
          lease_until = now() + $5::float8 * interval '1 millisecond',
          run_started_at = now(), updated_at = now(), cancel_requested_at = NULL
        -- by primary key whatever the statistics (a status test the planner can match to a
        -- partial index made it scan every pending row on a never-analyzed table); without
        -- grouped jobs due, the plain pick (only the branch taken is evaluated)
        WHERE id = ANY (CASE WHEN (SELECT due FROM grouped) THEN ARRAY(SELECT pick_id FROM picked)
                             ELSE ARRAY(SELECT ${s}.pick_pending($2::int, $3::text[], $4::text[])) END)
          AND (status || '') = 'pending'
        RETURNING ${CLAIMED_COLUMNS}
      )
      -- in the plain case the rows as the primary key gave them (the caller sorts: nearly in
      -- order already); else each with its position in the round-robin pick
      SELECT c.*, NULL::bigint AS pick_ord FROM claimed AS c WHERE NOT (SELECT due FROM grouped)
      UNION ALL
      SELECT c.*, picked.pick_ord FROM claimed AS c JOIN picked ON picked.pick_id = c.id::bigint
      WHERE (SELECT due FROM grouped)`,

    /**
     * §1.4/§1.9 milliseconds (database time) until the earliest pending job of these tasks and
     * queues becomes due, for the worker's wake-up timer; null when none is waiting. A job that
     * became due *by time* (delayed or retried: run_after after created_at) in the last $3 ms
     * counts as due now (0; the caller clamps): the claim before this read may have run just before its due time, and
     * left out here it would wait for the slow poll. Jobs due on insert have their NOTIFY.
     */
    nextDueInMs: `
      SELECT extract(epoch FROM min(run_after) - now()) * 1000 AS ms FROM ${jobs}
      WHERE status = 'pending' AND run_after > now() - $3::float8 * interval '1 millisecond'
        AND (run_after > now() OR run_after > created_at)
        AND ($1::text[] IS NULL OR task = ANY($1::text[]))
        AND ($2::text[] IS NULL OR queue = ANY($2::text[]))`,
  };
}

export class ClaimStatements extends StatementFamily<ReturnType<typeof claimSql>> {
  async claim(
    db: Executor,
    workerId: string,
    limit: number,
    leaseMs: number,
    tasks: string[] | null,
    queues: string[] | null,
    afterGroups: ReadonlyMap<string, string> = new Map(),
  ): Promise<ClaimedJob[]> {
    const rows = await this.runArrays<ClaimedColumns>(db, this.sql.claim, [
      workerId,
      limit,
      tasks,
      queues,
      leaseMs,
      afterGroups.size === 0 ? null : JSON.stringify(Object.fromEntries(afterGroups)),
    ]);
    return claimedJobsInPickOrder(rows, workerId, leaseMs);
  }

  /**
   * §11 the claims' sequence pass (migration 22): a statement of its own, sent before a claim on
   * the same connection so that the claim's snapshot sees what it made pending. True when keys
   * were noted (the pass ran; some may be left for the next one), false when none was.
   */
  async sequencePass(db: Executor): Promise<boolean> {
    return (await this.run(db, this.sql.sequencePass, [])).length > 0;
  }

  /**
   * Milliseconds until the next pending job of these tasks/queues is due, or null; jobs that
   * became due within the last `sinceMs` (when the caller's claim was sent) give 0.
   */
  async nextDueInMs(
    db: Executor,
    tasks: string[] | null,
    queues: string[] | null,
    sinceMs = 0,
  ): Promise<number | null> {
    const rows = await this.run<{ ms: string | number | null }>(db, this.sql.nextDueInMs, [
      tasks,
      queues,
      Math.max(0, sinceMs),
    ]);
    const ms = rows[0]?.ms;
    return ms === null || ms === undefined ? null : Math.max(0, Number(ms));
  }
}
