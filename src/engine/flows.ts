/**
 * Workflows (SPEC §10): writes jobs with dependencies — a flow of new jobs, or jobs that depend
 * on existing ones — all rows or none, and reads a job's dependencies and a flow. What a
 * dependency's finishing does to its dependents happens in the database (migration 14's
 * trigger), in the transaction that finishes it, whoever finishes it.
 */
import { randomUUID } from 'node:crypto';
import type { FlowNodePlan } from '../core/flow-spec.js';
import type { NewJob } from '../core/job-spec.js';
import type { Executor } from '../db/executor.js';
import { DatabaseError, ValidationError } from '../errors.js';
import type { GraphRow, LockedDependency } from '../store/flows.js';
import type {
  DependencyState,
  EnqueueResult,
  FlowGraph,
  FlowResult,
  Job,
  JobDependencies,
} from '../types.js';
import type { EngineCore } from './engine-core.js';

/** One job of a graph to write: the job, and its dependencies as node indexes and job ids. */
interface GraphNode {
  job: NewJob;
  ref: string | null;
  refDeps: readonly number[];
  idDeps: readonly string[];
}

/** Tries of a dependsOn/flow write in its own transaction that a deadlock rolled back. */
const DEADLOCK_ROUNDS = 5;

/** A deadlock (40P01), mapped or as the driver raised it (a COMMIT's: where the new jobs' dependencies are locked). */
function isDeadlock(error: unknown): boolean {
  if (error instanceof DatabaseError) return error.sqlState === '40P01';
  return (error as { code?: unknown } | null)?.code === '40P01';
}

export class Flows {
  constructor(private readonly engine: EngineCore) {}

  /** A flow of new jobs (`order`: a topological order of `nodes`); their ids by ref. */
  async enqueueFlow(plan: { nodes: FlowNodePlan[]; order: number[] }, db?: Executor): Promise<FlowResult> {
    const flowId = randomUUID();
    const ids = await this.write(plan.nodes, plan.order, flowId, db);
    // own properties (Object.fromEntries): a ref such as `__proto__` is a key like any other
    const jobs: Record<string, string> = Object.fromEntries(
      plan.nodes.map((node, i) => [node.ref, (ids[i] as EnqueueResult).id]),
    );
    return { flowId, jobs };
  }

  /**
   * Jobs of which some depend on existing jobs (`enqueue`/`enqueueMany` with `dependsOn`); each
   * joins the flow of its dependencies when they all belong to one.
   */
  async enqueueDependent(jobs: NewJob[], db?: Executor): Promise<EnqueueResult[]> {
    const nodes = jobs.map((job) => ({ job, ref: null, refDeps: [], idDeps: job.dependsOn ?? [] }));
    return this.write(
      nodes,
      nodes.map((_, i) => i),
      null,
      db,
    );
  }

  /** A job's dependencies with their status and result, keyed by ref in its flow, else by id. */
  dependencies(jobId: string): Promise<Record<string, DependencyState>> {
    this.engine.assertOpen();
    return this.engine.store.flows.dependencies(this.engine.pool, jobId);
  }

  /** The ids a job depends on and the ids depending on it (from the read replica when there is one). */
  neighbours(jobId: string): Promise<JobDependencies> {
    return this.engine.read((db) => this.engine.store.flows.neighbours(db, jobId));
  }

  /** A flow's jobs, oldest first (from the read replica when there is one). */
  jobs(flowId: string): Promise<Job[]> {
    return this.engine.read((db) => this.engine.store.flows.flowJobs(db, flowId));
  }

  /** A flow's jobs (its oldest `limit`, or all) and their edges. */
  async graph(flowId: string, limit: number | null = null): Promise<FlowGraph> {
    const { flows } = this.engine.store;
    return this.engine.read(async (db) => {
      const jobs = await flows.flowJobs(db, flowId, limit === null ? null : limit + 1);
      const truncated = limit !== null && jobs.length > limit;
      if (truncated) jobs.length = limit;
      const edges = await flows.flowEdges(db, flowId, truncated ? (jobs.at(-1)?.id ?? null) : null);
      return { flowId, jobs, edges, truncated };
    });
  }

