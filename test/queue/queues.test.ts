/**
 * SPEC §8 queues from the library: configureQueue (validated; each setting changed only when
 * given), queues() with live counts, and pause — nothing of a paused queue starts (running jobs
 * finish), other queues go on, and resumeQueue wakes the workers at once (a hint, not a poll:
 * the worker's fallback poll is set to a minute).
 */
import { describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { ValidationError } from '../../src/errors.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();

describe('configureQueue and queues()', () => {
  test('bad input is a ValidationError naming the field, and nothing is written', async () => {
    const queue = db.queue();
    const bad: [unknown, unknown, string][] = [
      ['', { paused: true }, 'name'],
      ['q', { paused: 'yes' }, 'paused'],
      ['q', { concurrency: 0 }, 'concurrency'],
      ['q', { concurrency: 2.5 }, 'concurrency'],
      ['q', { rateLimit: { limit: 0, periodMs: 1000 } }, 'rateLimit.limit'],
      ['q', { rateLimit: { limit: 5 } }, 'rateLimit.periodMs'],
      ['q', { rateLimit: { limit: 5, periodMs: 1000, burst: 2 } }, 'rateLimit.burst'],
      ['q', { groupConcurrency: 0 }, 'groupConcurrency'],
      ['q', { groupRateLimit: { limit: 2, periodMs: 0 } }, 'groupRateLimit.periodMs'],
      ['q', { groupRateLimit: 5 }, 'groupRateLimit'],
      ['q', { max: 3 }, 'options.max'],
    ];
    for (const [name, options, field] of bad) {
      const error = await queue.configureQueue(name as string, options as never).catch((e: unknown) => e);
      expect(error, JSON.stringify(options)).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field, JSON.stringify(options)).toBe(field);
    }
    expect(await queue.queues()).toEqual([]);
    // A bad group key is refused by name, in enqueue and enqueueMany, with nothing written.
    for (const [group, field] of [
      ['', 'group'],
      [7, 'group'],
      ['é'.repeat(101), 'group'], // 202 bytes: over the 200-byte limit
    ] as const) {
      const error = await queue.enqueue('q.group', null, { group } as never).catch((e: unknown) => e);
      expect((error as ValidationError).field, String(group)).toBe(field);
    }
    const many = await queue
      .enqueueMany([
        { task: 'q.group', payload: null, group: 'ok' },
        { task: 'q.group', payload: null, group: '' },
      ])
      .catch((e: unknown) => e);
    expect((many as ValidationError).field).toBe('specs[1].group');
    expect(await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = 'q.group'`)).toEqual([]);
  });

  test('each setting changes only when given; null clears a limit; queues() adds live counts', async () => {
    const queue = db.queue();
    await queue.configureQueue('mail', { concurrency: 3 });
    await queue.configureQueue('mail', { rateLimit: { limit: 10, periodMs: 60_000 } });
    expect(await queue.configureQueue('mail', { paused: true })).toEqual({
      name: 'mail',
      paused: true,
      concurrency: 3,
      rateLimit: { limit: 10, periodMs: 60_000 },
      groupConcurrency: null,
      groupRateLimit: null,
      priorityAging: null,
    });
    expect(await queue.configureQueue('mail', { concurrency: null, paused: false })).toMatchObject({
      concurrency: null,
      paused: false,
      rateLimit: { limit: 10, periodMs: 60_000 },
    });
    await queue.configureQueue('mail', { groupConcurrency: 2 });
    expect(
      await queue.configureQueue('mail', { groupRateLimit: { limit: 5, periodMs: 1_000 } }),
    ).toMatchObject({
      rateLimit: { limit: 10, periodMs: 60_000 },
      groupConcurrency: 2,
      groupRateLimit: { limit: 5, periodMs: 1_000 },
    });
    expect(
      await queue.configureQueue('mail', { groupConcurrency: null, groupRateLimit: null }),
    ).toMatchObject({
      groupConcurrency: null,
      groupRateLimit: null,
      rateLimit: { limit: 10, periodMs: 60_000 },
    });
    await queue.enqueue('q.count', null, { queue: 'mail' });
    await queue.enqueue('q.count', null, { queue: 'unconfigured' });
    const infos = await queue.queues();
    expect(infos.map((q) => [q.name, q.pending, q.running])).toEqual([
      ['mail', 1, 0],
      ['unconfigured', 1, 0],
    ]);
    expect(infos[1]).toMatchObject({ paused: false, concurrency: null, rateLimit: null });
    // Back to no settings: no row is kept; the queue is listed while it has live jobs.
    await queue.configureQueue('mail', { rateLimit: null });
    await queue.configureQueue('typo-queue', { paused: true });
    await queue.resumeQueue('typo-queue');
    expect((await queue.queues()).map((q) => q.name)).toEqual(['mail', 'unconfigured']);
    expect(await db.sql(`SELECT name FROM ${quoteIdent(TEST_SCHEMA)}.queues`)).toEqual([]);
  });
});

describe('pause and resume', () => {
  test('a paused queue starts nothing (its running job finishes); resume wakes workers at once', async () => {
    // Break: drop the paused-queue filter from pick_pending (migration 7) and the paused jobs
    // start at once; drop the hint configureQueue sends (engine/queues.ts) and resume waits for
    // the one-minute poll.
    const queue = db.queue();
    const started: { payload: string; at: number }[] = [];
    let releaseSlow!: () => void;
    const slowDone = new Promise<void>((resolve) => (releaseSlow = resolve));
    const worker = db.worker({
      pollIntervalMs: 60_000,
      tasks: {
        'pause.job': async (payload: string) => {
          started.push({ payload, at: Date.now() });
          if (payload === 'slow') await slowDone;
        },
      },
    });
    await worker.start();
    await queue.enqueue('pause.job', 'slow', { queue: 'reports' });
    await expect.poll(() => started.map((s) => s.payload)).toContain('slow');

    await queue.pauseQueue('reports');
    await queue.enqueue('pause.job', 'held-1', { queue: 'reports' });
    await queue.enqueue('pause.job', 'held-2', { queue: 'reports' });
    await queue.enqueue('pause.job', 'other', { queue: 'emails' });
    await expect.poll(() => started.map((s) => s.payload)).toContain('other');
    releaseSlow(); // the job running when the queue was paused finishes
    await expect.poll(async () => (await queue.queues()).find((q) => q.name === 'reports')?.running).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(started.map((s) => s.payload).sort()).toEqual(['other', 'slow']);
    expect((await queue.queues()).find((q) => q.name === 'reports')).toMatchObject({
      paused: true,
      pending: 2,
    });

    const resumedAt = Date.now();
    await queue.resumeQueue('reports');
    await expect
      .poll(() => started.filter((s) => s.payload.startsWith('held')).length, { timeout: 3_000 })
      .toBe(2);
    const latest = Math.max(...started.filter((s) => s.payload.startsWith('held')).map((s) => s.at));
    expect(latest - resumedAt).toBeLessThan(1_500); // the hint, not the one-minute poll
    await worker.stop();
  });
});

describe('pause on a limited queue', () => {
  test('a paused queue with a concurrency limit starts nothing either; resume starts its jobs', async () => {
    // Break: drop both guards — `AND NOT paused` in the limited claim's cfg (store/queues.ts)
    // and the paused filter of LimitedQueues (engine/limited-queues.ts) — and the paused queue's job
    // starts. (With one of them left, it holds: the statement guards a stale list.)
    const queue = db.queue();
    await queue.configureQueue('limited.paused', { concurrency: 2 });
    const ran: string[] = [];
    const worker = db.worker({
      pollIntervalMs: 60_000,
      tasks: { 'lp.job': async (p: string) => void ran.push(p) },
    });
    await worker.start();
    await queue.enqueue('lp.job', 'first', { queue: 'limited.paused' });
    await expect.poll(() => ran).toEqual(['first']);
    await queue.pauseQueue('limited.paused');
    await queue.enqueue('lp.job', 'second', { queue: 'limited.paused' });
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(ran).toEqual(['first']);
    await queue.resumeQueue('limited.paused');
    await expect.poll(() => ran, { timeout: 3_000 }).toEqual(['first', 'second']);
    await worker.stop();
  });
});
