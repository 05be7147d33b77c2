/**
 * §11 `maxWaitMs` (review finding 2): the wait for a trickle of jobs never counts against their
 * leases.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect, test } from 'vitest';
import type { ClaimedJob } from '../../src/types.js';
import { ClaimLoop } from '../../src/worker/claim-loop.js';

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
