/**
 * §12 ctx.waitForEvent in a job that holds a key `waiting` would give up (migration 23).
 *
 * Failing on main before migration 23:
 * - dedupe key: the second enqueue of the key made a second job while the first waited; the
 *   emit then raised 23505 on jobs_dedupe_key_idx (event not set, every waiter on it left waiting);
 * - sequence: the head's `waiting` left the key and the advance put the head itself back to
 *   pending at once: claimed and suspended again in a loop (247 runs in 1.5 s), never waiting.
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

test('a sequence head cannot wait for an event (no busy loop); a dead head holds the key until cancelled; sleep still holds the key', async () => {
  const queue = db.queue();
  const runs = new Map<string, number>();
  const order: string[] = [];
  const worker = db.worker({
    queue,
    tasks: {
      'seq.wait': waiter(runs),
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
  const ended = await queue.waitFor(head.id, { timeoutMs: 10_000 });
  expect(ended.status).toBe('dead');
  expect(ended.lastError).toMatch(/sequence/);
  expect(runs.get(head.id)).toBe(1);
  // a dead head holds its key (§11) and the next job is not started; cancelling it moves the key on
  expect((await row(next.id))?.status).toBe('waiting');
  expect(await queue.cancel(head.id)).toBe(true);
  expect((await queue.waitFor(next.id, { timeoutMs: 10_000 })).status).toBe('done');
  // a sleeping head stays pending: the next job of its key waits for it
  const sleeper = await queue.enqueue('seq.sleep', {}, { sequence: 'k2' });
  const after = await queue.enqueue('seq.next', {}, { sequence: 'k2' });
  expect((await queue.waitFor(after.id, { timeoutMs: 10_000 })).status).toBe('done');
  expect(order.slice(-2)).toEqual([`sleep ${sleeper.id}`, `next ${after.id}`]);
  expect(runs.get(sleeper.id)).toBe(2);
  await worker.stop();
});
