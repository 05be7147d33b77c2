/**
 * §12 ctx.waitForEvent in a job that holds a key.
 *
 * Failing on main before migrations 23 and 24:
 * - dedupe key (refused since migration 23): the second enqueue of the key made a second job
 *   while the first waited; the emit then raised 23505 on jobs_dedupe_key_idx (event not set,
 *   every waiter on it left waiting);
 * - sequence (a waiting head holds its key since migration 24): the head's `waiting` left the key
 *   and the advance put the head itself back to pending at once: claimed and suspended again in
 *   a loop (247 runs in 1.5 s), never waiting. Migration 24's two parts, each broken alone, are
 *   caught by test/queue/adv-seq-steps.test.ts (the trigger WHEN of migration 22 kept: a cancelled
 *   suspended head left its key stuck, `expected [ 'cancelled', 'waiting' ]`; the advance's head
 *   lookup without suspended heads: a late commit ran beside the suspended head); this test
 *   checks what a user sees of both together.
 */
import { expect, test } from 'vitest';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

async function row(id: string) {
  return (
    await db.sql<{ status: string; wait_event: string | null; claims: number; last_error: string | null }>(
      `SELECT status, wait_event, claims::int AS claims, last_error FROM ${db.jobs} WHERE id = $1`,
      [id],
    )
  )[0];
}

function waiter(runs: Map<string, number>) {
  return async (payload: { event: string }, ctx: JobContext) => {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
    return { got: await ctx.waitForEvent('got', payload.event) };
  };
}

test('a job with a dedupe key cannot wait (its key would be free, the emit would fail); others on the event are woken', async () => {
  const queue = db.queue();
  const runs = new Map<string, number>();
  const worker = db.worker({
    queue,
    tasks: { 'dd.wait': waiter(runs) },
    concurrency: 4,
    pollIntervalMs: 200,
  });
  await worker.start();
  const plain = await queue.enqueue('dd.wait', { event: 'dd-ev' });
  await expect.poll(async () => (await row(plain.id))?.status).toBe('waiting');
  const a = await queue.enqueue('dd.wait', { event: 'dd-ev' }, { dedupeKey: 'order-1', maxAttempts: 1 });
  const done = await queue.waitFor(a.id, { timeoutMs: 10_000 });
  expect(done.status).toBe('dead');
  expect(done.lastError).toMatch(/dedupe key/);
  expect(await queue.steps(a.id)).toEqual([]); // nothing stored: no timeout started
  // the key was held while it ran: a second enqueue was a dedupe hit or made a job after it ended
  expect(await queue.emitEvent('dd-ev', 'go')).toBe(true);
  expect((await queue.waitFor(plain.id, { timeoutMs: 10_000 })).result).toEqual({ got: { payload: 'go' } });
  // an event already set answers a keyed job at once (no suspension)
  const b = await queue.enqueue('dd.wait', { event: 'dd-ev' }, { dedupeKey: 'order-2' });
  expect((await queue.waitFor(b.id, { timeoutMs: 10_000 })).result).toEqual({ got: { payload: 'go' } });
  await worker.stop();
});

test('a sequence head waiting for an event holds its key (ran once, no busy loop), the next job runs after the emit; sleep holds the key too', async () => {
  const queue = db.queue();
  const runs = new Map<string, number>();
  const order: string[] = [];
  const worker = db.worker({
    queue,
    tasks: {
      'seq.wait': async (payload: { event: string }, ctx: JobContext) => {
        runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
        const got = await ctx.waitForEvent('got', payload.event);
        order.push(`wait ${ctx.job.id}`);
        return { got };
      },
      'seq.sleep': async (_: unknown, ctx: JobContext) => {
        runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
        await ctx.sleep('nap', 400);
        order.push(`sleep ${ctx.job.id}`);
        return 'slept';
      },
      'seq.next': async (_: unknown, ctx: JobContext) => {
        order.push(`next ${ctx.job.id}`);
        return 'next ran';
      },
    },
    concurrency: 4,
    pollIntervalMs: 200,
  });
  await worker.start();
  const head = await queue.enqueue('seq.wait', { event: 'seq-ev' }, { sequence: 'k1', maxAttempts: 1 });
  const next = await queue.enqueue('seq.next', {}, { sequence: 'k1' });
  await expect.poll(async () => (await row(head.id))?.status).toBe('waiting');
  // give the worker time to loop if the key moved on: it must not
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  expect(await row(head.id)).toMatchObject({ status: 'waiting', wait_event: 'seq-ev', claims: 1 });
  expect(runs.get(head.id)).toBe(1);
  expect((await row(next.id))?.status).toBe('waiting');
  const [info] = await queue.sequences();
  expect(info).toMatchObject({ key: 'k1', headId: head.id, headStatus: 'waiting', queued: 1 });
  expect(await queue.emitEvent('seq-ev', { ok: 1 })).toBe(true);
  expect((await queue.waitFor(next.id, { timeoutMs: 10_000 })).status).toBe('done');
  expect((await queue.get(head.id))?.status).toBe('done');
  expect(order).toEqual([`wait ${head.id}`, `next ${next.id}`]);
  expect(runs.get(head.id)).toBe(2);
  // a sleeping head stays pending: the next job of its key waits for it
  const sleeper = await queue.enqueue('seq.sleep', {}, { sequence: 'k2' });
  const after = await queue.enqueue('seq.next', {}, { sequence: 'k2' });
  expect((await queue.waitFor(after.id, { timeoutMs: 10_000 })).status).toBe('done');
  expect(order.slice(-2)).toEqual([`sleep ${sleeper.id}`, `next ${after.id}`]);
  expect(runs.get(sleeper.id)).toBe(2);
  await worker.stop();
});
