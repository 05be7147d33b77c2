/**
 * §11 `maxWaitMs` (review findings 2 and 3): the wait for a trickle of jobs never counts against
 * their leases, a wait that would eat much of the lease is refused, and start() never waits it.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect, test } from 'vitest';
import { ValidationError } from '../../src/errors.js';
import type { ClaimedJob } from '../../src/types.js';
import { ClaimLoop } from '../../src/worker/claim-loop.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

// Run against the code before this fix (the batch loop waited inside claim(), after ClaimLoop
// had taken sentAt; no beforeClaim): this test failed.
test("a claim's sentAt (where its leases start) is taken after the wait before it", async () => {
  let waited = 0;
  let sentAt = -1;
  const job = { id: '1' } as unknown as ClaimedJob;
  const loop = new ClaimLoop({
    beforeClaim: async () => {
      await sleep(300);
      waited = performance.now();
    },
    claim: async () => [job],
    nextDueInMs: async () => null,
    freeSlots: () => 1,
    accept: (_jobs, at) => {
      sentAt = at;
    },
    giveBack: async () => undefined,
    onError: () => undefined,
    pollIntervalMs: 60_000,
  });
  await loop.start();
  await loop.stop();
  expect(waited).toBeGreaterThan(0);
  expect(sentAt).toBeGreaterThanOrEqual(waited);
});

// Run against the code before this fix (no such check): no error, this test failed.
test('maxWaitMs of a third of leaseMs or more is a ValidationError naming the field', () => {
  const handler = async () => undefined;
  const make = (maxWaitMs: number) =>
    db.worker({ leaseMs: 3_000, tasks: { w: { batch: { maxSize: 10, maxWaitMs }, handler } } });
  expect(() => make(1_000)).toThrow(ValidationError);
  expect(() => make(1_000)).toThrow(/tasks\["w"\]\.batch\.maxWaitMs.*a third of leaseMs/);
  expect(() => make(999)).not.toThrow();
});

// Reviewer's rv7. Run against the code before this fix (loops started one after another, each
// batch task's first claim waiting maxWaitMs): start() took ~6 s and this test failed.
test('start() does not wait maxWaitMs per batch task', async () => {
  const handler = async () => undefined;
  const worker = db.worker({
    concurrency: 4,
    tasks: {
      a: { batch: { maxSize: 10, maxWaitMs: 3_000 }, handler },
      b: { batch: { maxSize: 10, maxWaitMs: 3_000 }, handler },
    },
  });
  const t0 = performance.now();
  await worker.start();
  const ms = performance.now() - t0;
  await worker.stop();
  expect(ms).toBeLessThan(1_000);
}, 30_000);
