/**
 * The arguments of `enqueue`, `enqueueMany` and `enqueueFlow` resolved and checked before
 * anything is written (SPEC §1.11, §9): a defined task gives its name and its defaults under the
 * call's own options, every job is built and validated (core/job-spec.ts, core/flow-spec.ts),
 * and the payload of each defined task is checked against its schema as it will be stored. The
 * caller's `client` comes back as given, for the engine to check and join.
 */
import { type FlowNodePlan, toFlowPlan } from '../core/flow-spec.js';
import { enqueueOptions, type NewJob, toNewJob, toNewJobs } from '../core/job-spec.js';
import { clientOption } from '../core/queue-args.js';
import { checkPayload, checkSpecPayloads, isTask, specsWithTaskDefaults, withTaskDefaults } from './task.js';

/** A spec of `enqueueMany` or a node of `enqueueFlow`: a task (name or defined) and its payload. */
type Spec = { task: unknown; payload?: unknown };

/** `enqueue(task, payload, options)`: the job, its payload checked, and the caller's client. */
export async function enqueueArgs(
  task: unknown,
  payload: unknown,
  options: unknown,
): Promise<{ job: NewJob; client: unknown }> {
  const { client, ...callOptions } = enqueueOptions(options);
  const { name, options: jobOptions } = withTaskDefaults(task, callOptions);
  const job = toNewJob(name, payload, jobOptions);
  if (isTask(task)) await checkPayload(task, job.payloadJson, payload, 'payload');
  return { job, client };
}

/** `enqueueMany(specs, options)`: the jobs in input order, each payload checked. */
export async function enqueueManyArgs(
  specs: readonly Spec[],
  options: { client?: unknown } | undefined,
): Promise<{ jobs: NewJob[]; client: unknown }> {
  const client = clientOption(options);
  const jobs = toNewJobs(specsWithTaskDefaults(specs));
  await checkSpecPayloads(specs, jobs);
  return { jobs, client };
}

/** `enqueueFlow(nodes, options)`: the flow's plan (nodes in a topological order), each payload checked. */
export async function enqueueFlowArgs(
  nodes: readonly Spec[],
  options: { client?: unknown } | undefined,
): Promise<{ plan: { nodes: FlowNodePlan[]; order: number[] }; client: unknown }> {
  const client = clientOption(options);
  const plan = toFlowPlan(specsWithTaskDefaults(nodes));
  await checkSpecPayloads(
    nodes,
    plan.nodes.map((node) => node.job),
  );
  return { plan, client };
}
