import { pickGroupsSql, pickMixedSql, pickPendingSql, pickQueueSql } from './009-groups.js';
import { blocked } from './010-pending-scope.js';
import type { Migration } from './migration.js';

/**
 * SPEC §10, §1.5: a dependent's counter is decided where no older snapshot can hide an edge or
 * a status — whatever the interleaving of the enqueue that adds the edge with the statement that
 * finishes the dependency.
 *
 * The trap (TECH-NOTES): a statement that waits on a row lock re-checks only that row once the
 * lock is granted (EvalPlanQual); every other table it reads from the snapshot it took before it
 * waited. A completion that waited for an enqueue's lock on its job counted that job's dependents
 * from `job_dependencies` as of before the new edge committed, and the new dependent waited
 * forever; a prune that waited so deleted a dependency the new edge needed.
 *
 * - **Completions** (`complete`, `completeMany`, their ctx.transaction forms) call
 *   `unblock_dependents(ids)` after they have locked and updated their jobs: a VOLATILE function,
 *   so each of its statements takes a new snapshot, which sees every edge committed before the
 *   completion held its jobs (an enqueue can add an edge to a job only while it holds that job's
 *   row lock, at its commit: see below). The rest of the design of migration 14 is unchanged:
 *   the dependents are locked in id order, then counted down once each per batch.
 * - **A new job that depends on existing jobs** is written `waiting`, its counter at its number
 *   of dependencies, and its write notes it in `dependency_checks`. At the commit of its
 *   transaction a deferred constraint trigger on that row (`dependencies_committed`: one per
 *   write, however many jobs it holds) locks those jobs in id order — waiting for a transition in
 *   flight, whose outcome the lock then reads — marks them as having dependents (a new row
 *   version: a prune whose snapshot is older sees the change and keeps them), and decides the
 *   jobs' counters and statuses from their statuses as they are now: pending (with the wake-up
 *   hint) when all are satisfied, cancelled when one failed, else waiting. Until that commit
 *   the enqueue holds only FOR KEY SHARE on them (taken by the enqueue's read, src/store/flows.ts),
 *   which keeps them from being deleted and makes nobody else wait: completions, claims, the
 *   reaper, cancel and requeue take FOR NO KEY UPDATE, which does not conflict with it. The
 *   picks of the claims are recreated here with FOR NO KEY UPDATE SKIP LOCKED (FOR UPDATE
 *   would skip such a job).
 * - **Prunes** lock their victims FOR UPDATE SKIP LOCKED (a job an open enqueue depends on is
 *   passed by) and keep a row whose version changed since their snapshot (src/store/admin.ts).
 *
 * A job written by the previous version (its counter exact under the row locks it took) is
 * left as it was.
 */
