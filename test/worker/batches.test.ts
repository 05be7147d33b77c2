/**
 * SPEC §11 batch handlers, in one worker process against real PostgreSQL: the handler gets up to
 * `maxSize` jobs of its task at once, in claim order; returning nothing completes them all; an
 * array of the same length gives each job its own outcome (a value, an Error with its own
 * retry/backoff/dead-letter, a PermanentError); a throw or an array of another length fails them
 * all; a job cancelled mid-batch ends cancelled whatever is returned; stop(), a lost lease and a
 * deadline abort the batch's signal, and every job's final row is checked; `maxWaitMs` fills a
 * batch from a trickle; a batch takes items.length of the worker's concurrency; a defined
 * task's schema types (and checks) each item.
 *
 * Deliberate breaks seen failing (each made in src/, this file run, the break undone):
 *  1. settleMany's `WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'` made `WHEN false`
 *     (src/store/outcome.ts): "a job cancelled while its batch runs…" and "a cancel committed
 *     while the statement waits…" failed (the job ended done).
 *  2. planOutcomes never taking an entry as an Error: "a mixed result array…" failed.
 *  3. The `value.length === itemCount` check removed (any array accepted): "an array of another
 *     length…" failed (the jobs ended done).
 *  4. BatchRun.memberAborted marking a lost job without aborting the batch: "a lost lease aborts
 *     the batch…" failed (the handler's signal never aborted).
 *  5. The batch claim loop without its maxWaitMs wait (Worker.batchLoop): "maxWaitMs fills a
 *     batch…" failed (the first batch held the first job alone).
 *  6. Dispatcher.batchRoom returning maxSize when fewer slots are free: "a batch takes
 *     items.length of the concurrency…" failed (a batch of 10 with concurrency 4).
 *  7. Worker.batchLoop giving its limited claims no room (`idle: 0`, so only the plain claim,
 *     which leaves limited queues out): "a limited queue counts each job…" failed (its jobs were
 *     never claimed). The limit itself is the limited claim's (test/queue/limits.test.ts).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, test } from 'vitest';
import { z } from 'zod';
import { engineOf } from '../../src/engine/engine.js';
import {
  JobDeadlineExceeded,
  LeaseLostError,
  PermanentError,
  WorkerStoppingError,
} from '../../src/errors.js';
import { defineTask } from '../../src/task/task.js';
import type { BatchItem } from '../../src/task-types.js';
import { useTestDatabase } from '../support/database.js';
import { aborted, gate, nextEvent, recordEvents, startWorker, within } from './helpers.js';

const db = useTestDatabase();

interface Row {
  id: string;
  status: string;
  attempts: number;
  result: unknown;
  last_error: string | null;
  retry_ms: number | null;
  worker_id: string | null;
}

/** The final rows of `ids`, in that order, with each retry's delay after its failure (database time). */
async function rows(ids: readonly string[]): Promise<Row[]> {
  const found = await db.sql<Row>(
    `SELECT id::text AS id, status, attempts, result, last_error, worker_id,
            CASE WHEN status = 'pending' THEN round(extract(epoch FROM run_after - updated_at) * 1000)::int END AS retry_ms
     FROM ${db.jobs} WHERE id = ANY($1::bigint[])`,
    [ids],
  );
  return ids.map((id) => found.find((row) => row.id === id) as Row);
}

/**
 * Resolves once the worker (fresh for each test) has written `count` outcomes (done, retry, dead,
 * cancelled, released) since it started — also those written before this was called.
 */
function settled(worker: Parameters<typeof recordEvents>[0], count: number): Promise<void> {
  const total = () => {
    const s = worker.stats();
    return s.done + s.retried + s.dead + s.cancelled + s.released;
  };
  return new Promise((resolve) => {
    if (total() >= count) return resolve();
    const heard = () => {
      if (total() >= count) resolve();
    };
    for (const event of ['job:done', 'job:retry', 'job:dead', 'job:cancelled', 'job:released'] as const)
      worker.on(event, heard);
  });
}

