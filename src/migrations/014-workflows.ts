import type { Migration } from './migration.js';

/**
 * SPEC §10 workflows: job dependencies. A job with dependencies that are not all done is
 * `waiting` (not claimable, not backlog). Its edges live in `job_dependencies`, indexed both
 * ways; `deps_left` counts the edges not yet satisfied — an edge is satisfied while its
 * dependency is done, or, for a dependent with `run_on_dependency_failure`, dead or cancelled.
 *
 * Everything that follows from a dependency's change of status happens in the transaction that
 * changes it, whichever statement does. A completion (running → done) counts its dependents
 * down in the completing statement itself (UNBLOCK in src/store/fragments.ts: one update per
 * dependent for a whole batch). Every other change (a retry that goes dead, a cancel, the
 * reaper, a requeue, any statement) goes through a trigger on the dependency's row, which fires
 * only for jobs that have dependents (`has_dependents`; every other job pays one WHEN test per
 * status change).
 * - The counter of each dependent moves by one per edge whose satisfaction changed; the
 *   dependents' rows are locked first, in id order, so two dependencies that finish at the same
 *   instant in two workers serialise on their shared dependents and exactly one of them sees the
 *   counter reach zero (waiting → pending, and the enqueue's wake-up hint). A dependency that
 *   leaves done again (a requeue) moves its not yet started dependents back to waiting.
 * - A dependency that ends dead or cancelled cancels its waiting dependents, and theirs, in one
 *   statement (no trigger recursion as deep as the graph); each notes in `cancelled_by` the
 *   dependency whose failure cancelled it. Requeueing that dependency brings them back to
 *   waiting, except those that still depend on another dead or cancelled job.
 * A requeue of a dead job with unsatisfied edges makes it waiting (the requeue statements). No
 * BEFORE trigger does that for every statement: a BEFORE UPDATE row trigger makes PostgreSQL
 * lock each updated row once more before the update, whatever its WHEN says (every claim and
 * completion paid it: W2 was about 8 % slower). A retry or release of a running job whose
 * dependency was requeued meanwhile (onDependencyFailure 'run') goes back to pending: it does
 * not wait again.
 * Deleting a job deletes its edges (no foreign keys: their checks would cost every delete); a
 * running job deleted (a completion by a worker of the version before this one, under
 * retention 'delete') counts as done for its dependents.
 */
