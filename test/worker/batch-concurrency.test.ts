import { setTimeout as sleep } from 'node:timers/promises';
import { expect, test } from 'vitest';
import type { BatchItem } from '../../src/task-types.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

// §11 review finding 1 (reviewer's rv1 and rv2): every claim loop (one per batch task, and the
// main one) measured its free slots when it sent a claim, and nothing held them while it was in
// flight, so two loops took the same slots. Broken on purpose by removing the reservation
// (ClaimLoop's reserve/unreserve, the Dispatcher's reserved counts): the first test saw 8 items
// in flight with concurrency 4, the second 4 with concurrency 2 — both failed.

test('two batch tasks: concurrency 4 never exceeded', async () => {
  const queue = db.queue();
  await queue.enqueueMany(Array.from({ length: 12 }, (_, i) => ({ task: 'ba', payload: { i } })));
  await queue.enqueueMany(Array.from({ length: 12 }, (_, i) => ({ task: 'bb', payload: { i } })));
  let inFlight = 0;
  let max = 0;
  let total = 0;
  const handler = async (items: BatchItem[]) => {
    inFlight += items.length;
    max = Math.max(max, inFlight);
    await sleep(200);
    inFlight -= items.length;
    total += items.length;
  };
  const worker = db.worker({
    concurrency: 4,
    tasks: { ba: { batch: { maxSize: 4 }, handler }, bb: { batch: { maxSize: 4 }, handler } },
  });
  await worker.start();
  while (total < 24) await sleep(50);
  await worker.stop();
  expect(max).toBeLessThanOrEqual(4);
}, 30_000);

test('single + batch task: concurrency 2 never exceeded', async () => {
  const queue = db.queue();
  await queue.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ task: 'single', payload: { i } })));
  await queue.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ task: 'bc', payload: { i } })));
  let inFlight = 0;
  let max = 0;
  let total = 0;
  const track = async (n: number) => {
    inFlight += n;
    max = Math.max(max, inFlight);
    await sleep(100);
    inFlight -= n;
    total += n;
  };
  const worker = db.worker({
    concurrency: 2,
    prefetch: 0,
    tasks: {
      single: async () => track(1),
      bc: { batch: { maxSize: 2 }, handler: async (items: BatchItem[]) => track(items.length) },
    },
  });
  await worker.start();
  while (total < 20) await sleep(50);
  await worker.stop();
  expect(max).toBeLessThanOrEqual(2);
}, 30_000);

test('single + batch task woken by one hint: concurrency 4 never exceeded', async () => {
  let inFlight = 0;
  let max = 0;
  let total = 0;
  const track = async (n: number) => {
    inFlight += n;
    max = Math.max(max, inFlight);
    await sleep(300);
    inFlight -= n;
    total += n;
  };
  const worker = db.worker({
    concurrency: 4,
    tasks: {
      single: async () => track(1),
      bc: { batch: { maxSize: 4 }, handler: async (items: BatchItem[]) => track(items.length) },
    },
  });
  await worker.start();
  await sleep(300);
  const queue = db.queue();
  await queue.enqueueMany([
    ...Array.from({ length: 4 }, (_, i) => ({ task: 'single', payload: { i } })),
    ...Array.from({ length: 4 }, (_, i) => ({ task: 'bc', payload: { i } })),
  ]);
  while (total < 8) await sleep(50);
  await worker.stop();
  expect(max).toBeLessThanOrEqual(4);
}, 30_000);