async function enqueueAll(task: string, count: number, options: { queue?: string } = {}): Promise<string[]> {
  const queue = db.queue();
  const results = await queue.enqueueMany(
    Array.from({ length: count }, (_, i) => ({ task, payload: { i }, priority: i, ...options })),
  );
  return results.map((r) => r.id);
}

describe('batch options', () => {
  test('bad batch options are a ValidationError naming the field, before anything runs', () => {
    const schema = z.object({});
    const handler = async () => undefined;
    expect(() => defineTask({ name: 'b.bad', schema, batch: { maxSize: 0 }, handler })).toThrow(
      /task "b.bad": batch.maxSize.*from 1 to 1000/,
    );
    expect(() =>
      defineTask({ name: 'b.bad', schema, batch: { maxSize: 10, maxWaitMs: -1 }, handler }),
    ).toThrow(/batch.maxWaitMs/);
    expect(() =>
      db.worker({ tasks: { 'b.bad': { batch: { maxSize: 10, size: 3 } as never, handler } } }),
    ).toThrow(/tasks\["b.bad"\].batch.size.*not a known option/);
    expect(() => db.worker({ tasks: { 'b.bad': { batch: { maxSize: 1_001 }, handler } } })).toThrow(
      /batch.maxSize/,
    );
  });
});

