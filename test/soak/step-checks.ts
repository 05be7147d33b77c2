/**
 * SPEC §12 in the soak: the `stepped` jobs (workload.ts) run a transactional step (a row in
 * soak.step_ledger with its tag, inside the step's transaction), a plain step, and a short
 * ctx.sleep, then finish as a `tx` job. Whatever the faults, for each of them:
 * - the transactional step's writes happened exactly once if its checkpoint committed, and
 *   never if it did not (ledger rows: exactly one, whose tag is the stored value — or none);
 * - a done job's result carries the values of its stored steps (the first successful ones: a
 *   later run got them back instead of running the step again).
 */
import type { Figure, Finding } from './verify.js';

/** One stepped job as the database left it (soak-run.ts reads it). */
export interface SteppedRow {
  id: string;
  status: string;
  /** result.steps of a done job: [s1, s2]. */
  result_steps: string[] | null;
  /** The stored values of s1 and s2 (null when not stored). */
  s1: string | null;
  s2: string | null;
  /** The tags the transactional step wrote to soak.step_ledger (committed rows only). */
  ledger: string[] | null;
}

export interface StepVerdict {
  jobs: number;
  done: number;
  twice: Finding[];
  mismatched: Finding[];
}

export const STEPPED_SQL = `
  SELECT j.id::text AS id, j.status,
         CASE WHEN j.status = 'done' THEN ARRAY(SELECT jsonb_array_elements_text(j.result->'steps')) END AS result_steps,
         (SELECT s.value #>> '{}' FROM skiplock.job_steps AS s WHERE s.job_id = j.id AND s.name = 's1') AS s1,
         (SELECT s.value #>> '{}' FROM skiplock.job_steps AS s WHERE s.job_id = j.id AND s.name = 's2') AS s2,
         ARRAY(SELECT l.tag FROM soak.step_ledger AS l WHERE l.job_id = j.id) AS ledger
  FROM skiplock.jobs AS j WHERE j.payload->>'kind' = 'stepped'`;

export function stepChecks(rows: readonly SteppedRow[]): StepVerdict {
  const twice: Finding[] = [];
  const mismatched: Finding[] = [];
  for (const row of rows) {
    const ledger = row.ledger ?? [];
    const exact = row.s1 === null ? ledger.length === 0 : ledger.length === 1 && ledger[0] === row.s1;
    if (!exact)
      twice.push({
        check: 'transactional step not exactly once',
        job: row.id,
        text: `ledger ${JSON.stringify(ledger)}, stored s1 ${JSON.stringify(row.s1)}`,
      });
    if (row.status === 'done' && JSON.stringify(row.result_steps) !== JSON.stringify([row.s1, row.s2]))
      mismatched.push({
        check: 'stepped result not its stored steps',
        job: row.id,
        text: `result ${JSON.stringify(row.result_steps)}, stored ${JSON.stringify([row.s1, row.s2])}`,
      });
  }
  return { jobs: rows.length, done: rows.filter((r) => r.status === 'done').length, twice, mismatched };
}

export function stepFigures(steps: StepVerdict): Figure[] {
  return [
    {
      section: 'durable steps (SPEC §12)',
      label: 'stepped jobs (done)',
      value: `${steps.jobs} (${steps.done})`,
    },
    { label: 'transactional steps not exactly once', value: steps.twice.length, mustBeZero: true },
    { label: 'stepped results not their stored steps', value: steps.mismatched.length, mustBeZero: true },
  ];
}
