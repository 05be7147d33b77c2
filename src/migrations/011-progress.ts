import type { Migration } from './migration.js';

/**
 * SPEC §9 `ctx.progress(value)`: a job's progress as JSON, written by the worker that holds its
 * lease and kept after the job finishes. No index and no default: adding it is instant, and a
 * progress write touches no indexed column (a HOT update).
 */
export const progress: Migration = {
  version: 11,
  name: 'progress',
  sql: (s) => `
ALTER TABLE ${s}.jobs ADD COLUMN progress jsonb;
`,
};
