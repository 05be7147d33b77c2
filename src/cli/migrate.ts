import type { Command } from 'commander';
import { print, withQueue } from './context.js';

/** `skiplock migrate`: create or upgrade the schema (safe to run from many processes at once). */
export function registerMigrate(program: Command): void {
  program
    .command('migrate')
    .description("create or upgrade Skiplock's tables (safe to run concurrently)")
    .addHelpText(
      'after',
      `
Examples:
  $ DATABASE_URL=postgres://localhost/app skiplock migrate
  $ skiplock migrate --database-url postgres://localhost/app --schema jobs_tenant_a --json`,
    )
    .action(async (_options: unknown, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const result = await queue.migrate();
        const text =
          result.applied.length === 0
            ? `Schema "${result.schema}" is up to date (version ${result.version}).`
            : `Schema "${result.schema}" migrated to version ${result.version} (applied ${result.applied.join(', ')}).`;
        print(options, result, text);
      });
    });
}
