import type { Command } from 'commander';
import { isLoopback, isWildcard } from '../admin/auth.js';
import { PROBE_MS, type ReplicaState } from '../admin/read-route.js';
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
requeue and cancel are written on the primary. While the replica is unreachable (and at start-up
until it first answers) they come from the primary: the page and /api/ops ("replica") say so,
and stderr says when it goes down and comes back.

Examples:
  $ skiplock dashboard
  $ SKIPLOCK_ADMIN_TOKEN=s3cret skiplock dashboard --host 0.0.0.0 --port 8080`,
    )
    .action(async (flags: Flags, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & Flags>();
      const connection = {
        connectionString: requireDatabaseUrl(options),
        schema: options.schema,
        preparedStatements: options.preparedStatements ?? true,
      };
      const readConnectionString = readDatabaseUrl(command);
      const queue = new Queue({ ...connection, poolSize: 4, readConnectionString });
      // With a replica, a second queue reads the primary while the replica is down (issue 26).
      const primary = readConnectionString ? new Queue({ ...connection, poolSize: 2 }) : undefined;
      try {
        // Fail fast on the primary (unreachable, not migrated); the replica is checked once
        // serving, and its being down is said, not fatal.
        await (primary ?? queue).ops();
        let wasDown = false;
        const { startAdminServer } = await import('../admin/server.js'); // loaded only when serving
        const server = await startAdminServer({
          queue,
          primary,
          port: flags.port,
          host: flags.host,
          onReplicaChange: (state) => {
            const line = replicaLine(state, wasDown);
            wasDown = state.status === 'down';
            if (line) process.stderr.write(`${line}\n`);
          },
        });
        process.stdout.write(`${startLine(server, Boolean(process.env.SKIPLOCK_ADMIN_TOKEN))}\n`);
        await new Promise<void>((resolve) => {
          const stop = () => resolve();
          process.once('SIGINT', stop);
          process.once('SIGTERM', stop);
        });
        await server.close();
      } finally {
        await Promise.all([queue.close(), primary?.close()]);
      }
    });
}

/**
 * What the dashboard says once it listens: where to open it, the address it is bound to, and
 * who may change jobs (the rules of auth.ts).
 */
export function startLine(server: { url: string; host: string }, token: boolean): string {
  const bound = isWildcard(server.host)
    ? `listening on ${server.host}: every address`
    : `listening on ${server.host}`;
  const rule = token
    ? 'bearer token required for /api and /metrics'
    : isLoopback(server.host)
      ? 'no token: anyone on this machine may read and change jobs'
      : 'no token: read-only, every change (requeue, cancel, pause) is refused with 403; set SKIPLOCK_ADMIN_TOKEN to allow them';
  return `skiplock dashboard on ${server.url} (${bound}; ${rule}); metrics at ${server.url}metrics`;
}

/** What the dashboard says on stderr when its read replica goes down or comes back; null: nothing. */
export function replicaLine(state: ReplicaState, wasDown: boolean): string | null {
  if (state.status === 'down')
    return `skiplock dashboard: the read replica is unreachable, reading the primary until it answers (asked every ${PROBE_MS / 1_000} s): ${state.error ?? ''}`;
  return state.status === 'up' && wasDown
    ? 'skiplock dashboard: the read replica answers again: reading it'
    : null;
}
