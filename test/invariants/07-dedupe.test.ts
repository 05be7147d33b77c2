/**
 * SPEC §1.7 — dedupe is enforced by the database: a partial unique index over active
 * (pending, running) jobs with a key, and INSERT … ON CONFLICT … DO NOTHING; never an app-side
 * check-then-insert. A dedupe hit returns the holder's id in the same call and sends no NOTIFY.
 *
 * Deliberate break seen failing: turning the unique index into a plain one and enqueue into
 * check-then-insert (findActive, then a plain INSERT) let 40 racing enqueues create several
 * jobs for one key ("exactly one of 40 racing enqueues creates the job" failed).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import type { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { type Listener, listen } from '../support/listener.js';

const db = useTestDatabase();
let listener: Listener;
let queues: Queue[];

beforeAll(async () => {
  listener = await listen(db.url);
  queues = Array.from({ length: 4 }, () => db.queue({ poolSize: 10 }));
});
beforeEach(async () => {
  await listener.sync(db.pool);
});
afterAll(async () => {
  await listener.close();
});

async function activeWithKey(key: string): Promise<number> {
  const [row] = await db.sql<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${db.jobs} WHERE dedupe_key = $1 AND status IN ('pending', 'running')`,
    [key],
  );
  return row?.n ?? 0;
}

describe('§1.7 dedupe', () => {
  test('exactly one of 40 racing enqueues creates the job; all get its id', async () => {
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        queues[i % queues.length]!.enqueue('dedupe.race', { i }, { dedupeKey: 'race-key' }),
      ),
    );
    const created = results.filter((r) => r.created);
    expect(created).toHaveLength(1);
    expect(new Set(results.map((r) => r.id))).toEqual(new Set([created[0]!.id]));
    expect(await activeWithKey('race-key')).toBe(1);
  });

  test('the key is free again once the job is done, dead or cancelled', async () => {
    const queue = queues[0]!;
    const first = await queue.enqueue('dedupe.free', { n: 1 }, { dedupeKey: 'free-key', maxAttempts: 1 });
    const [job] = await queue.claim('w-dedupe', { tasks: ['dedupe.free'] });
    // Running still holds the key.
    expect(await queue.enqueue('dedupe.free', { n: 2 }, { dedupeKey: 'free-key' })).toEqual({
      id: first.id,
      created: false,
    });
    expect((await queue.findActive('free-key'))?.id).toBe(first.id);
    await queue.complete(job!);
    expect(await queue.findActive('free-key')).toBeNull();

    const second = await queue.enqueue('dedupe.free', { n: 3 }, { dedupeKey: 'free-key', maxAttempts: 1 });
    expect(second.created).toBe(true);
    expect(second.id).not.toBe(first.id);
    const [job2] = await queue.claim('w-dedupe', { tasks: ['dedupe.free'] });
    expect(await queue.fail(job2!, 'boom')).toBe('dead');

    const third = await queue.enqueue('dedupe.free', { n: 4 }, { dedupeKey: 'free-key' });
    expect(third.created).toBe(true);
    expect(await queue.cancel(third.id)).toBe(true);

    const fourth = await queue.enqueue('dedupe.free', { n: 5 }, { dedupeKey: 'free-key' });
    expect(fourth.created).toBe(true);
    expect(new Set([first.id, second.id, third.id, fourth.id]).size).toBe(4);
  });

  test('a dedupe hit sends no notification and leaves the holder unchanged', async () => {
    const queue = queues[0]!;
    const holder = await queue.enqueue('dedupe.quiet', { v: 1 }, { dedupeKey: 'quiet-key', priority: 5 });
    // The holder's own wake-up hint (sent right after its commit) arrives first.
    expect(await listener.next()).toBe('jobs');
    await listener.sync(db.pool);
    const before = await queue.get(holder.id);
    expect(await queue.enqueue('dedupe.quiet', { v: 2 }, { dedupeKey: 'quiet-key', priority: 1 })).toEqual({
      id: holder.id,
      created: false,
    });
    await listener.mark(db.pool, 'marker-quiet');
    expect(await listener.next()).toBe('marker-quiet');
    expect(await queue.get(holder.id)).toEqual(before);
  });

  test('enqueueMany: a key repeated in the batch gets the first entry’s id', async () => {
    const queue = queues[0]!;
    const existing = await queue.enqueue('dedupe.batch', {}, { dedupeKey: 'batch-existing' });
    const results = await queue.enqueueMany([
      { task: 'dedupe.batch', payload: 0, dedupeKey: 'batch-a' },
      { task: 'dedupe.batch', payload: 1, dedupeKey: 'batch-a' },
      { task: 'dedupe.batch', payload: 2 },
      { task: 'dedupe.batch', payload: 3, dedupeKey: 'batch-existing' },
      { task: 'dedupe.batch', payload: 4, dedupeKey: 'batch-a' },
    ]);
    expect(results.map((r) => r.created)).toEqual([true, false, true, false, false]);
    expect(results[1]!.id).toBe(results[0]!.id);
    expect(results[4]!.id).toBe(results[0]!.id);
    expect(results[3]!.id).toBe(existing.id);
    expect((await queue.get(results[0]!.id))?.payload).toBe(0);
  });

  test('racing batches sharing keys: one job per key, every caller agrees on its id', async () => {
    const keys = Array.from({ length: 50 }, (_, i) => `shared-${i}`);
    const batches = await Promise.all(
      Array.from({ length: 8 }, (_, b) =>
        queues[b % queues.length]!.enqueueMany(
          keys.map((key, i) => ({ task: 'dedupe.shared', payload: { b, i }, dedupeKey: key })),
        ),
      ),
    );
    expect(batches.flat().filter((r) => r.created)).toHaveLength(keys.length);
    keys.forEach((_, i) => {
      expect(new Set(batches.map((batch) => batch[i]!.id)).size).toBe(1);
    });
    for (const key of keys.slice(0, 5)) expect(await activeWithKey(key)).toBe(1);
  });

  test('enqueues racing the holder’s completion always name an active or new job', async () => {
    const queue = queues[0]!;
    for (let round = 0; round < 10; round++) {
      const key = `turnover-${round}`;
      const holder = await queue.enqueue('dedupe.turnover', {}, { dedupeKey: key });
      const [job] = await queue.claim('w-turnover', { tasks: ['dedupe.turnover'] });
      const [, ...results] = await Promise.all([
        queue.complete(job!),
        ...Array.from({ length: 6 }, (_, i) =>
          queues[i % 4]!.enqueue('dedupe.turnover', {}, { dedupeKey: key }),
        ),
      ]);
      const created = results.filter((r) => r.created);
      expect(created.length).toBeLessThanOrEqual(1);
      for (const r of results) expect([holder.id, ...created.map((c) => c.id)]).toContain(r.id);
      expect(await activeWithKey(key)).toBe(created.length);
      await db.sql(
        `UPDATE ${db.jobs} SET status = 'cancelled' WHERE dedupe_key = $1 AND status = 'pending'`,
        [key],
      );
    }
  });
});
