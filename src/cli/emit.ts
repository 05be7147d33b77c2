import type { Command } from 'commander';
import { print, withQueue } from './context.js';
import { json } from './parse.js';

/** `skiplock emit NAME [PAYLOAD]` (SPEC §12): sets an event once, waking the jobs that wait for it. */
export function registerEmit(program: Command): void {
  program
    .command('emit')
    .description('set an event (once: a latch), making every job waiting for it pending')
    .argument('<name>', 'event name')
    .argument('[payload]', 'JSON payload (default: null)', json)
    .addHelpText(
      'after',
      `
An event is set once: the first emit stores its payload ("set": true); later ones change
nothing ("set": false). A job that starts waiting for it afterwards gets it at once.

Examples:
  $ skiplock emit order.paid:42 '{"amount":1200}'
  $ skiplock emit deploy.approved --json`,
    )
    .action(async (name: string, payload: unknown, _flags: unknown, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const set = await queue.emitEvent(name, payload ?? null);
        print(
          options,
          { name, set },
          set ? `Event ${name} set.` : `Event ${name} was already set: nothing changed.`,
        );
      });
    });
}
