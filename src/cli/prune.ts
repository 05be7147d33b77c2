import type { Command } from 'commander';
import { formatDuration } from '../core/duration.js';
import { print, withQueue } from './context.js';
import { progress } from './format.js';
import { duration, nameList } from './parse.js';

interface Flags {
  olderThan: number;
  status?: string[];
}

/** `skiplock prune --older-than 7d`. */
export function registerPrune(program: Command): void {
  program
    .command('prune')
    .description('delete finished jobs older than a duration (in batches, with progress)')
    .requiredOption('--older-than <duration>', 'age of the last update, e.g. 7d, 12h', duration)
    .option('--status <a,b>', 'finished statuses to delete (default done,dead,cancelled)', nameList)
    .addHelpText(
      'after',
      `
Examples:
  $ skiplock prune --older-than 7d
  $ skiplock prune --older-than 30d --status dead,cancelled --json`,
    )
    .action(async (flags: Flags, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const bar = options.json ? null : progress('prune', null);
        const deleted = await queue.prune(
          {
            olderThanMs: flags.olderThan,
            ...(flags.status === undefined
              ? {}
              : { statuses: flags.status as ('done' | 'dead' | 'cancelled')[] }),
          },
          (n) => bar?.update(n),
        );
        bar?.done(deleted);
        print(
          options,
          { deleted, olderThanMs: flags.olderThan },
          `Deleted ${deleted} finished job${deleted === 1 ? '' : 's'} older than ${formatDuration(flags.olderThan)}.`,
        );
      });
    });
}
