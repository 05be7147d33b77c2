import type { Migration } from './migration.js';

/**
 * SPEC §8 group keys: a job may carry a group (a tenant, a customer); within one priority the
 * claim takes jobs round-robin across groups, and a queue may limit each group's running jobs
 * and starts per period.
 *
 * Ungrouped jobs keep their claim index, now restricted to them (`group_key IS NULL`), so a
 * queue without group keys claims exactly as before — and a backlog of grouped jobs never lies
 * in that walk. Grouped jobs have an index of their own in (queue, priority, group, run_after,
 * id) order: the pick walks its distinct (priority, group) pairs with one descent each (a skip
 * scan), starts after the group its claimer served last, and takes one job per group per round.
 */
/**
 * A paused or limited queue (alias q): the plain claim leaves it to the limited claim. Later
 * migrations pass a longer list to the pick builders (migration 19: queues with priority aging).
 */
export const RESTRICTED = `q.paused OR q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
       OR q.group_concurrency IS NOT NULL OR q.group_rate_limit IS NOT NULL`;

/**
 * The merge of a pick's CTEs `plain` (ungrouped, in claim order) and `grouped` (pick_groups's
 * rows, its lock marker left out): the k-th plain pick goes with the k-th pick of each group's
 * round, ties between sources go to the older job.
 */
const MERGE = `SELECT x.id FROM (
    SELECT p.id, p.priority, 1 AS rnk, (row_number() OVER ())::int AS seq, p.run_after FROM plain AS p
    UNION ALL
    SELECT g.id, g.priority, g.rnk, g.seq, g.run_after FROM grouped AS g WHERE g.id <> -1
  ) AS x
  ORDER BY x.priority, x.rnk, x.seq, x.run_after, x.id
  LIMIT p_limit`;

/** How a pick function is created: anew, or replacing one of the same signature. */
export type Create = 'CREATE' | 'CREATE OR REPLACE';
/**
 * A condition a pick adds to its candidate jobs (alias given), starting with AND — '' for none.
 * Later migrations recreate the picks with one (migration 10: a key whose holder is running).
 */
export type PickFilter = (alias: string) => string;
const NONE: PickFilter = () => '';
/**
 * The row lock a pick takes on the jobs it picks. Migration 15 recreates the picks with
 * FOR NO KEY UPDATE: a job whose dependent is being enqueued holds a FOR KEY SHARE lock (it
 * must not be deleted meanwhile), which FOR UPDATE would wait for — or, with SKIP LOCKED, skip.
 */
export type PickLock = 'FOR UPDATE' | 'FOR NO KEY UPDATE';

