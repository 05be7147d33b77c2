/**
 * Guards SPEC §1.9's `listen: false` mode: the fallback poll of ClaimLoop waits
 * pollIntervalMs ± 25 %, drawn anew before every poll (Math.random stubbed here, fake timers), so
 * workers started together do not poll in step and the first to poll after a burst does not take
 * it all.
 *
 * Caught on the code before the fix (issue 8, defect 7): the poll was a fixed `setInterval`:
 * with random() = 0 it still fired at 1,000 ms, not 750 ms; and every interval was the same.
 */
import { afterEach, beforeEach, expect, test, vi } from 'vitest';
import { ClaimLoop } from '../../src/worker/claim-loop.js';

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

test('each poll delay is pollIntervalMs ± 25 %, drawn anew each time', async () => {
  const polls: number[] = [];
  const loop = new ClaimLoop({
    claim: async () => {
      polls.push(Date.now());
      return [];
    },
    nextDueInMs: async () => null,
    freeSlots: () => 10,
    accept: () => undefined,
    giveBack: async () => undefined,
    onError: (error) => {
      throw error;
    },
    pollIntervalMs: 1_000,
  });
  const draws = [0, 0.999_999, 0.5, 0];
  vi.spyOn(Math, 'random').mockImplementation(() => draws.shift() ?? 0.5);
  const t0 = Date.now();
  await loop.start(); // the first pass claims at once
  await vi.advanceTimersByTimeAsync(749);
  expect(polls.map((t) => t - t0)).toEqual([0]);
  await vi.advanceTimersByTimeAsync(1); // 750 ms: random() = 0 → 1,000 × 0.75
  await vi.advanceTimersByTimeAsync(1_249); // 1,999 ms
  expect(polls.map((t) => t - t0)).toEqual([0, 750]);
  await vi.advanceTimersByTimeAsync(1); // 750 + 1,250: random() → 1 gives 1,000 × 1.25
  await vi.advanceTimersByTimeAsync(1_000); // then 1,000 × 1.00
  await vi.advanceTimersByTimeAsync(750); // then 750 again
  expect(polls.map((t) => t - t0)).toEqual([0, 750, 2_000, 3_000, 3_750]);
  await loop.stop();
  await vi.advanceTimersByTimeAsync(5_000);
  expect(polls).toHaveLength(5); // no poll after stop()
});
