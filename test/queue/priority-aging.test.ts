/**
 * SPEC §11 priority aging: in a queue with `priorityAging`, a due pending job's effective
 * priority number drops by `step` for every `everyMs` it has waited, never below `floor`, so a
 * priority-1000 job behind an endless stream of priority-0 jobs starts within (1000 / step) ·
 * everyMs plus a claim batch; `job.priority` stays as given; the setting round-trips through
 * configureQueue/queues() and `null` turns it off (the queue is claimed as before).
 *
 * Deliberate breaks seen failing (in this tree, restored):
 *  - pick_aged without aging (`l.priority - 0 * floor(…)`: the raw priority): the priority-1000
 *    job did not start within 5 s (the stream starved it).
 *  - the limited claim calling pick_queue for aging queues too (its switch on aging_every_ms
 *    removed): starved likewise.
 * Not a break: leaving aging queues out of the plain picks' restricted list alone changed
 * nothing here (the limited claim serves them first, with the idle slots).
 */
import { describe, expect, test } from 'vitest';
import { ValidationError } from '../../src/errors.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('priority aging', () => {
  test('a priority-1000 job behind an endless priority-0 stream starts within the bound', async () => {
    const queue = db.queue();
    const config = await queue.configureQueue('aging', { priorityAging: { everyMs: 20, step: 100 } });
    expect(config.priorityAging).toEqual({ everyMs: 20, step: 100, floor: 0 });
    // the stream: always a backlog of urgent jobs, refilled as the worker drains it
    let streaming = true;
    const stream = (async () => {
      while (streaming) {
        const backlog = (
          await db.sql<{ n: number }>(
            `SELECT count(*)::int AS n FROM ${db.jobs} WHERE queue = 'aging' AND status = 'pending' AND priority = 0`,
          )
        )[0]?.n;
        if ((backlog ?? 0) < 40) {
          await queue.enqueueMany(
            Array.from({ length: 40 }, (_, i) => ({
              task: 'age.t',
              payload: `urgent-${i}`,
              queue: 'aging',
              priority: 0,
            })),
          );
        }
        await sleep(5);
      }
    })();
    const started: string[] = [];
    const worker = db.worker({
      concurrency: 2,
      pollIntervalMs: 1_000,
      tasks: {
        'age.t': async (payload: unknown) => {
          started.push(String(payload));
          await sleep(3);
        },
      },
    });
    await worker.start();
    await expect.poll(() => started.length, { timeout: 10_000 }).toBeGreaterThan(20); // the stream flows
    const t0 = performance.now();
    const slow = await queue.enqueue('age.t', 'slow', { queue: 'aging', priority: 1000 });
    // bound: 1000 / 100 = 10 steps of 20 ms, plus a claim batch; generous for a loaded machine
    await expect.poll(() => started.includes('slow'), { timeout: 5_000, interval: 20 }).toBe(true);
    const waited = performance.now() - t0;
    streaming = false;
    await stream;
    await worker.stop();
    expect(waited).toBeLessThan(5_000);
    // urgent jobs kept running meanwhile (it aged past them; it did not stop the stream)
    expect(started.indexOf('slow')).toBeGreaterThan(20);
    // its priority is the one it was given
    expect((await queue.get(slow.id))?.priority).toBe(1000);
  });

  test('configureQueue checks the setting; null turns it off; queues() shows it', async () => {
    const queue = db.queue();
    const field = async (call: Promise<unknown>) => {
      const error = await call.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ValidationError);
      return (error as ValidationError).field;
    };
    expect(await field(queue.configureQueue('a2', { priorityAging: { everyMs: 0 } }))).toBe(
      'priorityAging.everyMs',
    );
    expect(await field(queue.configureQueue('a2', { priorityAging: { everyMs: 10, step: 0 } }))).toBe(
      'priorityAging.step',
    );
    expect(await field(queue.configureQueue('a2', { priorityAging: { everyMs: 10, by: 1 } as never }))).toBe(
      'priorityAging.by',
    );
    await queue.configureQueue('a2', { priorityAging: { everyMs: 1000, step: 10, floor: 5 } });
    const listed = (await queue.queues()).find((q) => q.name === 'a2');
    expect(listed?.priorityAging).toEqual({ everyMs: 1000, step: 10, floor: 5 });
    const off = await queue.configureQueue('a2', { priorityAging: null });
    expect(off.priorityAging).toBeNull();
    // off again: no settings left, no row (a queue without jobs is not listed)
    expect((await queue.queues()).find((q) => q.name === 'a2')).toBeUndefined();
  });

  test('an aging queue still claims in claim order among jobs of equal wait, and with a limit', async () => {
    const queue = db.queue();
    await queue.configureQueue('a3', { priorityAging: { everyMs: 60_000, step: 1 }, concurrency: 5 });
    const low = await queue.enqueue('age.o', 'low', { queue: 'a3', priority: 10 });
    const high = await queue.enqueue('age.o', 'high', { queue: 'a3', priority: 1 });
    const worker = db.worker({
      concurrency: 1,
      pollIntervalMs: 1_000,
      tasks: { 'age.o': async () => null },
    });
    await worker.start();
    await expect.poll(async () => (await queue.get(low.id))?.status, { timeout: 10_000 }).toBe('done');
    await worker.stop();
    expect((await queue.get(high.id))?.status).toBe('done');
    const [h, l] = [(await queue.get(high.id))?.runStartedAt, (await queue.get(low.id))?.runStartedAt];
    expect((h as Date).getTime()).toBeLessThanOrEqual((l as Date).getTime());
  });

  // Review finding 5: aging lifted a job already below floor (greatest(floor, …) alone): with floor
  // 50 a priority-10 job ran after an older priority-40 one, and with the default floor 0 a
  // priority -10 job after an older priority-0 one. Both failed before the least(priority, …) fix.
  async function startOrder(qname: string): Promise<string[]> {
    const started: string[] = [];
    const worker = db.worker({
      concurrency: 1,
      prefetch: 0,
      queues: [qname],
      pollIntervalMs: 60_000,
      tasks: {
        t: async (p: unknown) => {
          started.push(String(p));
        },
      },
    });
    await worker.start();
    await expect.poll(() => started.length, { timeout: 10_000 }).toBe(2);
    await worker.stop();
    return started;
  }

  test('a job already below floor keeps its priority (floor 50: priority 10 before an older 40)', async () => {
    const queue = db.queue();
    await queue.configureQueue('ag-floor', { priorityAging: { everyMs: 3_600_000, step: 1, floor: 50 } });
    await queue.enqueue('t', 'prio-40', { queue: 'ag-floor', priority: 40 });
    await queue.enqueue('t', 'prio-10', { queue: 'ag-floor', priority: 10 });
    expect(await startOrder('ag-floor')).toEqual(['prio-10', 'prio-40']);
  });

  test('default floor 0: a priority -10 job goes before an older priority-0 job', async () => {
    const queue = db.queue();
    await queue.configureQueue('ag-neg', { priorityAging: { everyMs: 3_600_000 } });
    await queue.enqueue('t', 'prio-0', { queue: 'ag-neg', priority: 0 });
    await queue.enqueue('t', 'prio-minus-10', { queue: 'ag-neg', priority: -10 });
    expect(await startOrder('ag-neg')).toEqual(['prio-minus-10', 'prio-0']);
  });
});
