/**
 * `enqueueFlow(nodes)` checked before anything is written (SPEC §10): each node an `enqueueMany`
 * spec plus `ref`, `dependsOn` (refs of other nodes, or ids of existing jobs) and
 * `onDependencyFailure`; refs unique; no cycle.
 */
import { ValidationError } from '../errors.js';
import type { EnqueueOptions } from '../types.js';
import { dependsOnArg, type NewJob, toNewJob } from './job-spec.js';
import { describe, rejectUnknownKeys, requireJobId, requireName } from './validate.js';

/** Most nodes in one flow: its rows go in one statement. */
export const MAX_FLOW_NODES = 100_000;
/** Most dependencies (edges) in one flow, all nodes together: they go in one statement too. */
export const MAX_FLOW_EDGES = 1_000_000;

/** One node, checked: its job, its ref, and its dependencies as node indexes and job ids. */
export interface FlowNodePlan {
  job: NewJob;
  ref: string;
  /** Indexes of the nodes it depends on. */
  refDeps: number[];
  /** Ids of existing jobs it depends on. */
  idDeps: string[];
}

const NODE_KEYS = [
  'ref',
  'task',
  'payload',
  'queue',
  'priority',
  'maxAttempts',
  'runAt',
  'delayMs',
  'timeoutMs',
  'group',
  'dependsOn',
  'onDependencyFailure',
  'sequence',
];

/**
 * Checks every node and resolves its dependencies: an entry that is the ref of a node of the flow
 * names that node (a ref wins over an id that reads the same), else it must be a job id; one that
 * is neither is an unknown ref. A cycle (a node that depends on itself, directly or not) is named
 * by its refs. Returns the nodes in input order and a topological order of their indexes.
 */
export function toFlowPlan(nodes: unknown): { nodes: FlowNodePlan[]; order: number[] } {
  if (!Array.isArray(nodes)) {
    throw new ValidationError('nodes', 'must be an array of { ref, task, payload, dependsOn?, ...options }');
  }
  if (nodes.length === 0) throw new ValidationError('nodes', 'must hold at least one node');
  if (nodes.length > MAX_FLOW_NODES) {
    throw new ValidationError('nodes', `must hold at most ${MAX_FLOW_NODES} nodes, got ${nodes.length}`);
  }
  const byRef = new Map<string, number>();
  const raw = nodes.map((node: unknown, i) => {
    const at = `nodes[${i}]`;
    if (typeof node !== 'object' || node === null || Array.isArray(node)) {
      throw new ValidationError(at, 'must be an object { ref, task, payload, dependsOn?, ...options }');
    }
    const record = node as Record<string, unknown>;
    if (record.dedupeKey !== undefined || record.dedupe !== undefined) {
      throw new ValidationError(
        `${at}.${record.dedupeKey !== undefined ? 'dedupeKey' : 'dedupe'}`,
        'is not allowed in a flow: a waiting job holds no key (enqueue such a job on its own)',
      );
    }
    rejectUnknownKeys(record, NODE_KEYS, at);
    const ref = requireName(record.ref, `${at}.ref`);
    const seen = byRef.get(ref);
    if (seen !== undefined) {
      throw new ValidationError(`${at}.ref`, `${JSON.stringify(ref)} is already the ref of nodes[${seen}]`);
    }
    byRef.set(ref, i);
    return record;
  });
  const plans = raw.map((record, i): FlowNodePlan => {
    const at = `nodes[${i}]`;
    const { ref, task, payload, dependsOn, ...options } = record;
    const entries =
      dependsOnArg(dependsOn, `${at}.dependsOn`, (value, field) => {
        // a number is a job id (a safe integer, checked as enqueue checks one); a string a ref or an id
        if (typeof value === 'number') return requireJobId(value, field);
        if (typeof value !== 'string') {
          throw new ValidationError(
            field,
            `must be a ref of another node or a job id, got ${describe(value)}`,
          );
        }
        return value;
      }) ?? [];
    const refDeps: number[] = [];
    const idDeps: string[] = [];
    entries.forEach((entry, k) => {
      const index = byRef.get(entry);
      if (index !== undefined) refDeps.push(index);
      else if (/^[1-9][0-9]{0,18}$/.test(entry)) idDeps.push(requireJobId(entry, `${at}.dependsOn[${k}]`));
      else {
        throw new ValidationError(
          `${at}.dependsOn[${k}]`,
          `${JSON.stringify(entry)} is not the ref of any node of this flow, nor a job id`,
        );
      }
    });
    const job = toNewJob(task, payload, options as EnqueueOptions, `${at}.`);
    if (job.sequence !== null && entries.length > 0) {
      throw new ValidationError(
        `${at}.sequence`,
        'cannot be combined with dependsOn in this version: a node with a sequence must have no dependencies (its sequence orders it)',
      );
    }
    return { job, ref: ref as string, refDeps, idDeps };
  });
  const edges = plans.reduce((n, plan) => n + plan.refDeps.length + plan.idDeps.length, 0);
  if (edges > MAX_FLOW_EDGES) {
    throw new ValidationError(
      'nodes',
      `must have at most ${MAX_FLOW_EDGES} dependencies in all, got ${edges}`,
    );
  }
  return { nodes: plans, order: topologicalOrder(plans) };
}

/** Kahn's algorithm over the nodes' refs; a cycle is a ValidationError naming its nodes. */
function topologicalOrder(plans: readonly FlowNodePlan[]): number[] {
  const left = plans.map((plan) => plan.refDeps.length);
  const dependents: number[][] = plans.map(() => []);
  plans.forEach((plan, i) => {
    for (const dep of plan.refDeps) (dependents[dep] as number[]).push(i);
  });
  const order: number[] = [];
  left.forEach((n, i) => {
    if (n === 0) order.push(i);
  });
  for (let k = 0; k < order.length; k++) {
    for (const next of dependents[order[k] as number] as number[]) {
      left[next] = (left[next] as number) - 1;
      if (left[next] === 0) order.push(next);
    }
  }
  if (order.length < plans.length) {
    throw new ValidationError('nodes', `have a cycle: ${describeCycle(plans, left)}`);
  }
  return order;
}

/** One cycle among the nodes Kahn's algorithm could not order, as `a → b → a`. */
function describeCycle(plans: readonly FlowNodePlan[], left: readonly number[]): string {
  const stuck = (i: number) => (left[i] as number) > 0;
  let at = left.findIndex((n) => n > 0);
  const seen = new Map<number, number>();
  const path: number[] = [];
  // walk dependencies that are stuck themselves until a node repeats
  while (!seen.has(at)) {
    seen.set(at, path.length);
    path.push(at);
    at = (plans[at] as FlowNodePlan).refDeps.find(stuck) as number;
  }
  const cycle = path.slice(seen.get(at));
  // shown in the direction of the arrows "depends on"
  return [...cycle, at].map((i) => JSON.stringify((plans[i] as FlowNodePlan).ref)).join(' depends on ');
}