/** The walk of one queue's grouped jobs (see the comment in the SQL). */
export const pickGroupsSql = (
  s: string,
  create: Create,
  blocked: PickFilter,
  lock: PickLock = 'FOR UPDATE',
) => `-- §8 one queue's due grouped jobs, round-robin. Per priority (lowest first): round 1 walks the
-- groups in key order starting after p_after — the group this claimer served last in this
-- queue, so that claims of one job at a time rotate too — one descent per group, taking one job
-- from each group with room, and stops as soon as it has p_limit jobs (its cost follows the
-- jobs taken, not the number of groups); when it has gone all the way round, rounds 2, 3, …
-- take one more job from each group that gave one. A group's room is p_limit, or what p_gc
-- (its running jobs) and p_grl per p_grp_ms (its starts in the window ending at p_at) leave,
-- less what this call took from the group at a higher priority. Those counts are exact under
-- the queue's claim lock (the limited claim), or, with p_lock, under a lock per group: a group
-- with room is try-locked (p_lock, queue, group) until the caller's transaction ends — taken
-- elsewhere: skipped — and counted again by a new statement, whose snapshot sees every claim
-- committed by an earlier holder of that lock. o_rnk is the round, o_seq the order of the
-- picks: callers merge by (priority, round, seq).
${create} FUNCTION ${s}.pick_groups(p_limit integer, p_tasks text[], p_queue text,
                                 p_gc integer, p_grl integer, p_grp_ms integer, p_at timestamptz,
                                 p_after text, p_lock text)
RETURNS TABLE (o_id bigint, o_priority integer, o_rnk integer, o_seq integer, o_run_after timestamptz)
LANGUAGE plpgsql
VOLATILE
-- every probe a descent of jobs_group_claim_idx, whatever the statistics (a big group made the
-- planner walk jobs_pending_run_after_idx past every other group's rows instead)
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
SET enable_sort = off
SET enable_incremental_sort = off
AS $fn$
DECLARE
  limited  boolean := p_gc IS NOT NULL OR p_grl IS NOT NULL;
  used     jsonb := '{}';   -- jobs taken per group in this call (a group may sit at two priorities)
  prio     integer;
  done_prio integer;
  nxt      text COLLATE "C";   -- the walk's order is the index's: every comparison in "C"
  cur      text COLLATE "C";
  busy     boolean := false;
  wrapped  boolean;
  g_key    text[];
  g_room   integer[];
  g_ra     timestamptz[];
  g_id     bigint[];
  ng       integer;
  taken    integer := 0;
  seq      integer := 0;
  rnd      integer;
  room     integer;
  active   integer;
  last     integer;
  k        integer;
  pick     record;
BEGIN
  IF p_limit <= 0 THEN RETURN; END IF;
  IF p_lock IS NOT NULL AND current_setting('transaction_isolation') <> 'read committed' THEN
    -- the recount after a group's lock must see the claims committed before it
    RAISE EXCEPTION 'skiplock claims need READ COMMITTED, not %', current_setting('transaction_isolation')
      USING HINT = 'Set default_transaction_isolation to read committed for the role Skiplock connects as.';
  END IF;
  SELECT j.priority INTO prio FROM ${s}.jobs AS j
  WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.queue = p_queue
  ORDER BY j.queue, j.priority LIMIT 1;
  WHILE prio IS NOT NULL AND taken < p_limit LOOP
    g_key := '{}'; g_room := '{}'; g_ra := '{}'; g_id := '{}'; ng := 0;
    cur := p_after;
    wrapped := p_after IS NULL;
    -- round 1: the groups of this priority from the cursor on, lazily
    LOOP
      EXIT WHEN taken >= p_limit;
      nxt := NULL;
      SELECT j.group_key INTO nxt FROM ${s}.jobs AS j
      WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.queue = p_queue AND j.priority = prio
        AND j.group_key > coalesce(cur, '')   -- '' sorts first in "C" and is no group key (an index bound)
      ORDER BY j.queue, j.priority, j.group_key LIMIT 1;
      IF nxt IS NULL THEN
        EXIT WHEN wrapped;
        wrapped := true;
        cur := NULL;
        CONTINUE;
      END IF;
      EXIT WHEN wrapped AND p_after IS NOT NULL AND nxt > p_after COLLATE "C";   -- all the way round
      cur := nxt;
      room := p_limit;
      IF p_gc IS NOT NULL AND p_lock IS NOT NULL THEN
        -- a quick look first (a full group is skipped without a lock), then under the lock
        CONTINUE WHEN p_gc <= (SELECT count(*) FROM ${s}.jobs AS r
                               WHERE r.status = 'running' AND r.queue = p_queue AND r.group_key = nxt)
                             + coalesce((used ->> nxt)::int, 0);
        IF NOT pg_try_advisory_xact_lock(hashtext(p_lock || ':' || p_queue), hashtext(nxt)) THEN
          busy := true;   -- another claimer is in this group: the caller looks again shortly
          CONTINUE;
        END IF;
      END IF;
      IF limited THEN
        room := least(p_limit,
                      p_gc - (SELECT count(*) FROM ${s}.jobs AS r
                              WHERE r.status = 'running' AND r.queue = p_queue AND r.group_key = nxt)::int,
                      p_grl - (SELECT count(*) FROM ${s}.group_starts AS gs
                               WHERE gs.queue = p_queue AND gs.group_key = nxt
                                 AND gs.at > p_at - p_grp_ms * interval '1 millisecond')::int)
                - coalesce((used ->> nxt)::int, 0);
      END IF;
      CONTINUE WHEN room <= 0;
      SELECT j.id, j.run_after INTO pick FROM ${s}.jobs AS j
      WHERE j.status = 'pending' AND j.group_key = nxt AND j.queue = p_queue AND j.priority = prio
        AND j.run_after <= now() AND (p_tasks IS NULL OR j.task = ANY (p_tasks))${blocked('j')}
      ORDER BY j.queue, j.priority, j.group_key, j.run_after, j.id
      LIMIT 1
      ${lock} SKIP LOCKED;
      CONTINUE WHEN NOT FOUND;
      taken := taken + 1;
      seq := seq + 1;
      ng := ng + 1;
      g_key[ng] := nxt; g_room[ng] := room - 1; g_ra[ng] := pick.run_after; g_id[ng] := pick.id;
      IF limited THEN used := used || jsonb_build_object(nxt, coalesce((used ->> nxt)::int, 0) + 1); END IF;
      o_id := pick.id; o_priority := prio; o_rnk := 1; o_seq := seq; o_run_after := pick.run_after;
      RETURN NEXT;
    END LOOP;
    -- rounds 2, 3, …: only after going all the way round with room to spare
    rnd := 1;
    WHILE taken < p_limit AND ng > 0 LOOP
      rnd := rnd + 1;
      active := 0;
      FOR k IN 1 .. ng LOOP
        IF g_room[k] > 0 THEN active := active + 1; last := k; END IF;
      END LOOP;
      EXIT WHEN active = 0;
      FOR k IN 1 .. ng LOOP
        EXIT WHEN taken >= p_limit;
        CONTINUE WHEN g_room[k] <= 0;
        -- one group left with room: the rest of it in one statement, not a round each
        FOR pick IN
          SELECT j.id, j.run_after FROM ${s}.jobs AS j
          WHERE j.status = 'pending' AND j.group_key = g_key[k] AND j.queue = p_queue AND j.priority = prio
            AND j.run_after <= now() AND (p_tasks IS NULL OR j.task = ANY (p_tasks))${blocked('j')}
            AND (j.run_after, j.id) > (g_ra[k], g_id[k])
          ORDER BY j.queue, j.priority, j.group_key, j.run_after, j.id
          LIMIT CASE WHEN active = 1 THEN least(g_room[k], p_limit - taken) ELSE 1 END
          ${lock} SKIP LOCKED
        LOOP
          taken := taken + 1;
          seq := seq + 1;
          g_room[k] := g_room[k] - 1; g_ra[k] := pick.run_after; g_id[k] := pick.id;
          IF limited THEN
            used := used || jsonb_build_object(g_key[k], coalesce((used ->> g_key[k])::int, 0) + 1);
          END IF;
          o_id := pick.id; o_priority := prio; o_rnk := rnd; o_seq := seq; o_run_after := pick.run_after;
          RETURN NEXT;
          IF active = 1 THEN rnd := rnd + 1; END IF;
        END LOOP;
        IF NOT FOUND THEN g_room[k] := 0; END IF;   -- the group has no more due jobs
      END LOOP;
    END LOOP;
    done_prio := prio;
    prio := NULL;
    SELECT j.priority INTO prio FROM ${s}.jobs AS j
    WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.queue = p_queue AND j.priority > done_prio
    ORDER BY j.queue, j.priority LIMIT 1;
  END LOOP;
  IF busy AND taken < p_limit THEN
    -- a marker, not a job (id -1): a group was skipped for its lock, and this pick is short
    o_id := -1; o_priority := NULL; o_rnk := NULL; o_seq := NULL; o_run_after := NULL;
    RETURN NEXT;
  END IF;
END
$fn$;`;

