/**
 * Retention (SPEC §7): `completed: 'delete'` removes a job in the statement that completes it
 * and counts it in a maintained counter; `keepFinishedMs` makes workers prune finished jobs.
 * What it must never do: delete a job through a stale lease (§1.3 holds for deletes too), lose
 * or double a count under concurrent completions, touch a pending or running job, or delete a
 * failed one on completion.
 *
 * Deliberate breaks seen failing (each undone):
 *  - completeManyDelete without `AND j.claims = c.token`: the stale-lease test saw the new
 *    owner's job deleted by the old lease.
 *  - countDeleted() without its `ON CONFLICT … n = c.n + excluded.n` (DO NOTHING instead): the
 *    first test counted 1 completion of 4.
 *  - pruneFinished without `status IN ('done', 'dead', 'cancelled')`: the pruner test saw the
 *    pending and running jobs deleted.
 *  - the pruner's interval without its 1 s floor: the floor test counted 1,571 prune statements in 2.5 s.
 */
import { expect, test } from 'vitest';
import { engineOf } from '../../src/engine/engine.js';
import { ValidationError } from '../../src/errors.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

test('completed: delete — complete() and completeMany() delete the job and count it; failures are kept', async () => {
  const queue = db.queue({ schema: 'ret_delete', retention: { completed: 'delete' } });
  await queue.migrate();
  const ids = (
    await queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ task: 'r', payload: { i } })))
  ).map((r) => r.id);
  const jobs = await queue.claim('w', { limit: 5 });
  expect(jobs).toHaveLength(5);
  expect(await queue.complete(jobs[0]!, { ignored: true })).toBe(true);
  expect(await queue.completeMany(jobs.slice(1, 4).map((lease) => ({ lease, result: 1 })))).toEqual([
    true,
    true,
    true,
  ]);
  expect(await queue.fail(jobs[4]!, new Error('boom'), { retryInMs: 0 })).toBe('pending');
  for (const id of ids.slice(0, 4)) expect(await queue.get(id)).toBeNull();
  expect(await queue.get(ids[4]!)).toMatchObject({ status: 'pending', attempts: 1 });
  expect(await queue.counts()).toMatchObject({ done: 4, pending: 1, running: 0 });
  expect((await queue.ops()).done).toBe(4);
  // Completing again through the same (now gone) lease: nothing happens, nothing is counted.
  expect(await queue.complete(jobs[0]!)).toBe(false);
  expect(await queue.completeMany([{ lease: jobs[1]! }])).toEqual([false]);
  expect((await queue.counts()).done).toBe(4);
});

test('completed: delete — a stale lease deletes nothing: the new owner’s claim of the job survives', async () => {
  const queue = db.queue({ schema: 'ret_stale', retention: { completed: 'delete' } });
  await queue.migrate();
  const { id } = await queue.enqueue('r', {});
  const [old] = await queue.claim('same-worker', { leaseMs: 60_000 });
  await db.sql(`UPDATE ret_stale.jobs SET lease_until = now() - interval '1 second' WHERE id = $1`, [id]);
  expect(await queue.reap()).toEqual([id]);
  const [owner] = await queue.claim('same-worker', { leaseMs: 60_000 });
  expect(owner).toMatchObject({ id, workerId: 'same-worker', attempt: 2 });
  // ABA through the same worker id and attempt number (release gives the attempt back).
  expect(await queue.release(owner!)).toBe(true);
  const [again] = await queue.claim('same-worker', { leaseMs: 60_000 });
  expect(again).toMatchObject({ id, attempt: 2 });
  expect(await queue.completeMany([{ lease: old! }, { lease: owner! }])).toEqual([false, false]);
  expect(await queue.complete(owner!)).toBe(false);
  expect(await queue.get(id)).toMatchObject({ status: 'running', attempts: 2 });
  expect((await queue.counts()).done).toBe(0);
  expect(await queue.complete(again!)).toBe(true);
  expect(await queue.get(id)).toBeNull();
  expect((await queue.counts()).done).toBe(1);
});

test('completed: delete — concurrent completions are each counted exactly once', async () => {
  const queue = db.queue({ schema: 'ret_count', retention: { completed: 'delete' }, poolSize: 8 });
  await queue.migrate();
  await queue.enqueueMany(Array.from({ length: 1_000 }, (_, i) => ({ task: 'r', payload: { i } })));
  const claimed = await Promise.all(
    Array.from({ length: 4 }, (_, w) => queue.claim(`w${w}`, { limit: 250 })),
  );
  expect(claimed.flat()).toHaveLength(1_000);
  // Every lease twice, from eight calls at once: each job is deleted and counted once.
  const answers = await Promise.all(
    [...claimed, ...claimed].map((jobs) => queue.completeMany(jobs.map((lease) => ({ lease })))),
  );
  expect(answers.flat().filter(Boolean)).toHaveLength(1_000);
  expect(await queue.counts()).toMatchObject({ done: 1_000, pending: 0, running: 0 });
  expect(await db.jobCount('ret_count')).toBe(0);
});

