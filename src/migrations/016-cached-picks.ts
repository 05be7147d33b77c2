import { type PickFilter, pickMixedSql, pickPendingSql, pickQueueSql } from './009-groups.js';
import type { Migration } from './migration.js';

/**
 * §7 the claims' picks keep their plans. `pick_pending`, `pick_mixed` and `pick_queue` were SQL
 * functions with SET options, which PostgreSQL never inlines and plans again at every call: on
 * this machine ~0.5–0.7 ms of planning in every claim, whose pick then runs in ~0.05 ms (a claim
 * of one job took 0.7–0.9 ms to pick against 0.17–0.26 for the same query cached). Recreated
 * here, unchanged in what they read, lock and return (as migration 15 left them), as PL/pgSQL
 * functions running the same single query: PL/pgSQL keeps the plan for the session. The plan is
 * forced generic, the one the SQL functions had: planned without the arguments' values, so it
 * is the same plan whatever the first caller passed. A cached plan is kept until the table's
 * statistics change, so nothing in it may depend on them for its shape: the scope-'pending'
 * filter (migration 10's `blocked`) is written so that it is always one probe of the running
 * keyed jobs' index per keyed candidate (OFFSET 0 keeps the planner from turning it into a hash
 * of every running keyed job, which it chose on a never-analyzed table and then kept).
 */
export const cachedPicks: Migration = {
  version: 16,
  name: 'cached-picks',
  sql: (s) => `
${asPlpgsql(pickPendingSql(s, 'CREATE OR REPLACE', probedBlocked(s), 'FOR NO KEY UPDATE'))}

${asPlpgsql(pickMixedSql(s, 'CREATE OR REPLACE', probedBlocked(s), 'FOR NO KEY UPDATE'))}

${asPlpgsql(pickQueueSql(s, 'CREATE OR REPLACE', probedBlocked(s), 'FOR NO KEY UPDATE'))}
`,
};

/**
 * A `LANGUAGE sql` set-returning function of one query as PL/pgSQL returning that query, with
 * its SET options, `jit = off` and a generic plan.
 */
export function asPlpgsql(definition: string): string {
  const open = definition.indexOf('AS $fn$');
  const close = definition.lastIndexOf('$fn$');
  if (open < 0 || close <= open || !definition.includes('LANGUAGE sql')) {
    throw new Error('migration 16: not a LANGUAGE sql function of one query');
  }
  const head = definition
    .slice(0, open)
    .replace('LANGUAGE sql', 'LANGUAGE plpgsql')
    .replace(/SET jit = off\n/, '');
  const query = definition.slice(open + 'AS $fn$'.length, close);
  return `${head}SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
  RETURN QUERY
${query}
  ;
END
$fn$;`;
}

/**
 * §8 scope 'pending' as migration 10's `blocked`: a pending job whose key has a running holder
 * is not picked; always probed per keyed candidate through jobs_pending_key_running_idx.
 */
export const probedBlocked =
  (s: string): PickFilter =>
  (alias) =>
    `
      -- §8 scope 'pending': not while the key's holder runs (one running per key)
      AND (${alias}.pending_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM ${s}.jobs AS rk   -- one probe of the index of running keyed jobs
            WHERE rk.pending_key = ${alias}.pending_key AND rk.status = 'running' AND rk.pending_key IS NOT NULL
            OFFSET 0))`;