/** The plain claim's pick for ungrouped jobs. */
export const pickPendingSql = (
  s: string,
  create: Create,
  blocked: PickFilter,
  lock: PickLock = 'FOR UPDATE',
  restricted: string = RESTRICTED,
) => `-- §1.1 the plain claim's pick, as before, for ungrouped jobs only (its index holds no others).
${create} FUNCTION ${s}.pick_pending(p_limit integer, p_tasks text[], p_queues text[])
RETURNS SETOF bigint
LANGUAGE sql
VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
AS $fn$
  SELECT id FROM ${s}.jobs
  WHERE status = 'pending' AND group_key IS NULL AND run_after <= now()
    AND (p_tasks IS NULL OR task = ANY (p_tasks))${blocked('jobs')}
    AND (p_queues IS NULL OR queue = ANY (p_queues))
    -- §8 paused and limited queues are not claimed here (read once per call: an init plan)
    AND queue <> ALL (ARRAY(SELECT q.name FROM ${s}.queues AS q WHERE ${restricted}))
  ORDER BY priority, run_after, id
  LIMIT p_limit
  ${lock} SKIP LOCKED
$fn$;`;

/** The plain claim's pick while a grouped job is due. */
export const pickMixedSql = (
  s: string,
  create: Create,
  blocked: PickFilter,
  lock: PickLock = 'FOR UPDATE',
  restricted: string = RESTRICTED,
) => `-- §1.1/§8 the plain claim's pick while a grouped job is due (the claim statement chooses):
-- ungrouped jobs in claim order and each unrestricted queue's grouped jobs round-robin, merged
-- by (priority, round, order of the picks) — the k-th ungrouped job goes with each group's k-th
-- job. Each source may lock up to p_limit rows, of which the merge keeps p_limit: the rest are
-- skipped by other claimers until this statement commits. p_after: each queue's cursor.
${create} FUNCTION ${s}.pick_mixed(p_limit integer, p_tasks text[], p_queues text[], p_after jsonb)
RETURNS SETOF bigint
LANGUAGE sql
VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
  WITH plain AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_after FROM ${s}.jobs AS j
    WHERE j.status = 'pending' AND j.group_key IS NULL AND j.run_after <= now()
      AND (p_tasks IS NULL OR j.task = ANY (p_tasks))${blocked('j')}
      AND (p_queues IS NULL OR j.queue = ANY (p_queues))
      AND j.queue <> ALL (ARRAY(SELECT q.name FROM ${s}.queues AS q WHERE ${restricted}))
    ORDER BY j.priority, j.run_after, j.id
    LIMIT p_limit
    ${lock} SKIP LOCKED
  ), grouped AS MATERIALIZED (
    WITH RECURSIVE queues_with_groups AS (
      (SELECT j.queue FROM ${s}.jobs AS j
       WHERE j.status = 'pending' AND j.group_key IS NOT NULL ORDER BY j.queue LIMIT 1)
      UNION ALL
      SELECT nx.queue FROM queues_with_groups AS w CROSS JOIN LATERAL (
        SELECT j.queue FROM ${s}.jobs AS j
        WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.queue > w.queue
        ORDER BY j.queue LIMIT 1) AS nx
    )
    SELECT g.o_id AS id, g.o_priority AS priority, g.o_rnk AS rnk, g.o_seq AS seq, g.o_run_after AS run_after
    FROM queues_with_groups AS w
    CROSS JOIN LATERAL ${s}.pick_groups(p_limit, p_tasks, w.queue, NULL, NULL, NULL, NULL, p_after ->> w.queue, NULL) AS g
    WHERE (p_queues IS NULL OR w.queue = ANY (p_queues))
      AND NOT EXISTS (SELECT 1 FROM ${s}.queues AS q
                      WHERE q.name = w.queue
                        AND (${restricted}))
  )
  ${MERGE}
$fn$;`;

