import type { Migration } from './migration.js';

/**
 * Finished jobs by the time they finished: throughput over time for the dashboard and metrics,
 * and the age test of prune, read an index range instead of the table (SPEC §7). One more index
 * entry per finished job; nothing on the claim path.
 */
export const finishedIndex: Migration = {
  version: 2,
  name: 'finished-index',
  sql: (s) => `
CREATE INDEX jobs_finished_idx ON ${s}.jobs (updated_at) WHERE status IN ('done', 'dead', 'cancelled');
`,
};
