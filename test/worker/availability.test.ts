/**
 * Issue 8, defects 10 and 11: a worker that meets an unavailable database waits it out.
 *
 *  - `start()` while nothing listens on the database's address kept exiting at once (24 exits
 *    of `skiplock worker` during two outages in the fault soak). Now it retries with backoff,
 *    reporting each failure as an 'error' event, and resolves once the database answers. Before
 *    the fix this test saw start() reject with ECONNREFUSED.
 *  - An outcome write that meets `25006` (read-only: a failover that reconnected the worker to
 *    a server that is not yet, or no longer, the primary) was given up, leaving the job to the
 *    reaper and a second execution. Now it is retried while the lease lasts: the job ends done
 *    after one execution. Before the fix the handler ran twice.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, test } from 'vitest';
import { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { freePort } from '../support/ports.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { gate, nextEvent, startWorker, within } from './helpers.js';

const db = useTestDatabase();

describe('an unavailable database', () => {
  test('stop() while start() waits for its LISTEN connection: start() resolves; nothing of the worker runs after (no claim, no reaper)', async () => {
    // Before the fix start() went on after the stop's drain had run: it started the heartbeat,
    // reaper and claim loop of a stopped worker (its timers kept the process alive — the CLI
    // worker hung on a SIGTERM during startup — and it claimed jobs after stop()).
    const target = new URL(db.url);
    const proxy = await startTcpProxy(Number(target.port || 5432), target.hostname);
    try {
      proxy.silenceWhen = /LISTEN/; // the LISTEN connection hangs; the pool's work
      const queue = new Queue({
        connectionString: proxy.url(db.url),
        schema: TEST_SCHEMA,
        connectTimeoutMs: 3_000,
      });
      const worker = db.worker({
        queue,
        tasks: { 'avail.early-stop': () => 'ran' },
        pollIntervalMs: 100,
        reapIntervalMs: 100,
      });
      const starting = worker.start().catch(() => undefined);
      await sleep(300);
      await within(worker.stop(), 10_000, 'stop() during start()');
      await within(starting, 10_000, 'start() after stop()');
      const other = db.queue();
      const { id } = await other.enqueue('avail.early-stop', {});
      // a crashed worker's job: only a running reaper would take it back
      const { id: crashed } = await other.enqueue('avail.crashed', {});
      await other.claim('crashed-worker', { tasks: ['avail.crashed'] });
      await db.expireLease(crashed);
      await sleep(1_000);
      expect((await other.get(id))?.status).toBe('pending');
      expect((await other.get(crashed))?.status).toBe('running');
      expect(worker.stats().done).toBe(0);
    } finally {
      await proxy.close();
    }
  });

  test('start() waits for a database that is not up yet, then works', async () => {
    const port = await freePort();
    const target = new URL(db.url);
    const url = new URL(db.url);
    url.hostname = '127.0.0.1';
    url.port = String(port);
    const queue = new Queue({
      connectionString: url.toString(),
      schema: TEST_SCHEMA,
      connectTimeoutMs: 1_000,
    });
    const worker = db.worker({ queue, tasks: { 'avail.start': () => 'up' }, pollIntervalMs: 200 });
    const errors: string[] = [];
    worker.on('error', ({ error, during }) => errors.push(`${during}: ${error.message}`));
    let settled: 'resolved' | 'rejected' | null = null;
    const starting = worker.start().then(
      () => {
        settled = 'resolved';
      },
      (error: unknown) => {
        settled = 'rejected';
        throw error;
      },
    );
    const starts = () =>
      errors.filter((e) => /^starting: the database is unreachable; retrying in \d+ ms/.test(e));
    await expect.poll(() => starts().length, { timeout: 5_000 }).toBeGreaterThanOrEqual(2);
    expect(settled).toBeNull();

    const proxy = await startTcpProxy(Number(target.port || 5432), target.hostname, port); // the database "comes up"
    try {
      await within(starting, 10_000, 'start() after the database came up');
      const done = nextEvent(worker, 'job:done', () => true, 10_000);
      await db.queue().enqueue('avail.start', {});
      expect((await done).result).toBe('up');
      await worker.stop();
      await queue.close();
    } finally {
      await proxy.close();
    }
  });

  test('start() still fails at once when the schema is not migrated', async () => {
    const worker = db.worker({ schema: 'never_migrated', tasks: { 'avail.nm': () => null } });
    await expect(within(worker.start(), 5_000, 'start()')).rejects.toMatchObject({
      code: 'ERR_NOT_MIGRATED',
    });
  });

  test('an outcome write refused as read-only (25006) is retried while the lease lasts; the job runs once', async () => {
    const dbName = new URL(db.url).pathname.slice(1);
    const release = gate();
    let executions = 0;
    const worker = await startWorker(db, {
      tasks: {
        'avail.readonly': async () => {
          executions++;
          await release.promise;
          return 'written after the failover';
        },
      },
      leaseMs: 20_000,
      reapIntervalMs: 500,
      batchCompletions: false,
    });
    const errors: string[] = [];
    worker.on('error', ({ during }) => errors.push(during));
    const done = nextEvent(worker, 'job:done', () => true, 20_000);
    const queue = db.queue();
    const { id } = await queue.enqueue('avail.readonly', {});
    await expect.poll(() => executions).toBe(1);
    // "Failover": every new session of this database is read-only, and the worker's are new.
    await db.sql(`ALTER DATABASE ${dbName} SET default_transaction_read_only = on`);
    await db.sql(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = current_database() AND application_name = 'skiplock' AND state = 'idle'`,
    );
    try {
      release.open();
      await expect
        .poll(() => errors.some((e) => /recording|completing/.test(e)), { timeout: 10_000 })
        .toBe(true);
      await sleep(300);
    } finally {
      await db.sql(`ALTER DATABASE ${dbName} RESET default_transaction_read_only`);
      await db.sql(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'skiplock' AND pid <> pg_backend_pid()`,
      );
    }
    expect((await done).job.id).toBe(id);
    expect(executions).toBe(1);
    expect(await queue.get(id)).toMatchObject({
      status: 'done',
      result: 'written after the failover',
      attempts: 1,
    });
    await worker.stop();
  });
});
