/**
 * SPEC §8 `dedupe: { scope: 'pending' }`: at most one queued and one running job per key. An
 * enqueue while the key's job is queued returns that job; while it runs, one more is queued,
 * and it starts only when the running one has ended — through every claim path (plain, with
 * group keys, limited queues). A job of the key that would go back to the queue while the next
 * one is already queued (retry, release, lease expiry) is cancelled as superseded, and the
 * queued job takes a failed attempt's retry over (backoff and attempt count); requeueing a dead
 * one then is a DedupeConflictError. Racing enqueues, workers and failures never run two jobs
 * of a key at once and never make a worker's write fail; your transaction holding a key does
 * not deadlock a stopping worker or requeueDead.
 *
 * Deliberate breaks seen failing (in a private copy of src/):
 *  - the picks without the running-holder filter (migration 10's `blocked` returning ''): each
 *    claim path took B while A ran, and the race test's claims failed on the unique running
 *    index (jobs_pending_key_running_idx).
 *  - pending_holder without its lock: the race test's jobs stayed running (a write that failed
 *    on jobs_pending_key_idx leaves its job to the lease expiry).
 *  - fail() with the old status CASE (no holder): "duplicate key … jobs_pending_key_idx" in the
 *    superseded test and the race test.
 *  - pending_holder not updating the queued job (no takeover): the takeover, dead-letter and
 *    reap tests (attempts 0, the key never went dead).
 *  - releaseMany and requeueDeadBatch waiting for their keys' locks instead of trying them: both
 *    no-deadlock tests, "deadlock detected" (40P01).
 *  - complete without the NOTIFY of a keyed job: the idle worker waited for its one-minute poll
 *    (wake-up test timed out).
 */