describe('outcomes of a batch', () => {
  test('a mixed result array gives each job its own fate, backoff and events, in one call', async () => {
    const ids = await enqueueAll('batch.mixed', 5);
    // the fourth job is on its second attempt (its own backoff doubles), the fifth on its last
    await db.sql(`UPDATE ${db.jobs} SET attempts = 1, claims = 1 WHERE id = $1`, [ids[3]]);
    await db.sql(`UPDATE ${db.jobs} SET max_attempts = 1 WHERE id = $1`, [ids[4]]);
    const calls: number[][] = [];
    const worker = db.worker({
      concurrency: 10,
      backoff: { baseMs: 10_000, capMs: 600_000 },
      tasks: {
        'batch.mixed': {
          batch: { maxSize: 10 },
          handler: async (items: BatchItem<{ i: number }>[]) => {
            calls.push(items.map((item) => item.payload.i));
            return [
              { ok: 0 },
              new Error('second failed'),
              new PermanentError('third is hopeless'),
              new Error('fourth again'),
              new Error('fifth last'),
            ];
          },
        },
      },
    });
    const log = recordEvents(worker);
    const done = settled(worker, 5);
    await worker.start();
    await within(done, 10_000, 'five outcomes');
    await worker.stop();

    expect(calls, 'one call, the jobs in claim order').toEqual([[0, 1, 2, 3, 4]]);
    const [a, b, c, d, e] = await rows(ids);
    expect(a).toMatchObject({ status: 'done', attempts: 1, result: { ok: 0 }, worker_id: null });
    expect(b).toMatchObject({
      status: 'pending',
      attempts: 1,
      result: null,
      last_error: expect.stringContaining('second failed'),
    });
    expect(b?.retry_ms).toBeGreaterThanOrEqual(9_990);
    expect(b?.retry_ms).toBeLessThanOrEqual(10_010);
    expect(c).toMatchObject({
      status: 'dead',
      attempts: 1,
      last_error: expect.stringContaining('third is hopeless'),
    });
    expect(d).toMatchObject({
      status: 'pending',
      attempts: 2,
      last_error: expect.stringContaining('fourth again'),
    });
    expect(d?.retry_ms, 'its own attempt count: base·2^(2-1)').toBeGreaterThanOrEqual(19_990);
    expect(d?.retry_ms).toBeLessThanOrEqual(20_010);
    expect(e).toMatchObject({
      status: 'dead',
      attempts: 1,
      last_error: expect.stringContaining('fifth last'),
    });
    const events = (name: string) => log.filter((x) => x.name === name).map((x) => x.jobId);
    expect(events('job:start')).toEqual(ids);
    expect(events('job:done')).toEqual([ids[0]]);
    expect(events('job:retry')).toEqual([ids[1], ids[3]]);
    expect(events('job:dead')).toEqual([ids[2], ids[4]]);
  });

  test('returning nothing completes every job with result null', async () => {
    const ids = await enqueueAll('batch.void', 3);
    const worker = await startWorker(db, {
      tasks: { 'batch.void': { batch: { maxSize: 10 }, handler: async () => undefined } },
    });
    const done = settled(worker, 3);
    await within(done, 10_000, 'three outcomes');
    for (const row of await rows(ids))
      expect(row).toMatchObject({ status: 'done', result: null, attempts: 1 });
  });

  test('an array of another length, or a throw, fails every job of the batch with that error', async () => {
    const short = await enqueueAll('batch.short', 3);
    const thrown = await enqueueAll('batch.throw', 2);
    const worker = await startWorker(db, {
      backoff: { baseMs: 60_000, capMs: 60_000 },
      tasks: {
        'batch.short': { batch: { maxSize: 10 }, handler: async () => ['only', 'two'] },
        'batch.throw': {
          batch: { maxSize: 10 },
          handler: async () => {
            throw new Error('the mail server is down');
          },
        },
      },
    });
    await within(settled(worker, 5), 10_000, 'five outcomes');
    for (const row of await rows(short)) {
      expect(row).toMatchObject({ status: 'pending', attempts: 1, result: null });
      expect(row.last_error).toContain('returned an array of 2 for a batch of 3 job(s)');
    }
    for (const row of await rows(thrown))
      expect(row).toMatchObject({
        status: 'pending',
        attempts: 1,
        last_error: expect.stringContaining('the mail server is down'),
      });
  });

  test('a defined task: each item typed and checked by its schema; a bad payload goes dead, never to the handler', async () => {
    const seen: number[] = [];
    const task = defineTask({
      name: 'batch.typed',
      schema: z.object({ n: z.coerce.number().int() }),
      batch: { maxSize: 10 },
      handler: async (items) => {
        for (const item of items) seen.push(item.payload.n); // the schema's output: a number
        return items.map((item) => item.payload.n * 2);
      },
    });
    const queue = db.queue();
    const [good, bad, other] = await queue.enqueueMany([
      { task: 'batch.typed', payload: { n: '21' }, priority: 1 },
      { task: 'batch.typed', payload: { n: 'not a number' }, priority: 2 },
      { task: 'batch.typed', payload: { n: 4 }, priority: 3 },
    ]);
    const worker = await startWorker(db, { tasks: [task] });
    await within(settled(worker, 3), 10_000, 'three outcomes');
    expect(seen).toEqual([21, 4]);
    const [g, b, o] = await rows([good!.id, bad!.id, other!.id]);
    expect(g).toMatchObject({ status: 'done', result: 42 });
    expect(b).toMatchObject({
      status: 'dead',
      last_error: expect.stringContaining('does not match the schema'),
    });
    expect(o).toMatchObject({ status: 'done', result: 8 });
  });
});

