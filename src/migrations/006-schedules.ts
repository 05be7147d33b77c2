import type { Migration } from './migration.js';

/**
 * SPEC §8 cron schedules, stored in the database so that no process holds them in memory: any
 * worker claims a due row (`FOR UPDATE SKIP LOCKED`), enqueues that tick's job and advances
 * `next_run_at` in one transaction. `catch_up` is 'latest', 'none' or a count of missed ticks.
 */
export const schedules: Migration = {
  version: 6,
  name: 'schedules',
  sql: (s) => `
CREATE TABLE ${s}.schedules (
  name         text        PRIMARY KEY CHECK (name <> ''),
  cron         text        NOT NULL,
  tz           text        NOT NULL DEFAULT 'UTC',
  task         text        NOT NULL CHECK (task <> ''),
  payload      jsonb       NOT NULL DEFAULT 'null',
  queue        text        NOT NULL DEFAULT 'default',
  priority     integer     NOT NULL DEFAULT 100,
  max_attempts integer     NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
  timeout_ms   integer     CHECK (timeout_ms > 0),
  overlap      boolean     NOT NULL DEFAULT false,
  catch_up     text        NOT NULL DEFAULT 'latest' CHECK (catch_up ~ '^(latest|none|[1-9][0-9]*)$'),
  paused       boolean     NOT NULL DEFAULT false,
  next_run_at  timestamptz NOT NULL,
  last_run_at  timestamptz,
  last_job_id  bigint,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now()
);
-- The scheduler's due rows and its wake-up timer: the earliest next run of an active schedule.
CREATE INDEX schedules_due_idx ON ${s}.schedules (next_run_at) WHERE NOT paused;
`,
};
