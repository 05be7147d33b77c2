import type { Command } from 'commander';
import { NotFoundError, print, withQueue } from './context.js';
import { jobDetail } from './format.js';

/** `skiplock get ID`. */
export function registerGet(program: Command): void {
  program
    .command('get')
    .description('show one job: status, attempts, payload, result, last error')
    .argument('<id>', 'job id')
    .addHelpText('after', '\nExamples:\n  $ skiplock get 42\n  $ skiplock get 42 --json | jq .payload')
    .action(async (id: string, _flags: unknown, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const job = await queue.get(id);
        if (!job) throw new NotFoundError(`No job with id ${id}`);
        print(options, job, jobDetail(job));
      });
    });
}