describe('aborts and cancellations', () => {
  test('a job cancelled while its batch runs ends cancelled whatever the handler returns; the signal stays', async () => {
    const ids = await enqueueAll('batch.cancel', 3);
    const running = gate<AbortSignal>();
    const release = gate();
    const worker = await startWorker(db, {
      tasks: {
        'batch.cancel': {
          batch: { maxSize: 10 },
          handler: async (_items: BatchItem[], { signal }: { signal: AbortSignal }) => {
            running.open(signal);
            await release.promise;
            return ['a', 'b', 'c'];
          },
        },
      },
    });
    const cancelled = nextEvent(worker, 'job:cancelled');
    const all = settled(worker, 3);
    const signal = await within(running.promise, 10_000, 'the batch started');
    const queue = db.queue();
    expect(await queue.cancel(ids[1]!)).toBe(true);
    await worker.tick.renewLeases(); // the cancel reaches the worker even without its NOTIFY
    expect(signal.aborted, 'a cancel does not abort the batch').toBe(false);
    release.open();
    await within(all, 10_000, 'three outcomes');
    expect(await cancelled).toMatchObject({ job: { id: ids[1] }, reason: 'cancel' });
    const [a, b, c] = await rows(ids);
    expect(a).toMatchObject({ status: 'done', result: 'a' });
    expect(b).toMatchObject({ status: 'cancelled', result: null, worker_id: null });
    expect(c).toMatchObject({ status: 'done', result: 'c' });
  });

  test('stop() past its timeout aborts the batch; a handler that throws gives every job back, attempt not spent', async () => {
    const ids = await enqueueAll('batch.stop', 3);
    const running = gate<AbortSignal>();
    const reason = gate<unknown>();
    const worker = await startWorker(db, {
      abortGraceMs: 2_000,
      tasks: {
        'batch.stop': {
          batch: { maxSize: 10 },
          handler: async (_items: BatchItem[], { signal }: { signal: AbortSignal }) => {
            running.open(signal);
            const why = await aborted(signal);
            reason.open(why);
            throw why;
          },
        },
      },
    });
    await within(running.promise, 10_000, 'the batch started');
    const released: string[] = [];
    worker.on('job:released', ({ job }) => released.push(job.id));
    await worker.stop({ timeoutMs: 100 });
    expect(await reason.promise).toBeInstanceOf(WorkerStoppingError);
    expect(released.sort()).toEqual([...ids].sort());
    for (const row of await rows(ids))
      expect(row).toMatchObject({ status: 'pending', attempts: 0, worker_id: null });
  });

  test('stop(): a batch handler that ignores its signal keeps its jobs (nothing written, leases left to expire)', async () => {
    const ids = await enqueueAll('batch.runaway', 2);
    const running = gate();
    const never = gate();
    const worker = await startWorker(db, {
      abortGraceMs: 100,
      tasks: {
        'batch.runaway': {
          batch: { maxSize: 10 },
          handler: async () => {
            running.open();
            await never.promise;
          },
        },
      },
    });
    await within(running.promise, 10_000, 'the batch started');
    const runaways: string[] = [];
    worker.on('job:runaway', ({ job, reason }) => runaways.push(`${job.id}:${reason}`));
    await worker.stop({ timeoutMs: 50 });
    expect(runaways.sort()).toEqual(ids.map((id) => `${id}:stop`).sort());
    for (const row of await rows(ids)) expect(row).toMatchObject({ status: 'running', attempts: 1 });
    never.open();
  });

  test('a lost lease aborts the batch; the lost job is never written, the others go back', async () => {
    // a queue of their own, paused once the batch runs: the jobs it gives back are not claimed again
    const ids = await enqueueAll('batch.lost', 3, { queue: 'batch-lost' });
    const running = gate<AbortSignal>();
    const reason = gate<unknown>();
    const worker = await startWorker(db, {
      leaseMs: 60_000,
      tasks: {
        'batch.lost': {
          batch: { maxSize: 10 },
          handler: async (_items: BatchItem[], { signal }: { signal: AbortSignal }) => {
            running.open(signal);
            const why = await aborted(signal);
            reason.open(why);
            throw why;
          },
        },
      },
    });
    await within(running.promise, 10_000, 'the batch started');
    const queue = db.queue();
    await queue.pauseQueue('batch-lost');
    const lost = nextEvent(worker, 'lease:lost');
    const all = settled(worker, 2);
    // the second job's lease expires and another worker's reaper takes it back
    await db.expireLease(ids[1]!);
    expect(await queue.reap()).toEqual([ids[1]]);
    await worker.tick.renewLeases();
    expect(await within(reason.promise, 5_000, 'the batch aborted')).toBeInstanceOf(LeaseLostError);
    expect(await lost).toMatchObject({ job: { id: ids[1] } });
    await within(all, 10_000, 'the two others released');
    const [a, b, c] = await rows(ids);
    expect(a).toMatchObject({ status: 'pending', attempts: 0, worker_id: null });
    expect(b, 'reaped: its retry is the reaper’s, nothing of this worker').toMatchObject({
      status: 'pending',
      attempts: 1,
    });
    expect(b?.last_error).not.toContain('LeaseLost');
    expect(c).toMatchObject({ status: 'pending', attempts: 0, worker_id: null });
  });

  test('timeoutMs bounds the call: past it every job fails with JobDeadlineExceeded', async () => {
    const ids = await enqueueAll('batch.deadline', 2);
    const reason = gate<unknown>();
    const worker = await startWorker(db, {
      backoff: { baseMs: 60_000, capMs: 60_000 },
      tasks: {
        'batch.deadline': {
          batch: { maxSize: 10 },
          timeoutMs: 200,
          handler: async (_items: BatchItem[], { signal }: { signal: AbortSignal }) => {
            const why = await aborted(signal);
            reason.open(why);
            throw why;
          },
        },
      },
    });
    const all = settled(worker, 2);
    expect(await within(reason.promise, 10_000, 'the deadline')).toBeInstanceOf(JobDeadlineExceeded);
    await within(all, 10_000, 'two outcomes');
    for (const row of await rows(ids)) {
      expect(row).toMatchObject({ status: 'pending', attempts: 1 });
      expect(row.last_error).toMatch(/^JobDeadlineExceeded/);
    }
  });
});

