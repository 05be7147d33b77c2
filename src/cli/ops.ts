import { type Command, Option } from 'commander';
import { JOB_STATUSES, type OpsSnapshot } from '../types.js';
import { print, READ_DATABASE_URL_HELP, withQueue } from './context.js';
import { style, table } from './format.js';
import { duration } from './parse.js';

interface Flags {
  watch?: boolean;
  interval: number;
}

/** `skiplock ops [--json] [--watch]`. */
export function registerOps(program: Command): void {
  program
    .command('ops')
    .description('the operational snapshot: counts, lag, dead and stuck jobs')
    .option('--watch', 'refresh until Ctrl-C')
    .addOption(
      new Option('--interval <duration>', 'refresh interval with --watch')
        .argParser(duration)
        .default(2_000, '2s'),
    )
    .option('--read-database-url <url>', READ_DATABASE_URL_HELP)
    .addHelpText(
      'after',
      `
With a read replica the figures come from it, and "replica lag" says how far behind the
primary it was (replicaLagMs in --json; 0 = it had replayed everything).

Examples:
  $ skiplock ops
  $ skiplock ops --watch --interval 5s
  $ skiplock ops --json
  $ DATABASE_READ_URL=postgres://replica.internal/app skiplock ops`,
    )
    .action(async (flags: Flags, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const show = async () => {
          const ops = await queue.ops();
          if (flags.watch && !options.json && process.stdout.isTTY) process.stdout.write('\u001b[2J\u001b[H');
          print(options, ops, render(ops));
        };
        await show();
        if (!flags.watch) return;
        await new Promise<void>((resolve) => {
          const timer = setInterval(() => {
            show().catch((error: unknown) => {
              process.stderr.write(`skiplock: ${error instanceof Error ? error.message : String(error)}\n`);
            });
          }, flags.interval);
          process.once('SIGINT', () => {
            clearInterval(timer);
            resolve();
          });
        });
      });
    });
}

/** A replica this far behind shows in red: a local one lags milliseconds (TECH-NOTES). */
const REPLICA_LAG_ALERT_MS = 1_000;

function render(ops: OpsSnapshot): string {
  const estimated = (status: string) => (ops.estimated.includes(status as never) ? '~' : '');
  const rows = JOB_STATUSES.map((status) => [
    status,
    `${estimated(status)}${ops[status].toLocaleString('en-US')}`,
  ]);
  const alerts = [
    ['dead in the last hour', ops.dead1h, ops.dead1h > 0],
    ['stuck running', ops.stuckRunning, ops.stuckRunning > 0],
    ['oldest due pending (s)', ops.oldestPendingSec, ops.oldestPendingSec > 60],
    ['deadline exceeded, last hour', ops.deadline1h, ops.deadline1h > 0],
    ...(ops.replicaLagMs === null
      ? []
      : [['replica lag (ms)', ops.replicaLagMs, ops.replicaLagMs >= REPLICA_LAG_ALERT_MS] as const]),
  ] as const;
  const flagged = alerts.map(([name, value, bad]) => [name, bad ? style.red(String(value)) : String(value)]);
  const note = ops.estimated.length ? `\n${style.dim('~ estimated from table statistics')}` : '';
  return `${table(['STATUS', 'JOBS'], rows)}\n\n${table(['SIGNAL', 'VALUE'], flagged)}${note}`;
}
