import { setTimeout as sleep } from 'node:timers/promises';
import { expect, test } from 'vitest';
import type { BatchItem } from '../../src/task-types.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

// §11 review finding 5 (reviewer's rv5): with a limited queue a claim pass is several
// statements (each limited queue's, then the plain one), and one batch took jobs of two of them,
// out of claim order. Run against the code before the fix (batches cut from the pass's jobs as
// one list): the one batch was [lim:50, lim:60, default:1, default:2] and this test failed.

test('a batch is one claim statement, in claim order, even with a limited queue', async () => {
  const queue = db.queue();
  await queue.configureQueue('lim', { concurrency: 2 });
  await queue.enqueueMany([
    { task: 'bl', payload: { q: 'default', p: 1 }, priority: 1 },
    { task: 'bl', payload: { q: 'default', p: 2 }, priority: 2 },
    { task: 'bl', payload: { q: 'lim', p: 50 }, priority: 50, queue: 'lim' },
    { task: 'bl', payload: { q: 'lim', p: 60 }, priority: 60, queue: 'lim' },
  ]);
  const batches: string[][] = [];
  const worker = db.worker({
    concurrency: 4,
    tasks: {
      bl: {
        batch: { maxSize: 4 },
        handler: async (items: BatchItem<{ q: string; p: number }>[]) => {
          batches.push(items.map((i) => `${i.payload.q}:${i.payload.p}`));
        },
      },
    },
  });
  await worker.start();
  while (batches.flat().length < 4) await sleep(20);
  await worker.stop();
  // each batch from one statement, in its claim order (priority ASC)
  for (const b of batches) {
    const ps = b.map((s) => Number(s.split(':')[1]));
    expect(ps).toEqual([...ps].sort((x, y) => x - y));
  }
}, 30_000);
