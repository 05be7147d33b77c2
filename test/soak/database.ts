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
import { LIMITED, SCHEDULE } from './features.js';
import { LEDGER_TABLE, REQUEUED_TABLE, STEP_LEDGER_TABLE } from './tasks.js';
import { scheduleOptions } from './workload.js';

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

  /**
   * Migrates Skiplock's schema, creates the soak's own tables (the ledger, the requeue marks and
   * the database's own record of every job's status changes, see {@link HISTORY_SQL}), configures
   * the limited queues and sets up the schedule. Returns the schedule's first tick (ms).
   */
  async setup(): Promise<number> {
    const queue = new Queue({ connectionString: this.url(this.port, 'soak-setup') });
    try {
      await queue.migrate();
      await this.query(`CREATE SCHEMA IF NOT EXISTS soak`);
      await this.query(
        `CREATE TABLE IF NOT EXISTS ${LEDGER_TABLE} (
           job_id  bigint PRIMARY KEY,   -- UNIQUE: a second completion of a job cannot commit
           run_id  text NOT NULL,
           attempt integer NOT NULL,
           pid     integer NOT NULL,
           at      timestamptz NOT NULL DEFAULT clock_timestamp())`,
      );
      await this.query(`CREATE TABLE IF NOT EXISTS ${REQUEUED_TABLE} (job_id bigint PRIMARY KEY)`);
      // §12 no unique key: a transactional step written twice must show, not fail
      await this.query(
        `CREATE TABLE IF NOT EXISTS ${STEP_LEDGER_TABLE} (job_id bigint NOT NULL, tag text NOT NULL)`,
      );
      for (const statement of HISTORY_SQL) await this.query(statement);
      const { concurrency, rate, groups } = LIMITED;
      await queue.configureQueue(concurrency.queue, { concurrency: concurrency.concurrency });
      await queue.configureQueue(rate.queue, { rateLimit: { limit: rate.limit, periodMs: rate.periodMs } });
      await queue.configureQueue(groups.queue, { groupConcurrency: groups.groupConcurrency });
      const schedule = await queue.schedule(SCHEDULE.name, scheduleOptions());
      if (!schedule.nextRunAt) throw new Error('the soak schedule has no next run');
      return schedule.nextRunAt.getTime();
    } finally {
      await queue.close();
    }
  }

  /** Pauses the schedule (at the drain: its ticks from then on are not the run's). */
  async pauseSchedule(): Promise<void> {
    const queue = new Queue({ connectionString: this.url(this.port, 'soak-control') });
    try {
      await queue.pauseSchedule(SCHEDULE.name);
    } finally {
      await queue.close();
    }
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
 * The database's own view of every job, kept by triggers in the soak's schema (nothing in
 * Skiplock's): each status change with its instant, each job's row as it was deleted (prune),
 * each dependency edge ever written. The limit, dedupe and flow checks judge intervals from
 * these — what the database believed was running — not from the handlers' stamps, which go on
 * in a paused or cut-off process after its lease has ended.
 *
 * `at` is clock_timestamp() in an AFTER ROW trigger, which runs at the end of the statement,
 * before its commit. So a claim that saw a job's end (after that end's commit) is stamped later
 * than the end; a claim that did not see it counted the job as running. The intervals never show
 * an overlap the database did not allow (and could hide one only in a race of microseconds).
 */
const HISTORY_SQL = [
  `CREATE TABLE soak.transitions (
     seq            bigserial PRIMARY KEY,
     job_id         bigint NOT NULL,
     old_status     text,            -- null: inserted
     new_status     text,            -- null: deleted
     at             timestamptz NOT NULL DEFAULT clock_timestamp(),
     run_started_at timestamptz)`,
  `CREATE TABLE soak.deleted (job_id bigint PRIMARY KEY, job jsonb NOT NULL)`,
  `CREATE TABLE soak.edges (job_id bigint NOT NULL, depends_on bigint NOT NULL)`,
  `CREATE FUNCTION soak.record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     IF TG_OP = 'INSERT' THEN
       INSERT INTO soak.transitions (job_id, old_status, new_status, run_started_at)
       VALUES (NEW.id, NULL, NEW.status, NEW.run_started_at);
     ELSIF TG_OP = 'UPDATE' THEN
       INSERT INTO soak.transitions (job_id, old_status, new_status, run_started_at)
       VALUES (NEW.id, OLD.status, NEW.status, NEW.run_started_at);
     ELSE
       INSERT INTO soak.transitions (job_id, old_status, new_status) VALUES (OLD.id, OLD.status, NULL);
       INSERT INTO soak.deleted (job_id, job) VALUES (OLD.id, to_jsonb(OLD)) ON CONFLICT DO NOTHING;
     END IF;
     RETURN NULL;
   END $$`,
  `CREATE FUNCTION soak.record_edge() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     INSERT INTO soak.edges (job_id, depends_on) VALUES (NEW.job_id, NEW.depends_on);
     RETURN NULL;
   END $$`,
  `CREATE TRIGGER soak_inserted AFTER INSERT ON skiplock.jobs
     FOR EACH ROW EXECUTE FUNCTION soak.record_transition()`,
  `CREATE TRIGGER soak_status AFTER UPDATE OF status ON skiplock.jobs
     FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION soak.record_transition()`,
  `CREATE TRIGGER soak_deleted AFTER DELETE ON skiplock.jobs
     FOR EACH ROW EXECUTE FUNCTION soak.record_transition()`,
  `CREATE TRIGGER soak_edge AFTER INSERT ON skiplock.job_dependencies
     FOR EACH ROW EXECUTE FUNCTION soak.record_edge()`,
];

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
