/**
 * The worker's services one step at a time, without a database and without waiting for timers:
 * each test drives `tick()` (or the one call that is the service's step) with stand-ins for the
 * statements, and checks what the step decided. The database-backed tests elsewhere check the
 * same services end to end.
 *
 * Deliberate breaks seen failing (each undone):
 *  - LocalQueue.take() without `!run.checkLease()`: "skips a run whose lease has passed" started it.
 *  - LeaseKeeper.tick() without its `run.phase === 'held'` in the lost branch: the held run was
 *    never reported lost.
 *  - ClaimLoop.runPass() handing jobs to accept() after stop(): "a claim in flight at stop()"
 *    saw them accepted instead of given back.
 *  - Pruner.step() without `this.stopRequested` between batches: the stop test never ended.
 */
import { performance } from 'node:perf_hooks';
import { describe, expect, test } from 'vitest';
import { Batcher } from '../../src/core/batcher.js';
import type { ClaimedJob } from '../../src/types.js';
import { ClaimLoop } from '../../src/worker/claim-loop.js';
import { JobRun, leaseMargin } from '../../src/worker/job-run.js';
import { LeaseKeeper } from '../../src/worker/lease-keeper.js';
import { LocalQueue } from '../../src/worker/local-queue.js';
import { Pruner, Reaper, Scheduler } from '../../src/worker/maintenance.js';

let nextId = 1;
function job(): ClaimedJob {
  const id = String(nextId++);
  const now = new Date();
  return {
    id,
    queue: 'default',
    task: 't',
    status: 'running',
    priority: 100,
    payload: {},
    result: null,
    dedupeKey: null,
    attempts: 1,
    maxAttempts: 3,
    runAfter: now,
    leaseUntil: now,
    workerId: 'w',
    runStartedAt: now,
    timeoutMs: null,
    lastError: null,
    cancelRequestedAt: null,
    createdAt: now,
    updatedAt: now,
    attemptedBy: ['w'],
    attempt: 1,
    token: '1',
  } as ClaimedJob;
}

/** A held run claimed `ageMs` ago with a lease of `leaseMs`. */
function run(leaseMs = 60_000, ageMs = 0, onLeaseExpired: (run: JobRun) => void = () => undefined): JobRun {
  return new JobRun(job(), {
    timeoutMs: null,
    leaseMs,
    graceMs: 1_000,
    claimSentAt: performance.now() - ageMs,
    onLeaseExpired,
  });
}

const noError = (error: unknown) => {
  throw error;
};