test('completed: delete — a worker and ctx.transaction delete on completion', async () => {
  const queue = db.queue({ schema: 'ret_worker', retention: { completed: 'delete' } });
  await queue.migrate();
  const worker = db.worker({
    queue,
    tasks: {
      plain: async () => 'x',
      tx: async (_p: unknown, ctx) =>
        ctx.transaction(async (client) => {
          await client.query('CREATE TABLE IF NOT EXISTS ret_worker.side (n int)');
          await client.query('INSERT INTO ret_worker.side VALUES (1)');
          return 'y';
        }),
    },
  });
  await worker.start();
  await queue.enqueueMany([...Array.from({ length: 20 }, () => ({ task: 'plain' })), { task: 'tx' }]);
  await expect.poll(() => worker.stats().done, { timeout: 10_000 }).toBe(21);
  await worker.stop();
  expect(await db.jobCount('ret_worker')).toBe(0);
  expect((await queue.counts()).done).toBe(21);
  expect(await db.sql('SELECT n FROM ret_worker.side')).toEqual([{ n: 1 }]);
});

test('keepFinishedMs — the pruner deletes old finished jobs only, in batches, and never a live one', async () => {
  const queue = db.queue({ schema: 'ret_prune', retention: { keepFinishedMs: 60_000 } });
  await queue.migrate();
  const made = await queue.enqueueMany(
    Array.from({ length: 2_600 }, (_, i) => ({ task: 'p', payload: { i } })),
  );
  const ids = made.map((m) => m.id);
  // 2,500 finished (done, dead, cancelled) two minutes ago; 50 finished just now; 50 live.
  await db.sql(
    `UPDATE ret_prune.jobs SET status = (ARRAY['done', 'dead', 'cancelled'])[1 + id % 3],
            updated_at = now() - interval '2 minutes'
     WHERE id = ANY($1::bigint[])`,
    [ids.slice(0, 2_500)],
  );
  await db.sql(`UPDATE ret_prune.jobs SET status = 'done' WHERE id = ANY($1::bigint[])`, [
    ids.slice(2_500, 2_550),
  ]);
  await db.sql(
    `UPDATE ret_prune.jobs SET status = 'running', worker_id = 'x', lease_until = now() + interval '1 minute',
            updated_at = now() - interval '2 minutes'
     WHERE id = ANY($1::bigint[])`,
    [ids.slice(2_550, 2_575)],
  );
  await db.sql(
    `UPDATE ret_prune.jobs SET updated_at = now() - interval '2 minutes' WHERE id = ANY($1::bigint[])`,
    [ids.slice(2_575)],
  );
  const worker = db.worker({ queue, tasks: { other: async () => undefined }, reapIntervalMs: 3_600_000 });
  const pruned: number[] = [];
  worker.on('pruned', ({ deleted }) => pruned.push(deleted));
  await worker.tick.prune();
  expect(pruned).toEqual([2_500]);
  const left = await db.sql<{ status: string; n: number }>(
    'SELECT status, count(*)::int AS n FROM ret_prune.jobs GROUP BY status ORDER BY status',
  );
  expect(left).toEqual([
    { status: 'done', n: 50 },
    { status: 'pending', n: 25 },
    { status: 'running', n: 25 },
  ]);
  await worker.tick.prune();
  expect(pruned).toEqual([2_500]); // nothing more to do: no event
});

test('bad retention settings are refused with nothing made', () => {
  for (const retention of [
    { completed: 'drop' },
    { keepFinishedMs: 0 },
    { keepFinishedMs: 1.5 },
    { completed: 'delete', extra: 1 },
    'delete',
  ]) {
    expect(() => db.queue({ retention: retention as never })).toThrow(ValidationError);
  }
  const queue = db.queue();
  expect(() =>
    db.worker({ queue, tasks: { t: async () => undefined }, retention: { completed: 'delete' } }),
  ).toThrow(/set it on the Queue/);
});

test('keepFinishedMs below a second: the pruner still runs at most about once a second', async () => {
  const queue = db.queue({ schema: 'ret_floor', retention: { keepFinishedMs: 1 } });
  await queue.migrate();
  const engine = engineOf(queue);
  const prune = engine.pruneFinished.bind(engine);
  let calls = 0;
  engine.pruneFinished = (limit: number) => {
    calls++;
    return prune(limit);
  };
  const worker = db.worker({ queue, tasks: { t: async () => undefined }, reapIntervalMs: 3_600_000 });
  await worker.start();
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  await worker.stop();
  // The first tick at a random point of the first second, then every 0.8–1.2 s: at most 3.
  expect(calls).toBeGreaterThanOrEqual(1);
  expect(calls).toBeLessThanOrEqual(3);
});
