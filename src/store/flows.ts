/**
 * Workflows (SPEC §10): jobs with dependencies written with their edges in one statement, the
 * dependencies of new jobs locked and marked first, and the reads of a job's dependencies and of
 * a flow. What a dependency's change of status does to its dependents is migration 14's trigger.
 * Each statement is defined next to the method that binds its parameters; the quoted schema is
 * spliced once, everything else is a parameter.
 */
import { type JobRow, toJob } from '../core/job-row.js';
import type { Executor } from '../db/executor.js';
import { quoteLiteral } from '../db/identifier.js';
import type { Job, JobDependencies, JobStatus } from '../types.js';
import { JOB_COLUMNS, MAX_BIGINT, RUN_AFTER } from './fragments.js';
import { StatementFamily } from './runner.js';

/** One job of a graph, ready for INSERT: its id drawn, its status and counter decided. */
export interface GraphRow {
  id: string;
  queue: string;
  task: string;
  payloadJson: string;
  priority: number;
  maxAttempts: number;
  runAt: Date | null;
  delayMs: number | null;
  timeoutMs: number | null;
  group: string | null;
  traceContext: string | null;
  status: 'waiting' | 'pending';
  depsLeft: number;
  /** Depends on jobs that existed before this write: decided at its transaction's commit (migration 15). */
  checkAtCommit: boolean;
  depsTotal: number;
  hasDependents: boolean;
  runOnDependencyFailure: boolean;
  cancelledBy: string | null;
  lastError: string | null;
  flowId: string | null;
  flowRef: string | null;
  /** §11 the sequence key, or null. */
  sequence: string | null;
}

