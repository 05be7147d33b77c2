import type { Migration } from './migration.js';

/**
 * SPEC §8 throttling (`dedupe: { windowMs }`): a key stays taken for a window after its holder
 * was created, finished or not. One row per key, locked by each throttled enqueue of that key
 * (so racing enqueues decide one after the other) and rewritten when a new holder is created.
 */
export const dedupeWindows: Migration = {
  version: 8,
  name: 'dedupe-windows',
  sql: (s) => `
CREATE TABLE ${s}.dedupe_windows (
  key    text        PRIMARY KEY,
  until  timestamptz NOT NULL,
  job_id bigint      NOT NULL
);
`,
};
