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

-- §8 one queue's due grouped jobs, round-robin: the groups (per priority, in key order starting
-- after p_after — the group this claimer served last, so that claims of one job at a time
-- rotate too) each give one job per round, rounds repeat until p_limit jobs or none left.
-- A group's room is p_limit, or what p_gc (its running jobs) and p_grl per p_grp_ms (its starts)
-- leave, the starts counted in the window that ends at p_at — those counts are exact only under
-- the queue's claim lock (the limited claim).
-- o_rnk is the round: callers merge picks by (priority, round, run_after, id).
CREATE FUNCTION ${s}.pick_groups(p_limit integer, p_tasks text[], p_queue text,
                                 p_gc integer, p_grl integer, p_grp_ms integer, p_at timestamptz,
                                 p_after text)
RETURNS TABLE (o_id bigint, o_priority integer, o_rnk integer, o_run_after timestamptz)
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
  g_prio   integer[];
  g_key    text[];
  g_first  integer[];   -- the entry that holds this group's room (a group may sit at two priorities)
  g_room   integer[];
  g_ra     timestamptz[];
  g_id     bigint[];
  g_done   boolean[];
  ng       integer;
  taken    integer := 0;
  lvl      integer := 1;
  lvl_end  integer;
  rnd      integer;
  progress boolean;
  k        integer;
  active   integer;
  last     integer;
  pick     record;
