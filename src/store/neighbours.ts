/**
 * The bounded read of a job's place in a dependency graph (SPEC §10, §5 bounded reads): the
 * first ids on each side and how many there are, for the admin API and the dashboard's job
 * view. A flow may give one job a million dependents, so neither the list nor its count is ever
 * read in full. Apart from store/flows.ts (the workflow writes and their locking) on purpose.
 */
import type { Executor } from '../db/executor.js';
import type { JobDependencySummary } from '../types.js';
import { StatementFamily } from './runner.js';

/**
 * Rows counted on each side before the count stops (then reported as a lower bound). Counting all
 * of a million dependents took 110–150 ms once vacuumed (index only) and 240–420 ms before; the
 * whole statement with this limit, 4–5 ms unvacuumed (psql \timing on a scratch database,
 * PostgreSQL 15, 1,000,000 dependents and 10,000 dependencies of one job, 2026-12-02).
 */
export const NEIGHBOUR_COUNT_LIMIT = 10_000;

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function neighbourSql(s: string) {
  const deps = `${s}.job_dependencies`;
  return {
    /**
     * §10/§5 a job's first $2 dependencies and dependents, ascending by id, and each side counted
     * up to $3 + 1 rows — ranges of the primary key (job_id, depends_on) and of
     * job_dependencies_depends_on_idx, never more. The ORDER BY is the bigint column (the text
     * output is named `id` so that it cannot shadow it): ordered as text, 10 would come before 9
     * and the first $2 would need a sort of every dependent, a million in a large flow. $1 job id.
     */
    neighbourSummary: `
      SELECT
        ARRAY(SELECT d.depends_on::text AS id FROM ${deps} AS d WHERE d.job_id = $1::bigint
              ORDER BY d.depends_on LIMIT $2::int) AS depends_on,
        ARRAY(SELECT d.job_id::text AS id FROM ${deps} AS d WHERE d.depends_on = $1::bigint
              ORDER BY d.job_id LIMIT $2::int) AS dependents,
        (SELECT count(*) FROM (SELECT FROM ${deps} WHERE job_id = $1::bigint LIMIT $3::int + 1) AS d)::int
          AS depends_on_count,
        (SELECT count(*) FROM (SELECT FROM ${deps} WHERE depends_on = $1::bigint LIMIT $3::int + 1) AS d)::int
          AS dependents_count`,
  };
}

export class NeighbourStatements extends StatementFamily<ReturnType<typeof neighbourSql>> {
  /** The first `limit` ids on each side of job `jobId`, and their counts (up to NEIGHBOUR_COUNT_LIMIT). */
  async summary(db: Executor, jobId: string, limit: number): Promise<JobDependencySummary> {
    const [row] = await this.run<{
      depends_on: string[];
      dependents: string[];
      depends_on_count: number;
      dependents_count: number;
    }>(db, this.sql.neighbourSummary, [jobId, limit, NEIGHBOUR_COUNT_LIMIT]);
    const dependsOnCount = Number(row?.depends_on_count ?? 0);
    const dependentsCount = Number(row?.dependents_count ?? 0);
    return {
      dependsOn: (row?.depends_on ?? []).map(String),
      dependsOnCount: Math.min(dependsOnCount, NEIGHBOUR_COUNT_LIMIT),
      dependsOnCountExact: dependsOnCount <= NEIGHBOUR_COUNT_LIMIT,
      dependents: (row?.dependents ?? []).map(String),
      dependentsCount: Math.min(dependentsCount, NEIGHBOUR_COUNT_LIMIT),
      dependentsCountExact: dependentsCount <= NEIGHBOUR_COUNT_LIMIT,
    };
  }
}
