import type { Command } from 'commander';
import type { GlobalOptions } from './context.js';
import type { DevFlags } from './dev-flags.js';
import { port, positiveInt } from './parse.js';

/** `skiplock dev`: embedded PostgreSQL + migrate + demo worker and producer + dashboard. */
export function registerDev(program: Command): void {
  program
    .command('dev')
    .description('zero-setup: embedded PostgreSQL, demo workers and the dashboard, in one command')
    .option('--port <port>', 'dashboard port (default 4000, or the next free one; 0: any free port)', port)
    .option('--data-dir <dir>', 'where the embedded server keeps its data (reused next time)', '.skiplock')
    .option('--rate <n>', 'demo jobs enqueued per second', positiveInt, 5)
    .option('--no-demo', 'no demo worker or producer: just the database and the dashboard')
    .addHelpText(
      'after',
      `
It prints the dashboard URL and a DATABASE_URL for other processes (psql, skiplock worker, …).
Ctrl-C stops everything and leaves no server running; a server left by a killed earlier run is
found and stopped.

Examples:
  $ npx skiplock dev
  $ npx skiplock dev --rate 50 --port 8080
  $ DATABASE_URL=<printed url> npx skiplock worker --tasks ./tasks.js   # in another terminal`,
    )
    .action(async (flags: DevFlags, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & DevFlags>();
      const { runDev } = await import('./dev-run.js'); // the embedded server and the rest load only here
      await runDev(flags, options.schema);
    });
}