BEGIN
  IF p_limit <= 0 THEN RETURN; END IF;
  -- the groups: the distinct (priority, group) pairs of jobs_group_claim_idx, one descent each
  -- (a group with no job due yet gives nothing below)
  WITH RECURSIVE walk AS (
    (SELECT j.priority, j.group_key, j.run_after, j.id FROM ${s}.jobs AS j
     WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.queue = p_queue
     ORDER BY j.queue, j.priority, j.group_key, j.run_after, j.id LIMIT 1)
    UNION ALL
    SELECT nx.priority, nx.group_key, nx.run_after, nx.id
    FROM walk AS w CROSS JOIN LATERAL (
      SELECT j.priority, j.group_key, j.run_after, j.id FROM ${s}.jobs AS j
      WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.queue = p_queue
        AND (j.priority, j.group_key) > (w.priority, w.group_key)
      ORDER BY j.queue, j.priority, j.group_key, j.run_after, j.id LIMIT 1) AS nx
  ), heads AS (
    SELECT w.priority, w.group_key,
           row_number() OVER (ORDER BY w.priority, coalesce(w.group_key <= p_after, false), w.group_key) AS ord
    FROM walk AS w
  ), firsts AS (
    SELECT h.*, min(h.ord) OVER (PARTITION BY h.group_key) AS first FROM heads AS h
  )
  SELECT array_agg(f.priority ORDER BY f.ord), array_agg(f.group_key ORDER BY f.ord),
         array_agg(f.first::int ORDER BY f.ord),
         array_agg(least(p_limit,
                         p_gc - (SELECT count(*) FROM ${s}.jobs AS r
                                 WHERE p_gc IS NOT NULL AND r.status = 'running'
                                   AND r.queue = p_queue AND r.group_key = f.group_key)::int,
                         p_grl - (SELECT count(*) FROM ${s}.group_starts AS gs
                                  WHERE p_grl IS NOT NULL AND gs.queue = p_queue AND gs.group_key = f.group_key
                                    AND gs.at > p_at - p_grp_ms * interval '1 millisecond')::int)
                   ORDER BY f.ord)
  INTO g_prio, g_key, g_first, g_room
  FROM firsts AS f;
  ng := coalesce(array_length(g_key, 1), 0);
  IF ng = 0 THEN RETURN; END IF;
  g_ra := array_fill('-infinity'::timestamptz, ARRAY[ng]);
  g_id := array_fill(0::bigint, ARRAY[ng]);
  g_done := array_fill(false, ARRAY[ng]);
  WHILE lvl <= ng AND taken < p_limit LOOP
    lvl_end := lvl;
    WHILE lvl_end < ng AND g_prio[lvl_end + 1] = g_prio[lvl] LOOP
      lvl_end := lvl_end + 1;
    END LOOP;
    rnd := 0;
    LOOP
      rnd := rnd + 1;
      progress := false;
      -- one group left in this priority: the rest of its room in one statement, not a round each
      active := 0;
      FOR k IN lvl .. lvl_end LOOP
        IF NOT g_done[k] AND g_room[g_first[k]] > 0 THEN
          active := active + 1;
          last := k;
        END IF;
      END LOOP;
      IF active = 1 THEN
        k := last;
        FOR pick IN
          SELECT j.id, j.run_after FROM ${s}.jobs AS j
          WHERE j.status = 'pending' AND j.group_key = g_key[k] AND j.queue = p_queue
            AND j.priority = g_prio[k] AND j.run_after <= now()
            AND (p_tasks IS NULL OR j.task = ANY (p_tasks))
            AND (j.run_after, j.id) > (g_ra[k], g_id[k])
          ORDER BY j.queue, j.priority, j.group_key, j.run_after, j.id
          LIMIT least(g_room[g_first[k]], p_limit - taken)
          FOR UPDATE SKIP LOCKED
        LOOP
          taken := taken + 1;
          o_id := pick.id;
          o_priority := g_prio[k];
          o_rnk := rnd;
          rnd := rnd + 1;
          o_run_after := pick.run_after;
          RETURN NEXT;
        END LOOP;
        EXIT;
      END IF;
      EXIT WHEN active = 0;
      FOR k IN lvl .. lvl_end LOOP
        EXIT WHEN taken >= p_limit;
        CONTINUE WHEN g_done[k] OR g_room[g_first[k]] <= 0;
        SELECT j.id, j.run_after INTO pick FROM ${s}.jobs AS j
        WHERE j.status = 'pending' AND j.group_key = g_key[k] AND j.queue = p_queue
          AND j.priority = g_prio[k] AND j.run_after <= now()
          AND (p_tasks IS NULL OR j.task = ANY (p_tasks))
          AND (j.run_after, j.id) > (g_ra[k], g_id[k])
        ORDER BY j.queue, j.priority, j.group_key, j.run_after, j.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
          g_done[k] := true;
          CONTINUE;
        END IF;
        g_ra[k] := pick.run_after;
        g_id[k] := pick.id;
        g_room[g_first[k]] := g_room[g_first[k]] - 1;
        taken := taken + 1;
        progress := true;
        o_id := pick.id;
        o_priority := g_prio[k];
        o_rnk := rnd;
        o_run_after := pick.run_after;
        RETURN NEXT;
      END LOOP;
      EXIT WHEN NOT progress OR taken >= p_limit;
    END LOOP;
    lvl := lvl_end + 1;
  END LOOP;
END
$fn$;

-- §1.1 the plain claim's pick, as before, for ungrouped jobs only (its index holds no others).
CREATE OR REPLACE FUNCTION ${s}.pick_pending(p_limit integer, p_tasks text[], p_queues text[])
RETURNS SETOF bigint
LANGUAGE sql
VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
AS $fn$
  SELECT id FROM ${s}.jobs
  WHERE status = 'pending' AND group_key IS NULL AND run_after <= now()
    AND (p_tasks IS NULL OR task = ANY (p_tasks))
    AND (p_queues IS NULL OR queue = ANY (p_queues))
    -- §8 paused and limited queues are not claimed here (read once per call: an init plan)
    AND queue <> ALL (ARRAY(SELECT q.name FROM ${s}.queues AS q
                            WHERE q.paused OR q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
                               OR q.group_concurrency IS NOT NULL OR q.group_rate_limit IS NOT NULL))
  ORDER BY priority, run_after, id
  LIMIT p_limit
  FOR UPDATE SKIP LOCKED
