/**
 * Review finding: a worker's own pool has min(concurrency + 2, 20) connections; with more
 * handlers inside ctx.transaction than that, every connection was held by a transaction and the
 * heartbeat queued behind them — healthy jobs lost their leases (25 of 25 in the reviewer's
 * run). Now sessions never take the last two connections of a pool, so the heartbeat, claims and
 * outcome writes always find one. Before the fix this test saw 'lease:lost' events.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { expect, test } from 'vitest';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { recordEvents, startWorker } from './helpers.js';

const db = useTestDatabase();

test('more handlers in ctx.transaction than the pool has connections: every lease is kept', async () => {
  const worker = await startWorker(db, {
    tasks: {
      'reserve.tx': async (_payload: unknown, ctx: JobContext) =>
        ctx.transaction(async (client) => {
          await client.query('SELECT 1');
          await sleep(1_200);
          return ctx.job.id;
        }),
    },
    concurrency: 24, // its own pool: 20 connections
    leaseMs: 1_500,
    reapIntervalMs: 3_600_000,
  });
  const events = recordEvents(worker);
  const queue = db.queue();
  await queue.enqueueMany(Array.from({ length: 24 }, (_, i) => ({ task: 'reserve.tx', payload: { i } })));
  await expect.poll(() => worker.stats().done, { timeout: 20_000 }).toBe(24);
  expect(events.filter((e) => e.name === 'lease:lost')).toEqual([]);
  expect(worker.stats()).toMatchObject({ done: 24, leaseLost: 0, retried: 0 });
  await worker.stop();
});
