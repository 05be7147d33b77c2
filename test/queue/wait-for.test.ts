/**
 * SPEC §9 `queue.waitFor(id | { id }, { timeoutMs, signal })`: resolves with the job once it is
 * done, dead or cancelled — and never misses that moment: a completion hint over LISTEN (only
 * for waited-for jobs: migration 12's trigger), the row read again on every (re)connection of the
 * LISTEN connection, while LISTEN is unavailable (`listen: false`), and on timeout, after which a
 * WaitTimeoutError names the status. The adversarial case: the LISTEN connection is killed after
 * the wait began and the job finishes before it reconnects, so its hint goes to nobody.
 *
 * The tests that must not rely on polling lengthen the re-read intervals to ten minutes
 * (`waitTuning`), so only the hint or the reconnection can end the wait.
 *
 * Deliberate breaks seen failing: the trigger's WHEN made false (the hint test hung to its
 * bound); no re-read on (re)connection (the killed-LISTEN test hung); no final read on timeout
 * (the job finished in the last moment was reported as a timeout); `listen: false` without
 * polling (hung); the hint request waiting for the row lock (two waits on a job inside a long
 * ctx.transaction starved a pool of 3 and the job lost its lease).
 */
import { describe, expect, test } from 'vitest';
import { engineOf } from '../../src/engine/engine.js';
import { NotFoundError, type Queue, ValidationError, WaitTimeoutError } from '../../src/index.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const NEVER = { pollMs: 600_000, safetyPollMs: 600_000 };

/** A queue whose waits can only end by a hint, a reconnection or a timeout. */
function hintOnlyQueue(): Queue {
  const queue = db.queue();
  engineOf(queue).waitTuning = NEVER;
  return queue;
}

