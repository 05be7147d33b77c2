/**
 * The read pool (`readConnectionString`, SPEC §7, issue 8 defect 8): it has the primary's
 * timeouts, so a replica that accepts TCP and never answers cannot hang `ops()`; its errors say
 * they came from the replica; `ops().replicaLagMs` is null without a replica and 0 (with a
 * warning) when the "replica" is a primary. The lag of a real streaming replica is tested in
 * streaming-replica.test.ts.
 *
 * Deliberate breaks seen failing:
 * - src/queue.ts of d10263e^, the commit before the pools got timeouts (its option allow-list
 *   patched to accept the two options, which it then ignores): "a replica that accepts TCP and
 *   never answers" failed — ops() never settled and the 5 s bound fired; the statement test
 *   failed too (its error did not name the replica: "Database error (SQLSTATE 55P03): …");
 * - `read()` without `fromReadReplica`: every test that expects the replica named failed.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, inject, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { DatabaseError, NotMigratedError } from '../../src/errors.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const REPLICA = /^Read replica \(readConnectionString\): /;

/** A TCP server that accepts every connection and never sends a byte: a replica gone silent. */
async function silentServer(): Promise<{ url: string; server: Server; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return { url: `postgres://nobody@127.0.0.1:${port}/nothing`, server, sockets };
}

/** Settles with what `promise` settled with, or 'hung' when it took longer than `ms`. */
async function within(
  ms: number,
  promise: Promise<unknown>,
): Promise<{ value?: unknown; error?: unknown } | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<'hung'>((resolve) => {
    timer = setTimeout(() => resolve('hung'), ms);
  });
  try {
    return await Promise.race([
      promise.then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      ),
      bound,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

describe('read replica: timeouts and errors', () => {
  let silent: Awaited<ReturnType<typeof silentServer>>;
  beforeAll(async () => {
    silent = await silentServer();
  });
  afterAll(async () => {
    for (const socket of silent.sockets) socket.destroy();
    await new Promise((resolve) => silent.server.close(resolve));
  });

  test('a replica that accepts TCP and never answers fails ops(), get(), list(), counts() within the bound', async () => {
    const queue = db.queue({
      readConnectionString: silent.url,
      connectTimeoutMs: 300,
      statementTimeoutMs: 300,
    });
    await queue.migrate(); // the primary answers
    const { id } = await queue.enqueue('silent.replica', {});
    for (const [name, call] of [
      ['ops', () => queue.ops()],
      ['get', () => queue.get(id)],
      ['list', () => queue.list()],
      ['counts', () => queue.counts()],
    ] as const) {
      const started = performance.now();
      const outcome = await within(5_000, call());
      expect(outcome, `${name}() hung on a silent replica`).not.toBe('hung');
      const error = (outcome as { error?: unknown }).error;
      expect(error, `${name}() should reject`).toBeInstanceOf(DatabaseError);
      expect((error as Error).message).toMatch(REPLICA);
      expect((error as Error).message).toMatch(/timeout/i);
      expect(performance.now() - started).toBeLessThan(5_000);
    }
    // Writes and claims never touch the replica.
    const [job] = await queue.claim('w1', { tasks: ['silent.replica'] });
    expect(job && (await queue.complete(job, 'ok'))).toBe(true);
    expect(await within(5_000, queue.close())).not.toBe('hung');
  });

  test('a refused connection names the replica, keeps the cause, and says what to check', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const address = closed.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    await new Promise((resolve) => closed.close(resolve)); // nothing listens there now
    const queue = db.queue({ readConnectionString: `postgres://nobody@127.0.0.1:${port}/nothing` });
    const error = await queue.get('1').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseError);
    expect((error as Error).message).toMatch(REPLICA);
    expect((error as Error).message).toMatch(/ECONNREFUSED/);
    expect((error as Error).message).toMatch(/remove readConnectionString to read the primary/);
    expect((error as Error & { cause?: { code?: string } }).cause?.code).toBe('ECONNREFUSED');
  });

  test('a statement the replica refuses keeps its SQLSTATE; a statement it never answers times out', async () => {
    const schema = `replica_locks_${randomBytes(3).toString('hex')}`;
    const primary = db.queue({ schema });
    await primary.migrate();
    // The "replica" is this same database, reached with a lock timeout of 50 ms: a table lock
    // held elsewhere makes its read fail with 55P03 from the server.
    const refusing = db.queue({
      schema,
      readConnectionString: `${db.url}?options=${encodeURIComponent('-c lock_timeout=50')}`,
    });
    const silentRead = db.queue({ schema, readConnectionString: db.url, statementTimeoutMs: 300 });
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`LOCK TABLE ${quoteIdent(schema)}.jobs IN ACCESS EXCLUSIVE MODE`);
      const refused = await refusing.counts().catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(DatabaseError);
      expect(refused).toMatchObject({ code: 'ERR_DATABASE', sqlState: '55P03' });
      expect((refused as Error).message).toMatch(REPLICA);
      expect((refused as Error & { cause?: { code?: string } }).cause?.code).toBe('55P03');

      const timedOut = await within(5_000, silentRead.list());
      expect(timedOut).not.toBe('hung');
      const error = (timedOut as { error?: unknown }).error;
      expect(error).toBeInstanceOf(DatabaseError);
      expect((error as Error).message).toMatch(REPLICA);
      expect((error as Error).message).toMatch(/timeout/i);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
  });

  test('a replica without the tables says it may not have replayed the migration yet', async () => {
    const schema = `replica_unmigrated_${randomBytes(3).toString('hex')}`;
    // Migrated on the primary (this file's database); the "replica" is another database.
    const queue = db.queue({ schema, readConnectionString: inject('adminUrl') });
    await queue.migrate();
    const error = await queue.ops().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotMigratedError);
    expect(error).toMatchObject({ code: 'ERR_NOT_MIGRATED', schema });
    expect((error as Error).message).toMatch(REPLICA);
    expect((error as Error).message).toMatch(/replayed/);
  });
});

describe('read replica: ops().replicaLagMs', () => {
  test('null without a read replica', async () => {
    const queue = db.queue();
    expect((await queue.ops()).replicaLagMs).toBeNull();
  });

  test('0 with a warning (once) when readConnectionString points at a primary', async () => {
    const warnings: string[] = [];
    const queue = db.queue({
      schema: TEST_SCHEMA,
      readConnectionString: db.url,
      logger: { warn: (_fields, message) => warnings.push(String(message)) },
    });
    expect((await queue.ops()).replicaLagMs).toBe(0);
    expect((await queue.ops()).replicaLagMs).toBe(0);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/not a replica/);
  });
});
