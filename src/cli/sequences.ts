/**
 * `skiplock sequences` (SPEC §11): the sequence keys with unfinished jobs, each with its head
 * and how many jobs wait behind it; `--blocked` only those whose head is dead.
 */
import type { Command } from 'commander';
import type { SequenceInfo } from '../types.js';
import { print, withQueue } from './context.js';
import { colourStatus, style, table } from './format.js';
import { positiveInt } from './parse.js';

interface SequencesFlags {
  blocked?: boolean;
  limit?: number;
  after?: string;
}

export function registerSequences(program: Command): void {
  program
    .command('sequences')
    .description('list sequence keys with their head job and how many jobs wait behind it')
    .option('--blocked', 'only keys whose head is dead (blocked until it is requeued or cancelled)')
    .option('--limit <n>', 'at most this many keys (default 100, at most 1000)', positiveInt)
    .option('--after <key>', 'keys after this one (the last key of the previous page)')
    .addHelpText(
      'after',
      `
Examples:
  $ skiplock sequences
  $ skiplock sequences --blocked
  $ skiplock sequences --blocked --json
  $ skiplock requeue 42     # a blocked key's dead head: runs again, first`,
    )
    .action(async (flags: SequencesFlags, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const sequences = await queue.sequences({
          blocked: flags.blocked === true,
          ...(flags.limit === undefined ? {} : { limit: flags.limit }),
          ...(flags.after === undefined ? {} : { after: flags.after }),
        });
        print(options, sequences, render(sequences, flags.blocked === true));
      });
    });
}

function render(sequences: SequenceInfo[], blocked: boolean): string {
  if (sequences.length === 0) return blocked ? 'No blocked sequences.' : 'No sequences with unfinished jobs.';
  const lines = table(
    ['KEY', 'HEAD', 'HEAD STATUS', 'QUEUED'],
    sequences.map((s) => [s.key, s.headId, colourStatus(s.headStatus), String(s.queued)]),
  );
  const dead = sequences.filter((s) => s.headStatus === 'dead').length;
  return dead === 0
    ? lines
    : `${lines}\n${style.yellow(`${dead} blocked: \`skiplock requeue <head>\` runs the head again, \`skiplock cancel <head>\` skips it.`)}`;
}