/** Resolves within `ms` or fails the test (a hung wait must fail, not time the test out). */
async function within<T>(ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`not settled within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function claimOne(queue: Queue, task: string) {
  const { id } = await queue.enqueue(task, { n: 1 });
  const [lease] = await queue.claim('w-test', { tasks: [task] });
  expect(lease?.id).toBe(id);
  return lease!;
}

async function hinted(id: string): Promise<void> {
  await expect
    .poll(
      async () =>
        (await db.sql<{ h: boolean | null }>(`SELECT wait_hint AS h FROM ${db.jobs} WHERE id = $1`, [id]))[0]
          ?.h,
    )
    .toBe(true);
}

describe('queue.waitFor', () => {
  test('resolves with the finished job when its completion hint arrives', async () => {
    const queue = hintOnlyQueue();
    const lease = await claimOne(queue, 'wait.done');
    const waiting = queue.waitFor(lease.id);
    await hinted(lease.id);
    await sleep(50);
    expect(await queue.complete(lease, { ok: true })).toBe(true);
    const job = await within(5_000, waiting);
    expect(job).toMatchObject({ id: lease.id, status: 'done', result: { ok: true } });
  });

  test('dead and cancelled end the wait too; a job object is accepted', async () => {
    const queue = hintOnlyQueue();
    const lease = await claimOne(queue, 'wait.dead');
    const dead = queue.waitFor({ id: lease.id });
    await hinted(lease.id);
    await queue.fail(lease, new Error('boom'), { retryInMs: 0 }); // attempt 1 of 5: back to pending
    await sleep(100);
    await db.sql(`UPDATE ${db.jobs} SET max_attempts = attempts WHERE id = $1`, [lease.id]);
    const [again] = await queue.claim('w-test', { tasks: ['wait.dead'] });
    await queue.fail(again!, new Error('boom'));
    expect((await within(5_000, dead)).status).toBe('dead');

    const { id } = await queue.enqueue('wait.cancel', null, { runAt: new Date(Date.now() + 3_600_000) });
    const cancelled = queue.waitFor(id);
    await hinted(id);
    await queue.cancel(id);
    expect((await within(5_000, cancelled)).status).toBe('cancelled');
  });

  test('a job that already finished resolves at once; an unknown id is a NotFoundError; bad input throws', async () => {
    const queue = hintOnlyQueue();
    const lease = await claimOne(queue, 'wait.before');
    await queue.complete(lease, 7);
    expect((await within(2_000, queue.waitFor(lease.id))).result).toBe(7);
    await expect(queue.waitFor('987654321')).rejects.toBeInstanceOf(NotFoundError);
    await expect(queue.waitFor('x')).rejects.toBeInstanceOf(ValidationError);
    await expect(queue.waitFor(lease.id, { timeoutMs: -1 })).rejects.toBeInstanceOf(ValidationError);
    await expect(queue.waitFor(lease.id, { signal: 'soon' as never })).rejects.toThrow(/AbortSignal/);
    await expect(queue.waitFor(lease.id, { timeout: 5 } as never)).rejects.toBeInstanceOf(ValidationError);
  });

  test('the LISTEN connection killed after the wait began, the job finished before it reconnects: still resolves', async () => {
    const queue = hintOnlyQueue();
    const lease = await claimOne(queue, 'wait.partition');
    const waiting = queue.waitFor(lease.id);
    await hinted(lease.id);
    // a second wait keeps the LISTEN connection open after the first one ends (to look at it)
    const { id: later } = await queue.enqueue('wait.partition2', null, {
      runAt: new Date(Date.now() + 3_600_000),
    });
    const stopLater = new AbortController();
    const waitingLater = queue.waitFor(later, { signal: stopLater.signal }).catch(() => 'stopped');
    const listeners = () =>
      db.sql<{ pid: number; started: string }>(
        `SELECT pid, (extract(epoch FROM backend_start) * 1000)::text AS started FROM pg_stat_activity
         WHERE application_name = 'skiplock-listener' AND query LIKE 'LISTEN "skiplock-done:%'`,
      );
    const [listener] = await listeners();
    expect(listener).toBeDefined();
    await db.sql('SELECT pg_terminate_backend($1)', [listener!.pid]);
    await expect
      .poll(async () => (await listeners()).some((l) => l.pid === listener!.pid), { interval: 5 })
      .toBe(false);
    // The hint of this completion goes to nobody: the listener is gone and has not reconnected.
    expect(await queue.complete(lease, 'after the cut')).toBe(true);
    const finishedAt = Number(
      (
        await db.sql<{ at: string }>(
          `SELECT (extract(epoch FROM updated_at) * 1000)::text AS at FROM ${db.jobs} WHERE id = $1`,
          [lease.id],
        )
      )[0]?.at,
    );
    const job = await within(10_000, waiting);
    expect(job).toMatchObject({ status: 'done', result: 'after the cut' });
    // It was the reconnection's re-read: the new listener connected after the job finished.
    const [reconnected] = await listeners();
    expect(Number(reconnected?.started)).toBeGreaterThan(finishedAt);
    stopLater.abort();
    expect(await waitingLater).toBe('stopped');
  });

  test('timeout: the row is read once more, then a WaitTimeoutError naming the status', async () => {
    const queue = hintOnlyQueue();
    const { id } = await queue.enqueue('wait.timeout', null, { runAt: new Date(Date.now() + 3_600_000) });
    const error = await queue.waitFor(id, { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WaitTimeoutError);
    expect(error).toMatchObject({ code: 'ERR_WAIT_TIMEOUT', jobId: id, status: 'pending' });
    expect((error as Error).message).toMatch(/still pending after 300 ms/);

    // A job finished without a hint (the trigger disabled: as if the hint were lost) is found
    // by the read at the timeout and resolves instead of timing out.
    const lease = await claimOne(queue, 'wait.timeout2');
    const waiting = queue.waitFor(lease.id, { timeoutMs: 1_000 });
    await hinted(lease.id);
    await db.sql(`UPDATE ${db.jobs} SET status = 'done', wait_hint = NULL WHERE id = $1`, [lease.id]);
    expect((await within(5_000, waiting)).status).toBe('done');
  });

  test('signal: an abort rejects with its reason', async () => {
    const queue = hintOnlyQueue();
    const { id } = await queue.enqueue('wait.abort', null, { runAt: new Date(Date.now() + 3_600_000) });
    const controller = new AbortController();
    const waiting = queue.waitFor(id, { signal: controller.signal });
    await hinted(id);
    controller.abort(new Error('no longer needed'));
    await expect(within(2_000, waiting)).rejects.toThrow('no longer needed');
    await expect(queue.waitFor(id, { signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: 'AbortError',
    });
  });

  test('listen: false re-reads the row (no LISTEN connection is opened)', async () => {
    const queue = db.queue({ listen: false });
    const lease = await claimOne(queue, 'wait.poll');
    const waiting = queue.waitFor(lease.id);
    await hinted(lease.id);
    await queue.complete(lease, 'polled');
    expect((await within(5_000, waiting)).result).toBe('polled');
  });

  test('close() ends a wait with QueueClosedError; jobs nobody waits for send no hint', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('wait.close', null, { runAt: new Date(Date.now() + 3_600_000) });
    const waiting = queue.waitFor(id).catch((e: unknown) => e);
    await hinted(id);
    await queue.close();
    expect(await within(2_000, waiting)).toMatchObject({ code: 'ERR_QUEUE_CLOSED' });

    const other = db.queue();
    const lease = await claimOne(other, 'wait.nobody');
    await other.complete(lease, null);
    const [row] = await db.sql<{ h: boolean | null }>(`SELECT wait_hint AS h FROM ${db.jobs} WHERE id = $1`, [
      lease.id,
    ]);
    expect(row?.h).toBeNull();
  });

  test('waits on a job inside its own long ctx.transaction neither block nor cost it its lease', async () => {
    // Before: the hint request waited for the row lock, holding a pooled connection — two
    // waits on a pool of 3 starved the heartbeat, and the job lost its lease mid-transaction.
    const queue = db.queue({ poolSize: 3 });
    const { id } = await queue.enqueue('wait.in-tx', null, { timeoutMs: 20_000 });
    let entered!: () => void;
    const inTransaction = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const lost: string[] = [];
    const worker = db.worker({
      queue,
      pollIntervalMs: 100,
      leaseMs: 1_500,
      tasks: {
        'wait.in-tx': async (_payload: unknown, ctx: { transaction<T>(fn: () => Promise<T>): Promise<T> }) =>
          ctx.transaction(async () => {
            entered();
            await sleep(3_000);
            return 'ok';
          }),
      },
    });
    worker.on('lease:lost', ({ job }) => lost.push(job.id));
    await worker.start();
    await inTransaction;
    const waits = [queue.waitFor(id, { timeoutMs: 10_000 }), queue.waitFor(id, { timeoutMs: 10_000 })];
    const jobs = await within(12_000, Promise.all(waits));
    await worker.stop();
    expect(lost).toEqual([]);
    expect(jobs.map((job) => job.status)).toEqual(['done', 'done']);
  });

  test('a failed first look does not end the wait: it reads again', async () => {
    const queue = db.queue();
    const { store } = engineOf(queue);
    const original = store.observe.requestFinishHint.bind(store.observe);
    let failed = false;
    store.observe.requestFinishHint = async (dbx, id) => {
      if (!failed) {
        failed = true;
        throw new Error('Connection terminated unexpectedly');
      }
      return original(dbx, id);
    };
    const lease = await claimOne(queue, 'wait.first-fails');
    const waiting = queue.waitFor(lease.id);
    await sleep(100);
    await queue.complete(lease, 1);
    expect((await within(5_000, waiting)).status).toBe('done');
  });

  test('a schema that was never migrated rejects at once (no silent wait until the timeout)', async () => {
    const queue = db.queue({ schema: 'wait_for_never_migrated' });
    const started = performance.now();
    const error = await queue.waitFor('1', { timeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'ERR_NOT_MIGRATED' });
    expect(performance.now() - started).toBeLessThan(10_000);
    await expect(queue.waitFor('1')).rejects.toMatchObject({ code: 'ERR_NOT_MIGRATED' });
  });
});
