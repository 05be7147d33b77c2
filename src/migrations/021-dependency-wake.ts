import { producerFixes } from './018-producer-fixes.js';
import { recreate } from './019-sequences.js';
import type { Migration } from './migration.js';

/**
 * §1.9 a dependent's commit no longer costs its pending dependencies their wake-up. The commit
 * trigger of jobs with dependencies (`dependencies_committed`, migration 15, guarded in 18) locks
 * every existing dependency for an instant at the dependent's commit. A claim in that instant
 * skips a pending dependency (SKIP LOCKED), comes back short, and its worker may sleep until its
 * poll (seen while testing durable steps: a parent skipped while a child was added to it). The
 * trigger now announces again at the commit when a dependency it locked is pending, as the
 * waitFor hint statement does (store/observe.ts). Recreated from migration 18's text with two
 * edits.
 */
export const dependencyWake: Migration = {
  version: 21,
  name: 'dependency-wake',
  sql: (s) => `
${recreate(producerFixes, s, 'dependencies_committed', [
  ['  woken integer;\n', '  woken integer;\n  locked_pending integer;\n'],
  [
    `  PERFORM 1 FROM ${s}.jobs AS p
  WHERE p.id IN (SELECT d.depends_on FROM ${s}.job_dependencies AS d
                 WHERE d.job_id = ANY (NEW.job_ids) AND d.depends_on < NEW.first_id)
  ORDER BY p.id FOR NO KEY UPDATE;`,
    `  SELECT count(*) FILTER (WHERE l.status = 'pending') INTO locked_pending FROM (
    SELECT p.status FROM ${s}.jobs AS p
    WHERE p.id IN (SELECT d.depends_on FROM ${s}.job_dependencies AS d
                   WHERE d.job_id = ANY (NEW.job_ids) AND d.depends_on < NEW.first_id)
    ORDER BY p.id FOR NO KEY UPDATE) AS l;`,
  ],
  [
    '  IF woken > 0 THEN\n',
    '  -- §1.9 also when a pending dependency was locked here: a claim meanwhile skipped it\n  IF woken > 0 OR locked_pending > 0 THEN\n',
  ],
])}
REVOKE ALL ON FUNCTION ${s}.dependencies_committed() FROM PUBLIC;
`,
};
