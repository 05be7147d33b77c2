import type { Migration } from './migration.js';

/**
 * SPEC §7 maintained counters: `retention: { completed: 'delete' }` removes a job in the
 * statement that completes it, so `counts().done` / `ops().done` can no longer count rows; that
 * statement adds its completions here instead. A counter is spread over shards (the completing
 * session's backend pid modulo 16), so concurrent completions rarely wait on one row; a
 * counter's value is the sum of its shards. A new, empty table: instant on any jobs table.
 */
export const counters: Migration = {
  version: 4,
  name: 'counters',
  sql: (s) => `
CREATE TABLE ${s}.counters (
  name  text     NOT NULL,
  shard smallint NOT NULL,
  n     bigint   NOT NULL DEFAULT 0,
  PRIMARY KEY (name, shard)
);
`,
};
