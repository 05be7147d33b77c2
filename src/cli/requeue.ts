import type { Command } from 'commander';
import { ValidationError } from '../errors.js';
import { print, withQueue } from './context.js';
import { progress } from './format.js';

interface Flags {
  allDead?: boolean;
  task?: string;
  resetSteps?: boolean;
}

/** `skiplock requeue ID | --all-dead [--task T]`. */
export function registerRequeue(program: Command): void {
  program
    .command('requeue')
    .description('bring dead jobs back to pending with attempts reset')
    .argument('[id]', 'job id')
    .option('--all-dead', 'every dead job (in batches, with progress)')
    .option('--task <task>', 'with --all-dead: only this task')
    .option('--reset-steps', 'with an id: delete its durable steps too (it runs from scratch)')
    .addHelpText(
      'after',
      `
Examples:
  $ skiplock requeue 42
  $ skiplock requeue --all-dead --task email.send`,
    )
    .action(async (id: string | undefined, flags: Flags, command: Command) => {
      if ((id === undefined) === (flags.allDead !== true)) {
        throw new ValidationError('requeue', 'give a job id or --all-dead (not both)');
      }
      if (flags.resetSteps && id === undefined) {
        throw new ValidationError('--reset-steps', 'only goes with a job id');
      }
      if (flags.task !== undefined && !flags.allDead) {
        throw new ValidationError('--task', 'only goes with --all-dead');
      }
      await withQueue(command, async (queue, options) => {
        if (id !== undefined) {
          // One statement on the primary: unknown exits 3, not dead is ERR_CONFLICT (exit 3).
          await queue.requeueOrThrow(id, { resetSteps: flags.resetSteps === true });
          print(options, { id, requeued: true }, `Requeued job ${id}.`);
          return;
        }
        const total = (await queue.counts()).dead;
        const bar = options.json ? null : progress('requeue', flags.task === undefined ? total : null);
        const result = await queue.requeueDead(flags.task === undefined ? {} : { task: flags.task }, (p) =>
          bar?.update(p.requeued),
        );
        bar?.done(result.requeued);
        const skipped = result.skipped
          ? ` (${result.skipped} skipped: their dedupe key is active again)`
          : '';
        print(
          options,
          result,
          `Requeued ${result.requeued} dead job${result.requeued === 1 ? '' : 's'}${skipped}.`,
        );
      });
    });
}
