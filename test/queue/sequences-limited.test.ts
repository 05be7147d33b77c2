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
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

for (const [name, config] of [
  ['concurrency-limited', { concurrency: 5 }],
  ['priority-aging', { priorityAging: { everyMs: 60_000 } }],
  ['unrestricted (control)', null],
] as const) {
  test(`${name}: a new key's first job (priority 0) behind 30 plain priority-100 jobs`, async () => {
    const queue = db.queue();
    const qname = `q${name.length}`;
    if (config) await queue.configureQueue(qname, config as never);
    await queue.enqueueMany(
      Array.from({ length: 30 }, (_, i) => ({
        task: 't',
        payload: `plain-${i}`,
        queue: qname,
        priority: 100,
      })),
    );
    await queue.enqueue('t', 'SEQ', { queue: qname, priority: 0, sequence: `k-${qname}` });
    const started: string[] = [];
    const worker = db.worker({
      concurrency: 1,
      prefetch: 0,
      pollIntervalMs: 60_000,
      queues: [qname],
      tasks: {
        t: async (p: unknown) => {
          started.push(String(p));
          await sleep(10);
        },
      },
    });
    await worker.start();
    await expect.poll(() => started.length, { timeout: 20_000 }).toBe(31);
    await worker.stop();
    expect(started.indexOf('SEQ')).toBeLessThan(3);
  });
}