export const workflows: Migration = {
  version: 14,
  name: 'workflows',
  sql: (s) => `
-- a superset of the old check: NOT VALID skips checking every row again (the new indexes below
-- read the table once each, under the migration's lock)
ALTER TABLE ${s}.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE ${s}.jobs ADD CONSTRAINT jobs_status_check
  CHECK (status IN ('waiting', 'pending', 'running', 'done', 'dead', 'cancelled')) NOT VALID;

ALTER TABLE ${s}.jobs
  ADD COLUMN flow_id uuid,
  ADD COLUMN flow_ref text,
  ADD COLUMN deps_left integer NOT NULL DEFAULT 0,
  ADD COLUMN deps_total integer NOT NULL DEFAULT 0,
  ADD COLUMN has_dependents boolean NOT NULL DEFAULT false,
  ADD COLUMN run_on_dependency_failure boolean NOT NULL DEFAULT false,
  ADD COLUMN cancelled_by bigint;

CREATE TABLE ${s}.job_dependencies (
  job_id     bigint NOT NULL,
  depends_on bigint NOT NULL,
  PRIMARY KEY (job_id, depends_on)
);
-- a dependency's dependents (the trigger's every lookup)
CREATE INDEX job_dependencies_depends_on_idx ON ${s}.job_dependencies (depends_on, job_id);

-- queue.flow(id), the dashboard's graph
CREATE INDEX jobs_flow_idx ON ${s}.jobs (flow_id, id) WHERE flow_id IS NOT NULL;
-- the jobs a dependency's failure cancelled: brought back by its requeue
CREATE INDEX jobs_cancelled_by_idx ON ${s}.jobs (cancelled_by) WHERE cancelled_by IS NOT NULL;
-- counts(), ops() and lists of waiting jobs (§7: no full-table count)
CREATE INDEX jobs_waiting_idx ON ${s}.jobs (queue) WHERE status = 'waiting';

-- jit off: its statements are small, and a JIT compile of one (~0.6 s) in each nested call of
-- a cascade cost more than the cascade
CREATE FUNCTION ${s}.dependency_changed() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $fn$
DECLARE
  was_done boolean := OLD.status = 'done';
  now_done boolean := NEW.status = 'done';
  was_failed boolean := OLD.status IN ('dead', 'cancelled');
  now_failed boolean := NEW.status IN ('dead', 'cancelled');
  -- how the counter of a dependent moves: one that is cancelled by a failure, one that runs anyway
  step_cancel integer := was_done::int - now_done::int;
  step_run integer := (was_done OR was_failed)::int - (now_done OR now_failed)::int;
  woken integer := 0;
  restored bigint[];
  failure text := CASE WHEN NEW.status = 'dead' THEN 'ended dead' ELSE 'was cancelled' END;
  channel text := 'skiplock:' || TG_TABLE_SCHEMA;
BEGIN
  IF octet_length(channel) > 63 THEN
    channel := 'skiplock:' || left(encode(sha256(convert_to(TG_TABLE_SCHEMA, 'UTF8')), 'hex'), 40);
  END IF;

  -- §10 the dependents' rows, locked in id order before any is changed: dependencies finishing
  -- at once in several transactions queue on them in one order (no deadlock), and each reads
  -- the counter the one before it left (exactly one of them sees it reach zero)
  PERFORM 1 FROM ${s}.jobs AS c
  WHERE c.id IN (SELECT d.job_id FROM ${s}.job_dependencies AS d WHERE d.depends_on = NEW.id)
  ORDER BY c.id FOR NO KEY UPDATE;

  IF step_cancel <> 0 OR step_run <> 0 THEN
    WITH moved AS (
      SELECT c.id, c.deps_left + CASE WHEN c.run_on_dependency_failure THEN step_run ELSE step_cancel END AS left_now
      FROM ${s}.jobs AS c
      WHERE c.id IN (SELECT d.job_id FROM ${s}.job_dependencies AS d WHERE d.depends_on = NEW.id)
    ), changed AS (
      UPDATE ${s}.jobs AS c SET
        deps_left = m.left_now,
        status = CASE WHEN c.status = 'waiting' AND m.left_now = 0 THEN 'pending'
                      WHEN c.status = 'pending' AND m.left_now > 0 THEN 'waiting'
                      ELSE c.status END,
        -- due from when it was unblocked: the backlog queued meanwhile runs first (§2 claim order)
        run_after = CASE WHEN c.status = 'waiting' AND m.left_now = 0 THEN greatest(c.run_after, now())
                         ELSE c.run_after END,
        updated_at = CASE WHEN c.status IN ('waiting', 'pending') THEN now() ELSE c.updated_at END
      FROM moved AS m
      WHERE c.id = m.id AND m.left_now <> c.deps_left
      RETURNING c.status
    )
    SELECT count(*) FILTER (WHERE status = 'pending') INTO woken FROM changed;
    -- §1.9 the same wake-up hint as an enqueue
    IF woken > 0 THEN
      PERFORM pg_notify(channel, 'jobs');
    END IF;
  END IF;

  IF now_failed AND NOT was_failed THEN
    -- §10 cancels the waiting dependents (of onDependencyFailure 'cancel') and theirs, at once
    -- §7 every step by index: the edges by depends_on, each job by its primary key (a scalar
    -- subquery; the waiting jobs' partial index would be read whole at every level)
    WITH RECURSIVE victims(id, via) AS (
      SELECT d.job_id, NEW.id FROM ${s}.job_dependencies AS d
      WHERE d.depends_on = NEW.id
        AND (SELECT c.status = 'waiting' AND NOT c.run_on_dependency_failure FROM ${s}.jobs AS c WHERE c.id = d.job_id)
      UNION
      SELECT d.job_id, v.id FROM victims AS v
      CROSS JOIN LATERAL (SELECT e.job_id FROM ${s}.job_dependencies AS e WHERE e.depends_on = v.id OFFSET 0) AS d
      WHERE (SELECT c.status = 'waiting' AND NOT c.run_on_dependency_failure FROM ${s}.jobs AS c WHERE c.id = d.job_id)
    )
    UPDATE ${s}.jobs AS c SET
      status = 'cancelled', cancelled_by = v.via, updated_at = now(),
      last_error = format('Cancelled: %s (onDependencyFailure ''cancel'')%s',
        CASE WHEN v.via = NEW.id THEN format('job %s, which it depends on, %s', NEW.id, failure)
             ELSE format('job %s, which it depends on, was cancelled because job %s %s', v.via, NEW.id, failure) END,
        -- only a dead job can be requeued (SPEC §3)
        CASE WHEN NEW.status = 'dead' THEN format('; requeueing job %s brings this job back', NEW.id) ELSE '' END)
    FROM (SELECT DISTINCT ON (id) id, via FROM victims ORDER BY id, via) AS v
    -- re-checked on the row (a cancel may have come first), in a form no partial index matches
    WHERE c.id = v.id AND (c.status || '') = 'waiting';
  ELSIF was_failed AND NOT now_failed THEN
    -- §10 a requeue brings back what this job's failure cancelled, and what that cancelled
    -- through jobs_cancelled_by_idx (the status in a form the cancelled jobs' index does not match)
    WITH RECURSIVE back(id) AS (
      SELECT c.id FROM ${s}.jobs AS c WHERE c.cancelled_by = NEW.id AND (c.status || '') = 'cancelled'
      UNION
      SELECT c.id FROM back AS b
      CROSS JOIN LATERAL (SELECT j.id FROM ${s}.jobs AS j
                          WHERE j.cancelled_by = b.id AND (j.status || '') = 'cancelled' OFFSET 0) AS c
    )
    SELECT array_agg(id ORDER BY id) INTO restored FROM back;
    IF restored IS NOT NULL THEN
      UPDATE ${s}.jobs AS c SET status = 'waiting', cancelled_by = NULL, last_error = NULL, updated_at = now()
      WHERE c.id = ANY (restored) AND c.status = 'cancelled';
      -- one that still depends on another dead or cancelled job is cancelled by that one again
      -- (its own trigger cancels what depends on it)
      UPDATE ${s}.jobs AS c SET
        status = 'cancelled', cancelled_by = f.dep, updated_at = now(),
        last_error = format('Cancelled: job %s, which it depends on, is %s (onDependencyFailure ''cancel'')', f.dep, f.status)
      FROM (SELECT DISTINCT ON (d.job_id) d.job_id, p.id AS dep, p.status
            FROM ${s}.job_dependencies AS d JOIN ${s}.jobs AS p ON p.id = d.depends_on
            WHERE d.job_id = ANY (restored) AND p.status IN ('dead', 'cancelled')
            ORDER BY d.job_id, p.id) AS f
      WHERE c.id = f.job_id AND c.status = 'waiting' AND NOT c.run_on_dependency_failure;
    END IF;
  END IF;
  RETURN NULL;
END
$fn$;

-- running → done is left to the completing statements (UNBLOCK in src/store/fragments.ts), which
-- count a whole batch down with one update per dependent
CREATE TRIGGER dependency_changed AFTER UPDATE OF status ON ${s}.jobs FOR EACH ROW
  WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
        AND (OLD.status IN ('done', 'dead', 'cancelled') OR NEW.status IN ('done', 'dead', 'cancelled'))
        AND NOT (OLD.status = 'running' AND NEW.status = 'done'))
  EXECUTE FUNCTION ${s}.dependency_changed();

CREATE FUNCTION ${s}.dependencies_deleted() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  woken integer;
  channel text := 'skiplock:' || TG_TABLE_SCHEMA;
BEGIN
  -- a running job deleted is a completion under retention 'delete' by a worker of a version
  -- before this one (which deletes jobs with dependents too): it counts as done for them
  IF OLD.has_dependents AND OLD.status = 'running' THEN
    IF octet_length(channel) > 63 THEN
      channel := 'skiplock:' || left(encode(sha256(convert_to(TG_TABLE_SCHEMA, 'UTF8')), 'hex'), 40);
    END IF;
    PERFORM 1 FROM ${s}.jobs AS c
    WHERE c.id IN (SELECT d.job_id FROM ${s}.job_dependencies AS d WHERE d.depends_on = OLD.id)
    ORDER BY c.id FOR NO KEY UPDATE;
    WITH changed AS (
      UPDATE ${s}.jobs AS c SET
        deps_left = c.deps_left - 1,
        status = CASE WHEN c.status = 'waiting' AND c.deps_left = 1 THEN 'pending' ELSE c.status END,
        run_after = CASE WHEN c.status = 'waiting' AND c.deps_left = 1 THEN greatest(c.run_after, now())
                         ELSE c.run_after END,
        updated_at = CASE WHEN c.status = 'waiting' AND c.deps_left = 1 THEN now() ELSE c.updated_at END
      WHERE c.id IN (SELECT d.job_id FROM ${s}.job_dependencies AS d WHERE d.depends_on = OLD.id)
      RETURNING c.status
    )
    SELECT count(*) FILTER (WHERE status = 'pending') INTO woken FROM changed;
    IF woken > 0 THEN
      PERFORM pg_notify(channel, 'jobs');
    END IF;
  END IF;
  DELETE FROM ${s}.job_dependencies WHERE job_id = OLD.id;
  DELETE FROM ${s}.job_dependencies WHERE depends_on = OLD.id;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER dependencies_deleted AFTER DELETE ON ${s}.jobs FOR EACH ROW
  WHEN (OLD.has_dependents OR OLD.deps_total > 0)
  EXECUTE FUNCTION ${s}.dependencies_deleted();
`,
};
