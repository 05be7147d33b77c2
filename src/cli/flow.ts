import type { Command } from 'commander';
import { flowLayers } from '../core/flow-layers.js';
import { requireFlowId } from '../core/validate.js';
import { NotFoundError, ValidationError } from '../errors.js';
import { type FlowGraph, JOB_STATUSES, type Job } from '../types.js';
import { print, withQueue } from './context.js';
import { colourStatus, style, table } from './format.js';

/** `skiplock flow ID`: a flow's jobs layer by layer (SPEC §10); `--json` prints the FlowGraph. */
export function registerFlow(program: Command): void {
  program
    .command('flow')
    .description("show a flow: its jobs in dependency order, each one's status and dependencies")
    .argument('<id>', 'flow id (the flowId of enqueueFlow; `skiplock get JOB` shows a job’s flow)')
    .addHelpText(
      'after',
      `
Each job is in the layer after its deepest dependency: layer 0 depends on nothing in the flow.
DEPENDS ON names the flow's jobs by ref, others (and jobs without a ref) by #id.

Examples:
  $ skiplock flow 0b6a3f5e-9c1d-4e2f-8a7b-3c4d5e6f7a8b
  $ skiplock flow 0b6a3f5e-9c1d-4e2f-8a7b-3c4d5e6f7a8b --json | jq '.jobs[] | {ref: .flowRef, status}'`,
    )
    .action(async (id: string, _flags: unknown, command: Command) => {
      const flowId = flowIdArgument(id);
      await withQueue(command, async (queue, options) => {
        const graph = await queue.flowGraph(flowId);
        if (graph.jobs.length === 0)
          throw new NotFoundError(
            `No flow with id ${flowId}: no job belongs to it (its jobs may have been deleted by retention)`,
          );
        print(options, graph, render(graph));
      });
    });
}

/** The id, or a ValidationError (exit 2) that says what a flow id looks like and where to find one. */
function flowIdArgument(id: string): string {
  try {
    return requireFlowId(id, 'id');
  } catch (error) {
    throw new ValidationError(
      'id',
      `must be a flow id, a UUID like 0b6a3f5e-9c1d-4e2f-8a7b-3c4d5e6f7a8b (enqueueFlow returns it; \`skiplock get JOB_ID\` shows a job's flow), got ${JSON.stringify(id)}`,
      { cause: error },
    );
  }
}

/** The layers as one table, then a line of counts by status. */
function render(graph: FlowGraph): string {
  const byId = new Map(graph.jobs.map((job) => [job.id, job]));
  const name = (id: string) => {
    const job = byId.get(id);
    return job?.flowRef ? job.flowRef : `#${id}`;
  };
  const dependsOn = new Map<string, string[]>();
  for (const edge of graph.edges) {
    const list = dependsOn.get(edge.job);
    if (list) list.push(edge.dependsOn);
    else dependsOn.set(edge.job, [edge.dependsOn]);
  }
  const rows = flowLayers(graph).flatMap((ids, layer) =>
    ids.map((id) => {
      const job = byId.get(id) as Job;
      return [
        String(layer),
        job.flowRef ?? '–',
        job.id,
        job.task,
        colourStatus(job.status),
        (dependsOn.get(id) ?? []).map(name).join(', ') || '–',
      ];
    }),
  );
  return [
    `${style.bold(`Flow ${graph.flowId}`)}`,
    table(['LAYER', 'REF', 'ID', 'TASK', 'STATUS', 'DEPENDS ON'], rows),
    summary(graph.jobs),
  ].join('\n');
}

/** `14 jobs: 1 done, 1 pending, 12 waiting`, in lifecycle order. */
function summary(jobs: readonly Job[]): string {
  const counts = new Map<string, number>();
  for (const job of jobs) counts.set(job.status, (counts.get(job.status) ?? 0) + 1);
  const parts = JOB_STATUSES.filter((status) => counts.has(status)).map(
    (status) => `${(counts.get(status) ?? 0).toLocaleString('en-US')} ${colourStatus(status)}`,
  );
  const total = jobs.length.toLocaleString('en-US');
  return `${total} job${jobs.length === 1 ? '' : 's'}: ${parts.join(', ')}`;
}
