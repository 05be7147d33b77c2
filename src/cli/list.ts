import type { Command } from 'commander';
import { requireStatus } from '../core/validate.js';
import type { JobPage } from '../types.js';
import { print, withQueue } from './context.js';
import { JOB_HEADER, jobRows, style, table } from './format.js';
import { positiveInt } from './parse.js';

interface Flags {
  status?: string;
  task?: string;
  queue?: string;
  limit: number;
  after?: string;
}

/**
 * `skiplock list [--status S] [--task T]`: one bounded page (`queue.listPage`), so no filter
 * scans the whole table; `--json` prints `{ jobs, next }`.
 */
export function registerList(program: Command): void {
  program
    .command('list')
    .description('list jobs, newest first')
    .option('--status <status>', 'waiting, pending, running, done, dead or cancelled')
    .option('--task <task>', 'only this task')
    .option('--queue <queue>', 'only this queue')
    .option('--limit <n>', 'how many, at most 1000', positiveInt, 50)
    .option('--after <id>', 'next page: jobs older than this id')
    .addHelpText(
      'after',
      `
Examples:
  $ skiplock list --status dead
  $ skiplock list --task email.send --limit 100
  $ skiplock list --status dead --after 1234        # the next page
  $ skiplock list --status waiting                  # jobs whose dependencies are not all done

A page examines at most the 10,000 newest jobs below --after (a waiting, pending, running, dead
or cancelled filter reads that status's own jobs instead while there are no more than 10,000), so
a filter that matches nothing recent says where it stopped: follow its --after to look further.`,
    )
    .action(async (flags: Flags, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const page = await queue.listPage({
          ...(flags.status === undefined ? {} : { status: requireStatus(flags.status, '--status') }),
          ...(flags.task === undefined ? {} : { task: flags.task }),
          ...(flags.queue === undefined ? {} : { queue: flags.queue }),
          ...(flags.after === undefined ? {} : { after: flags.after }),
          limit: flags.limit,
        });
        print(options, page, render(page, flags.limit));
      });
    });
}

/** The table, then where the next page starts: after a full page, or where the search stopped. */
function render({ jobs, next }: JobPage, limit: number): string {
  const found = jobs.length === 0 ? 'No jobs match.' : table(JOB_HEADER, jobRows(jobs));
  if (next === null) return found;
  const hint =
    jobs.length === limit
      ? `next page: --after ${next}`
      : `looked through jobs down to id ${next}; older ones may match: --after ${next}`;
  return `${jobs.length === 0 ? 'No jobs match so far.' : found}\n${style.dim(hint)}`;
}
