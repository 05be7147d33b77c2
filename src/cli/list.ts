import type { Command } from 'commander';
import { requireStatus } from '../core/validate.js';
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

/** `skiplock list [--status S] [--task T]`. */
export function registerList(program: Command): void {
  program
    .command('list')
    .description('list jobs, newest first')
    .option('--status <status>', 'pending, running, done, dead or cancelled')
    .option('--task <task>', 'only this task')
    .option('--queue <queue>', 'only this queue')
    .option('--limit <n>', 'how many (default 50, at most 1000)', positiveInt, 50)
    .option('--after <id>', 'next page: jobs older than this id')
    .addHelpText(
      'after',
      `
Examples:
  $ skiplock list --status dead
  $ skiplock list --task email.send --limit 100
  $ skiplock list --status dead --after 1234        # the next page`,
    )
    .action(async (flags: Flags, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const jobs = await queue.list({
          ...(flags.status === undefined ? {} : { status: requireStatus(flags.status, '--status') }),
          ...(flags.task === undefined ? {} : { task: flags.task }),
          ...(flags.queue === undefined ? {} : { queue: flags.queue }),
          ...(flags.after === undefined ? {} : { after: flags.after }),
          limit: flags.limit,
        });
        const more =
          jobs.length === flags.limit ? `\n${style.dim(`next page: --after ${jobs.at(-1)?.id}`)}` : '';
        const text = jobs.length === 0 ? 'No jobs match.' : `${table(JOB_HEADER, jobRows(jobs))}${more}`;
        print(options, jobs, text);
      });
    });
}