/** The limited claim's pick for one queue. */
export const pickQueueSql = (
  s: string,
  create: Create,
  blocked: PickFilter,
  lock: PickLock = 'FOR UPDATE',
) => `${create} FUNCTION ${s}.pick_queue(p_limit integer, p_tasks text[], p_queue text, p_at timestamptz,
                                p_after text, p_lock text)
RETURNS SETOF bigint
LANGUAGE sql
VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
SET enable_seqscan = off
AS $fn$
  WITH plain AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_after FROM ${s}.jobs AS j
    WHERE j.status = 'pending' AND j.group_key IS NULL AND j.run_after <= now() AND j.queue = p_queue
      AND (p_tasks IS NULL OR j.task = ANY (p_tasks))${blocked('j')}
    ORDER BY j.priority, j.run_after, j.id
    LIMIT p_limit
    ${lock} SKIP LOCKED
  ), grouped AS MATERIALIZED (
    SELECT g.o_id AS id, g.o_priority AS priority, g.o_rnk AS rnk, g.o_seq AS seq, g.o_run_after AS run_after
    FROM ${s}.queues AS q
    CROSS JOIN LATERAL ${s}.pick_groups(p_limit, p_tasks, p_queue, q.group_concurrency,
                                        q.group_rate_limit, q.group_rate_period_ms, p_at, p_after, p_lock) AS g
    WHERE q.name = p_queue
      -- a queue without grouped jobs skips the function call (one descent of jobs_group_claim_idx)
      AND EXISTS (SELECT 1 FROM ${s}.jobs AS j
                  WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.queue = p_queue)
  )
  (${MERGE})
  UNION ALL
  -- pick_groups's marker: a group skipped for its lock (the claim looks again shortly)
  SELECT -1 WHERE EXISTS (SELECT 1 FROM grouped AS g WHERE g.id = -1)
$fn$;`;