describe('gathering batches', () => {
  test('maxWaitMs fills a batch from a trickle of single enqueues', async () => {
    const sizes: number[] = [];
    const worker = await startWorker(db, {
      concurrency: 50,
      tasks: {
        'batch.trickle': {
          // long enough for five enqueues on a loaded machine (each one its own transaction)
          batch: { maxSize: 50, maxWaitMs: 5_000 },
          handler: async (items: BatchItem[]) => {
            sizes.push(items.length);
          },
        },
      },
    });
    const queue = db.queue();
    // start() does not wait for the loops' first claims: one primer job, claimed by a claim that
    // did not wait, makes the loop's last claim a short one; its next claim waits maxWaitMs (a
    // trickle that began before the first claim came back was claimed alone: CI saw batches 1, 4)
    const primed = settled(worker, 1);
    await queue.enqueue('batch.trickle', { primer: true });
    await within(primed, 20_000, 'the primer done');
    const all = settled(worker, 6); // counts from the start: the primer and five
    for (let i = 0; i < 5; i++) {
      await queue.enqueue('batch.trickle', { i }); // its own hint each
      await new Promise((resolve) => setTimeout(resolve, 100)); // a trickle, not a burst
    }
    await within(all, 30_000, 'the five done');
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(6);
    expect(sizes[0]).toBe(1); // the primer
    expect(sizes[1], `batch sizes ${sizes.join(', ')}`).toBeGreaterThanOrEqual(3);
  });

  test('a batch takes items.length of the concurrency: never more jobs running than slots', async () => {
    await enqueueAll('batch.slots', 10);
    const sizes: number[] = [];
    let runningNow = 0;
    let most = 0;
    const worker = await startWorker(db, {
      concurrency: 4,
      tasks: {
        'batch.slots': {
          batch: { maxSize: 10 },
          handler: async (items: BatchItem[]) => {
            sizes.push(items.length);
            runningNow += items.length;
            most = Math.max(most, runningNow);
            await sleep(20);
            runningNow -= items.length;
          },
        },
      },
    });
    await within(settled(worker, 10), 10_000, 'ten jobs done');
    expect(Math.max(...sizes)).toBeLessThanOrEqual(4);
    expect(most).toBeLessThanOrEqual(4);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(10);
  });
});

