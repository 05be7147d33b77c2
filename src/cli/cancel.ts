import type { Command } from 'commander';
import { NotFoundError, print, withQueue } from './context.js';

/** `skiplock cancel ID`. */
export function registerCancel(program: Command): void {
  program
    .command('cancel')
    .description('cancel a job: a pending one at once; a running one is aborted by its worker')
    .argument('<id>', 'job id')
    .addHelpText('after', '\nExamples:\n  $ skiplock cancel 42')
    .action(async (id: string, _flags: unknown, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const before = await queue.get(id);
        if (!before) throw new NotFoundError(`no job with id ${id}`);
        const cancelled = await queue.cancel(id);
        if (!cancelled)
          throw new NotFoundError(
            `job ${id} is ${before.status}: only pending or running jobs can be cancelled`,
          );
        const text =
          before.status === 'running'
            ? `Cancellation of running job ${id} requested: its worker aborts it.`
            : `Cancelled job ${id}.`;
        print(options, { id, cancelled, wasRunning: before.status === 'running' }, text);
      });
    });
}
