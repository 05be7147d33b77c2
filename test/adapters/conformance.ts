/**
 * The suite every adapter of `skiplock/adapters` passes (SPEC §9), run against the real library
 * on the real database by one test file per library: an enqueue, a batch and a completion that
 * join the library's transaction exist if and only if it commits; a dedupe hit (and a throttle,
 * which takes a savepoint of that transaction) answers the holder, and debounce and scope
 * 'pending' run their own statements there; a failed statement keeps its SQLSTATE; anything but
 * a transaction is refused with a ValidationError.
 *
 * Each library's file lists the breaks of its adapter that this suite caught. The suite itself
 * was checked by running an adapter on its library's pool instead of the transaction (Knex's):
 * the invisibility, rollback, batch and completion tests failed. The debounce test was seen
 * failing for Prisma with the debounce statement's pg_notify column left void.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ValidationError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import type { Queryable } from '../../src/types.js';
import { type TestDatabase, useTestDatabase } from '../support/database.js';

/** One library, opened on the test database. */
export interface AdapterHarness {
  /**
   * Runs `fn` in one transaction of the library with the adapter's client on it: commits when
   * `fn` resolves, rolls back (and rejects) when it throws.
   */
  transaction<T>(fn: (client: Queryable) => Promise<T>): Promise<T>;
  /** The adapter called on what is not a transaction (the library's pool or instance). */
  onNonTransaction(): Queryable;
  close(): Promise<void>;
}

class Rollback extends Error {}

