import type { Command } from 'commander';
import { NotFoundError, print, withQueue } from './context.js';
import { jobDetail } from './format.js';

/** Ids of dependencies and of dependents `get` shows (the lowest; the counts say how many): as `GET /api/jobs/:id`. */
const DEPENDENCY_IDS = 100;

/** `skiplock get ID`: the job, and (SPEC §10, §5 bounded) what it waits for and what waits for it. */
export function registerGet(program: Command): void {
  program
    .command('get')
    .description(
      'show one job: status, attempts, payload, result, last error, dependencies, dependents and steps',
    )
    .argument('<id>', 'job id')
    .addHelpText(
      'after',
      `
"depends on" lists the jobs it waits for (a waiting job runs once they are all done) and
"dependents" the jobs that wait for it: the first ${DEPENDENCY_IDS} ids of each and how many there are
(--json: dependsOn, dependsOnCount, dependents, dependentsCount, as GET /api/jobs/:id).
"steps" lists its durable steps (SPEC §12): name, kind, when, and a preview of the value; a
step still waiting for its event says so (--json: steps, as GET /api/jobs/:id).

Examples:
  $ skiplock get 42
  $ skiplock get 42 --json | jq .payload`,
    )
    .action(async (id: string, _flags: unknown, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const [job, dependencies, steps] = await Promise.all([
          queue.get(id),
          queue.dependencySummary(id, { limit: DEPENDENCY_IDS }),
          queue.steps(id),
        ]);
        if (!job) throw new NotFoundError(`No job with id ${id}`);
        print(options, { ...job, ...dependencies, steps }, jobDetail(job, dependencies, new Date(), steps));
      });
    });
}
