/**
 * SPEC §9 `ctx.progress(value)`: JSON progress on the job, the first report of an attempt written
 * at once, later ones coalesced (a handler reporting in a tight loop costs a few writes a
 * second, not one per call), the last one written before the outcome and kept after the job
 * finishes; shown by `get`. A report inside the job's own ctx.transaction neither blocks nor
 * deadlocks it. A value JSON cannot hold (BigInt, NaN, ±Infinity) throws and writes nothing.
 *
 * A write renews the lease; a runaway's reports after stop() are dropped; the value reported
 * inside ctx.transaction commits with the completion.
 *
 * Deliberate breaks seen failing: no flush before the outcome (the finished job kept an older
 * value); no coalescing (a write per report: they overlapped, and the job ended with an older
 * value than the last); writeProgress not renewing lease_until (the lease test); ctx.transaction
 * not taking the unwritten value (the transaction test kept 1). From a review: a value whose
 * coalesced write was still in flight when ctx.transaction began was lost; a failed write
 * dropped its value; a write in flight when stop() was called renewed the lease after stop()
 * resolved — each test below failed before its fix. toJsonText() without its NaN/±Infinity
 * check (before issue 21): the NaN test caught nothing and the job kept `{"steps":[1,null]}`.
 */
import { describe, expect, test } from 'vitest';
import { engineOf } from '../../src/engine/engine.js';
import { ValidationError } from '../../src/errors.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('ctx.progress', () => {
  test('first report at once, a tight loop coalesced, the last one kept after the job is done', async () => {
    const queue = db.queue();
    const { store } = engineOf(queue);
    const original = store.lease.writeProgress.bind(store.lease);
    let writes = 0;
    store.lease.writeProgress = (...args) => {
      writes++;
      return original(...args);
    };
    const { id } = await queue.enqueue('progress.loop', null);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      tasks: {
        'progress.loop': async (_payload: unknown, ctx: { progress(value: unknown): void }) => {
          ctx.progress({ stage: 'started' });
          await gate;
          for (let i = 1; i <= 500; i++) {
            ctx.progress({ stage: `loop ${i}` });
            if (i % 100 === 0) await sleep(20);
          }
          return 'ok';
        },
      },
    });
    await worker.start();
    // The first report is written at once, while the handler waits.
    await expect
      .poll(async () => (await queue.get(id))?.progress, { timeout: 5_000 })
      .toEqual({ stage: 'started' });
    expect((await queue.get(id))?.status).toBe('running');
    const started = performance.now();
    release();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 10_000 }).toBe('done');
    const loopMs = performance.now() - started;
    await worker.stop();
    expect((await queue.get(id))?.progress).toEqual({ stage: 'loop 500' }); // the last, kept
    // 501 reports: the first one, one per 250 ms of the loop, and the last before the outcome.
    expect(writes).toBeLessThanOrEqual(3 + Math.ceil(loopMs / 250));
  });

  test('a report inside the job’s own ctx.transaction neither waits nor blocks it, and commits with it', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('progress.tx', null, { timeoutMs: 10_000 });
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      tasks: {
        'progress.tx': async (
          _payload: unknown,
          ctx: { progress(value: unknown): void; transaction<T>(fn: () => Promise<T>): Promise<T> },
        ) => {
          ctx.progress(1); // written at once
          await sleep(300);
          return ctx.transaction(async () => {
            ctx.progress(2); // the row is locked by this transaction: not written meanwhile…
            await sleep(300);
            return 'committed'; // …but committed with the completion
          });
        },
      },
    });
    const started = performance.now();
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 8_000 }).toBe('done');
    expect(performance.now() - started).toBeLessThan(5_000);
    await worker.stop();
    const job = await queue.get(id);
    expect(job?.result).toBe('committed');
    expect(job?.progress).toBe(2);
  });

  test('the latest value survives a ctx.transaction that rolled back', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('progress.rollback', null);
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      tasks: {
        'progress.rollback': async (
          _payload: unknown,
          ctx: { progress(value: unknown): void; transaction<T>(fn: () => Promise<T>): Promise<T> },
        ) => {
          ctx.progress('first'); // written at once
          ctx.progress('second'); // coalesced: waits for the interval, or for the transaction
          await ctx
            .transaction(async () => {
              throw new Error('rolled back');
            })
            .catch(() => undefined);
          return 'ok';
        },
      },
    });
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 8_000 }).toBe('done');
    await worker.stop();
    expect((await queue.get(id))?.progress).toBe('second');
  });

  test('a progress write renews the lease (a heartbeat that skipped the row loses nothing)', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('progress.lease', null);
    let report!: () => void;
    const reported = new Promise<void>((resolve) => {
      report = resolve;
    });
    const leaseUntil = async () =>
      Number(
        (
          await db.sql<{ ms: string }>(
            `SELECT (extract(epoch FROM lease_until) * 1000)::text AS ms FROM ${db.jobs} WHERE id = $1`,
            [id],
          )
        )[0]?.ms,
      );
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    // a long lease: its heartbeat (every third of it) does not come during the test
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      leaseMs: 60_000,
      tasks: {
        'progress.lease': async (_payload: unknown, ctx: { progress(value: unknown): void }) => {
          await reported;
          ctx.progress('now');
          await gate;
        },
      },
    });
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 5_000 }).toBe('running');
    const claimed = await leaseUntil();
    await sleep(1_000);
    report();
    await expect.poll(async () => (await queue.get(id))?.progress, { timeout: 5_000 }).toBe('now');
    expect(await leaseUntil()).toBeGreaterThan(claimed + 700);
    release();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 5_000 }).toBe('done');
    await worker.stop();
  });

  test("a runaway's reports after stop() are not written", async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('progress.runaway', null);
    let reports = 0;
    let running = true;
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      abortGraceMs: 100,
      tasks: {
        // ignores its signal; starts reporting only once told to stop
        'progress.runaway': async (
          _payload: unknown,
          ctx: { progress(value: unknown): void; signal: AbortSignal },
        ) => {
          while (running) {
            if (ctx.signal.aborted) ctx.progress(++reports);
            await sleep(20);
          }
        },
      },
    });
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 5_000 }).toBe('running');
    await worker.stop({ timeoutMs: 100 });
    const atStop = (await queue.get(id))?.progress ?? null;
    const reportsAtStop = reports;
    await sleep(800);
    running = false;
    expect(reports).toBeGreaterThan(reportsAtStop + 10); // it kept reporting…
    expect((await queue.get(id))?.progress ?? null).toEqual(atStop); // …and nothing was written
  });

  test('a value JSON cannot hold throws a ValidationError at the call; the job fails', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('progress.bad', null, { maxAttempts: 1 });
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      tasks: {
        'progress.bad': (_payload: unknown, ctx: { progress(value: unknown): void }) => {
          ctx.progress({ n: 10n });
        },
      },
    });
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 5_000 }).toBe('dead');
    await worker.stop();
    expect((await queue.get(id))?.lastError).toMatch(/^ValidationError: progress: must be JSON-serialisable/);
  });

  test('NaN or Infinity in a value throws a ValidationError naming its path and writes nothing', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('progress.nan', null);
    const caught: unknown[] = [];
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      tasks: {
        'progress.nan': (_payload: unknown, ctx: { progress(value: unknown): void }) => {
          ctx.progress({ done: 1 });
          for (const bad of [{ done: 2, rate: Number.NaN }, { steps: [1, Number.NEGATIVE_INFINITY] }]) {
            try {
              ctx.progress(bad);
            } catch (error) {
              caught.push(error);
            }
          }
          return 'ok';
        },
      },
    });
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 5_000 }).toBe('done');
    await worker.stop();
    expect(caught).toHaveLength(2);
    expect(caught[0]).toBeInstanceOf(ValidationError);
    expect(caught[0]).toMatchObject({ field: 'progress.rate' });
    expect(caught[1]).toMatchObject({ field: 'progress.steps[1]' });
    // the last value that could be stored is the one kept, never { done: 2, rate: null }
    expect((await queue.get(id))?.progress).toEqual({ done: 1 });
  });

  test('a value whose write is still in flight when ctx.transaction starts commits with the completion', async () => {
    const queue = db.queue();
    const { store } = engineOf(queue);
    const original = store.lease.writeProgress.bind(store.lease);
    // the coalesced write is slow to get through (a busy pool, a slow network)
    store.lease.writeProgress = async (dbx, lease, json, ms, wait) => {
      if (!wait) await sleep(300);
      return original(dbx, lease, json, ms, wait);
    };
    const { id } = await queue.enqueue('progress.inflight', null);
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      tasks: {
        'progress.inflight': async (
          _payload: unknown,
          ctx: { progress(value: unknown): void; transaction<T>(fn: () => Promise<T>): Promise<T> },
        ) => {
          ctx.progress({ pct: 100 });
          return ctx.transaction(async () => 'r');
        },
      },
    });
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 5_000 }).toBe('done');
    await sleep(500);
    await worker.stop();
    expect((await queue.get(id))?.progress).toEqual({ pct: 100 });
  });

  test('a failed write keeps its value: the last one is still written before the outcome', async () => {
    const queue = db.queue();
    const { store } = engineOf(queue);
    const original = store.lease.writeProgress.bind(store.lease);
    let failed = false;
    store.lease.writeProgress = async (dbx, lease, json, ms, wait) => {
      if (!failed) {
        failed = true;
        throw new Error('Connection terminated unexpectedly');
      }
      return original(dbx, lease, json, ms, wait);
    };
    const { id } = await queue.enqueue('progress.failed-write', null);
    const errors: string[] = [];
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      tasks: {
        'progress.failed-write': async (_payload: unknown, ctx: { progress(value: unknown): void }) => {
          ctx.progress('final');
          await sleep(100);
          return 'ok';
        },
      },
    });
    worker.on('error', ({ during }) => errors.push(during));
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 5_000 }).toBe('done');
    await worker.stop();
    expect((await queue.get(id))?.progress).toBe('final');
    expect(errors).toEqual([`writing the progress of job ${id}`]);
  });

  test('a progress write in flight when stop() is called lands before stop() resolves, never after', async () => {
    const queue = db.queue();
    const { store } = engineOf(queue);
    const original = store.lease.writeProgress.bind(store.lease);
    let stopping = false;
    store.lease.writeProgress = async (dbx, lease, json, ms, wait) => {
      while (!stopping) await sleep(20); // held until stop() begins (waiting for a connection)
      await sleep(100);
      return original(dbx, lease, json, ms, wait);
    };
    const { id } = await queue.enqueue('progress.stop-inflight', null);
    let started!: () => void;
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    let release!: () => void;
    const forever = new Promise<void>((resolve) => {
      release = resolve;
    });
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      leaseMs: 3_000,
      abortGraceMs: 50,
      tasks: {
        'progress.stop-inflight': async (_payload: unknown, ctx: { progress(value: unknown): void }) => {
          started();
          ctx.progress('a');
          await forever; // a runaway
        },
      },
    });
    await worker.start();
    await running;
    const stopped = worker.stop({ timeoutMs: 50 });
    stopping = true;
    await stopped;
    const leaseUntil = async () =>
      (
        await db.sql<{ lu: Date }>(`SELECT lease_until AS lu FROM ${db.jobs} WHERE id = $1`, [id])
      )[0]?.lu.getTime();
    const atStop = await leaseUntil();
    await sleep(600);
    expect(await leaseUntil()).toBe(atStop);
    release();
  });
});
