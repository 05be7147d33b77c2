/**
 * SPEC §1.8 through the Worker — a handler that throws (an Error or anything else) fails the
 * attempt: 'job:retry' with the Worker's own backoff, then 'job:dead' once maxAttempts are
 * spent, with the message and stack kept in last_error. A handler's return value becomes the
 * job's `result`; one that cannot be stored as JSON (a BigInt, NaN, ±Infinity) fails the attempt
 * with an error naming the task (and, for a number, its path).
 *
 * A retry must also start at its due time without waiting for the fallback poll (SPEC §1.9);
 * the retry tests run with the default 30 s poll, the last one with 60 s.
 *
 * Deliberate breaks seen failing (in a private copy of src/):
 *  - writeOutcome() using `deps.engine.retryDelay(job.attempt)` even when the Worker has a
 *    backoff: the retry tests timed out (the queue's default 5 s backoff) and retryInMs was
 *    5000, not 50/100.
 *  - errorText() keeping only `${name}: ${message}` (no stack): the stack assertion failed.
 *  - writeOutcome() skipping resultProblem() (completing with the BigInt): complete() threw a
 *    ValidationError inside the worker; the job stayed running and no 'job:dead' came.
 *  - toJsonText() without its NaN/±Infinity check (before issue 21): the NaN test's jobs ended
 *    done with `{"total":null}` and `{"rows":[1,null]}`; no 'job:retry' came.
 *  - Worker.run()'s emit without `claimLoop.wakeIn(retryInMs)` for 'job:retry' (the state
 *    before commit 93b5c07): every retry waited for the fallback poll, so all retry tests timed out.
 *  - ClaimLoop.armDueTimer() clearing a sooner timer when its (older) read found nothing: the
 *    last test failed — the retry waited for the poll (it was written as a failing test first).
 */
import { describe, expect, test } from 'vitest';
import { type Engine, engineOf } from '../../src/engine/engine.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { gate, nextEvent, recordEvents, startWorker, within } from './helpers.js';

const db = useTestDatabase();
const backoff = { baseMs: 50, capMs: 100 };

