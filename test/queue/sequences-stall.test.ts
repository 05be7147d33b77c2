/**
 * Review finding reproductions (sequences), kept as tests. Each failed on the branch before the
 * fix (checked by reverting src/: the limited-queue late commit ran H before A, the claim racing a
 * held key lock took H, the new key's first job started behind the backlog — at position >= 3,
 * the plain claim that ran the pass returned [] and a listen:false worker idled its poll
 * interval). The fix: every pick skips a head whose key is noted, and the pass runs as a statement
 * of its own before both the plain and the limited claim.
 */
import { expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

test('a claim that runs the pass returns nothing although jobs are due', async () => {
  const queue = db.queue();
  await queue.enqueueMany(
    Array.from({ length: 5 }, (_, i) => ({ task: 't', payload: `plain-${i}`, priority: 100 })),
  );
  await queue.enqueue('t', 'SEQ', { priority: 0, sequence: 'k' });
  const got = await queue.claim('w', { limit: 1 });
  // expected: one job (plain-0, or SEQ); actual: []
  expect(got.map((j) => j.payload)).toHaveLength(1);
});

test('listen:false worker with a backlog idles for a poll interval after sequenced arrivals', async () => {
  const queue = db.queue();
  await queue.enqueueMany(
    Array.from({ length: 100 }, (_, i) => ({ task: 't', payload: `plain-${i}`, priority: 100, queue: 'L' })),
  );
  await queue.enqueueMany(
    Array.from({ length: 100 }, (_, i) => ({
      task: 't',
      payload: `seq-${i}`,
      priority: 0,
      sequence: `k${i}`,
      queue: 'L',
    })),
  );
  const started: number[] = [];
  const t0 = performance.now();
  const worker = db.worker({
    concurrency: 1,
    listen: false,
    queues: ['L'],
    pollIntervalMs: 4_000,
    tasks: {
      t: async () => {
        started.push(performance.now() - t0);
      },
    },
  });
  await worker.start();
  await expect.poll(() => started.length, { timeout: 20_000 }).toBeGreaterThan(0);
  await worker.stop();
  expect(started[0]).toBeLessThan(1_000);
});
