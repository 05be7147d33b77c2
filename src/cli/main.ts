#!/usr/bin/env node
/**
 * The `skiplock` command (SPEC §4). Each subcommand lives in its own file; this one wires them
 * and owns the error policy: one line on stderr and a non-zero exit, a stack only with --verbose.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { SkiplockError } from '../errors.js';
import { registerCancel } from './cancel.js';
import { registerDashboard } from './dashboard.js';
import { registerDev } from './dev.js';
import { registerEmit } from './emit.js';
import { registerEnqueue } from './enqueue.js';
import { registerFlow } from './flow.js';
import { registerGet } from './get.js';
import { registerList } from './list.js';
import { registerMigrate } from './migrate.js';
import { registerOps } from './ops.js';
import { registerPrune } from './prune.js';
import { registerQueues } from './queues.js';
import { registerRequeue } from './requeue.js';
import { registerSchedules } from './schedules.js';
import { registerSequences } from './sequences.js';
import { registerWorker } from './worker.js';

const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

export function buildProgram(): Command {
  const program = new Command('skiplock')
    .description('Skiplock: a durable job queue on PostgreSQL')
    .version(version)
    .option('--database-url <url>', 'PostgreSQL URL (default: $DATABASE_URL)')
    .option('--schema <name>', "schema of Skiplock's tables", 'skiplock')
    // Both forms, so that "not given" stays undefined: `worker --no-listen` then defaults to off.
    .option('--prepared-statements', 'keep named prepared statements even with `worker --no-listen`')
    .option(
      '--no-prepared-statements',
      'no named prepared statements: for PgBouncer in transaction mode (`worker --no-listen` implies it)',
    )
    .option('--json', 'print JSON instead of text for people')
    .option('--verbose', 'print stack traces of errors')
    .addHelpText(
      'after',
      `
Examples:
  $ npx skiplock dev                                  # embedded PostgreSQL, demo worker, dashboard
  $ DATABASE_URL=postgres://localhost/app skiplock migrate
  $ skiplock worker --tasks ./tasks.js --concurrency 20
  $ skiplock ops --watch

Behind PgBouncer in transaction mode (see docs/pgbouncer.md):
  $ skiplock worker --tasks ./tasks.js --no-listen    # polls; no prepared statements
  $ skiplock ops --no-prepared-statements             # every other command that connects

Run "skiplock <command> --help" for a command's options and examples.`,
    )
    .configureOutput({ outputError: (text, write) => write(`skiplock: ${text.replace(/^error: /, '')}`) })
    .exitOverride();
  registerMigrate(program);
  registerWorker(program);
  registerEnqueue(program);
  registerGet(program);
  registerFlow(program);
  registerOps(program);
  registerList(program);
  registerRequeue(program);
  registerCancel(program);
  registerEmit(program);
  registerPrune(program);
  registerSchedules(program);
  registerQueues(program);
  registerSequences(program);
  registerDashboard(program);
  registerDev(program);
  return program;
}

async function main(argv: string[]): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      // Commander already printed its one-line message (usage errors) or the help/version text.
      process.exitCode = error.exitCode === 0 ? 0 : 2;
      return;
    }
    const verbose = program.opts<{ verbose?: boolean }>().verbose === true || argv.includes('--verbose');
    process.stderr.write(`skiplock: ${oneLine(error)}\n`);
    if (verbose && error instanceof Error && error.stack) process.stderr.write(`${error.stack}\n`);
    process.exitCode = exitCode(error);
  }
}

/**
 * 2: bad arguments; 3: no such job, or not in a state the command applies to (ERR_CONFLICT, the
 * admin API's 409; also a dedupe key taken again); 1: anything else (database…).
 */
function exitCode(error: unknown): number {
  if (!(error instanceof SkiplockError)) return 1;
  if (error.code === 'ERR_VALIDATION') return 2;
  if (['ERR_NOT_FOUND', 'ERR_CONFLICT', 'ERR_DEDUPE_CONFLICT'].includes(error.code)) return 3;
  return 1;
}

function oneLine(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.split('\n')[0] ?? message;
}

await main(process.argv);
