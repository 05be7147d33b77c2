import type { Migration } from './migration.js';

/**
 * SPEC §1.3 claim tokens and SPEC §2 `attemptedBy`.
 *
 * `claims` counts the claims of a job and never goes down — not when `release()` gives the
 * attempt back, not when `requeue()` resets `attempts` — so its value after a claim is a token
 * that no other claim of that job ever gets. `attempted_by` keeps the worker ids of the job's
 * claims (oldest first, the last 25), because `worker_id` is now set only while it runs.
 * Both columns have constant defaults: adding them rewrites nothing (PostgreSQL ≥ 11), so the
 * migration is instant on a table of any size. Rows written before it may still carry a
 * `worker_id` after they stopped running; the API shows it as `attemptedBy` (see job-row.ts).
 */
export const claimToken: Migration = {
  version: 3,
  name: 'claim-token',
  sql: (s) => `
ALTER TABLE ${s}.jobs ADD COLUMN claims bigint NOT NULL DEFAULT 0; -- no CHECK: it would scan the table
ALTER TABLE ${s}.jobs ADD COLUMN attempted_by text[] NOT NULL DEFAULT '{}';
`,
};