$fn$;

-- §1.1/§8 the plain claim's pick while any pending job carries a group key (the claim statement
-- chooses): ungrouped jobs in claim order and each unrestricted queue's grouped jobs
-- round-robin, merged by (priority, round, run_after, id) — an ungrouped job is a group of its
-- own. About twice the plain pick's cost (1.2 → 2.5 ms for 200 rows), so only when needed.
CREATE FUNCTION ${s}.pick_mixed(p_limit integer, p_tasks text[], p_queues text[], p_after text)
RETURNS SETOF bigint
LANGUAGE sql
VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
  WITH plain AS MATERIALIZED (
    SELECT j.id, j.priority, 1 AS rnk, j.run_after FROM ${s}.jobs AS j
    WHERE j.status = 'pending' AND j.group_key IS NULL AND j.run_after <= now()
      AND (p_tasks IS NULL OR j.task = ANY (p_tasks))
      AND (p_queues IS NULL OR j.queue = ANY (p_queues))
      AND j.queue <> ALL (ARRAY(SELECT q.name FROM ${s}.queues AS q
                                WHERE q.paused OR q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
                                   OR q.group_concurrency IS NOT NULL OR q.group_rate_limit IS NOT NULL))
    ORDER BY j.priority, j.run_after, j.id
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED
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
    SELECT g.o_id AS id, g.o_priority AS priority, g.o_rnk AS rnk, g.o_run_after AS run_after
    FROM queues_with_groups AS w
    CROSS JOIN LATERAL ${s}.pick_groups(p_limit, p_tasks, w.queue, NULL, NULL, NULL, NULL, p_after) AS g
    WHERE (p_queues IS NULL OR w.queue = ANY (p_queues))
      AND NOT EXISTS (SELECT 1 FROM ${s}.queues AS q
                      WHERE q.name = w.queue
                        AND (q.paused OR q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
                             OR q.group_concurrency IS NOT NULL OR q.group_rate_limit IS NOT NULL))
  )
  SELECT x.id FROM (SELECT * FROM plain UNION ALL SELECT * FROM grouped) AS x
  ORDER BY x.priority, x.rnk, x.run_after, x.id
  LIMIT p_limit
$fn$;

-- §8 the limited claim's pick for one queue: its ungrouped jobs in claim order and its grouped
-- jobs round-robin within the queue's group limits (rate windows ending at p_at, the claim's
-- instant), merged as pick_mixed merges them.
DROP FUNCTION ${s}.pick_queue(integer, text[], text);
CREATE FUNCTION ${s}.pick_queue(p_limit integer, p_tasks text[], p_queue text, p_at timestamptz,
                                p_after text)
RETURNS SETOF bigint
LANGUAGE sql
VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
SET enable_seqscan = off
AS $fn$
  WITH plain AS MATERIALIZED (
    SELECT j.id, j.priority, 1 AS rnk, j.run_after FROM ${s}.jobs AS j
    WHERE j.status = 'pending' AND j.group_key IS NULL AND j.run_after <= now() AND j.queue = p_queue
      AND (p_tasks IS NULL OR j.task = ANY (p_tasks))
    ORDER BY j.priority, j.run_after, j.id
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED
  ), grouped AS MATERIALIZED (
    SELECT g.o_id AS id, g.o_priority AS priority, g.o_rnk AS rnk, g.o_run_after AS run_after
    FROM ${s}.queues AS q
    CROSS JOIN LATERAL ${s}.pick_groups(p_limit, p_tasks, p_queue, q.group_concurrency,
                                        q.group_rate_limit, q.group_rate_period_ms, p_at, p_after) AS g
    WHERE q.name = p_queue
  )
  SELECT x.id FROM (SELECT * FROM plain UNION ALL SELECT * FROM grouped) AS x
  ORDER BY x.priority, x.rnk, x.run_after, x.id
  LIMIT p_limit
$fn$;
`,
};
