import type { Migration } from './migration.js';

/**
 * SPEC §12 durable steps: a job's checkpoints, and events as set-once latches.
 *
 * - `job_steps` holds one row per (job, step name): a step's value (kind 'step'), a sleep's wake
 *   instant (kind 'sleep', `wake_at`), an event wait (kind 'event': `event`, its timeout instant
 *   in `wake_at`, `resolved` false until the event or the timeout answered it, then `value` is
 *   `{"payload": …}` or null). Every write is fenced by the claim token in the statement that
 *   writes it (src/store/steps.ts and the functions below). A job that ever wrote a step is
 *   marked `has_steps`, and only such a job's delete pays the trigger that deletes its steps
 *   (every other delete one WHEN test).
 * - `events` holds one row per event name: `set_at` null until the first `emitEvent`.
 * - A job waiting for an event is `waiting` with `wait_event` set and `wait_timeout` its timeout
 *   instant (or null); `jobs_wait_event_idx` finds them for the emit, `jobs_wait_timeout_idx`
 *   for the reaper's pass that wakes the timed-out ones.
 *
 * No lost wake-up (the snapshot trap of TECH-NOTES): the waiter and the emitter meet on the
 * event's row lock. The waiter (`step_wait`) reads the event FOR SHARE and registers itself
 * before its commit; the emitter (`emit_event`) sets the event with ON CONFLICT DO UPDATE (a row
 * lock that waits for every registering waiter to commit) and only then, in a later statement
 * with a newer snapshot, wakes the waiting jobs. A waiter that comes second waits for the
 * emitter's lock and then reads the set event from the locked row itself (EvalPlanQual reads its
 * latest version), so it never suspends on an event already set.
 */