export const groups: Migration = {
  version: 9,
  name: 'groups',
  sql: (s) => `
-- "C": a group key is an identifier (a tenant id); byte order makes the pick's many key
-- comparisons cheap and its order the same on every server
ALTER TABLE ${s}.jobs ADD COLUMN group_key text COLLATE "C" CHECK (group_key <> '');

DROP INDEX ${s}.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON ${s}.jobs (priority, run_after, id)
  WHERE status = 'pending' AND group_key IS NULL;
CREATE INDEX jobs_group_claim_idx ON ${s}.jobs (queue, priority, group_key, run_after, id)
  WHERE status = 'pending' AND group_key IS NOT NULL;
-- whether any grouped job is due: the claim statement's switch to the merging pick
CREATE INDEX jobs_group_due_idx ON ${s}.jobs (run_after)
  WHERE status = 'pending' AND group_key IS NOT NULL;
-- groupConcurrency: a group's running jobs, counted under the queue's claim lock
CREATE INDEX jobs_group_running_idx ON ${s}.jobs (queue, group_key)
  WHERE status = 'running' AND group_key IS NOT NULL;

ALTER TABLE ${s}.queues
  ADD COLUMN group_concurrency    integer CHECK (group_concurrency >= 1),
  ADD COLUMN group_rate_limit     integer CHECK (group_rate_limit >= 1),
  ADD COLUMN group_rate_period_ms integer CHECK (group_rate_period_ms >= 1),
  ADD CHECK ((group_rate_limit IS NULL) = (group_rate_period_ms IS NULL));
DROP INDEX ${s}.queues_restricted_idx;
CREATE INDEX queues_restricted_idx ON ${s}.queues (name)
  WHERE paused OR concurrency IS NOT NULL OR rate_limit IS NOT NULL
     OR group_concurrency IS NOT NULL OR group_rate_limit IS NOT NULL;

-- groupRateLimit: the starts of each group of a group-rate-limited queue within its period
CREATE TABLE ${s}.group_starts (
  queue     text        NOT NULL,
  group_key text        COLLATE "C" NOT NULL,
  at        timestamptz NOT NULL
);
CREATE INDEX group_starts_idx ON ${s}.group_starts (queue, group_key, at);
-- the prune and the wait for a full window read a queue's log by time
CREATE INDEX group_starts_at_idx ON ${s}.group_starts (queue, at);

${pickGroupsSql(s, 'CREATE', NONE)}

${pickPendingSql(s, 'CREATE OR REPLACE', NONE)}

${pickMixedSql(s, 'CREATE', NONE)}

-- §8 the limited claim's pick for one queue: its ungrouped jobs in claim order and its grouped
-- jobs round-robin within the queue's group limits (rate windows ending at p_at, the claim's
-- instant), merged as pick_mixed merges them. p_lock: the caller holds no queue lock (a queue
-- whose only limit is groupConcurrency): groups are locked one by one (pick_groups).
DROP FUNCTION ${s}.pick_queue(integer, text[], text);
${pickQueueSql(s, 'CREATE', NONE)}
`,
};
