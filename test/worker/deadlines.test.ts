/**
 * SPEC §1.10 — deadlines are enforced. Past a job's timeoutMs (its own, or its task's default)
 * the handler's signal aborts with a JobDeadlineExceeded, and the attempt fails with a
 * last_error starting `JobDeadlineExceeded` (counted by ops().deadline1h; dead when it was the
 * last attempt). A handler that ignores its signal loses its slot after abortGraceMs: the
 * worker emits 'job:runaway', counts it, records the failure and starts the next job.
 *
 * Deliberate breaks seen failing (in a private copy of src/):
 *  - JobRun's constructor without its deadline setTimeout: the three tests that expect an
 *    abort timed out waiting for it (the signal, 'job:retry', 'job:runaway').
 *  - Worker.run() using `task?.timeoutMs ?? job.timeoutMs` (task default winning over the
 *    job's own): the "job's own timeoutMs wins" test failed (aborted at 150 ms).
 *  - JobRun.abort() without the grace timer (never abandoning a runaway): the next job of the
 *    concurrency-1 worker never started and no 'job:runaway' was emitted.
 */
import { performance } from 'node:perf_hooks';
import { describe, expect, test } from 'vitest';
import { JobDeadlineExceeded } from '../../src/errors.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { aborted, gate, nextEvent, startWorker, within } from './helpers.js';

const db = useTestDatabase();