  /**
   * Writes `nodes` (ids drawn in topological order) and their edges in one transaction — the
   * caller's when `db` is its client. The existing jobs they depend on are read and held (FOR
   * KEY SHARE: not deleted meanwhile, and no transition waits for this transaction); the jobs
   * that depend on them go in `waiting`, and the commit decides their counters and statuses from
   * what those jobs are then (migration 15). A dependency on an id that does not exist is a
   * ValidationError with nothing written.
   */
  private async write(
    nodes: readonly GraphNode[],
    order: readonly number[],
    flowId: string | null,
    db: Executor | undefined,
  ): Promise<EnqueueResult[]> {
    const { engine } = this;
    engine.assertOpen();
    const jobs = nodes.map((node) => node.job);
    const existing = [...new Set(nodes.flatMap((node) => node.idDeps))];
    const attempt = () =>
      engine.atomically(db, async (tx) => {
        const locked =
          existing.length > 0
            ? await engine.store.flows.lockDependencies(tx, existing)
            : new Map<string, LockedDependency>();
        nodes.forEach((node, i) => {
          const missing = node.idDeps.find((id) => !locked.has(id));
          if (missing !== undefined) {
            const field =
              flowId === null
                ? nodes.length === 1
                  ? 'dependsOn'
                  : `specs[${i}].dependsOn`
                : `nodes[${i}].dependsOn`;
            throw new ValidationError(
              field,
              `job ${missing} does not exist (it may have been deleted by retention)`,
            );
          }
        });
        // ids in topological order: a job's dependencies always have lower ids than it (existing
        // ones are older), so every lock taken in id order takes a dependency before its
        // dependents, as a completion does (its job, then its dependents)
        const drawn = await engine.store.flows.nextIds(tx, nodes.length);
        const ids: string[] = new Array(nodes.length);
        order.forEach((node, k) => {
          ids[node] = drawn[k] as string;
        });
        const rows = plan(nodes, ids, locked, flowId);
        const edges = nodes.flatMap((node, i) => {
          const job = ids[i] as string;
          return [...node.refDeps.map((dep) => ids[dep] as string), ...node.idDeps].map((dependsOn) => ({
            job,
            dependsOn,
          }));
        });
        await engine.store.flows.insertGraph(tx, rows, edges);
        return ids.map((id) => ({ id, created: true }));
      });
    // A deadlock with a batch of completions (which lock their own jobs in no set order before
    // their dependents) rolls the transaction back: in a transaction of our own, it is tried
    // again; in yours, the error (SQLSTATE 40P01) is yours to retry, as for any deadlock.
    const run = async (): Promise<EnqueueResult[]> => {
      // In your transaction, the jobs depended on are marked first, in a statement of their own:
      // a completion under retention 'delete' keeps them without waiting for your commit.
      if (db !== undefined && existing.length > 0)
        await engine.store.flows.markDependencies(engine.pool, existing);
      for (let round = 1; ; round++) {
        try {
          return await attempt();
        } catch (error) {
          if (db !== undefined || round >= DEADLOCK_ROUNDS || !isDeadlock(error)) throw error;
          await new Promise((resolve) => setTimeout(resolve, Math.random() * 20 * round));
        }
      }
    };
    const { tracing } = engine;
    // §9 one PRODUCER span for the whole call, its trace context stored with every job
    return tracing?.mayTrace() ? tracing.send(jobs, run) : run();
  }
}

/**
 * Each node's row. A node that depends on existing jobs goes in `waiting` with every edge
 * counted as unsatisfied, and its commit decides (the trigger of migration 15, which reads their
 * statuses under their locks); a node that depends only on new ones waits for all of them (none
 * of them is done yet); one without dependencies is pending. A node joins the flow being written,
 * or else the one flow all its existing dependencies belong to.
 */
function plan(
  nodes: readonly GraphNode[],
  ids: readonly string[],
  locked: ReadonlyMap<string, LockedDependency>,
  flowId: string | null,
): GraphRow[] {
  const hasDependents = new Set(nodes.flatMap((node) => node.refDeps));
  return nodes.map((node, i) => {
    const { job } = node;
    const depsTotal = node.refDeps.length + node.idDeps.length;
    const flows = new Set(node.idDeps.map((id) => (locked.get(id) as LockedDependency).flowId));
    const joins = flowId ?? (flows.size === 1 && node.refDeps.length === 0 ? ([...flows][0] ?? null) : null);
    return {
      id: ids[i] as string,
      queue: job.queue,
      task: job.task,
      payloadJson: job.payloadJson,
      priority: job.priority,
      maxAttempts: job.maxAttempts,
      runAt: job.runAt,
      delayMs: job.delayMs,
      timeoutMs: job.timeoutMs,
      group: job.group,
      traceContext: job.traceContext,
      status: depsTotal > 0 ? 'waiting' : 'pending',
      depsLeft: depsTotal,
      depsTotal,
      checkAtCommit: node.idDeps.length > 0,
      hasDependents: hasDependents.has(i),
      runOnDependencyFailure: job.runOnDependencyFailure,
      cancelledBy: null,
      lastError: null,
      flowId: joins,
      flowRef: flowId === null ? null : node.ref,
      sequence: job.sequence,
    };
  });
}
