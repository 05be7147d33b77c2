/**
 * The soak's own PostgreSQL: an embedded server (src/embedded) in the run's folder, which the
 * soak stops and starts at will on the same port and data folder — never the machine's shared
 * server. Stops go straight to the postmaster: SIGINT is a fast shutdown (clients disconnected,
 * clean checkpoint), SIGQUIT an immediate one (everything killed, crash recovery at the next
 * start), as `pg_ctl stop -m fast|immediate` would send them.
 *
 * The soak's own statements (setup, status, fault targeting, verification) connect directly,
 * not through the proxy, each on a fresh connection with short timeouts, retried while the
 * server restarts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../../src/embedded/embedded-postgres.js';
import { Queue } from '../../src/index.js';
import { LEDGER_TABLE } from './tasks.js';

export type StopMode = 'fast' | 'immediate';

export class SoakDatabase {
  private server: EmbeddedPostgres;
  private up = true;

  private constructor(server: EmbeddedPostgres) {
    this.server = server;
  }

  static async start(dataDir: string): Promise<SoakDatabase> {
    return new SoakDatabase(await launch(dataDir));
  }

  get port(): number {
    return this.server.port;
  }

  get version(): string {
    return this.server.version;
  }

  get isUp(): boolean {
    return this.up;
  }

  /** A URL on this server, with an application_name that shows in pg_stat_activity. */
  url(port: number, applicationName: string): string {
    return `postgres://postgres@127.0.0.1:${port}/postgres?application_name=${applicationName}`;
  }

  /** Stops the server (fast or immediate) and resolves once the postmaster has exited. */
  async stop(mode: StopMode): Promise<void> {
    this.up = false;
    const pid = this.server.pid;
    try {
      process.kill(pid, mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
    } catch {
      return; // already gone
    }
    for (let waited = 0; alive(pid); waited += 20) {
      if (waited > 30_000) process.kill(pid, 'SIGKILL');
      await sleep(20);
    }
  }

  /** Starts the server again on the same port and data folder. */
  async startAgain(): Promise<void> {
    this.server = await launch(this.server.dataDir, this.server.port);
    this.up = true;
  }

  /** Final stop (fast shutdown), if it runs. */
  async close(): Promise<void> {
    if (this.up) await this.server.stop();
    this.up = false;
  }

  /** Migrates Skiplock's schema and creates the soak's ledger table. */
  async setup(): Promise<void> {
    const queue = new Queue({ connectionString: this.url(this.port, 'soak-setup') });
    try {
      await queue.migrate();
    } finally {
      await queue.close();
    }
    await this.query(`CREATE SCHEMA IF NOT EXISTS soak`);
    await this.query(
      `CREATE TABLE IF NOT EXISTS ${LEDGER_TABLE} (
         job_id  bigint PRIMARY KEY,   -- UNIQUE: a second completion of a job cannot commit
         run_id  text NOT NULL,
         attempt integer NOT NULL,
         pid     integer NOT NULL,
         at      timestamptz NOT NULL DEFAULT clock_timestamp())`,
    );
  }

  /** One statement on a fresh direct connection; with `retryForMs`, retried while the server is away. */
  async query<T = Record<string, unknown>>(
    text: string,
    values: unknown[] = [],
    retryForMs = 0,
  ): Promise<T[]> {
    const deadline = Date.now() + retryForMs;
    for (;;) {
      const client = new pg.Client({
        connectionString: this.url(this.port, 'soak-verifier'),
        connectionTimeoutMillis: 3_000,
        query_timeout: 30_000,
      });
      client.on('error', () => undefined);
      try {
        await client.connect();
        const result = await client.query(text, values);
        return result.rows as T[];
      } catch (error) {
        if (Date.now() >= deadline) throw error;
        await sleep(500);
      } finally {
        await client.end().catch(() => undefined);
      }
    }
  }
}

/**
 * Durable commits: not the embedded server's `fast` mode, whose `synchronous_commit=off` loses
 * the last commits in an immediate shutdown (seen: an acknowledged job missing, a completed job
 * run again). fsync and full-page writes stay off: they only matter when the machine itself
 * crashes, never when PostgreSQL's processes do — the kernel keeps what was written.
 */
function launch(dataDir: string, port?: number): Promise<EmbeddedPostgres> {
  return startEmbeddedPostgres({
    dataDir,
    ...(port === undefined ? {} : { port }),
    persistent: true,
    ownProcessGroup: true,
    settings: { fsync: 'off', full_page_writes: 'off' },
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
