import type { Command } from 'commander';
import { Queue } from '../queue.js';
import {
  type GlobalOptions,
  READ_DATABASE_URL_HELP,
  readDatabaseUrl,
  requireDatabaseUrl,
} from './context.js';
import { port } from './parse.js';

interface Flags {
  port: number;
  host: string;
}

/** `skiplock dashboard [--port P] [--host H]`. */
export function registerDashboard(program: Command): void {
  program
    .command('dashboard')
    .description('serve the web dashboard, the admin API and /metrics')
    .option('--port <port>', 'TCP port (0: any free port)', port, 4000)
    .option(
      '--host <host>',
      'address to bind (without SKIPLOCK_ADMIN_TOKEN, changes need a loopback bind)',
      '127.0.0.1',
    )
    .option('--read-database-url <url>', READ_DATABASE_URL_HELP)
    .addHelpText(
      'after',
      `
Without SKIPLOCK_ADMIN_TOKEN the server binds 127.0.0.1 and anyone on this machine may use it.
With it, every /api call and /metrics need "Authorization: Bearer <token>" (the page asks for
the token; give Prometheus its "authorization" scrape setting, type Bearer, with the token).
Bound to another address without a token, requeue and cancel are refused.
Bound to loopback, it answers only requests addressed to localhost, 127.0.0.1 or [::1]
(any other Host header is refused: DNS-rebinding protection).
With a read replica, the counts, job lists and details come from it and the page shows its lag;
requeue and cancel are written on the primary.

Examples:
  $ skiplock dashboard
  $ SKIPLOCK_ADMIN_TOKEN=s3cret skiplock dashboard --host 0.0.0.0 --port 8080`,
    )
    .action(async (flags: Flags, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & Flags>();
      const queue = new Queue({
        connectionString: requireDatabaseUrl(options),
        schema: options.schema,
        poolSize: 4,
        readConnectionString: readDatabaseUrl(command),
        preparedStatements: options.preparedStatements ?? true,
      });
      try {
        await queue.ops(); // fail fast: unreachable database or schema not migrated
        const { startAdminServer } = await import('../admin/server.js'); // loaded only when serving
        const server = await startAdminServer({ queue, port: flags.port, host: flags.host });
        const auth = process.env.SKIPLOCK_ADMIN_TOKEN
          ? 'bearer token required'
          : 'no token: loopback only for changes';
        process.stdout.write(
          `skiplock dashboard on ${server.url} (${auth}); metrics at ${server.url}metrics\n`,
        );
        await new Promise<void>((resolve) => {
          const stop = () => resolve();
          process.once('SIGINT', stop);
          process.once('SIGTERM', stop);
        });
        await server.close();
      } finally {
        await queue.close();
      }
    });
}