describe('§1.8 failures through the worker', () => {
  test('a thrown Error is retried with the worker backoff, then dead; last_error keeps message and stack', async () => {
    const queue = db.queue();
    const thrown: Error[] = [];
    const worker = await startWorker(db, {
      tasks: {
        'fail.error': (_payload: unknown, { job }: JobContext) => {
          const error = new Error(`boom on attempt ${job.attempt}`);
          thrown.push(error);
          throw error;
        },
      },
      backoff,
      pollIntervalMs: 100, // about the failure path; the retry's wake-up is the last tests' topic
    });
    const events = recordEvents(worker);
    const dead = nextEvent(worker, 'job:dead', (e) => e.job.task === 'fail.error', 5_000);
    const { id } = await queue.enqueue('fail.error', { n: 1 }, { maxAttempts: 3 });
    const deadEvent = await dead;

    expect(deadEvent.error).toBe(thrown[2]);
    const mine = events.filter((e) => e.jobId === id);
    expect(mine.map((e) => e.name)).toEqual([
      'job:start',
      'job:retry',
      'job:start',
      'job:retry',
      'job:start',
      'job:dead',
    ]);
    const retries = mine.filter((e) => e.name === 'job:retry').map((e) => e.payload);
    expect(retries).toMatchObject([
      { error: thrown[0], retryInMs: 50 },
      { error: thrown[1], retryInMs: 100 },
    ]);

    const job = await queue.get(id);
    expect(job).toMatchObject({
      status: 'dead',
      attempts: 3,
      maxAttempts: 3,
      result: null,
      leaseUntil: null,
    });
    expect(job?.lastError).toMatch(/^Error: boom on attempt 3\n\s+at /);
    expect(job?.lastError).toContain('failures.test.ts'); // the stack, pointing at the handler
    expect(worker.stats()).toMatchObject({ retried: 2, dead: 1 });
    await worker.stop();
  });

  test('a non-Error throw (a string, an object) is recorded and retried like any failure', async () => {
    const queue = db.queue();
    const worker = await startWorker(db, {
      tasks: {
        'fail.string': () => {
          throw 'a plain string';
        },
        'fail.object': () => {
          throw { code: 42, reason: 'object' };
        },
      },
      backoff,
      pollIntervalMs: 100, // (as above)
    });
    const events = recordEvents(worker);
    const deadString = nextEvent(worker, 'job:dead', (e) => e.job.task === 'fail.string');
    const deadObject = nextEvent(worker, 'job:dead', (e) => e.job.task === 'fail.object');
    const { id: stringId } = await queue.enqueue('fail.string', {}, { maxAttempts: 2 });
    const { id: objectId } = await queue.enqueue('fail.object', {}, { maxAttempts: 2 });

    expect((await deadString).error).toBe('a plain string');
    expect((await deadObject).error).toEqual({ code: 42, reason: 'object' });
    for (const id of [stringId, objectId]) {
      expect(events.filter((e) => e.jobId === id).map((e) => e.name)).toEqual([
        'job:start',
        'job:retry',
        'job:start',
        'job:dead',
      ]);
    }
    expect(await queue.get(stringId)).toMatchObject({
      status: 'dead',
      attempts: 2,
      lastError: 'a plain string',
    });
    const objectJob = await queue.get(objectId);
    expect(objectJob?.status).toBe('dead');
    expect(objectJob?.lastError).toMatch(/^Non-Error thrown: /);
    expect(objectJob?.lastError).toContain('"code":42');
    await worker.stop();
  });

  test("the handler's return value is stored as the job's result", async () => {
    const queue = db.queue();
    const value = { sent: true, to: ['a@example.com'], n: 3, nested: { ok: null } };
    const worker = await startWorker(db, {
      tasks: {
        'result.object': () => value,
        'result.none': async () => undefined,
      },
    });
    const doneObject = nextEvent(worker, 'job:done', (e) => e.job.task === 'result.object');
    const doneNone = nextEvent(worker, 'job:done', (e) => e.job.task === 'result.none');
    const { id } = await queue.enqueue('result.object', {});
    const { id: noneId } = await queue.enqueue('result.none', {});
    expect((await doneObject).result).toBe(value);
    await doneNone;
    expect(await queue.get(id)).toMatchObject({
      status: 'done',
      result: value,
      attempts: 1,
      lastError: null,
    });
    expect(await queue.get(noneId)).toMatchObject({ status: 'done', result: null });
    await worker.stop();
  });

  test('a result that is not JSON-serialisable (BigInt) fails the attempt with an error naming the task', async () => {
    const queue = db.queue();
    const worker = await startWorker(db, {
      tasks: { 'result.bigint': () => ({ total: 10n }) },
    });
    const dead = nextEvent(worker, 'job:dead', (e) => e.job.task === 'result.bigint');
    const { id } = await queue.enqueue('result.bigint', {}, { maxAttempts: 1 });
    const { error } = await dead;
    expect((error as Error).message).toMatch(/task "result\.bigint".*JSON/);
    const job = await queue.get(id);
    expect(job).toMatchObject({ status: 'dead', result: null, attempts: 1 });
    expect(job?.lastError).toMatch(/task "result\.bigint".*JSON/);
    expect(job?.lastError).toMatch(/BigInt/i);
    await worker.stop();
  });

  test('a result holding NaN or Infinity fails the attempt like a BigInt: retried, then dead, never stored as null', async () => {
    const queue = db.queue();
    const worker = await startWorker(db, {
      backoff,
      tasks: {
        'result.nan': () => ({ total: Number.NaN }),
        // inside ctx.transaction the completion is refused before it is written: rolled back
        'result.nan.tx': (_payload: unknown, ctx: JobContext) =>
          ctx.transaction(async () => ({ rows: [1, Number.POSITIVE_INFINITY] })),
      },
    });
    const retried = nextEvent(worker, 'job:retry', (e) => e.job.task === 'result.nan');
    const dead = nextEvent(worker, 'job:dead', (e) => e.job.task === 'result.nan');
    const deadTx = nextEvent(worker, 'job:dead', (e) => e.job.task === 'result.nan.tx');
    const { id } = await queue.enqueue('result.nan', {}, { maxAttempts: 2 });
    const tx = await queue.enqueue('result.nan.tx', {}, { maxAttempts: 1 });
    expect(((await retried).error as Error).message).toMatch(
      /^The handler of task "result\.nan" returned a value that cannot be stored as JSON \(result\.total: must be a finite number, got NaN/,
    );
    await dead;
    expect(await queue.get(id)).toMatchObject({ status: 'dead', result: null, attempts: 2 });
    expect((await queue.get(id))?.lastError).toMatch(
      /task "result\.nan".*result\.total: must be a finite number, got NaN/,
    );
    await deadTx;
    expect(await queue.get(tx.id)).toMatchObject({ status: 'dead', result: null, attempts: 1 });
    expect((await queue.get(tx.id))?.lastError).toMatch(
      /^ValidationError: result\.rows\[1\]: must be a finite number, got Infinity/,
    );
    await worker.stop();
  });

  /**
   * A worker on a Queue whose engine's nextDueInMs() (read by every claim pass that drains the
   * queue, to set the due timer) can be held: its result is delivered only once `release` resolves.
   */
  async function retryWorker(task: string, release: (retried: Promise<void>) => Promise<void>) {
    const queue = db.queue();
    const engine = engineOf(queue);
    const nextDueInMs = engine.nextDueInMs.bind(engine);
    const retried = gate();
    let hold = false;
    engine.nextDueInMs = async (...args: Parameters<Engine['nextDueInMs']>) => {
      const ms = await nextDueInMs(...args);
      if (hold) await release(retried.promise);
      return ms;
    };
    const dueRead = gate();
    const worker = await startWorker(db, {
      queue,
      tasks: {
        [task]: async (_payload: unknown, { job }: JobContext) => {
          if (job.attempt === 1) {
            await dueRead.promise; // (see the first test below)
            throw new Error('first attempt fails');
          }
          return 'second attempt';
        },
      },
      backoff,
      pollIntervalMs: 60_000, // only the worker's own timer can start the retry in time
    });
    hold = true; // from the claim pass that takes the job on
    worker.on('job:retry', () => retried.open());
    return { queue, worker, dueRead };
  }

  // A failed attempt is rescheduled at now() + backoff and the fail statement sends no NOTIFY,
  // so the worker must set its own timer for it (it waited for the poll before commit 93b5c07).
  test('a retry starts at its run_after without waiting for the fallback poll', async () => {
    // The handler fails only after the claim pass has read the next due time.
    const { queue, worker, dueRead } = await retryWorker('fail.wake', async () => dueRead.open());
    const retried = nextEvent(worker, 'job:retry', (e) => e.job.task === 'fail.wake');
    const done = nextEvent(worker, 'job:done', (e) => e.job.task === 'fail.wake', 10_000);
    const { id } = await queue.enqueue('fail.wake', {}, { maxAttempts: 2 });
    expect((await retried).retryInMs).toBe(50);
    await within(done, 2_000, 'the retry (due 50 ms after the failure) started and finished');
    expect(await queue.get(id)).toMatchObject({ status: 'done', attempts: 2, result: 'second attempt' });
    await worker.stop();
  });

  // BUG (src, see the report; seen as an intermittent 30 s stall in the retry tests): the claim
  // pass that took the job on reads nextDueInMs() while the job still runs (null: nothing
  // pending). When the handler fails fast, the retry's wakeIn() timer is set *before* that read
  // returns, and ClaimLoop.armDueTimer() then clears it (`if (this.dueTimer) clearTimeout(…)`)
  // and, the read being null, sets none: the retry waits for the fallback poll. Holding the
  // read's result until the retry was recorded makes the race deterministic. Remove `.fails`
  // once armDueTimer() keeps an earlier timer.
  test('a retry is not forgotten when a claim pass read the next due time before it was written', async () => {
    const { queue, worker, dueRead } = await retryWorker('fail.race', (retried) => retried);
    dueRead.open(); // the handler fails at once
    const done = nextEvent(worker, 'job:done', (e) => e.job.task === 'fail.race', 10_000);
    const { id } = await queue.enqueue('fail.race', {}, { maxAttempts: 2 });
    await within(done, 2_000, 'the retry (due 50 ms after the failure) started and finished');
    expect(await queue.get(id)).toMatchObject({ status: 'done', attempts: 2 });
    await worker.stop();
  });
});
