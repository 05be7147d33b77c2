/**
 * SPEC §1.9 — no polling on the hot path. An idle worker wakes on the NOTIFY hint within
 * milliseconds (the fallback poll is 5 s here, so a job that waited for it would show); a
 * burst of hints causes a handful of claim passes, not one per hint; hints that arrive while
 * every slot is busy are not forgotten; a delayed job starts on a timer set to its run_after;
 * the LISTEN connection comes back after its backend is killed and claims what was enqueued
 * meanwhile; `listen: false` polls at pollIntervalMs.
 *
 * The latency figures are printed (console.log) so they appear in the test output.
 *
 * Deliberate breaks seen failing (in a private copy of src/):
 *  - ClaimLoop.request() without its single-flight guard (`if (this.pass !== null) …`): the
 *    burst test counted ~200 claim statements for 200 notifications.
 *  - ClaimLoop.runPass() without `await this.armDueTimer()`: the delayed job did not start
 *    within 3 s (it waits for the 60 s poll).
 *  - ClaimLoop.slotFreed() made a no-op: the jobs enqueued while the worker was busy waited
 *    for the 60 s poll.
 *  - Worker.listening() without `if (reconnected) this.claimLoop.wake()`: the job enqueued while
 *    the listener was down waited for the 5 s poll.
 *  - NotificationListener.scheduleReconnect() made a no-op: no `listen:connected` after the kill.
 *  - Worker.notified() ignoring 'jobs' hints: every wake-up figure went to the 5 s poll.
 *  - ClaimLoop.start() with a fixed 30 s poll interval: the `listen: false` job did not start.
 *  - nextDueInMs reading only `run_after > now()` (no look-back to the claim's send time): the
 *    job that became due between a claim and that read waited for the 60 s poll.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, test } from 'vitest';
import { type Engine, engineOf } from '../../src/engine/engine.js';
import type { ClaimedJob } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { listen } from '../support/listener.js';
import {
  type Gate,
  gate,
  heardNotification,
  holdListenerReconnect,
  nextEvent,
  percentile,
  startWorker,
  within,
} from './helpers.js';

const db = useTestDatabase();

function fmt(ms: number): string {
  return `${ms.toFixed(1)} ms`;
}

describe('§1.9 wake-up without polling', () => {
  test('an idle worker starts jobs enqueued 30 ms apart within milliseconds, not at the poll (5 s)', async () => {
    // The figure includes the enqueue's own INSERT + COMMIT, as the issue defines it, and is
    // printed below. The "p50 under 50 ms" was a bound here until issue 21: with other
    // work on the 2 cores (load average 8) three runs gave p50 65, 34 and 134 ms, the enqueue's
    // round trip alone 37, 13 and 70 ms. The bounds are what separates a wake-up from the 5 s
    // poll: a worker that waited for the poll would show a p50 of seconds.
    const queue = db.queue();
    const count = 50;
    const handlerStart = new Array<number>(count);
    const allStarted = gate();
    let started = 0;
    const worker = await startWorker(db, {
      tasks: {
        'wake.latency': (payload: { i: number }) => {
          handlerStart[payload.i] = performance.now();
          if (++started === count) allStarted.open();
        },
      },
      pollIntervalMs: 5_000,
      concurrency: 10,
    });

    await queue.counts(); // open a pooled connection first (not part of any measurement)
    const enqueueStart = new Array<number>(count);
    const enqueueDone = new Array<number>(count);
    const enqueues: Promise<unknown>[] = [];
    for (let i = 0; i < count; i++) {
      enqueueStart[i] = performance.now();
      enqueues.push(
        queue.enqueue('wake.latency', { i }).then(() => {
          enqueueDone[i] = performance.now();
        }),
      );
      await sleep(30); // the pacing the issue asks for: 30 ms between enqueue calls
    }
    await Promise.all(enqueues);
    await within(allStarted.promise, 10_000, 'all 50 jobs started');

    const latencies = enqueueStart.map((t0, i) => (handlerStart[i] as number) - t0);
    const p50 = percentile(latencies, 50);
    const p95 = percentile(latencies, 95);
    const p99 = percentile(latencies, 99);
    // For reading the figures: how much of it is the enqueue's own round trip (INSERT + COMMIT);
    // and the part after the commit was acknowledged (can be ≤ 0: the NOTIFY may arrive first).
    const roundTrip = percentile(
      enqueueStart.map((t0, i) => (enqueueDone[i] as number) - t0),
      50,
    );
    const afterCommit = percentile(
      enqueueDone.map((t1, i) => (handlerStart[i] as number) - t1),
      50,
    );
    console.log(
      `wake-up latency (enqueue call → handler start, ${count} jobs 30 ms apart, poll 5 s): ` +
        `p50 ${fmt(p50)}, p95 ${fmt(p95)}, p99 ${fmt(p99)}, max ${fmt(Math.max(...latencies))} ` +
        `(enqueue round trip alone: p50 ${fmt(roundTrip)}; after the enqueue returned: p50 ${fmt(afterCommit)})`,
    );
    expect(p50, `p50 (the enqueue round trip alone: p50 ${fmt(roundTrip)})`).toBeLessThan(250);
    // Even the slowest start is far from the 5 s fallback poll.
    expect(Math.max(...latencies)).toBeLessThan(2_000);
    await worker.stop();
  });

  /**
   * 200 separate enqueue calls in parallel (200 transactions, 200 notifications) to an idle
   * worker with room for all of them. The producer has `batchEnqueue: false`: by default a Queue
   * merges enqueue calls that arrive together into one INSERT and one NOTIFY, and the point here
   * is a burst of notifications. The worker has its own pool (a Queue passed in, whose engine's claim()
   * is counted); the burst comes through another pool, so claims and enqueues overlap.
   * With `holdFirstClaim`, the first claim statement waits until the whole burst has been
   * notified: every hint then arrives during that one pass.
   */
  async function burst(task: string, holdFirstClaim: boolean): Promise<{ hints: number; passes: number }> {
    const queue = db.queue();
    const producer = db.queue({ batchEnqueue: false });
    const engine = engineOf(queue);
    const claim = engine.claim.bind(engine);
    let claims = 0;
    let hold: Gate | null = null;
    const firstClaimHeld = gate();
    engine.claim = async (...args: Parameters<Engine['claim']>) => {
      claims++;
      if (hold) {
        firstClaimHeld.open();
        await hold.promise;
      }
      return claim(...args);
    };
    const count = 200;
    const allStarted = gate();
    const release = gate();
    let started = 0;
    const worker = await startWorker(db, {
      queue,
      tasks: {
        [task]: async () => {
          if (++started === count) allStarted.open();
          await release.promise; // hold every slot: no freed slot asks for a claim
        },
      },
      concurrency: 256,
      pollIntervalMs: 60_000,
    });
    const notifications = await listen(db.url);
    const held = gate();
    try {
      await notifications.sync(db.pool);
      const claimsBefore = claims;
      if (holdFirstClaim) hold = held;
      await Promise.all(Array.from({ length: count }, (_, i) => producer.enqueue(task, { i })));
      // Every enqueue has committed; the marker comes after all 200 notifications, on the test's
      // LISTEN connection and on the worker's.
      const workerHeardEnd = heardNotification(worker, `${task}-end`);
      await notifications.mark(db.pool, `${task}-end`);
      await notifications.next((p) => p === `${task}-end`);
      const hints = notifications.payloads.filter((p) => p === 'jobs').length;
      if (holdFirstClaim) {
        await within(firstClaimHeld.promise, 10_000, 'the first claim of the burst');
        // Every hint has reached the worker while its pass is held. (This was one round trip of
        // the test's, in the hope that the worker's LISTEN had caught up by then.)
        await within(workerHeardEnd, 10_000, 'the worker hearing the end of the burst');
        hold = null;
        held.open();
      }
      await within(allStarted.promise, 10_000, `all ${count} burst jobs started`);
      release.open();
      await expect.poll(() => worker.stats().done, { timeout: 10_000 }).toBe(count);
      await worker.stop(); // waits for an in-flight pass: every pass the burst caused is counted
      return { hints, passes: claims - claimsBefore };
    } finally {
      hold = null;
      held.open(); // a claim still held would keep stop() waiting for its pass
      release.open();
      await notifications.close();
    }
  }

  test('a burst of 200 notifications during one claim pass causes one more pass, not 200', async () => {
    const { hints, passes } = await burst('burst.held', true);
    console.log(`burst during a (held) claim pass: ${hints} notifications → ${passes} claim statements`);
    expect(hints).toBe(200); // one notification per enqueue call
    // The held pass, then one more for all the hints that came during it (a straggler hint
    // delivered just after could add one). Without single-flight: one claim per hint, 200.
    expect(passes).toBeGreaterThanOrEqual(2);
    expect(passes).toBeLessThanOrEqual(4);
  });

  test('a burst of 200 notifications at natural speed causes fewer claim passes than notifications', async () => {
    const { hints, passes } = await burst('burst.free', false);
    console.log(`burst at natural speed: ${hints} notifications → ${passes} claim statements`);
    expect(hints).toBe(200);
    // How many hints share a pass depends on claim vs commit speed (measured 11–71 passes against
    // embedded PostgreSQL 18 and a local 15); without single-flight it is one claim per hint, ≥ 200.
    expect(passes).toBeGreaterThanOrEqual(1);
    expect(passes).toBeLessThan(hints);
  });

  test('hints that arrive while every slot is busy are not lost: the jobs start when slots free up', async () => {
    const queue = db.queue();
    const engine = engineOf(queue);
    const claim = engine.claim.bind(engine);
    let claims = 0;
    engine.claim = (...args: Parameters<Engine['claim']>) => {
      claims++;
      return claim(...args);
    };
    const blockersRunning = gate();
    const release = gate();
    let blockers = 0;
    const done = new Set<number>();
    const worker = await startWorker(db, {
      queue,
      tasks: {
        'busy.blocker': async () => {
          if (++blockers === 4) blockersRunning.open();
          await release.promise;
        },
        'busy.quick': (payload: { i: number }) => {
          done.add(payload.i);
        },
      },
      concurrency: 4,
      prefetch: 0, // no room to claim ahead either: a hint finds the worker full
      pollIntervalMs: 60_000, // a job left behind would wait a minute
    });
    await queue.enqueueMany(Array.from({ length: 4 }, () => ({ task: 'busy.blocker', payload: {} })));
    await within(blockersRunning.promise, 5_000, 'the 4 blockers started');
    const claimsWhileBusy = claims;
    await Promise.all(Array.from({ length: 100 }, (_, i) => queue.enqueue('busy.quick', { i })));
    // No free slot: the burst of hints claims nothing (a claim needs a free slot)...
    expect(claims).toBe(claimsWhileBusy);
    expect(worker.stats().running).toBe(4);
    // ...but is remembered: once the slots free up, every job runs, long before the poll.
    const t0 = performance.now();
    release.open();
    await expect.poll(() => done.size, { timeout: 5_000 }).toBe(100);
    console.log(
      `busy burst: 100 jobs enqueued while 4/4 slots were busy ran ${fmt(performance.now() - t0)} after the slots freed, in ${claims - claimsWhileBusy} claim statements`,
    );
    await worker.stop();
  });

  test('a delayed job starts on a timer at its run_after, with no other activity (poll 60 s)', async () => {
    const queue = db.queue();
    const startedAt = gate<{ local: number; job: ClaimedJob }>();
    const worker = await startWorker(db, {
      tasks: {
        'wake.delayed': (_payload: unknown, { job }: { job: ClaimedJob }) => {
          startedAt.open({ local: performance.now(), job });
        },
      },
      pollIntervalMs: 60_000,
    });
    await queue.counts(); // open the pool's connection first: the enqueue is one round trip
    const t0 = performance.now();
    const { id } = await queue.enqueue('wake.delayed', {}, { delayMs: 1_500 });
    const t1 = performance.now();
    const { local, job } = await within(startedAt.promise, 3_000, 'the delayed job started');
    expect(job.id).toBe(id);
    // Database clock: the claim's now() (runStartedAt) against the job's run_after.
    const dbError = (job.runStartedAt as Date).getTime() - job.runAfter.getTime();
    // Local clock: run_after was set somewhere inside the enqueue round trip [t0, t1], + 1500 ms.
    const earliest = local - (t1 + 1_500);
    const latest = local - (t0 + 1_500);
    console.log(
      `delayed job (delayMs 1500, poll 60 s): claimed ${dbError} ms after run_after (database clock); ` +
        `handler started ${earliest.toFixed(1)}…${latest.toFixed(1)} ms after run_after (local clock, ` +
        `enqueue round trip ${(t1 - t0).toFixed(1)} ms)`,
    );
    expect(dbError).toBeGreaterThanOrEqual(0); // never before it is due
    // On time, give or take a loaded machine: the bound was 300 ms, and with other work on the
    // 2 cores the job started up to 600 ms late (issue 21). Waiting for the 60 s poll, it would
    // not have started within the 3 s above.
    expect(dbError).toBeLessThanOrEqual(1_000);
    expect(earliest).toBeLessThanOrEqual(1_000);
    expect(latest).toBeGreaterThanOrEqual(-300);
    await worker.stop();
  });
});

