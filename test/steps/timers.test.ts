/**
 * SPEC §12 the worker's wait-timeout bookkeeping: many outstanding event waits (each a pushed
 * timeout instant) neither overflow the stack nor delay an earlier timeout.
 *
 * Deliberate break seen failing (then restored): MinHeap.peek() made `Math.min(...items)` (the
 * earlier bookkeeping's arming): the test did not finish within 120 s (each suspension scans
 * the whole list; past ~125k entries the spread overflows the stack).
 */
import { expect, test } from 'vitest';
import type { JobContext } from '../../src/worker/options.js';
import { MinHeap } from '../../src/worker/worker.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

test('MinHeap pops in order', () => {
  const h = new MinHeap();
  const values = Array.from({ length: 1000 }, () => Math.floor(Math.random() * 500));
  for (const v of values) h.push(v);
  const out: number[] = [];
  while (h.size > 0) out.push(h.pop() as number);
  expect(out).toEqual([...values].sort((a, b) => a - b));
  expect(h.pop()).toBeUndefined();
});

test('150,000 outstanding wait timeouts: no error, and a short timeout still wakes its job', async () => {
  const queue = db.queue();
  const errors: unknown[] = [];
  const worker = db.worker({
    queue,
    tasks: {
      w: async (_p: unknown, ctx: JobContext) =>
        ctx.waitForEvent('e', `ev-${ctx.job.id}`, { timeoutMs: 300 }),
    },
  });
  worker.on('error', (e: unknown) => errors.push(e));
  await worker.start();
  try {
    // as if 150,000 earlier waits with a 7-day timeout had been suspended by this worker
    const far = Date.now() + 7 * 86_400_000;
    const suspended = (worker as unknown as { suspended(p: unknown): void }).suspended.bind(worker);
    for (let i = 0; i < 150_000; i++) suspended({ kind: 'event', until: new Date(far + i), event: 'x' });
    const { id } = await queue.enqueue('w', {});
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 10_000 }).toBe('done');
    expect(errors).toEqual([]);
  } finally {
    await worker.stop({ timeoutMs: 2_000 });
  }
}, 20_000);