/** Registers the suite for one library; `open` is called once the file's database exists. */
export function adapterSuite(
  name: string,
  open: (url: string) => Promise<AdapterHarness>,
): { queue(): Queue } {
  const db = useTestDatabase();
  let harness: AdapterHarness;
  let queue: Queue;
  let tasks = 0;
  const newTask = () => `adapter.${name}.${++tasks}`;

  beforeAll(async () => {
    harness = await open(db.url);
    queue = db.queue();
  });
  afterAll(async () => {
    await harness?.close();
  });

  /** Runs `fn` in the library's transaction, which then rolls back. */
  async function rolledBack(fn: (client: Queryable) => Promise<unknown>): Promise<void> {
    await expect(
      harness.transaction(async (client) => {
        await fn(client);
        throw new Rollback('roll back');
      }),
    ).rejects.toBeInstanceOf(Rollback);
  }

  describe(`skiplock/adapters: ${name}`, () => {
    test('enqueue commits with the transaction and is invisible to other connections before', async () => {
      const task = newTask();
      const payload = { to: 'ada@example.com', tags: ['a', 'ü'], nested: { n: 1 } };
      const result = await harness.transaction(async (client) => {
        const enqueued = await queue.enqueue(task, payload, { client, priority: 3 });
        expect(await rowsOf(db, task)).toEqual([]); // not committed yet
        return enqueued;
      });
      expect(result).toEqual({ id: expect.stringMatching(/^\d+$/), created: true });
      expect(await rowsOf(db, task)).toEqual([
        { id: result.id, status: 'pending', priority: 3, payload, payload_type: 'object' },
      ]);
    });

    test('enqueue rolls back with the transaction', async () => {
      const task = newTask();
      await rolledBack(async (client) => {
        await queue.enqueue(task, { n: 1 }, { client });
      });
      expect(await rowsOf(db, task)).toEqual([]);
    });

    test('enqueueMany commits and rolls back with the transaction', async () => {
      const task = newTask();
      const runAt = new Date(Date.now() + 60_000);
      const specs = [
        { task, payload: { n: 1 }, priority: 2, runAt },
        { task, payload: { n: 2 }, priority: 5, delayMs: 1_500, maxAttempts: 7 },
        { task, payload: null, priority: 9, dedupeKey: `${task}:k`, timeoutMs: 9_000 },
      ];
      await rolledBack((client) => queue.enqueueMany(specs, { client }));
      expect(await rowsOf(db, task)).toEqual([]);

      const results = await harness.transaction((client) => queue.enqueueMany(specs, { client }));
      expect(results.map((r) => r.created)).toEqual([true, true, true]);
      const rows = await db.sql<Record<string, unknown>>(
        `SELECT id::text, priority, max_attempts, timeout_ms, dedupe_key, payload,
                abs(extract(epoch FROM run_after - $2::timestamptz)) < 0.01 AS at_run_at
         FROM ${db.jobs} WHERE task = $1 ORDER BY id`,
        [task, runAt],
      );
      expect(rows).toEqual([
        {
          id: results[0]?.id,
          priority: 2,
          max_attempts: expect.any(Number),
          timeout_ms: null,
          dedupe_key: null,
          payload: { n: 1 },
          at_run_at: true,
        },
        {
          id: results[1]?.id,
          priority: 5,
          max_attempts: 7,
          timeout_ms: null,
          dedupe_key: null,
          payload: { n: 2 },
          at_run_at: false,
        },
        {
          id: results[2]?.id,
          priority: 9,
          max_attempts: expect.any(Number),
          timeout_ms: 9_000,
          dedupe_key: `${task}:k`,
          payload: null,
          at_run_at: false,
        },
      ]);
    });

    test('a dedupe hit inside the transaction answers the holder (created: false)', async () => {
      const task = newTask();
      const committed = await queue.enqueue(task, { n: 0 }, { dedupeKey: `${task}:held` });
      const results = await harness.transaction(async (client) => {
        const first = await queue.enqueue(task, { n: 1 }, { client, dedupeKey: `${task}:new` });
        const again = await queue.enqueue(task, { n: 2 }, { client, dedupeKey: `${task}:new` });
        const held = await queue.enqueue(task, { n: 3 }, { client, dedupeKey: `${task}:held` });
        const batch = await queue.enqueueMany(
          [
            { task, payload: { n: 4 }, dedupeKey: `${task}:held` },
            { task, payload: { n: 5 }, dedupeKey: `${task}:batch` },
          ],
          { client },
        );
        // A throttle runs under a savepoint of this transaction.
        const throttled = await queue.enqueue(
          task,
          { n: 6 },
          { client, dedupeKey: `${task}:thr`, dedupe: { windowMs: 60_000 } },
        );
        const throttledAgain = await queue.enqueue(
          task,
          { n: 7 },
          { client, dedupeKey: `${task}:thr`, dedupe: { windowMs: 60_000 } },
        );
        return { first, again, held, batch, throttled, throttledAgain };
      });
      expect(results.first.created).toBe(true);
      expect(results.again).toEqual({ id: results.first.id, created: false });
      expect(results.held).toEqual({ id: committed.id, created: false });
      expect(results.batch[0]).toEqual({ id: committed.id, created: false });
      expect(results.batch[1]?.created).toBe(true);
      expect(results.throttled.created).toBe(true);
      expect(results.throttledAgain).toEqual({ id: results.throttled.id, created: false });
      expect((await rowsOf(db, task)).map((row) => row.payload)).toEqual([
        { n: 0 },
        { n: 1 },
        { n: 5 },
        { n: 6 },
      ]);
    });

    test('debounce and scope pending inside the transaction (their own statements)', async () => {
      const task = newTask();
      const results = await harness.transaction(async (client) => {
        const debounced = { dedupeKey: `${task}:deb`, dedupe: { replace: true } };
        const first = await queue.enqueue(task, { v: 1 }, { client, ...debounced });
        const replaced = await queue.enqueue(task, { v: 2 }, { client, ...debounced });
        const pending = await queue.enqueueMany(
          [
            { task, payload: { p: 1 }, dedupeKey: `${task}:pend`, dedupe: { scope: 'pending' } },
            { task, payload: { p: 2 }, dedupeKey: `${task}:pend`, dedupe: { scope: 'pending' } },
          ],
          { client },
        );
        return { first, replaced, pending };
      });
      expect(results.first.created).toBe(true);
      expect(results.replaced).toEqual({ id: results.first.id, created: false, replaced: true });
      expect(results.pending[0]?.created).toBe(true);
      expect(results.pending[1]).toEqual({ id: results.pending[0]?.id, created: false });
      expect((await rowsOf(db, task)).map((row) => row.payload)).toEqual([{ v: 2 }, { p: 1 }]);
    });

    test('enqueueFlow and dependsOn commit and roll back with the transaction (§10)', async () => {
      const task = newTask();
      const { id: existing } = await queue.enqueue(task, { n: 0 });
      const nodes = [
        { ref: 'a', task, payload: { n: 1 } },
        { ref: 'b', task, payload: { n: 2 }, dependsOn: ['a', existing] },
      ];
      await rolledBack(async (client) => {
        await queue.enqueueFlow(nodes, { client });
        await queue.enqueue(task, { n: 3 }, { client, dependsOn: [existing] });
      });
      expect((await rowsOf(db, task)).map((r) => r.status)).toEqual(['pending']);
      const { flowId, jobs } = await harness.transaction(async (client) => {
        const flow = await queue.enqueueFlow(nodes, { client });
        await queue.enqueue(task, { n: 3 }, { client, dependsOn: [existing] });
        return flow;
      });
      expect((await queue.flow(flowId)).map((j) => [j.flowRef, j.status])).toEqual([
        ['a', 'pending'],
        ['b', 'waiting'],
      ]);
      expect(await queue.dependenciesOf(jobs.b as string)).toEqual({
        dependsOn: [existing, jobs.a].sort((x, y) => Number(x) - Number(y)),
        dependents: [],
      });
    });

    test('complete commits and rolls back with the transaction', async () => {
      const task = newTask();
      await queue.enqueue(task, { n: 1 });
      const [lease] = await queue.claim(`${name}-worker`, { tasks: [task] });
      if (!lease) throw new Error('nothing claimed');
      await rolledBack(async (client) => {
        expect(await queue.complete(lease, { ok: 1 }, { client })).toBe(true);
      });
      expect((await queue.get(lease.id))?.status).toBe('running');
      expect(await harness.transaction((client) => queue.complete(lease, { ok: 2 }, { client }))).toBe(true);
      expect(await queue.get(lease.id)).toMatchObject({ status: 'done', result: { ok: 2 } });
      // A stale lease answers false through the adapter too.
      expect(await harness.transaction((client) => queue.complete(lease, { ok: 3 }, { client }))).toBe(false);
    });

    test('enqueue with a run time, and rows shaped as pg gives them (int8 as a string)', async () => {
      const task = newTask();
      const runAt = new Date(Date.now() + 3_600_000);
      const { id, rows } = await harness.transaction(async (client) => ({
        id: (await queue.enqueue(task, { n: 1 }, { client, runAt })).id,
        rows: (
          await client.query(
            `SELECT id::text AS id, count(*) OVER () AS n, 5::int8 AS big, 7::int AS small, true AS yes,
                    (run_after = $2::timestamptz) AS at_run_at, payload
             FROM ${db.jobs} WHERE task = $1`,
            [task, runAt.toISOString()],
          )
        ).rows,
      }));
      expect(rows).toEqual([
        { id, n: '1', big: '5', small: 7, yes: true, at_run_at: true, payload: { n: 1 } },
      ]);
    });

    test("a failed statement keeps PostgreSQL's SQLSTATE", async () => {
      await rolledBack(async (client) => {
        await expect(client.query('SELECT 1 / $1::int AS x', [0])).rejects.toMatchObject({ code: '22012' });
      });
    });

    test('anything but a transaction is refused with a ValidationError that says what to pass', () => {
      expect(() => harness.onNonTransaction()).toThrow(ValidationError);
      expect(() => harness.onNonTransaction()).toThrow(/client: must be .*transaction/);
    });
  });
  return { queue: () => queue };
}

async function rowsOf(db: TestDatabase, task: string) {
  return db.sql<{ id: string; status: string; priority: number; payload: unknown; payload_type: string }>(
    `SELECT id::text AS id, status, priority, payload, jsonb_typeof(payload) AS payload_type
     FROM ${db.jobs} AS j WHERE task = $1 ORDER BY j.id`,
    [task],
  );
}