/** An existing job a new one depends on, as read (and held for its transaction): its flow. */
export interface LockedDependency {
  id: string;
  flowId: string | null;
}

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function flowSql(s: string) {
  const jobs = `${s}.jobs`;
  const deps = `${s}.job_dependencies`;
  return {
    /** §10 $1 ids drawn from the jobs' sequence for a graph's new jobs (its edges need them first). */
    nextIds: `
      SELECT nextval(${quoteLiteral(`${s}.jobs_id_seq`)}::regclass)::text AS id FROM generate_series(1, $1::int) ORDER BY 1`,

    /**
     * §10 the existing jobs new ones depend on, FOR KEY SHARE (in id order) until the transaction
     * ends: none of them can be deleted meanwhile (a prune passes it by, a completion under
     * retention 'delete' waits and keeps it), and nobody waits for this transaction — every
     * transition takes FOR NO KEY UPDATE. Their statuses are read at the commit, by the trigger
     * that decides the new jobs' counters (migration 15). $1 ids.
     */
    lockDependencies: `
      SELECT id::text AS id, flow_id::text AS flow_id FROM ${jobs}
      WHERE id = ANY ($1::bigint[]) ORDER BY id FOR KEY SHARE`,

    /**
     * §10 marks existing jobs as having dependents before a caller's transaction adds them (its
     * own autocommitted statement): a completion under retention 'delete' then keeps such a job
     * without waiting for that transaction (a rollback leaves a mark that only keeps a done row).
     * A row locked by another transaction — the caller's own, or a transition in flight — is
     * passed by: the commit's trigger marks it, and a completion that meets the enqueue's lock
     * waits for it. In id order. $1 ids.
     */
    markDependencies: `
      UPDATE ${jobs} AS j SET has_dependents = true
      FROM (SELECT id FROM ${jobs} WHERE id = ANY ($1::bigint[]) AND NOT has_dependents
            ORDER BY id FOR NO KEY UPDATE SKIP LOCKED) AS l
      WHERE j.id = l.id`,

    /**
     * §10/§1.6 a graph's jobs and edges in one statement (all rows or none); §1.9 one wake-up
     * hint when any job went in pending (those decided at the commit send their own). $1–$20
     * parallel arrays of the jobs' columns (the flags as text), $21 edge dependents, $22 edge
     * dependencies, $23 channel, $24 the jobs that depend on existing ones and $25 the lowest id
     * of the graph (every dependency below it existed before), $26 sequence keys (§11: a trigger
     * of migration 19 writes those jobs waiting).
     */
    insertGraph: `
      WITH input AS (
        SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::int[], $6::int[],
                             $7::timestamptz[], $8::float8[], $9::int[], $10::text[], $11::text[], $12::text[],
                             $13::int[], $14::int[], $15::text[], $16::text[], $17::bigint[], $18::text[],
                             $19::uuid[], $20::text[], $26::text[])
          AS t(id, queue, task, payload, priority, max_attempts, run_at, delay_ms, timeout_ms, group_key,
               trace_context, status, deps_left, deps_total, has_dependents, run_on_failure, cancelled_by,
               last_error, flow_id, flow_ref, sequence)
      ), ins AS (
        INSERT INTO ${jobs} (id, queue, task, payload, priority, max_attempts, run_after, timeout_ms, group_key,
                             trace_context, status, deps_left, deps_total, has_dependents,
                             run_on_dependency_failure, cancelled_by, last_error, flow_id, flow_ref, sequence)
        SELECT id, queue, task, payload::jsonb, priority, max_attempts, ${RUN_AFTER('run_at', 'delay_ms')},
               timeout_ms, group_key, trace_context::jsonb, status, deps_left, deps_total, has_dependents::boolean,
               run_on_failure::boolean, cancelled_by, last_error, flow_id, flow_ref, sequence
        FROM input
        RETURNING status, sequence
      ), edges AS (
        INSERT INTO ${deps} (job_id, depends_on)
        SELECT * FROM unnest($21::bigint[], $22::bigint[])
        RETURNING 1
      ), checks AS (
        -- the jobs that depend on existing ones, decided at the commit (migration 15)
        INSERT INTO ${s}.dependency_checks (job_ids, first_id)
        SELECT $24::bigint[], $25::bigint WHERE cardinality($24::bigint[]) > 0
        RETURNING 1
      ), notified AS (
        -- §11 a job with a sequence goes in waiting: its key is advanced by the next claim's pass
        SELECT pg_notify($23, 'jobs')
        FROM (SELECT 1 FROM ins WHERE status = 'pending' OR sequence IS NOT NULL LIMIT 1) AS any_pending
      )
      SELECT (SELECT count(*) FROM ins)::int AS jobs, (SELECT count(*) FROM edges)::int AS edges,
             (SELECT count(*) FROM checks)::int AS checks, (SELECT count(*) FROM notified)::int AS notified`,

    /**
     * §10 ctx.dependencies(): a job's dependencies with their status and result, and whether each
     * is of the job's own flow (then keyed by its ref). $1 job id.
     */
    dependencies: `
      SELECT p.id::text AS id, p.status, p.result, p.flow_ref,
             (p.flow_id IS NOT NULL AND p.flow_id = c.flow_id) AS same_flow
      FROM ${deps} AS d JOIN ${jobs} AS c ON c.id = d.job_id JOIN ${jobs} AS p ON p.id = d.depends_on
      WHERE d.job_id = $1::bigint
      ORDER BY p.id`,

    /** §10/§7 a flow's jobs, oldest first, through jobs_flow_idx, at most $2 (null: all). $1 flow id. */
    flowJobs: `SELECT ${JOB_COLUMNS} FROM ${jobs} AS j WHERE flow_id = $1::uuid ORDER BY j.id LIMIT $2::int`,

    /**
     * §10 the edges of a flow's jobs up to id $2 (null: all; dependencies outside the flow too).
     * $1 flow id.
     */
    flowEdges: `
      SELECT d.job_id::text AS job, d.depends_on::text AS depends_on
      FROM ${jobs} AS c JOIN ${deps} AS d ON d.job_id = c.id
      WHERE c.flow_id = $1::uuid AND c.id <= coalesce($2::bigint, ${MAX_BIGINT})
      ORDER BY d.job_id, d.depends_on`,

    /** §10 the ids of a job's dependencies and dependents (the dashboard's job view). $1 job id. */
    neighbours: `
      SELECT 'dependsOn' AS side, depends_on AS id FROM ${deps} WHERE job_id = $1::bigint
      UNION ALL
      SELECT 'dependents', job_id FROM ${deps} WHERE depends_on = $1::bigint
      ORDER BY 1, 2 -- the bigint ids: as text, 10 would sort before 9`,
  };
}

