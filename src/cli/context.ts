import type { Command } from 'commander';
import { ValidationError } from '../errors.js';

export { NotFoundError } from '../errors.js';

import { Queue } from '../queue.js';

/** Global options every subcommand sees. */
export interface GlobalOptions {
  databaseUrl?: string;
  schema: string;
  /** `--no-prepared-statements`: false; `--prepared-statements`: true; neither: undefined. */
  preparedStatements?: boolean;
  json?: boolean;
  verbose?: boolean;
}

/** Opens a Queue from `--database-url`/`$DATABASE_URL` and `--schema`, runs `fn`, closes it. */
export async function withQueue<T>(
  command: Command,
  fn: (queue: Queue, options: GlobalOptions) => Promise<T>,
): Promise<T> {
  const options = command.optsWithGlobals<GlobalOptions>();
  const queue = new Queue({
    connectionString: requireDatabaseUrl(options),
    schema: options.schema,
    poolSize: 2,
    readConnectionString: readDatabaseUrl(command),
    preparedStatements: options.preparedStatements ?? true,
  });
  try {
    return await fn(queue, options);
  } finally {
    await queue.close();
  }
}

/** Prints `value` as JSON with --json, else the text for people. */
export function print(options: GlobalOptions, value: unknown, text: string): void {
  process.stdout.write(options.json ? `${JSON.stringify(value)}\n` : `${text}\n`);
}

/** `--database-url`, else `$DATABASE_URL`, else a one-line error. */
export function requireDatabaseUrl(options: GlobalOptions): string {
  const url = options.databaseUrl ?? process.env.DATABASE_URL;
  if (!url)
    throw new ValidationError(
      '--database-url',
      'no database given: pass --database-url postgres://… or set DATABASE_URL',
    );
  return url;
}

/** Help of `--read-database-url`, shared by the commands that read a replica (ops, dashboard). */
export const READ_DATABASE_URL_HELP =
  'streaming replica for the reads (default: $DATABASE_READ_URL; "" for none): counts, job lists and details; writes stay on --database-url';

/**
 * The read replica (`readConnectionString`) of a command that declares `--read-database-url`
 * (ops, dashboard): the option, else `$DATABASE_READ_URL`; empty means none. Other commands
 * always use the primary.
 */
export function readDatabaseUrl(command: Command): string | undefined {
  if (!command.options.some((option) => option.long === '--read-database-url')) return undefined;
  const url = command.opts<{ readDatabaseUrl?: string }>().readDatabaseUrl ?? process.env.DATABASE_READ_URL;
  return url || undefined;
}

/** A second SIGINT this soon after the first is the same Ctrl-C relayed by npm/tsx, not a new one. */
export const SIGNAL_ECHO_MS = 1_000;