/** Waits (a few ms at a time, up to 2 s) until `ready()` holds. */
async function until(ready: () => boolean): Promise<void> {
  const deadline = performance.now() + 2_000;
  while (!ready()) {
    if (performance.now() > deadline) throw new Error('condition not reached within 2 s');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('LocalQueue', () => {
  test('hands out held runs in claim order, once each', () => {
    const queue = new LocalQueue();
    const runs = [run(), run(), run()];
    expect(queue.push(runs)).toBe(true);
    expect(queue.size).toBe(3);
    expect([queue.take(), queue.take(), queue.take(), queue.take()]).toEqual([...runs, null]);
    expect(queue.size).toBe(0);
  });

  test('skips a run whose lease has passed, and one no longer held (dropped, or finished)', () => {
    const queue = new LocalQueue();
    const expired: JobRun[] = [];
    const stale = run(1_000, 1_000, (r) => expired.push(r)); // claimed a whole lease ago
    const dropped = run();
    dropped.finish();
    const good = run();
    queue.push([stale, dropped, good]);
    expect(queue.take()).toBe(good);
    expect(expired).toEqual([stale]); // its expiry was reported as it was skipped
  });

  test('close() returns the runs still held and refuses new ones', () => {
    const queue = new LocalQueue();
    const [a, b, c] = [run(), run(), run()];
    queue.push([a, b, c]);
    expect(queue.take()).toBe(a);
    expect(queue.close()).toEqual([b, c]);
    expect(queue.state).toBe('closed');
    expect(queue.push([run()])).toBe(false);
    expect(queue.take()).toBeNull();
  });
});

describe('LeaseKeeper.tick()', () => {
  function keeper(runs: JobRun[], answer: (run: JobRun) => 'renewed' | 'busy' | 'lost', cancel = false) {
    const lost: JobRun[] = [];
    const cancelled: JobRun[] = [];
    const errors: string[] = [];
    let renewCalls = 0;
    const k = new LeaseKeeper({
      intervalMs: 1_000,
      runs: () => runs,
      renew: async (batch) => {
        renewCalls++;
        return batch.map((r) => ({ state: answer(r), cancelRequested: cancel }));
      },
      onLost: (r) => lost.push(r),
      onCancelRequested: (r) => cancelled.push(r),
      onError: (_error, during) => errors.push(during),
    });
    return { k, lost, cancelled, errors, calls: () => renewCalls };
  }

  test('renewed: the local deadline moves to this beat; a cancel request is passed on', async () => {
    const r = run(10_000, 5_000); // half its lease gone
    const before = r.leaseDeadline;
    const { k, lost, cancelled } = keeper([r], () => 'renewed', true);
    await k.tick();
    expect(r.leaseDeadline).toBeGreaterThan(before + 4_000);
    expect(lost).toEqual([]);
    expect(cancelled).toEqual([r]);
  });

  test('lost: held and running runs are reported; a run writing its outcome is left to its own compare-and-set', async () => {
    const held = run();
    const running = run();
    running.start();
    const writing = run();
    writing.start();
    writing.phase = 'writing';
    const { k, lost } = keeper([held, running, writing], () => 'lost');
    await k.tick();
    expect(lost).toEqual([held, running]);
  });

  test('busy under its own open ctx.transaction: held by the lock, not lost', async () => {
    const r = run(10_000, 5_000);
    r.start();
    r.setTransaction('open', () => undefined);
    const before = r.leaseDeadline;
    const { k, lost } = keeper([r], () => 'busy');
    await k.tick();
    expect(lost).toEqual([]);
    expect(r.leaseDeadline).toBeGreaterThan(before);
  });

  test('the database unreachable: the error is reported, nothing is lost, deadlines stay', async () => {
    const r = run();
    const before = r.leaseDeadline;
    const errors: string[] = [];
    const k = new LeaseKeeper({
      intervalMs: 1_000,
      runs: () => [r],
      renew: async () => {
        throw new Error('connection refused');
      },
      onLost: () => {
        throw new Error('not lost');
      },
      onCancelRequested: () => undefined,
      onError: (_error, during) => errors.push(during),
    });
    await k.tick();
    expect(errors).toEqual(['renewing leases']);
    expect(r.leaseDeadline).toBe(before);
  });

  test('checkDeadlines() expires, synchronously, every run past its local deadline — and renews none of them', async () => {
    const expired: JobRun[] = [];
    const past = run(1_000, 1_000 - leaseMargin(1_000) + 1, (x) => expired.push(x));
    const fine = run(60_000, 0, (x) => expired.push(x));
    const { k, calls } = keeper([past, fine], () => 'renewed');
    k.checkDeadlines();
    expect(expired).toEqual([past]);
    await k.tick();
    expect(calls()).toBe(1); // one statement, for `fine` only
  });
});

describe('ClaimLoop.tick()', () => {
  function loop(
    overrides: Partial<ConstructorParameters<typeof ClaimLoop>[0]> & { capacity?: () => number } = {},
  ) {
    const accepted: { jobs: ClaimedJob[]; sentAt: number }[] = [];
    const given: ClaimedJob[][] = [];
    const limits: number[] = [];
    let dueReads = 0;
    const l = new ClaimLoop({
      claim: async (limit) => {
        limits.push(limit);
        return Array.from({ length: Math.min(limit, 3) }, job);
      },
      nextDueInMs: async () => {
        dueReads++;
        return null;
      },
      freeSlots: overrides.capacity ?? (() => 5),
      accept: (jobs, sentAt) => accepted.push({ jobs, sentAt }),
      giveBack: async (jobs) => {
        given.push(jobs);
      },
      onError: noError,
      pollIntervalMs: 3_600_000,
      ...overrides,
    });
    return { l, accepted, given, limits, dueReads: () => dueReads };
  }

  test('claims what there is room for, hands the jobs over with the send time, then reads the next due time', async () => {
    const { l, accepted, limits, dueReads } = loop();
    const t0 = performance.now();
    await l.start(); // the first pass
    await l.tick(); // and one more
    await l.stop();
    expect(limits).toEqual([5, 5]);
    expect(accepted).toHaveLength(2);
    expect(accepted[0]?.jobs).toHaveLength(3);
    expect(accepted[0]?.sentAt).toBeGreaterThanOrEqual(t0);
    expect(dueReads()).toBe(2); // fewer than asked for: drained, so the due timer is set
  });

  test('no room: no claim at all', async () => {
    const { l, limits } = loop({ capacity: () => 0 });
    await l.start();
    await l.tick();
    await l.stop();
    expect(limits).toEqual([]);
  });

  test('a claim in flight at stop(): its jobs are given back, never accepted', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const claimed = [job(), job()];
    let calls = 0;
    const { l, accepted, given } = loop({
      claim: async () => {
        if (++calls === 1) return [];
        await held;
        return claimed;
      },
    });
    await l.start();
    const pass = l.tick();
    const stopped = l.stop();
    release();
    await pass;
    await stopped;
    expect(accepted).toEqual([]);
    expect(given).toEqual([claimed]);
  });

  test('a failed claim is reported and retried later, not thrown; after stop() a tick claims nothing', async () => {
    const errors: string[] = [];
    let calls = 0;
    const { l } = loop({
      claim: async () => {
        if (++calls === 1) return [];
        throw new Error('connection refused');
      },
      onError: (_error, during) => errors.push(during),
    });
    await l.start();
    await l.tick();
    expect(errors).toEqual(['claiming jobs']);
    await l.stop(); // clears the retry timer
    await l.tick();
    expect(calls).toBe(2);
  });
});

describe('maintenance services: tick()', () => {
  test('Reaper: reports what it reaped, and nothing when there was nothing', async () => {
    const reaped: string[][] = [];
    let answer: string[] = ['7', '9'];
    const reaper = new Reaper(
      { intervalMs: 1_000, onError: noError },
      { reap: async () => answer, onReaped: (ids) => reaped.push(ids) },
    );
    await reaper.tick();
    answer = [];
    await reaper.tick();
    expect(reaped).toEqual([['7', '9']]);
  });

  test('a failing step is reported with what the service was doing, never thrown', async () => {
    const errors: string[] = [];
    const reaper = new Reaper(
      { intervalMs: 1_000, onError: (_e, during) => errors.push(during) },
      {
        reap: async () => {
          throw new Error('boom');
        },
        onReaped: () => undefined,
      },
    );
    await reaper.tick();
    expect(errors).toEqual(['reaping expired leases']);
  });

  test('Pruner: batches until one comes back short, then reports the total once', async () => {
    const batches = [1_000, 1_000, 400];
    const pruned: number[] = [];
    const pruner = new Pruner(
      { intervalMs: 1_000, onError: noError },
      { batchSize: 1_000, pruneBatch: async () => batches.shift() ?? 0, onPruned: (n) => pruned.push(n) },
    );
    await pruner.tick();
    expect(pruned).toEqual([2_400]);
    expect(batches).toEqual([]);
  });

  test('Pruner: stop() ends a long step between batches', async () => {
    let calls = 0;
    let pruner!: Pruner;
    pruner = new Pruner(
      { intervalMs: 1_000, onError: noError },
      {
        batchSize: 10,
        pruneBatch: async () => {
          calls++;
          if (calls === 2) void pruner.stop();
          return 10; // always a full batch: only stop() ends it
        },
        onPruned: () => undefined,
      },
    );
    await pruner.tick();
    expect(calls).toBe(2);
  });
});

describe('Scheduler: tick() and its sleep', () => {
  /** Exposes the delay the base class would wait after the last step. */
  class ProbeScheduler extends Scheduler {
    sleep(): number {
      return this.nextDelayMs();
    }
  }
  const tick = (name: string, at: string) => ({ name, tick: new Date(at), jobId: '1' });

  test('fires batches until one is not full, reports each, then sleeps until the next due schedule', async () => {
    const batches = [
      { fired: [tick('a', '2026-01-01T00:00:00Z')], skipped: [], failed: [], more: true, locked: 20 },
      {
        fired: [],
        skipped: [{ name: 'b', tick: new Date(0), reason: 'overlap' as const }],
        failed: [],
        more: false,
        locked: 1,
      },
    ];
    const reported: string[] = [];
    const scheduler = new ProbeScheduler(
      { onError: noError },
      {
        fire: async () => batches.shift() ?? { fired: [], skipped: [], failed: [], more: false, locked: 0 },
        nextDueInMs: async () => 1_234,
        onFired: (fired, skipped) =>
          reported.push(...fired.map((f) => f.name), ...skipped.map((k) => `${k.name}:${k.reason}`)),
      },
    );
    await scheduler.tick();
    expect(reported).toEqual(['a', 'b:overlap']);
    expect(batches).toEqual([]);
    expect(scheduler.sleep()).toBe(1_236); // a couple of ms late rather than early
  });

  test('no schedule: it sleeps a minute; one due far ahead: at most a minute; a failure: retries in a second', async () => {
    let due: number | null = null;
    let fail = false;
    const errors: string[] = [];
    const scheduler = new ProbeScheduler(
      { onError: (_e, during) => errors.push(during) },
      {
        fire: async () => {
          if (fail) throw new Error('database away');
          return { fired: [], skipped: [], failed: [], more: false, locked: 0 };
        },
        nextDueInMs: async () => due,
        onFired: () => undefined,
      },
    );
    await scheduler.tick();
    expect(scheduler.sleep()).toBe(60_000);
    due = 86_400_000;
    await scheduler.tick();
    expect(scheduler.sleep()).toBe(60_000);
    fail = true;
    await scheduler.tick();
    expect(scheduler.sleep()).toBe(1_000);
    expect(errors).toEqual(['firing due schedules']);
  });

  test('due schedules it cannot lock (another worker firing them): it backs off instead of spinning', async () => {
    const scheduler = new ProbeScheduler(
      { onError: noError },
      {
        fire: async () => ({ fired: [], skipped: [], failed: [], more: false, locked: 0 }),
        nextDueInMs: async () => 0, // due now, but every row locked elsewhere
        onFired: () => undefined,
      },
    );
    const sleeps: number[] = [];
    for (let i = 0; i < 6; i++) {
      await scheduler.tick();
      sleeps.push(scheduler.sleep());
    }
    expect(sleeps).toEqual([100, 200, 400, 800, 1_000, 1_000]);
  });

  test('a schedule whose firing failed is reported by name; the others are not held back', async () => {
    const errors: string[] = [];
    const reported: string[] = [];
    const scheduler = new ProbeScheduler(
      { onError: (_e, during) => errors.push(during) },
      {
        fire: async () => ({
          fired: [tick('ok', '2026-01-01T00:00:00Z')],
          skipped: [],
          failed: [{ name: 'poison', error: new Error('index row size exceeds maximum') }],
          more: false,
          locked: 2,
        }),
        nextDueInMs: async () => 500,
        onFired: (fired) => reported.push(...fired.map((f) => f.name)),
      },
    );
    await scheduler.tick();
    expect(reported).toEqual(['ok']);
    expect(errors).toEqual(['firing schedule "poison" (its due ticks were skipped)']);
    expect(scheduler.sleep()).toBe(502);
  });

  test('wake() during a step runs another step right after it; after stop() it does nothing', async () => {
    let steps = 0;
    let release!: () => void;
    const scheduler = new Scheduler(
      { onError: noError },
      {
        fire: async () => {
          steps++;
          if (steps === 1) await new Promise<void>((resolve) => (release = resolve));
          return { fired: [], skipped: [], failed: [], more: false, locked: 0 };
        },
        nextDueInMs: async () => null, // asleep for a minute unless woken
        onFired: () => undefined,
      },
    );
    scheduler.start(); // the first step runs at once
    await until(() => steps === 1);
    scheduler.wake(); // a hint arrives while the first step runs
    release();
    await until(() => steps === 2);
    await scheduler.stop();
    scheduler.wake();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(steps).toBe(2);
  });
});

describe('Batcher (the completer’s and the enqueuer’s batching)', () => {
  test('calls made in one turn share one flush; each caller gets its own result or error', async () => {
    const flushes: number[][] = [];
    const batcher = new Batcher<number, number>(
      async (items) => {
        flushes.push(items);
        return items.map((n) =>
          n < 0 ? { ok: false, error: new Error(`bad ${n}`) } : { ok: true, value: n * 2 },
        );
      },
      { maxBatch: 100, maxConcurrent: 2 },
    );
    const results = await Promise.allSettled([1, -2, 3].map((n) => batcher.add(n)));
    expect(flushes).toEqual([[1, -2, 3]]);
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message))).toEqual([
      2,
      'bad -2',
      6,
    ]);
  });

  test('at most maxBatch items per flush and maxConcurrent flushes in flight', async () => {
    let inFlight = 0;
    let peak = 0;
    const sizes: number[] = [];
    const batcher = new Batcher<number, number>(
      async (items) => {
        inFlight++;
        peak = Math.max(peak, inFlight);
        sizes.push(items.length);
        await new Promise((resolve) => setImmediate(resolve));
        inFlight--;
        return items.map((value) => ({ ok: true, value }));
      },
      { maxBatch: 4, maxConcurrent: 2 },
    );
    await Promise.all(Array.from({ length: 10 }, (_, i) => batcher.add(i)));
    expect(Math.max(...sizes)).toBeLessThanOrEqual(4);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(10);
    expect(peak).toBeLessThanOrEqual(2);
    await batcher.idle();
  });

  // Break seen failing: cutAt() returning maxBatch regardless of groupOf — flushes of [4, 4, 2]
  // cut the second and third groups in two.
  test('groupOf: a group (one batch’s outcomes, §11) is never split across two flushes', async () => {
    const flushes: string[][] = [];
    const batcher = new Batcher<{ group: string }, number>(
      async (items) => {
        flushes.push(items.map((item) => item.group));
        return items.map(() => ({ ok: true, value: 1 }));
      },
      { maxBatch: 4, maxConcurrent: 1, groupOf: (item) => item.group },
    );
    const groups = ['a', 'a', 'a', 'b', 'b', 'b', 'c', 'c', 'c', 'c'];
    await Promise.all(groups.map((group) => batcher.add({ group })));
    // the first flush takes a, a, a, b and then the rest of b; the next takes all of c
    expect(flushes).toEqual([
      ['a', 'a', 'a', 'b', 'b', 'b'],
      ['c', 'c', 'c', 'c'],
    ]);
  });
});