import { beforeAll, describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { claimWithLimits } from '../../src/engine/queues.js';
import { DedupeConflictError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import type { ClaimedJob } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const PENDING = { scope: 'pending' } as const;
/** Four queues with pools of their own, for racing enqueues; the first for everything else. */
let queues: Queue[];
let queue: Queue;
beforeAll(() => {
  queues = Array.from({ length: 4 }, () => db.queue({ poolSize: 5 }));
  queue = queues[0] as Queue;
});

async function keyRows(key: string) {
  return db.sql<{ id: string; status: string; last_error: string | null }>(
    `SELECT j.id::text AS id, status, last_error FROM ${db.jobs} AS j WHERE pending_key = $1 ORDER BY j.id`,
    [key],
  );
}

/** A worker's claim pass (limited queues first, then the plain claim), for one task. */
async function claimOne(on: Queue, task: string, leaseMs = 30_000): Promise<ClaimedJob | undefined> {
  const errors: unknown[] = [];
  const { jobs } = await claimWithLimits(engineOf(on), {
    workerId: 'w',
    limit: 10,
    idle: 10,
    leaseMs,
    tasks: [task],
    queues: null,
    onError: (error) => errors.push(error),
  });
  expect(errors).toEqual([]);
  return jobs[0];
}

describe('one queued and one running per key', () => {
  // Each claim path: the plain pick, the merging pick (a grouped job is due), the limited
  // claim under a queue lock (concurrency) and without one (groupConcurrency only).
  const paths: { name: string; queue?: string; group?: string; configure?: object }[] = [
    { name: 'plain' },
    { name: 'grouped', group: 'g1' },
    { name: 'limited', queue: 'dp-limited', configure: { concurrency: 10 } },
    { name: 'group-limited', queue: 'dp-glimited', group: 'g1', configure: { groupConcurrency: 10 } },
  ];
  for (const path of paths) {
    test(`${path.name}: 40 racing enqueues make one job; while it runs, one more waits for it`, async () => {
      if (path.configure) await queue.configureQueue(path.queue as string, path.configure);
      const task = `dp.${path.name}`;
      const key = `pending:${path.name}`;
      const options = { dedupeKey: key, dedupe: PENDING, queue: path.queue, group: path.group };
      const enqueue40 = () =>
        Promise.all(
          Array.from({ length: 40 }, (_, i) => (queues[i % 4] as Queue).enqueue(task, { i }, options)),
        );

      const first = await enqueue40();
      expect(first.filter((r) => r.created)).toHaveLength(1);
      const aId = first.find((r) => r.created)?.id;
      expect(new Set(first.map((r) => r.id))).toEqual(new Set([aId]));
      expect((await queue.get(aId as string))?.dedupeKey).toBe(key);

      const a = await claimOne(queue, task);
      expect(a?.id).toBe(aId);
      const second = await enqueue40();
      expect(second.filter((r) => r.created)).toHaveLength(1);
      const bId = second.find((r) => r.created)?.id;
      expect(bId).not.toBe(aId);
      expect(new Set(second.map((r) => r.id))).toEqual(new Set([bId]));

      expect((await queue.findActive(key))?.id).toBe(bId); // the queued one, of the two

      // B waits while A runs, whichever way the queue is claimed.
      expect(await claimOne(queue, task)).toBeUndefined();
      expect(await queue.complete(a as ClaimedJob, null)).toBe(true);
      const b = await claimOne(queue, task);
      expect(b?.id).toBe(bId);
      expect((await queue.findActive(key))?.status).toBe('running');
      await queue.complete(b as ClaimedJob, null);
      expect((await keyRows(key)).map((r) => r.status)).toEqual(['done', 'done']);
    });
  }

  test('a key of scope pending and the same plain dedupeKey do not meet', async () => {
    const plain = await queue.enqueue('dp.apart', null, { dedupeKey: 'apart' });
    const scoped = await queue.enqueue('dp.apart', null, { dedupeKey: 'apart', dedupe: PENDING });
    expect(plain.created && scoped.created).toBe(true);
    expect(plain.id).not.toBe(scoped.id);
  });

  test('enqueueMany: repeated keys in a batch, and two batches racing over the same keys in opposite orders', async () => {
    const keys = Array.from({ length: 20 }, (_, i) => `batch:${i}`);
    const batch = (queue: Queue, list: string[]) =>
      queue.enqueueMany(
        list.flatMap((key) =>
          [0, 1].map(() => ({ task: 'dp.batch', payload: key, dedupeKey: key, dedupe: PENDING })),
        ),
      );
    const [x, y] = await Promise.all([
      batch(queues[0] as Queue, keys),
      batch(queues[1] as Queue, [...keys].reverse()),
    ]);
    expect([...x, ...y].filter((r) => r.created)).toHaveLength(keys.length);
    const rows = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${db.jobs} WHERE pending_key LIKE 'batch:%' AND status = 'pending'`,
    );
    expect(rows[0]?.n).toBe(keys.length);
  });
});

describe('a job of the key going back to the queue', () => {
  async function runningWithQueued(task: string, key: string, leaseMs?: number) {
    const a = await queue.enqueue(task, 'a', { dedupeKey: key, dedupe: PENDING, maxAttempts: 5 });
    const lease = await claimOne(queue, task, leaseMs);
    expect(lease?.id).toBe(a.id);
    const b = await queue.enqueue(task, 'b', { dedupeKey: key, dedupe: PENDING });
    expect(b.created).toBe(true);
    return { lease: lease as ClaimedJob, a: a.id, b: b.id };
  }

  test('fail with a retry while the next job is queued: cancelled as superseded; the queued job takes the retry over', async () => {
    const { lease, a, b } = await runningWithQueued('dp.fail', 'fail:1');
    expect(await queue.fail(lease, new Error('boom'), { retryInMs: 60_000 })).toBe('cancelled');
    const job = await queue.get(a);
    expect(job?.status).toBe('cancelled');
    // the reason first (lists and logs show the first line), then the attempt's error
    expect(job?.lastError).toMatch(new RegExp(`^Superseded: job ${b} was already queued.*\\nError: boom`));
    // B waits out A's backoff and continues A's attempt count (no hammering a failing service).
    const next = await queue.get(b);
    expect(next?.status).toBe('pending');
    expect(next?.attempts).toBe(1);
    expect(next?.lastError).toMatch(
      new RegExp(`^Took over from job ${a} \\(superseded after attempt 1\\): .*boom`),
    );
    expect((next?.runAfter.getTime() ?? 0) - Date.now()).toBeGreaterThan(50_000);
    expect(await claimOne(queue, 'dp.fail')).toBeUndefined();
  });

  test('a key whose work keeps failing goes dead, however often it is enqueued again', async () => {
    const key = 'fail:dead';
    const options = { dedupeKey: key, dedupe: PENDING, maxAttempts: 3 };
    const ids = new Set<string>();
    let status: string | null = null;
    for (let round = 0; round < 10 && status !== 'dead'; round++) {
      ids.add((await queue.enqueue('dp.faildead', round, options)).id);
      const lease = await claimOne(queue, 'dp.faildead');
      expect(lease).toBeDefined();
      ids.add((await queue.enqueue('dp.faildead', round, options)).id); // queued while it runs
      status = await queue.fail(lease as ClaimedJob, new Error('down'), { retryInMs: 0 });
    }
    // Attempts 1 and 2 were superseded (their queued jobs took over), attempt 3 died.
    expect(status).toBe('dead');
    const rows = await keyRows(key);
    expect(rows.filter((r) => r.status === 'cancelled')).toHaveLength(2);
    expect(rows.filter((r) => r.status === 'dead')).toHaveLength(1);
  });

  test('fail with no queued job retries, and that retry is the key’s queued job', async () => {
    const a = await queue.enqueue('dp.retry', null, { dedupeKey: 'retry:1', dedupe: PENDING });
    const lease = await claimOne(queue, 'dp.retry');
    expect(await queue.fail(lease as ClaimedJob, new Error('boom'), { retryInMs: 60_000 })).toBe('pending');
    expect(await queue.enqueue('dp.retry', null, { dedupeKey: 'retry:1', dedupe: PENDING })).toEqual({
      id: a.id,
      created: false,
    });
  });

  test('release while the next job is queued: cancelled as superseded; with none: pending again', async () => {
    const { lease, a, b } = await runningWithQueued('dp.release', 'release:1');
    expect(await queue.release(lease)).toBe(true);
    expect((await queue.get(a))?.status).toBe('cancelled');
    expect((await queue.get(a))?.lastError).toContain(`Superseded: job ${b}`);
    const next = await claimOne(queue, 'dp.release');
    expect(next?.id).toBe(b);
    expect(await queue.release(next as ClaimedJob)).toBe(true);
    expect((await queue.get(b))?.status).toBe('pending');
  });

  test('a lease that expires while the next job is queued: reaped as superseded; with none: pending again', async () => {
    const { a, b } = await runningWithQueued('dp.reap', 'reap:1', 200);
    await sleep(400);
    expect(await queue.reap()).toContain(a);
    expect((await queue.get(a))?.status).toBe('cancelled');
    expect((await queue.get(a))?.lastError).toMatch(/^Superseded: job .*\nLeaseExpired/);
    expect(await queue.get(b)).toMatchObject({
      attempts: 1,
      lastError: expect.stringMatching(/^Took over from job .*LeaseExpired/),
    });
    const next = await claimOne(queue, 'dp.reap', 200);
    expect(next?.id).toBe(b);
    await sleep(400);
    expect(await queue.reap()).toContain(b);
    expect((await queue.get(b))?.status).toBe('pending');
  });

  test('a stopping worker releases held jobs while your transaction holds one of their keys: no deadlock', async () => {
    // The transaction takes the key that comes later in the lock order first, so a release that
    // waited for its keys in that order would hold the earlier one and wait: a deadlock.
    const keys = ['hold:1', 'hold:2', 'hold:3', 'hold:4'];
    const order = await db.sql<{ key: string }>(
      `SELECT key FROM unnest($1::text[]) AS key ORDER BY ${quoteIdent(TEST_SCHEMA)}.pending_lock_id(key)`,
      [keys],
    );
    const [first, last] = [order[0]?.key as string, order.at(-1)?.key as string];
    for (const key of [first, last]) await queue.enqueue('dp.hold', key, { dedupeKey: key, dedupe: PENDING });
    const { jobs: held } = await claimWithLimits(engineOf(queue), {
      workerId: 'w-hold',
      limit: 10,
      idle: 10,
      leaseMs: 30_000,
      tasks: ['dp.hold'],
      queues: null,
      onError: () => undefined,
    });
    expect(held).toHaveLength(2);
    let releasing: Promise<boolean[]> | undefined;
    await queue.transaction(async (client) => {
      await queue.enqueue('dp.hold', 'tx', { dedupeKey: last, dedupe: PENDING, client });
      releasing = engineOf(queue).completer.releaseMany(held);
      await sleep(300); // the release is under way (and, waiting for both keys, would hold the first)
      await queue.enqueue('dp.hold', 'tx', { dedupeKey: first, dedupe: PENDING, client });
    });
    expect(await releasing).toEqual([true, true]);
    const statuses = Object.fromEntries(
      await Promise.all(held.map(async (job) => [job.payload, (await queue.get(job.id))?.status])),
    );
    expect(statuses).toEqual({ [first]: 'pending', [last]: 'cancelled' }); // superseded by the tx's job
  });

  test('requeueDead while your transaction holds one of the dead jobs’ keys: no deadlock', async () => {
    const keys = ['rqhold:1', 'rqhold:2', 'rqhold:3', 'rqhold:4'];
    const order = await db.sql<{ key: string }>(
      `SELECT key FROM unnest($1::text[]) AS key ORDER BY ${quoteIdent(TEST_SCHEMA)}.pending_lock_id(key)`,
      [keys],
    );
    const [first, last] = [order[0]?.key as string, order.at(-1)?.key as string];
    for (const key of [first, last]) {
      await queue.enqueue('dp.rqhold', key, { dedupeKey: key, dedupe: PENDING, maxAttempts: 1 });
    }
    const claimed = await queue.claim('w', { tasks: ['dp.rqhold'], limit: 10 });
    expect(claimed).toHaveLength(2);
    for (const lease of claimed) expect(await queue.fail(lease, new Error('boom'))).toBe('dead');
    let requeueing: Promise<{ requeued: number; skipped: number }> | undefined;
    await queue.transaction(async (client) => {
      await queue.enqueue('dp.rqhold', 'tx', { dedupeKey: last, dedupe: PENDING, client });
      requeueing = queue.requeueDead({ task: 'dp.rqhold' });
      await sleep(300); // under way (and, waiting for both keys, it would hold the first)
      await queue.enqueue('dp.rqhold', 'tx', { dedupeKey: first, dedupe: PENDING, client });
    });
    // first: requeued before the transaction asked for it (its enqueue was a hit); last: the
    // transaction's job is queued for it, so that dead job stays dead.
    expect(await requeueing).toEqual({ requeued: 1, skipped: 1 });
  });

  test('requeueing a dead job of a key that has a queued job is a DedupeConflictError; once free it requeues', async () => {
    const a = await queue.enqueue('dp.dead', null, { dedupeKey: 'dead:1', dedupe: PENDING, maxAttempts: 1 });
    await queue.fail((await claimOne(queue, 'dp.dead')) as ClaimedJob, new Error('boom'));
    expect((await queue.get(a.id))?.status).toBe('dead');
    const b = await queue.enqueue('dp.dead', null, { dedupeKey: 'dead:1', dedupe: PENDING });
    expect(b.created).toBe(true);
    await expect(queue.requeueOrThrow(a.id)).rejects.toBeInstanceOf(DedupeConflictError);
    expect(await queue.requeueDead({ task: 'dp.dead' })).toEqual({ requeued: 0, skipped: 1 });
    await queue.cancel(b.id);
    expect(await queue.requeue(a.id)).toBe(true);
    expect((await queue.get(a.id))?.status).toBe('pending');
  });
});

describe('workers', () => {
  test('an idle worker starts the queued job as soon as the running one completes (NOTIFY, not poll)', async () => {
    const a = await queue.enqueue('dp.wake', 'a', { dedupeKey: 'wake:1', dedupe: PENDING });
    const lease = await claimOne(queue, 'dp.wake');
    expect(lease?.id).toBe(a.id);
    const b = await queue.enqueue('dp.wake', 'b', { dedupeKey: 'wake:1', dedupe: PENDING });
    const started: string[] = [];
    const worker = db.worker({
      queue: db.queue({ poolSize: 4 }),
      pollIntervalMs: 60_000,
      tasks: {
        'dp.wake': (_payload: unknown, ctx: { job: { id: string } }) => void started.push(ctx.job.id),
      },
    });
    await worker.start();
    await sleep(300); // the worker found B blocked and sleeps
    expect(started).toEqual([]);
    await queue.complete(lease as ClaimedJob, null);
    await expect.poll(() => started, { timeout: 5_000 }).toEqual([b.id]);
    await worker.stop();
  });

  test("a worker's attempt that fails while the key's next job is queued: job:cancelled with reason 'superseded' and the error", async () => {
    let enqueueNext!: () => Promise<void>;
    const worker = db.worker({
      queue: db.queue({ poolSize: 4 }),
      pollIntervalMs: 100,
      tasks: {
        'dp.superseded': async (payload: unknown) => {
          if (payload === 'a') {
            await enqueueNext();
            throw new Error('boom in a');
          }
        },
      },
    });
    enqueueNext = async () => {
      await queue.enqueue('dp.superseded', 'b', { dedupeKey: 'sup:1', dedupe: PENDING });
    };
    const events: { id: string; reason: string; error: unknown }[] = [];
    worker.on('job:cancelled', ({ job, reason, error }) => events.push({ id: job.id, reason, error }));
    const a = await queue.enqueue('dp.superseded', 'a', { dedupeKey: 'sup:1', dedupe: PENDING });
    await worker.start();
    await expect.poll(() => events.length, { timeout: 5_000 }).toBe(1);
    await worker.stop();
    expect(events[0]).toMatchObject({ id: a.id, reason: 'superseded' });
    expect(events[0]?.error).toMatchObject({ message: 'boom in a' });
  });

  test('4 workers, failing handlers and a producer racing on 6 keys: never two jobs of a key at once, no write fails', async () => {
    const keys = Array.from({ length: 6 }, (_, i) => `race:${i}`);
    const running = new Map<string, string>();
    const overlaps: string[] = [];
    const errors: unknown[] = [];
    let runs = 0;
    const handler = async (payload: { key: string }, ctx: { job: { id: string } }) => {
      const holder = running.get(payload.key);
      if (holder !== undefined) overlaps.push(`${payload.key}: ${holder} and ${ctx.job.id}`);
      running.set(payload.key, ctx.job.id);
      runs++;
      await sleep(Math.random() * 8);
      running.delete(payload.key);
      if (Math.random() < 0.4) throw new Error('flaky');
    };
    const workers = Array.from({ length: 4 }, (_, i) =>
      db.worker({
        queue: db.queue({ poolSize: 4 }),
        workerId: `race-${i}`,
        concurrency: 4,
        pollIntervalMs: 500,
        backoff: { baseMs: 1, capMs: 5 },
        tasks: { 'dp.race': handler as never },
      }),
    );
    for (const worker of workers) {
      worker.on('error', (event: unknown) => errors.push(event));
      await worker.start();
    }
    const producer = queues[1] as Queue;
    const enqueues: Promise<unknown>[] = [];
    for (let i = 0; i < 600; i++) {
      const key = keys[i % keys.length] as string;
      enqueues.push(
        producer.enqueue('dp.race', { key }, { dedupeKey: key, dedupe: PENDING, maxAttempts: 3 }),
      );
      if (i % 20 === 19) {
        await Promise.all(enqueues.splice(0));
        await sleep(5);
      }
      // now and then a worker stops (its held jobs are released) and a new one takes its place
      if (i % 150 === 149) {
        const old = workers.shift();
        await old?.stop({ timeoutMs: 2_000 });
        const fresh = db.worker({
          queue: db.queue({ poolSize: 4 }),
          workerId: `race-fresh-${i}`,
          concurrency: 4,
          pollIntervalMs: 500,
          backoff: { baseMs: 1, capMs: 5 },
          tasks: { 'dp.race': handler as never },
        });
        fresh.on('error', (event: unknown) => errors.push(event));
        await fresh.start();
        workers.push(fresh);
      }
    }
    await Promise.all(enqueues);
    const live = async () =>
      (
        await db.sql<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${db.jobs} WHERE pending_key LIKE 'race:%' AND status IN ('pending', 'running')`,
        )
      )[0]?.n;
    // until every job of the keys has ended — or a worker reported an error (a write that failed
    // leaves its job running until its lease expires)
    await expect.poll(async () => errors.length > 0 || (await live()) === 0, { timeout: 30_000 }).toBe(true);
    expect(errors).toEqual([]);
    expect(overlaps).toEqual([]);
    expect(await live()).toBe(0);
    expect(runs).toBeGreaterThan(50);
    const ends = await db.sql<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM ${db.jobs} WHERE pending_key LIKE 'race:%' GROUP BY status ORDER BY status`,
    );
    console.log('scope pending race:', { runs, ends });
    await Promise.all(workers.map((worker) => worker.stop()));
  });
});
