/**
 * A database per test file, cloned from the migrated template (fast: a file copy), dropped
 * afterwards. Queues made through it are closed for you.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { Queue, type QueueOptions } from '../../src/queue.js';
import type { WorkerOptions } from '../../src/worker/options.js';
import { Worker } from '../../src/worker/worker.js';
import { jobsTable, TEST_SCHEMA } from './schema.js';
import { databaseUrl } from './urls.js';

export interface TestDatabase {
  /** URL of this file's database. */
  readonly url: string;
  /** A pool on this file's database, for assertions and setup statements. */
  readonly pool: pg.Pool;
  /** `<quoted test schema>.jobs`, for statements written by tests. */
  readonly jobs: string;
  /** A new Queue on this database, in the test schema unless told otherwise (closed after the file). */
  queue(options?: Omit<QueueOptions, 'connectionString'>): Queue;
  /**
   * A new Worker on this database, in the test schema unless told otherwise; stopped after the
   * file if the test did not stop it. It makes its own Queue (and pool) unless given `queue`.
   */
  worker(options: Omit<WorkerOptions, 'connectionString'>): Worker;
  /** Runs a statement on this database and returns its rows. */
  sql<T = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]>;
  /** Rows in `<schema>.jobs`. */
  jobCount(schema?: string): Promise<number>;
  /** Moves a running job's lease into the past, in the database (no clock stubbing). */
  expireLease(id: string, schema?: string): Promise<void>;
}

export function useTestDatabase(): TestDatabase {
  const name = `skiplock_t_${randomBytes(6).toString('hex')}`;
  const adminUrl = inject('adminUrl');
  const url = databaseUrl(adminUrl, name);
  const queues: Queue[] = [];
  const workers: Worker[] = [];
  let pool: pg.Pool | undefined;

  beforeAll(async () => {
    await admin(
      adminUrl,
      `CREATE DATABASE ${name} TEMPLATE ${inject('templateDatabase')} STRATEGY file_copy`,
    );
    pool = new pg.Pool({ connectionString: url, max: 4 });
    // Its idle connections are terminated by the DROP DATABASE … WITH (FORCE) of afterAll (and
    // by tests that terminate backends): unheard, that 'error' would be an uncaught exception.
    pool.on('error', () => undefined);
  });

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop({ timeoutMs: 1_000 })));
    await Promise.all(queues.map((q) => q.close()));
    await pool?.end();
    await admin(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  });

  const db: TestDatabase = {
    url,
    jobs: jobsTable(),
    get pool() {
      if (!pool) throw new Error('the test database is created in beforeAll');
      return pool;
    },
    queue(options = {}) {
      const queue = new Queue({ schema: TEST_SCHEMA, ...options, connectionString: url });
      queues.push(queue);
      return queue;
    },
    worker(options) {
      const worker = new Worker(
        options.queue ? options : { schema: TEST_SCHEMA, ...options, connectionString: url },
      );
      workers.push(worker);
      return worker;
    },
    async sql<T>(text: string, values?: unknown[]) {
      return (await db.pool.query(text, values)).rows as T[];
    },
    async jobCount(schema = TEST_SCHEMA) {
      const rows = await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${jobsTable(schema)}`);
      return rows[0]?.n ?? 0;
    },
    async expireLease(id, schema = TEST_SCHEMA) {
      await db.sql(
        `UPDATE ${jobsTable(schema)} SET lease_until = now() - interval '1 second' WHERE id = $1`,
        [id],
      );
    },
  };
  return db;
}

async function admin(adminUrl: string, statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}