describe('§1.9 LISTEN connection', () => {
  test('after its backend is killed the listener reconnects, claims what was missed, and wakes again', async () => {
    // Without batching, each enqueue's NOTIFY is sent in its own transaction, before it returns.
    const queue = db.queue({ batchEnqueue: false });
    const starts = new Map<string, number>();
    const worker = await startWorker(
      db,
      {
        tasks: {
          'listen.reconnect': (payload: { name: string }) => {
            starts.set(payload.name, performance.now());
          },
        },
        pollIntervalMs: 5_000,
      },
      (w) => w.on('error', () => undefined), // the dropped connection is reported; expected here
    );
    const [listener] = await db.sql<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE application_name = 'skiplock-listener' AND datname = current_database()`,
    );
    expect(listener).toBeDefined();

    const dropped = nextEvent(worker, 'error', (e) => /listening for notifications/.test(e.during));
    const reconnected = nextEvent(worker, 'listen:connected', (e) => e.reconnected, 5_000);
    // The reconnection waits until the job below is enqueued: its first try comes 75–125 ms after
    // the loss, and on a loaded machine the enqueue and the check took longer (the listener was
    // back already, and the check below failed).
    const letReconnect = holdListenerReconnect(worker);
    const [killed] = await db.sql<{ ok: boolean }>(
      `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
        WHERE application_name = 'skiplock-listener' AND datname = current_database()`,
    );
    expect(killed?.ok).toBe(true);
    await dropped; // the worker knows its LISTEN is gone; it reconnects after a short backoff

    // Enqueued while nobody listens: its NOTIFY is lost, so only the reconnect's claim pass
    // (or the 5 s poll) can start it.
    const missedAt = performance.now();
    await queue.enqueue('listen.reconnect', { name: 'missed' });
    const listening = await db.sql<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE application_name = 'skiplock-listener'
          AND datname = current_database() AND pid <> $1`,
      [listener?.pid],
    );
    expect(listening, 'the listener must still be down when the job is enqueued').toEqual([]);
    letReconnect();
    await reconnected;
    await expect.poll(() => starts.has('missed'), { timeout: 2_000 }).toBe(true);
    const missedLatency = (starts.get('missed') as number) - missedAt;

    // And the new LISTEN delivers wake-ups again.
    const started = nextEvent(worker, 'job:start', (e) => e.job.task === 'listen.reconnect');
    const t0 = performance.now();
    await queue.enqueue('listen.reconnect', { name: 'after' });
    await within(started, 2_000, 'the job enqueued after the reconnect started');
    const afterLatency = (starts.get('after') as number) - t0;
    console.log(
      `LISTEN reconnect: job enqueued while the listener was down started ${fmt(missedLatency)} after its enqueue; ` +
        `after the reconnect a new job started ${fmt(afterLatency)} after its enqueue (poll 5 s)`,
    );
    // Generous bounds for a loaded machine (tens of ms here); the poll they rule out is 5 s away.
    expect(missedLatency).toBeLessThan(2_000);
    expect(afterLatency).toBeLessThan(1_000);
    await worker.stop();
  });

  test('listen: false polls at pollIntervalMs (200 ms): a job starts within ~1 s', async () => {
    const queue = db.queue();
    const started = gate<number>();
    const worker = await startWorker(db, {
      tasks: { 'listen.off': () => started.open(performance.now()) },
      listen: false,
      pollIntervalMs: 200,
    });
    const rows = await db.sql(
      `SELECT pid FROM pg_stat_activity WHERE application_name = 'skiplock-listener' AND datname = current_database()`,
    );
    expect(rows).toEqual([]); // no LISTEN connection at all
    const t0 = performance.now();
    await queue.enqueue('listen.off', {});
    const latency = (await within(started.promise, 1_500, 'the polled job started')) - t0;
    console.log(`listen: false, pollIntervalMs 200: job started ${fmt(latency)} after its enqueue`);
    expect(latency).toBeLessThan(1_000);
    await worker.stop();
  });

  test('a job that becomes due between a claim and the next-due read starts at once, not at the poll', async () => {
    // CI found a retry (10 ms backoff) that never ran within 5 s: its wake-up timer fired a
    // fraction of a millisecond before run_after (timers run on a truncated, cached clock), the
    // claim found nothing due, and the next-due read that followed only looked at jobs due
    // *after* its own now() — the retry, due by then, was left to the 30 s poll. Here the claim
    // is slowed so the job's due time falls between the two statements every time.
    const queue = db.queue();
    const engine = engineOf(queue);
    const claim = engine.claim.bind(engine);
    let slowOnce = false;
    engine.claim = async (...args: Parameters<Engine['claim']>) => {
      const jobs = await claim(...args);
      if (jobs.length === 0 && slowOnce) {
        slowOnce = false;
        await sleep(600);
      }
      return jobs;
    };
    const started = gate();
    const worker = await startWorker(db, {
      queue,
      listen: false,
      pollIntervalMs: 60_000,
      tasks: { 'wake.due-between': () => started.open() },
    });
    // Another Queue enqueues: the worker hears of the job from no hint (listen: false) and no
    // in-process wake-up, and has no timer for it — only from the claim and the read after it.
    await db.queue().enqueue('wake.due-between', {}, { delayMs: 300 });
    slowOnce = true;
    const t0 = performance.now();
    void worker.tick.claim(); // comes back empty after 600 ms; the job was due at 300 ms
    await within(started.promise, 3_000, 'the job that became due during the claim started');
    console.log(`job due during a slow empty claim started ${fmt(performance.now() - t0)} after it`);
    await worker.stop();
  });
});
