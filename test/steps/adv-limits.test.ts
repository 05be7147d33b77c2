import { expect, test } from 'vitest';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

test('a limited queue (concurrency 1, two workers): suspended jobs take no slot; all end done once', async () => {
  const queue = db.queue();
  await queue.configureQueue('lim', { concurrency: 1 });
  const runs = new Map<string, number>();
  let running = 0;
  let maxRunning = 0;
  const tasks = {
    'lim.w': async (p: { i: number }, ctx: JobContext) => {
      runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
      running++;
      maxRunning = Math.max(maxRunning, running);
      try {
        await new Promise((r) => setTimeout(r, 5));
        if (p.i % 2 === 0) await ctx.sleep('nap', 300);
        else await ctx.waitForEvent('ev', `lim-${p.i}`, { timeoutMs: p.i % 3 === 0 ? 200 : undefined });
        return p.i;
      } finally {
        running--;
      }
    },
  };
  const w1 = db.worker({ queue, tasks, concurrency: 5, pollIntervalMs: 60_000 });
  const w2 = db.worker({ queue, tasks, concurrency: 5, pollIntervalMs: 60_000 });
  await w1.start();
  await w2.start();
  const jobs = await queue.enqueueMany(
    Array.from({ length: 30 }, (_, i) => ({ task: 'lim.w', payload: { i }, queue: 'lim' })),
  );
  // every odd job not timing out waits for its event: all 30 got their first run within a short time
  await expect.poll(() => jobs.filter((j) => runs.has(j.id)).length, { timeout: 10_000 }).toBe(30);
  // emit only once every job it wakes is waiting: an event set before the wait is answered at once
  // (§12), in one run, and this test counts two runs per job
  const awaited = Array.from({ length: 15 }, (_, k) => 2 * k + 1)
    .filter((i) => i % 3 !== 0)
    .map((i) => `lim-${i}`);
  await expect
    .poll(
      async () =>
        (
          await db.sql(`SELECT 1 FROM ${db.jobs} WHERE status = 'waiting' AND wait_event = ANY($1::text[])`, [
            awaited,
          ])
        ).length,
      { timeout: 10_000 },
    )
    .toBe(awaited.length);
  for (const name of awaited) await queue.emitEvent(name, Number(name.slice(4)));
  await expect
    .poll(
      async () => (await db.sql(`SELECT 1 FROM ${db.jobs} WHERE queue = 'lim' AND status <> 'done'`)).length,
      {
        timeout: 20_000,
      },
    )
    .toBe(0);
  expect(maxRunning).toBe(1);
  for (const j of jobs) expect(runs.get(j.id)).toBe(2);
  await w1.stop();
  await w2.stop();
}, 40_000);