export class FlowStatements extends StatementFamily<ReturnType<typeof flowSql>> {
  /** `n` new job ids, ascending. */
  async nextIds(db: Executor, n: number): Promise<string[]> {
    if (n === 0) return [];
    const rows = await this.run<{ id: string }>(db, this.sql.nextIds, [n]);
    return rows.map((row) => String(row.id)).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1));
  }

  /**
   * Holds the existing jobs `ids` for the rest of the transaction (FOR KEY SHARE: not deleted,
   * nobody waits); returns those found.
   */
  async lockDependencies(db: Executor, ids: readonly string[]): Promise<Map<string, LockedDependency>> {
    const rows = await this.run<{ id: string; flow_id: string | null }>(db, this.sql.lockDependencies, [ids]);
    return new Map(rows.map((row) => [String(row.id), { id: String(row.id), flowId: row.flow_id }]));
  }

  /** Marks the jobs `ids` as having dependents, in a statement of its own (rows locked elsewhere: passed by). */
  async markDependencies(db: Executor, ids: readonly string[]): Promise<void> {
    await this.run(db, this.sql.markDependencies, [ids]);
  }

  /** Writes a graph's jobs and edges in one statement. */
  async insertGraph(
    db: Executor,
    rows: readonly GraphRow[],
    edges: readonly { job: string; dependsOn: string }[],
  ): Promise<void> {
    const col = <T>(pick: (row: GraphRow) => T) => rows.map(pick);
    await this.run(db, this.sql.insertGraph, [
      col((r) => r.id),
      col((r) => r.queue),
      col((r) => r.task),
      col((r) => r.payloadJson),
      col((r) => r.priority),
      col((r) => r.maxAttempts),
      col((r) => r.runAt),
      col((r) => r.delayMs),
      col((r) => r.timeoutMs),
      col((r) => r.group),
      col((r) => r.traceContext),
      col((r) => r.status),
      col((r) => r.depsLeft),
      col((r) => r.depsTotal),
      // flags as text: postgres.js (skiplock/adapters) cannot send an array of booleans
      col((r) => String(r.hasDependents)),
      col((r) => String(r.runOnDependencyFailure)),
      col((r) => r.cancelledBy),
      col((r) => r.lastError),
      col((r) => r.flowId),
      col((r) => r.flowRef),
      edges.map((e) => e.job),
      edges.map((e) => e.dependsOn),
      this.channel,
      rows.filter((r) => r.checkAtCommit).map((r) => r.id),
      rows.reduce((low, r) => (BigInt(r.id) < BigInt(low) ? r.id : low), rows[0]?.id ?? '0'),
      col((r) => r.sequence),
    ]);
  }

  /** A job's dependencies, keyed by ref (a dependency of its own flow) or else by id. */
  async dependencies(
    db: Executor,
    jobId: string,
  ): Promise<Record<string, { id: string; status: JobStatus; result: unknown }>> {
    const rows = await this.run<{
      id: string;
      status: JobStatus;
      result: unknown;
      flow_ref: string | null;
      same_flow: boolean;
    }>(db, this.sql.dependencies, [jobId]);
    // own properties (Object.fromEntries): a ref such as `__proto__` is a key like any other
    return Object.fromEntries(
      rows.map((row) => [
        row.same_flow && row.flow_ref !== null ? row.flow_ref : String(row.id),
        { id: String(row.id), status: row.status, result: row.status === 'done' ? row.result : null },
      ]),
    );
  }

  async flowJobs(db: Executor, flowId: string, limit: number | null = null): Promise<Job[]> {
    return (await this.run<JobRow>(db, this.sql.flowJobs, [flowId, limit])).map(toJob);
  }

  /** The edges of the flow's jobs whose id is at most `upTo` (null: all). */
  async flowEdges(
    db: Executor,
    flowId: string,
    upTo: string | null = null,
  ): Promise<{ job: string; dependsOn: string }[]> {
    const rows = await this.run<{ job: string; depends_on: string }>(db, this.sql.flowEdges, [flowId, upTo]);
    return rows.map((row) => ({ job: String(row.job), dependsOn: String(row.depends_on) }));
  }

  async neighbours(db: Executor, jobId: string): Promise<JobDependencies> {
    const rows = await this.run<{ side: string; id: string }>(db, this.sql.neighbours, [jobId]);
    return {
      dependsOn: rows.filter((r) => r.side === 'dependsOn').map((r) => String(r.id)),
      dependents: rows.filter((r) => r.side === 'dependents').map((r) => String(r.id)),
    };
  }
}