export const steps: Migration = {
  version: 20,
  name: 'steps',
  sql: (s) => `
CREATE TABLE ${s}.job_steps (
  job_id       bigint      NOT NULL,
  name         text        NOT NULL,
  kind         text        NOT NULL CHECK (kind IN ('step', 'sleep', 'event')),
  value        jsonb,
  wake_at      timestamptz,
  event        text,
  resolved     boolean     NOT NULL DEFAULT true,
  completed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job_id, name)
);

CREATE TABLE ${s}.events (
  name       text        PRIMARY KEY,
  payload    jsonb,
  set_at     timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
-- prune: set events by age
CREATE INDEX events_set_at_idx ON ${s}.events (set_at) WHERE set_at IS NOT NULL;
-- prune: an event an unanswered wait still names is kept
CREATE INDEX job_steps_unresolved_event_idx ON ${s}.job_steps (event) WHERE NOT resolved;

-- no default, no index on has_steps: adding them is instant, and setting it is a HOT update
ALTER TABLE ${s}.jobs ADD COLUMN has_steps boolean, ADD COLUMN wait_event text, ADD COLUMN wait_timeout timestamptz;
CREATE INDEX jobs_wait_event_idx ON ${s}.jobs (wait_event) WHERE status = 'waiting' AND wait_event IS NOT NULL;
CREATE INDEX jobs_wait_timeout_idx ON ${s}.jobs (wait_timeout) WHERE status = 'waiting' AND wait_timeout IS NOT NULL;

-- §12 steps go with their job (retention, prune, a completion under retention 'delete')
CREATE FUNCTION ${s}.steps_deleted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  DELETE FROM ${s}.job_steps WHERE job_id = OLD.id;
  RETURN NULL;
END
$fn$;
CREATE TRIGGER steps_deleted AFTER DELETE ON ${s}.jobs FOR EACH ROW
  WHEN (OLD.has_steps) EXECUTE FUNCTION ${s}.steps_deleted();

-- §12 ctx.sleep: under the lease (§1.2/§1.3: the job's row locked first, all four fields
-- matched), stores the wake instant once (p_until, else now() + p_ms), then either answers
-- 'resolved' (the instant has passed) or suspends the job: pending at the instant, lease and
-- worker cleared, the attempt given back (as release). Answers 'lost' (not the owner), 'kind'
-- (the name holds another kind of step), 'keyed' (a job of a dedupe key of scope 'pending'
-- cannot go back to pending while it holds its key), 'cancelled' (a cancel was requested: the
-- job ends cancelled instead of sleeping).
CREATE FUNCTION ${s}.step_sleep(p_id bigint, p_worker text, p_attempt integer, p_token bigint,
                                p_name text, p_until timestamptz, p_ms float8,
                                OUT state text, OUT wake_at timestamptz)
LANGUAGE plpgsql VOLATILE SET jit = off AS $fn$
DECLARE
  j record;
  k text;
  inserted integer;
BEGIN
  SELECT id, pending_key, cancel_requested_at INTO j FROM ${s}.jobs
  WHERE id = p_id AND status = 'running' AND worker_id = p_worker AND attempts = p_attempt AND claims = p_token
  FOR NO KEY UPDATE;
  IF NOT FOUND THEN state := 'lost'; RETURN; END IF;
  INSERT INTO ${s}.job_steps AS t (job_id, name, kind, value, wake_at)
  SELECT p_id, p_name, 'sleep', jsonb_build_object('until', w), w
  FROM (SELECT coalesce(p_until, now() + p_ms * interval '1 millisecond') AS w) AS x
  ON CONFLICT (job_id, name) DO NOTHING;
  GET DIAGNOSTICS inserted = ROW_COUNT;
  SELECT t.kind, t.wake_at INTO k, wake_at FROM ${s}.job_steps AS t WHERE t.job_id = p_id AND t.name = p_name;
  IF k <> 'sleep' THEN state := 'kind'; RETURN; END IF;
  UPDATE ${s}.jobs SET has_steps = true WHERE id = p_id AND has_steps IS NOT TRUE;
  IF wake_at <= now() THEN state := 'resolved'; RETURN; END IF;
  IF j.pending_key IS NOT NULL THEN
    -- refused: the sleep is not stored (a retry must be refused again, not find it passed)
    IF inserted > 0 THEN DELETE FROM ${s}.job_steps AS t WHERE t.job_id = p_id AND t.name = p_name; END IF;
    state := 'keyed'; RETURN;
  END IF;
  IF j.cancel_requested_at IS NOT NULL THEN
    UPDATE ${s}.jobs SET status = 'cancelled', lease_until = NULL, worker_id = NULL, updated_at = now()
    WHERE id = p_id;
    state := 'cancelled'; RETURN;
  END IF;
  UPDATE ${s}.jobs SET status = 'pending', run_after = step_sleep.wake_at, attempts = attempts - 1,
                       lease_until = NULL, worker_id = NULL, run_started_at = NULL, updated_at = now()
  WHERE id = p_id;
  state := 'suspended';
END
$fn$;

-- §12 ctx.waitForEvent: under the lease (the job's row locked first), reads the event FOR SHARE
-- (see the header: the lock the emitter must wait for), registers the step once (its timeout
-- instant fixed at the first call), then answers 'set' (value {"payload": …} stored), 'timeout'
-- (value null stored), or suspends the job as waiting for the event until p_channel's emit or
-- the timeout ('waiting'; the attempt given back). 'lost', 'kind', 'keyed', 'cancelled' as in
-- step_sleep; 'resolved' with the stored value when the step was answered before.
CREATE FUNCTION ${s}.step_wait(p_id bigint, p_worker text, p_attempt integer, p_token bigint,
                               p_name text, p_event text, p_timeout_ms float8,
                               OUT state text, OUT value jsonb)
LANGUAGE plpgsql VOLATILE SET jit = off AS $fn$
DECLARE
  j record;
  st record;
  had boolean;
  ev record;
BEGIN
  SELECT id, pending_key, cancel_requested_at INTO j FROM ${s}.jobs
  WHERE id = p_id AND status = 'running' AND worker_id = p_worker AND attempts = p_attempt AND claims = p_token
  FOR NO KEY UPDATE;
  IF NOT FOUND THEN state := 'lost'; RETURN; END IF;
  SELECT t.kind, t.resolved, t.value, t.wake_at, t.event INTO st FROM ${s}.job_steps AS t
  WHERE t.job_id = p_id AND t.name = p_name;
  had := FOUND;
  IF had AND st.kind <> 'event' THEN state := 'kind'; RETURN; END IF;
  IF had AND st.resolved THEN state := 'resolved'; value := st.value; RETURN; END IF;
  -- the event's row, locked FOR SHARE: an emit in flight is waited for and then read here
  INSERT INTO ${s}.events (name) VALUES (p_event) ON CONFLICT (name) DO NOTHING;
  SELECT e.payload, e.set_at INTO ev FROM ${s}.events AS e WHERE e.name = p_event FOR SHARE;
  IF NOT had THEN
    INSERT INTO ${s}.job_steps AS t (job_id, name, kind, event, wake_at, resolved)
    VALUES (p_id, p_name, 'event', p_event,
            now() + p_timeout_ms * interval '1 millisecond', false)
    RETURNING t.kind, t.resolved, t.value, t.wake_at, t.event INTO st;
    UPDATE ${s}.jobs SET has_steps = true WHERE id = p_id AND has_steps IS NOT TRUE;
  END IF;
  IF ev.set_at IS NOT NULL THEN
    value := jsonb_build_object('payload', ev.payload);
    UPDATE ${s}.job_steps AS t SET resolved = true, value = step_wait.value, completed_at = now()
    WHERE t.job_id = p_id AND t.name = p_name;
    state := 'set'; RETURN;
  END IF;
  IF st.wake_at IS NOT NULL AND st.wake_at <= now() THEN
    UPDATE ${s}.job_steps AS t SET resolved = true, value = 'null'::jsonb, completed_at = now()
    WHERE t.job_id = p_id AND t.name = p_name;
    state := 'timeout'; value := 'null'::jsonb; RETURN;
  END IF;
  IF j.pending_key IS NOT NULL THEN
    -- refused: the wait is not stored (its timeout must not start on a refused call)
    IF NOT had THEN DELETE FROM ${s}.job_steps AS t WHERE t.job_id = p_id AND t.name = p_name; END IF;
    state := 'keyed'; RETURN;
  END IF;
  IF j.cancel_requested_at IS NOT NULL THEN
    UPDATE ${s}.jobs SET status = 'cancelled', lease_until = NULL, worker_id = NULL, updated_at = now()
    WHERE id = p_id;
    state := 'cancelled'; RETURN;
  END IF;
  UPDATE ${s}.jobs SET status = 'waiting', wait_event = p_event, wait_timeout = st.wake_at, attempts = attempts - 1,
                       lease_until = NULL, worker_id = NULL, run_started_at = NULL, updated_at = now()
  WHERE id = p_id;
  state := 'waiting';
END
$fn$;

-- §12 queue.emitEvent: sets the latch once (true: this call set it), then — in a later
-- statement, whose snapshot sees every waiter that registered before this lock (see the header)
-- — makes every job waiting for it pending, its wait answered with the payload in the same
-- statement, with the enqueue's wake-up hint (§1.9). Only at READ
-- COMMITTED: a transaction snapshot would hide the waiters.
CREATE FUNCTION ${s}.emit_event(p_name text, p_payload jsonb, p_channel text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET jit = off AS $fn$
DECLARE
  woken integer;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'emitEvent needs a READ COMMITTED transaction (this one is %)', current_setting('transaction_isolation')
      USING ERRCODE = '0A000',
            HINT = 'emit in a READ COMMITTED transaction: a transaction snapshot could miss jobs that began waiting meanwhile';
  END IF;
  INSERT INTO ${s}.events AS e (name, payload, set_at) VALUES (p_name, coalesce(p_payload, 'null'::jsonb), now())
  ON CONFLICT (name) DO UPDATE SET payload = excluded.payload, set_at = excluded.set_at
  WHERE e.set_at IS NULL;
  IF NOT FOUND THEN RETURN false; END IF;
  -- the woken jobs' waits are answered here, in the same statement: their rerun reads the
  -- payload from its own step row and never needs the event row again (prune may delete it)
  WITH changed AS (
    UPDATE ${s}.jobs SET status = 'pending', wait_event = NULL, wait_timeout = NULL, run_after = now(), updated_at = now()
    WHERE status = 'waiting' AND wait_event = p_name AND deps_left = 0
    RETURNING id
  ), answered AS (
    UPDATE ${s}.job_steps AS t SET resolved = true, value = jsonb_build_object('payload', coalesce(p_payload, 'null'::jsonb)),
                                   completed_at = now()
    FROM changed WHERE t.job_id = changed.id AND t.kind = 'event' AND t.event = p_name AND NOT t.resolved
    RETURNING 1
  )
  SELECT count(*) INTO woken FROM changed;
  IF woken > 0 THEN
    PERFORM pg_notify(p_channel, 'jobs');   -- §1.9 the same hint as an enqueue
  END IF;
  RETURN true;
END
$fn$;
`,
};
