/**
 * SPEC §8 limited queues inside one worker and between two (the failures an adversarial review
 * found, each reproduced here first): a limited queue's job is not stuck behind an unlimited
 * backlog; room freed on one worker wakes another that waits for it (a hint, not the poll); a
 * limited claim that fails does not lose the jobs of the plain claim; a claim lock held by a
 * stalled claimer does not stall other claims. Fallback polls are a minute, so only the
 * mechanisms under test can make these pass in time.
 */
import { describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { useTestDatabase } from '../support/database.js';
import { listen } from '../support/listener.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('limited queues in the claim pass', () => {
  test('a limited queue’s job starts while an unlimited backlog drains, not after it', async () => {
    // Break: Dispatcher.limitedRoom() returning 0 while every slot is busy (instead of at least
    // one job that goes ahead of the held ones) and the limited job waits for the whole backlog.
    const queue = db.queue();
    await queue.configureQueue('lim.backlog', { concurrency: 1 });
    await queue.enqueueMany(Array.from({ length: 300 }, () => ({ task: 'lc.plain', payload: 40 })));
    const started: Record<string, number> = {};
    let plainDone = 0;
    const worker = db.worker({
      concurrency: 2,
      pollIntervalMs: 60_000,
      tasks: {
        'lc.plain': async (ms: number) => {
          await sleep(ms);
          plainDone++;
        },
        'lc.limited': async () => {
          started.limited = Date.now();
        },
      },
    });
    await worker.start();
    await sleep(300);
    const enqueuedAt = Date.now();
    await queue.enqueue('lc.limited', null, { queue: 'lim.backlog' });
    await expect.poll(() => started.limited, { timeout: 5_000 }).toBeDefined();
    expect((started.limited as number) - enqueuedAt).toBeLessThan(1_500);
    expect(plainDone).toBeLessThan(250); // the backlog (about 6 s) was still draining
    await worker.stop({ timeoutMs: 1_000 });
  });

  test('room freed on one worker wakes another waiting for it', async () => {
    // Break: drop roomFreed() in Worker's emit (the hint) and A waits for its one-minute poll.
    const queue = db.queue();
    await queue.configureQueue('lim.shared', { concurrency: 1 });
    const startedAt: Record<string, number> = {};
    let releaseB!: () => void;
    const gate = new Promise<void>((resolve) => (releaseB = resolve));
    const b = db.worker({
      pollIntervalMs: 60_000,
      tasks: {
        'lc.b': async () => {
          startedAt.b = Date.now();
          await gate;
        },
      },
    });
    const a = db.worker({
      pollIntervalMs: 60_000,
      tasks: {
        'lc.a': async () => {
          startedAt.a = Date.now();
        },
      },
    });
    await b.start();
    await queue.enqueue('lc.b', null, { queue: 'lim.shared' });
    await expect.poll(() => startedAt.b).toBeDefined();
    await a.start();
    await queue.enqueue('lc.a', null, { queue: 'lim.shared' }); // no room: A must wait
    await sleep(500);
    expect(startedAt.a).toBeUndefined();
    const freedAt = Date.now();
    releaseB();
    await expect.poll(() => startedAt.a, { timeout: 5_000 }).toBeDefined();
    expect((startedAt.a as number) - freedAt).toBeLessThan(1_500);
    await Promise.all([a.stop(), b.stop()]);
  });

  test('room nobody can use is passed on once, not echoed between workers without end', async () => {
    // Break: send the room hint whenever a limited claim leaves room unused (not only room freed
    // by a job that finished here): each hint wakes every worker, whose claims hint again — a
    // storm of notifications and claims that never ends (a worker's start() never returned).
    const queue = db.queue();
    await queue.configureQueue('lim.echo', { concurrency: 2 });
    const listener = await listen(db.url);
    try {
      const workers = [0, 1].map(() =>
        db.worker({ pollIntervalMs: 60_000, tasks: { 'lc.echo': async () => undefined } }),
      );
      await Promise.all(workers.map((w) => w.start()));
      await queue.enqueue('lc.echo', null, { queue: 'lim.echo' }); // finishes, frees room nobody needs
      await sleep(1_000);
      const hints = listener.payloads.filter((p) => p === 'queues:room').length;
      expect(hints).toBeLessThanOrEqual(2);
      await Promise.all(workers.map((w) => w.stop()));
    } finally {
      await listener.close();
    }
  });

  test('a limited claim that fails is reported; the plain claim’s jobs still run', async () => {
    // Break: let claimWithLimits throw when a limited claim fails: the plain jobs of that pass
    // stay claimed but never run (until their leases expire), and go dead after retries.
    const queue = db.queue();
    await queue.configureQueue('lim.broken', { rateLimit: { limit: 10, periodMs: 1_000 } });
    const starts = `${quoteIdent(TEST_SCHEMA)}.queue_starts`;
    const ran: string[] = [];
    const errors: string[] = [];
    const worker = db.worker({
      pollIntervalMs: 60_000,
      tasks: { 'lc.any': async (name: string) => void ran.push(name) },
    });
    worker.on('error', ({ during }) => errors.push(during));
    await db.sql(`ALTER TABLE ${starts} RENAME TO queue_starts_away`);
    try {
      await worker.start();
      await queue.enqueue('lc.any', 'limited', { queue: 'lim.broken' });
      await queue.enqueue('lc.any', 'plain');
      await expect.poll(() => ran, { timeout: 5_000 }).toContain('plain');
      expect(errors.some((e) => e.includes('limited queue "lim.broken"'))).toBe(true);
      expect(ran).not.toContain('limited');
    } finally {
      await db.sql(`ALTER TABLE ${quoteIdent(TEST_SCHEMA)}.queue_starts_away RENAME TO queue_starts`);
    }
    await expect.poll(() => ran, { timeout: 5_000 }).toContain('limited'); // retried after a second
    await worker.stop();
  });

  test('a claim lock held by a stalled claimer stalls nobody else', async () => {
    // Break: take the lock with pg_advisory_xact_lock (waiting) instead of trying it: the plain
    // job waits as long as the lock is held.
    const queue = db.queue();
    await queue.configureQueue('lim.stalled', { concurrency: 3 });
    const ran: { name: string; at: number }[] = [];
    const worker = db.worker({
      pollIntervalMs: 60_000,
      tasks: { 'lc.stall': async (name: string) => void ran.push({ name, at: Date.now() }) },
    });
    await worker.start();
    const holder = await db.pool.connect();
    try {
      await holder.query('SELECT pg_advisory_lock(hashtext($1), hashtext($2))', [
        `skiplock-queue:${TEST_SCHEMA}`,
        'lim.stalled',
      ]);
      const enqueuedAt = Date.now();
      await queue.enqueue('lc.stall', 'limited', { queue: 'lim.stalled' });
      await queue.enqueue('lc.stall', 'plain');
      await expect.poll(() => ran.map((r) => r.name), { timeout: 5_000 }).toContain('plain');
      expect((ran.find((r) => r.name === 'plain')?.at as number) - enqueuedAt).toBeLessThan(1_000);
      await sleep(300);
      expect(ran.map((r) => r.name)).not.toContain('limited');
    } finally {
      await holder.query('SELECT pg_advisory_unlock_all()');
      holder.release();
    }
    await expect.poll(() => ran.map((r) => r.name), { timeout: 3_000 }).toContain('limited');
    await worker.stop();
  });
});