describe('queue limits (§8)', () => {
  test('a limited queue counts each job of a batch: never more running than its concurrency', async () => {
    const queue = db.queue();
    await queue.configureQueue('batch-limited', { concurrency: 3 });
    try {
      await enqueueAll('batch.limited', 10, { queue: 'batch-limited' });
      const sizes: number[] = [];
      let runningNow = 0;
      let most = 0;
      const worker = await startWorker(db, {
        queue,
        concurrency: 20,
        tasks: {
          'batch.limited': {
            batch: { maxSize: 10 },
            handler: async (items: BatchItem[]) => {
              sizes.push(items.length);
              runningNow += items.length;
              most = Math.max(most, runningNow);
              await sleep(30);
              runningNow -= items.length;
            },
          },
        },
      });
      await within(settled(worker, 10), 20_000, 'ten jobs done');
      expect(sizes.reduce((a, b) => a + b, 0)).toBe(10);
      expect(Math.max(...sizes), `batch sizes ${sizes.join(', ')}`).toBeLessThanOrEqual(3);
      expect(most).toBeLessThanOrEqual(3);
    } finally {
      await queue.configureQueue('batch-limited', { concurrency: null });
    }
  });
});

describe('the batch outcome statement (settleMany)', () => {
  test('a cancel committed while the statement waits for the row is seen: that job ends cancelled, the others as returned', async () => {
    const queue = db.queue();
    const ids = await enqueueAll('batch.held', 3);
    const jobs = await queue.claim('held-worker', { limit: 3, tasks: ['batch.held'] });
    expect(jobs.map((job) => job.id)).toEqual(ids);
    const engine = engineOf(queue);
    // a second session holds the middle row while it requests the cancel
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`UPDATE ${db.jobs} SET cancel_requested_at = now() WHERE id = $1`, [ids[1]]);
      const writing = engine.completer.settleMany(
        jobs.map((job) => ({ lease: job, kind: 'done' as const, resultJson: JSON.stringify(job.id) })),
      );
      await sleep(100); // the statement is now waiting for the held row
      await holder.query('COMMIT');
      expect(await writing).toEqual(['done', 'cancelled', 'done']);
    } finally {
      holder.release();
    }
    const [a, b, c] = await rows(ids);
    expect(a).toMatchObject({ status: 'done', result: ids[0] });
    expect(b).toMatchObject({ status: 'cancelled', result: null, worker_id: null });
    expect(b?.last_error).toContain('cancellation was requested while its batch ran');
    expect(c).toMatchObject({ status: 'done', result: ids[2] });
  });

  test('a lease that was reaped is not written (unwritten); the others are', async () => {
    const queue = db.queue();
    const ids = await enqueueAll('batch.reaped', 2);
    const jobs = await queue.claim('reaped-worker', { limit: 2, tasks: ['batch.reaped'] });
    await db.expireLease(ids[0]!);
    expect(await queue.reap()).toEqual([ids[0]]);
    const engine = engineOf(queue);
    const answers = await engine.completer.settleMany([
      { lease: jobs[0]!, kind: 'fail', errorText: 'late', retryInMs: 1_000, permanent: false },
      { lease: jobs[1]!, kind: 'fail', errorText: 'hopeless', retryInMs: 1_000, permanent: true },
    ]);
    expect(answers).toEqual(['unwritten', 'dead']);
    const [a, b] = await rows(ids);
    expect(a).toMatchObject({ status: 'pending', attempts: 1 });
    expect(a?.last_error).not.toBe('late');
    expect(b).toMatchObject({ status: 'dead', last_error: 'hopeless' });
  });

  test("retention { completed: 'delete' }: a batch's completions delete their rows and are counted", async () => {
    const queue = db.queue({ retention: { completed: 'delete' } });
    const ids = await enqueueAll('batch.delete', 4);
    const before = (await queue.counts()).done;
    const worker = await startWorker(db, {
      queue,
      tasks: {
        'batch.delete': { batch: { maxSize: 10 }, handler: async () => ['a', new Error('no'), 'c', 'd'] },
      },
    });
    await within(settled(worker, 4), 10_000, 'four outcomes');
    const left = await db.sql<{ id: string; status: string }>(
      `SELECT id::text AS id, status FROM ${db.jobs} WHERE id = ANY($1::bigint[])`,
      [ids],
    );
    expect(left).toEqual([{ id: ids[1], status: 'pending' }]);
    expect((await queue.counts()).done - before).toBe(3);
  });
});
