/**
 * SPEC §9 `ctx.progress(value)`: JSON progress on the job, the first report of an attempt written
 * at once, later ones coalesced (a handler reporting in a tight loop costs a few writes a
 * second, not one per call), the last one written before the outcome and kept after the job
 * finishes; shown by `get`. A report inside the job's own ctx.transaction neither blocks nor
 * deadlocks it. A value JSON cannot hold throws.
 *
 * Deliberate breaks seen failing (in a private copy of src/): no flush before the outcome (the
 * finished job kept an older value); no coalescing (a write per report: they overlapped, and the
 * job ended with an older value than the last).
 */
import { describe, expect, test } from 'vitest';
import { engineOf } from '../../src/engine/engine.js';
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

  test('a report inside the job’s own ctx.transaction neither waits nor blocks it', async () => {
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
            ctx.progress(2); // the row is locked by this transaction: kept for later, not waited for
            await sleep(300);
            return 'committed';
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
    expect(job?.progress).toBe(1); // the report inside the committed transaction came too late
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
});