describe('§1.10 deadlines', () => {
  test('JobDeadlineExceeded says its name once (issue 8: String() gave "JobDeadlineExceeded: JobDeadlineExceeded: …")', () => {
    const error = new JobDeadlineExceeded(400);
    expect(error.message).toBe('JobDeadlineExceeded: the job ran longer than its timeout of 400 ms');
    expect(String(error)).toBe(error.message);
    expect(error.stack?.split('\n')[0]).toBe(error.message);
    expect(error.code).toBe('ERR_JOB_DEADLINE_EXCEEDED');
  });

  test("a job's own timeoutMs aborts its signal with JobDeadlineExceeded; the last attempt goes dead and counts in deadline1h", async () => {
    const queue = db.queue();
    const deadline1hBefore = (await queue.ops()).deadline1h;
    const seen = gate<{ reason: unknown; afterMs: number }>();
    const worker = await startWorker(db, {
      tasks: {
        'deadline.own': async (_payload: unknown, { signal }: JobContext) => {
          const t0 = performance.now();
          const reason = await aborted(signal);
          seen.open({ reason, afterMs: performance.now() - t0 });
          throw reason; // a well-behaved handler stops when told to
        },
      },
    });
    const dead = nextEvent(worker, 'job:dead', (e) => e.job.task === 'deadline.own');
    const { id } = await queue.enqueue('deadline.own', {}, { timeoutMs: 200, maxAttempts: 1 });

    const { reason, afterMs } = await within(seen.promise, 3_000, 'the signal aborted');
    expect(reason).toBeInstanceOf(JobDeadlineExceeded);
    expect((reason as JobDeadlineExceeded).message).toMatch(/^JobDeadlineExceeded/);
    expect((reason as JobDeadlineExceeded).timeoutMs).toBe(200);
    expect(afterMs).toBeGreaterThanOrEqual(190);
    expect(afterMs).toBeLessThan(1_000);

    const event = await dead;
    expect(event.job.id).toBe(id);
    expect(event.error).toBeInstanceOf(JobDeadlineExceeded);
    const job = await queue.get(id);
    expect(job).toMatchObject({ status: 'dead', attempts: 1, result: null });
    expect(job?.lastError).toMatch(/^JobDeadlineExceeded/);
    expect((await queue.ops()).deadline1h).toBe(deadline1hBefore + 1);
    expect(worker.stats()).toMatchObject({ dead: 1, runaway: 0 });
    await worker.stop();
  });

  test("a task's default timeoutMs applies to jobs without their own; the failure is retried", async () => {
    const queue = db.queue();
    const reasons: unknown[] = [];
    const worker = await startWorker(db, {
      tasks: {
        'deadline.task': {
          timeoutMs: 150,
          handler: async (_payload: unknown, { signal, job }: JobContext) => {
            if (job.attempt === 2) return 'second attempt in time';
            reasons.push(await aborted(signal));
            return 'returned after the deadline: not a success';
          },
        },
      },
      backoff: { baseMs: 50, capMs: 100 },
      pollIntervalMs: 100, // the retry's own wake-up (and a race in it) is tested in failures.test.ts
    });
    const retry = nextEvent(worker, 'job:retry', (e) => e.job.task === 'deadline.task');
    const done = nextEvent(worker, 'job:done', (e) => e.job.task === 'deadline.task');
    const { id } = await queue.enqueue('deadline.task', {}, { maxAttempts: 2 });

    const retried = await retry;
    expect(retried.error).toBeInstanceOf(JobDeadlineExceeded);
    expect((retried.error as Error).message).toMatch(/^JobDeadlineExceeded: .*150 ms/);
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toBeInstanceOf(JobDeadlineExceeded);

    await done;
    const job = await queue.get(id);
    expect(job).toMatchObject({ status: 'done', attempts: 2, result: 'second attempt in time' });
    expect(job?.lastError).toMatch(/^JobDeadlineExceeded/); // the first attempt's failure is kept
    await worker.stop();
  });

  test("a job's own timeoutMs wins over its task's default", async () => {
    const queue = db.queue();
    const worker = await startWorker(db, {
      tasks: {
        'deadline.override': {
          timeoutMs: 150,
          handler: async (_payload: unknown, { signal }: JobContext) => {
            // Works for 400 ms unless aborted: past the task's 150 ms, within the job's 5 s.
            const outcome = await Promise.race([
              aborted(signal).then(() => 'aborted'),
              new Promise((resolve) => setTimeout(resolve, 400, 'finished')),
            ]);
            if (outcome === 'aborted') throw signal.reason;
            return outcome;
          },
        },
      },
    });
    const done = nextEvent(worker, 'job:done', (e) => e.job.task === 'deadline.override');
    const { id } = await queue.enqueue('deadline.override', {}, { timeoutMs: 5_000, maxAttempts: 1 });
    await done;
    expect(await queue.get(id)).toMatchObject({ status: 'done', result: 'finished', lastError: null });
    await worker.stop();
  });

  test("a handler that ignores its signal loses its slot after abortGraceMs: 'job:runaway', the next job starts", async () => {
    const queue = db.queue();
    const hung = gate();
    let runawaySettled = false;
    const nextStarted = gate<number>();
    const worker = await startWorker(db, {
      tasks: {
        'runaway.stuck': {
          timeoutMs: 200,
          handler: async () => {
            await hung.promise; // ignores its signal entirely
            runawaySettled = true;
            return 'too late';
          },
        },
        'runaway.next': () => nextStarted.open(performance.now()),
      },
      concurrency: 1,
      abortGraceMs: 300,
    });
    try {
      const stuckStarted = nextEvent(worker, 'job:start', (e) => e.job.task === 'runaway.stuck');
      const runaway = nextEvent(worker, 'job:runaway', (e) => e.job.task === 'runaway.stuck', 3_000);
      // when it is emitted (the test's own continuation after `await runaway` may run later
      // than the next job's start on a loaded machine)
      let runawayAt = Number.NaN;
      worker.on('job:runaway', () => {
        runawayAt = performance.now();
      });
      const dead = nextEvent(worker, 'job:dead', (e) => e.job.task === 'runaway.stuck', 3_000);
      const { id } = await queue.enqueue('runaway.stuck', {}, { maxAttempts: 1 });
      await stuckStarted;
      const t0 = performance.now();
      const { id: nextId } = await queue.enqueue('runaway.next', {});
      // The only slot is taken by the stuck handler until deadline (200 ms) + grace (300 ms).
      const event = await runaway;
      const runawayAfter = runawayAt - t0;
      expect(event).toMatchObject({ reason: 'deadline', graceMs: 300 });
      expect(event.job.id).toBe(id);
      const startedAt = await within(nextStarted.promise, 3_000, 'the next job started');
      expect(startedAt - t0).toBeGreaterThanOrEqual(runawayAfter); // not before the slot was freed
      expect(runawaySettled).toBe(false); // its slot was freed while the handler still hangs
      expect(worker.stats()).toMatchObject({ runaway: 1 });

      await dead;
      const job = await queue.get(id);
      expect(job?.status).toBe('dead');
      expect(job?.lastError).toMatch(/^JobDeadlineExceeded: .*ignored its aborted signal for 300 ms/);
      await expect.poll(async () => (await queue.get(nextId))?.status).toBe('done');

      // When the runaway finally returns, nothing about its job changes.
      hung.open();
      await expect.poll(() => runawaySettled).toBe(true);
      expect(await queue.get(id)).toEqual(job);
    } finally {
      hung.open();
    }
    await worker.stop();
  });
});
