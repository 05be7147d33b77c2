import type { Command } from 'commander';
import { print, withQueue } from './context.js';

/** `skiplock cancel ID`. */
export function registerCancel(program: Command): void {
  program
    .command('cancel')
    .description(
      'cancel a job: a waiting or pending one at once (and what depends on it); a running one is aborted by its worker',
    )
    .argument('<id>', 'job id')
    .addHelpText('after', '\nExamples:\n  $ skiplock cancel 42')
    .action(async (id: string, _flags: unknown, command: Command) => {
      await withQueue(command, async (queue, options) => {
        // One statement on the primary decides and reports; unknown: exit 3, finished: ERR_CONFLICT, exit 3.
        const { wasRunning } = await queue.cancelOrThrow(id);
        const text = wasRunning
          ? `Cancellation of running job ${id} requested: its worker aborts it.`
          : `Cancelled job ${id}.`;
        print(options, { id, cancelled: true, wasRunning }, text);
      });
    });
}