export const dependencyCommit: Migration = {
  version: 15,
  name: 'dependency-commit',
  sql: (s) => `
-- §10 running → done of the jobs p_done (all locked by the calling statement, which set them
-- done): their dependents, locked in id order, count them down — one update per dependent,
-- however many of its dependencies p_done holds; one that reaches zero goes waiting → pending,
-- due from now at the latest, with the enqueue's wake-up hint on p_channel. Returns how many
-- went pending. Every statement here has a snapshot newer than the caller's locks (VOLATILE):
-- it sees every edge to p_done that will ever be added before their completion commits.
-- §7 the edges by index, one probe per job (OFFSET 0 keeps it from becoming a scan of every edge).
CREATE FUNCTION ${s}.unblock_dependents(p_done bigint[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE SET jit = off AS $fn$
DECLARE
  woken integer;
BEGIN
  PERFORM 1 FROM ${s}.jobs AS c
  WHERE c.id IN (SELECT e.job_id FROM unnest(p_done) AS f(id)
                 CROSS JOIN LATERAL (SELECT d.job_id FROM ${s}.job_dependencies AS d
                                     WHERE d.depends_on = f.id OFFSET 0) AS e)
  ORDER BY c.id FOR NO KEY UPDATE;
  WITH k AS (
    SELECT e.job_id, count(*)::int AS n FROM unnest(p_done) AS f(id)
    CROSS JOIN LATERAL (SELECT d.job_id FROM ${s}.job_dependencies AS d WHERE d.depends_on = f.id OFFSET 0) AS e
    GROUP BY e.job_id
  ), changed AS (
    UPDATE ${s}.jobs AS c SET
      deps_left = c.deps_left - k.n,
      status = CASE WHEN c.status = 'waiting' AND c.deps_left = k.n THEN 'pending' ELSE c.status END,
      -- due from when it was unblocked: the backlog queued meanwhile runs first (§2 claim order)
      run_after = CASE WHEN c.status = 'waiting' AND c.deps_left = k.n THEN greatest(c.run_after, now())
                       ELSE c.run_after END,
      updated_at = CASE WHEN c.status = 'waiting' AND c.deps_left = k.n THEN now() ELSE c.updated_at END
    FROM k WHERE c.id = k.job_id
    RETURNING c.status
  )
  SELECT count(*) FILTER (WHERE status = 'pending') INTO woken FROM changed;
  IF woken > 0 THEN
    PERFORM pg_notify(p_channel, 'jobs');   -- §1.9 the same hint as an enqueue
  END IF;
  RETURN woken;
END
$fn$;

-- §10 the jobs of one write (an enqueue, enqueueMany or enqueueFlow call) that depend on jobs
-- that existed before it, to decide at its transaction's commit (dependencies_committed): one
-- row per write, deleted by its trigger. first_id: the lowest id the write drew (every
-- dependency below it is an existing job).
CREATE TABLE ${s}.dependency_checks (
  id       bigserial PRIMARY KEY,
  job_ids  bigint[] NOT NULL,
  first_id bigint NOT NULL
);

-- §10 at the commit of a write of jobs that depend on existing jobs: see the header
CREATE FUNCTION ${s}.dependencies_committed() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $fn$
DECLARE
  woken integer;
  channel text := 'skiplock:' || TG_TABLE_SCHEMA;
BEGIN
  IF octet_length(channel) > 63 THEN
    channel := 'skiplock:' || left(encode(sha256(convert_to(TG_TABLE_SCHEMA, 'UTF8')), 'hex'), 40);
  END IF;
  -- the existing dependencies, in id order (as every other locker of several jobs): a
  -- transition in flight is waited for, and its outcome is what the statements below read
  PERFORM 1 FROM ${s}.jobs AS p
  WHERE p.id IN (SELECT d.depends_on FROM ${s}.job_dependencies AS d
                 WHERE d.job_id = ANY (NEW.job_ids) AND d.depends_on < NEW.first_id)
  ORDER BY p.id FOR NO KEY UPDATE;
  -- marked, each once, in a new row version even when already marked (see the prunes)
  UPDATE ${s}.jobs AS p SET has_dependents = true
  WHERE p.id IN (SELECT d.depends_on FROM ${s}.job_dependencies AS d
                 WHERE d.job_id = ANY (NEW.job_ids) AND d.depends_on < NEW.first_id);
  -- each job's counter from its dependencies' statuses as they are now: an edge is satisfied
  -- while its dependency is done (or, for onDependencyFailure 'run', dead or cancelled), the
  -- counter the transitions of migration 14 move; a failed one cancels it. A job whose status
  -- this transaction changed meanwhile (a cascade, a cancel) keeps it, with its counter exact.
  WITH decided AS (
    SELECT c.id, c.status AS was,
           count(*) FILTER (WHERE NOT (p.status = 'done'
                                       OR (c.run_on_dependency_failure AND p.status IN ('dead', 'cancelled'))))::int AS left_now,
           min(p.id) FILTER (WHERE p.status IN ('dead', 'cancelled') AND NOT c.run_on_dependency_failure) AS failed_id
    FROM ${s}.jobs AS c
    JOIN ${s}.job_dependencies AS d ON d.job_id = c.id
    JOIN ${s}.jobs AS p ON p.id = d.depends_on
    WHERE c.id = ANY (NEW.job_ids)
    GROUP BY c.id, c.status
  ), changed AS (
    UPDATE ${s}.jobs AS c SET
      deps_left = k.left_now,
      status = CASE WHEN k.was <> 'waiting' THEN c.status
                    WHEN k.failed_id IS NOT NULL THEN 'cancelled'
                    WHEN k.left_now = 0 THEN 'pending'
                    ELSE 'waiting' END,
      cancelled_by = CASE WHEN k.was = 'waiting' AND k.failed_id IS NOT NULL THEN k.failed_id ELSE c.cancelled_by END,
      last_error = CASE WHEN k.was = 'waiting' AND k.failed_id IS NOT NULL
                        THEN format('Cancelled: job %s, which it depends on, is %s (onDependencyFailure ''cancel'')%s',
                                    k.failed_id, f.status,
                                    -- only a dead job can be requeued (SPEC §3)
                                    CASE WHEN f.status = 'dead'
                                         THEN format('; requeueing job %s brings this job back', k.failed_id)
                                         ELSE '' END)
                        ELSE c.last_error END,
      -- due from when it was unblocked at the latest (§2 claim order)
      run_after = CASE WHEN k.was = 'waiting' AND k.failed_id IS NULL AND k.left_now = 0
                       THEN greatest(c.run_after, now()) ELSE c.run_after END,
      updated_at = CASE WHEN k.was = 'waiting' AND (k.failed_id IS NOT NULL OR k.left_now = 0) THEN now()
                        ELSE c.updated_at END
    FROM decided AS k LEFT JOIN ${s}.jobs AS f ON f.id = k.failed_id
    WHERE c.id = k.id
    RETURNING c.status, k.was
  )
  SELECT count(*) FILTER (WHERE status = 'pending' AND was = 'waiting') INTO woken FROM changed;
  IF woken > 0 THEN
    PERFORM pg_notify(channel, 'jobs');   -- §1.9 the same hint as an enqueue
  END IF;
  DELETE FROM ${s}.dependency_checks WHERE id = NEW.id;
  RETURN NULL;
END
$fn$;

CREATE CONSTRAINT TRIGGER dependencies_committed AFTER INSERT ON ${s}.dependency_checks
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  EXECUTE FUNCTION ${s}.dependencies_committed();

-- §1.1 the picks, as migration 10 left them, locking FOR NO KEY UPDATE (see the header)
${pickGroupsSql(s, 'CREATE OR REPLACE', blocked(s), 'FOR NO KEY UPDATE')}

${pickPendingSql(s, 'CREATE OR REPLACE', blocked(s), 'FOR NO KEY UPDATE')}
-- kept from migration 10 (CREATE OR REPLACE resets a function's settings)
ALTER FUNCTION ${s}.pick_pending(integer, text[], text[]) SET jit = off;

${pickMixedSql(s, 'CREATE OR REPLACE', blocked(s), 'FOR NO KEY UPDATE')}

${pickQueueSql(s, 'CREATE OR REPLACE', blocked(s), 'FOR NO KEY UPDATE')}
`,
};
