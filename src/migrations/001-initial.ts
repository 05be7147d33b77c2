import { quoteLiteral } from '../db/identifier.js';
import type { Migration } from './migration.js';

/**
 * The jobs table and its partial indexes (SPEC §2, §7).
 *
 * Index design: every index other than the primary key is partial, so a finished job costs
 * nothing on the hot path, and a lease renewal (which only changes `lease_until`, an unindexed
 * column) can be a HOT update.
 */
export const initial: Migration = {
  version: 1,
  name: 'initial',
  sql: (s) => `
CREATE SEQUENCE ${s}.jobs_id_seq AS bigint;

CREATE TABLE ${s}.jobs (
  id                  bigint      PRIMARY KEY DEFAULT nextval(${quoteLiteral(`${s}.jobs_id_seq`)}::regclass),
  queue               text        NOT NULL DEFAULT 'default',
  task                text        NOT NULL CHECK (task <> ''),
  status              text        NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'done', 'dead', 'cancelled')),
  priority            integer     NOT NULL DEFAULT 100,
  payload             jsonb       NOT NULL DEFAULT 'null',
  result              jsonb,
  dedupe_key          text,
  attempts            integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  max_attempts        integer     NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
  run_after           timestamptz NOT NULL DEFAULT now(),
  lease_until         timestamptz,
  worker_id           text,
  run_started_at      timestamptz,
  timeout_ms          integer     CHECK (timeout_ms > 0),
  last_error          text,
  cancel_requested_at timestamptz,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

ALTER SEQUENCE ${s}.jobs_id_seq OWNED BY ${s}.jobs.id;

-- Claim order of SPEC §2, over pending rows only (§1.1, §7: done rows never slow the claim).
CREATE INDEX jobs_claim_idx ON ${s}.jobs (priority, run_after, id) WHERE status = 'pending';
-- Earliest run_after among pending jobs: the worker's wake-up timer and ops().oldestPendingSec.
CREATE INDEX jobs_pending_run_after_idx ON ${s}.jobs (run_after) WHERE status = 'pending';
-- §1.7 at most one active job per dedupe key, enforced by the database.
CREATE UNIQUE INDEX jobs_dedupe_key_idx ON ${s}.jobs (dedupe_key)
  WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running');
-- Running jobs by owner: lease renewal of a whole worker, the reaper, ops().running/stuckRunning.
CREATE INDEX jobs_running_idx ON ${s}.jobs (worker_id) WHERE status = 'running';
-- Rare finished states, counted exactly and by age for ops() (§7: no full-table count).
CREATE INDEX jobs_dead_idx ON ${s}.jobs (updated_at) WHERE status = 'dead';
CREATE INDEX jobs_cancelled_idx ON ${s}.jobs (updated_at) WHERE status = 'cancelled';
CREATE INDEX jobs_deadline_idx ON ${s}.jobs (updated_at) WHERE last_error LIKE 'JobDeadlineExceeded%';
`,
};
