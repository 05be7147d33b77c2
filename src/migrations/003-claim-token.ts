import type { Migration } from './migration.js';

/**
 * SPEC §1.3 claim tokens and SPEC §2 `attemptedBy`.
 *
 * `claims` counts the claims of a job and never goes down — not when `release()` gives the
 * attempt back, not when `requeue()` resets `attempts` — so its value after a claim is a token
 * that no other claim of that job ever gets. `attempted_by` keeps the worker ids of the job's
 * claims (oldest first, the last 25), because `worker_id` is now set only while it runs.
 * Both columns have constant defaults: adding them rewrites nothing (PostgreSQL ≥ 11).
 */
export const claimToken: Migration = {
  version: 3,
  name: 'claim-token',
  sql: (s) => `
ALTER TABLE ${s}.jobs ADD COLUMN claims bigint NOT NULL DEFAULT 0 CHECK (claims >= 0);
ALTER TABLE ${s}.jobs ADD COLUMN attempted_by text[] NOT NULL DEFAULT '{}';
-- Before this version worker_id stayed on finished and retried jobs: keep it as history.
UPDATE ${s}.jobs SET attempted_by = ARRAY[worker_id], claims = attempts
  WHERE worker_id IS NOT NULL;
UPDATE ${s}.jobs SET worker_id = NULL WHERE worker_id IS NOT NULL AND status <> 'running';
`,
};
