/**
 * §11 sequences × §12 ctx.waitForEvent: a sequenced head that suspends waiting for an event holds
 * its key (as a delayed or retrying head does) until it ends (migration 24). Each test failed on
 * main before migrations 23 and 24 (checked 2026-12-04, with the fix left out):
 * - the suspended head triggered its key's advance, which made the head itself pending again at
 *   once (its wait_event still set): the worker reran it hundreds of times a second until the
 *   event came ("pending, claims 2223" where "waiting, claims 1" was expected);
 * - with a smaller id committed late, the advance made that job pending instead: it ran beside the
 *   suspended head, and emitEvent failed on jobs_sequence_head_idx (SQLSTATE 23505) while it held
 *   the key;
 * - when that job died (the key blocked), the wake of timed-out waits failed the same way on every
 *   try: the head and an unrelated job X, both past their timeouts, stayed waiting for good;
 * - a cancelled suspended head: its key moves on (the trigger fires for it).
 */
import { expect, test } from 'vitest';
import type { Queue } from '../../src/queue.js';
import type { JobContext } from '../../src/worker/options.js';
import type { Worker } from '../../src/worker/worker.js';
import { useTestDatabase } from '../support/database.js';
import { heldClients } from '../support/held-clients.js';

const db = useTestDatabase();
const lateClient = heldClients(db);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function rows(ids: string[]) {
  return db.sql<{ status: string; claims: number }>(
    `SELECT status, claims::int AS claims FROM ${db.jobs} WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [ids],
  );
}
const statuses = async (ids: string[]) => (await rows(ids)).map((r) => r.status);

function latch(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

/** A started worker (4 slots, no poll) running `task`, and the `n` of each job it started, in order. */
async function recording(
  task: string,
  handler: (p: { n: string }, ctx: JobContext) => Promise<unknown>,
): Promise<{ queue: Queue; worker: Worker; started: string[] }> {
  const queue = db.queue();
  const started: string[] = [];
  const worker = db.worker({
    queue,
    concurrency: 4,
    pollIntervalMs: 60_000,
    tasks: {
      [task]: async (p: { n: string }, ctx: JobContext) => {
        started.push(p.n);
        return handler(p, ctx);
      },
    },
  });
  await worker.start();
  return { queue, worker, started };
}

test('a suspended head holds its key: no rerun before the event, the next job after it', async () => {
  const { queue, worker, started } = await recording('w1', async (p, ctx) => {
    if (p.n === 'W') await ctx.waitForEvent('go', 'ev-1');
  });
  const w = await queue.enqueue('w1', { n: 'W' }, { sequence: 'k1' });
  const n = await queue.enqueue('w1', { n: 'N' }, { sequence: 'k1' });
  await expect.poll(() => rows([w.id])).toEqual([{ status: 'waiting', claims: 1 }]);
  await sleep(1000);
  expect(await rows([w.id, n.id])).toEqual([
    { status: 'waiting', claims: 1 },
    { status: 'waiting', claims: 0 },
  ]);
  expect(await queue.sequences()).toEqual([{ key: 'k1', headId: w.id, headStatus: 'waiting', queued: 1 }]);
  expect(await queue.emitEvent('ev-1', 1)).toBe(true);
  await expect.poll(() => statuses([w.id, n.id])).toEqual(['done', 'done']);
  await worker.stop();
  expect(started).toEqual(['W', 'W', 'N']);
});

test('late commit behind a suspended head: it waits for the head, and the emit wakes the head', async () => {
  const wGo = latch();
  const { queue, worker, started } = await recording('w2', async (p, ctx) => {
    if (p.n === 'W') {
      await wGo.promise;
      await ctx.waitForEvent('go', 'ev-2');
    }
  });
  const c1 = await lateClient();
  await c1.query('BEGIN');
  const a = await queue.enqueue('w2', { n: 'A' }, { sequence: 'k2', client: c1 } as never);
  const w = await queue.enqueue('w2', { n: 'W' }, { sequence: 'k2' });
  await expect.poll(() => started.includes('W')).toBe(true);
  await c1.query('COMMIT'); // A, the smaller id, commits after W started: it runs right after W
  wGo.open();
  await expect.poll(() => rows([w.id])).toEqual([{ status: 'waiting', claims: 1 }]);
  await queue.claim('probe', { queues: ['nothing-here'] }); // a pass looks at A's arrival
  await sleep(500);
  expect(await statuses([a.id, w.id])).toEqual(['waiting', 'waiting']);
  expect(await queue.emitEvent('ev-2', 1)).toBe(true); // was: 23505 on jobs_sequence_head_idx
  await expect.poll(() => statuses([a.id, w.id])).toEqual(['done', 'done']);
  await worker.stop();
  expect(started).toEqual(['W', 'W', 'A']);
});

test('a wait that times out behind a late commit; an unrelated wait times out beside it', async () => {
  const wGo = latch();
  const { queue, worker, started } = await recording('w3', async (p, ctx) => {
    if (p.n === 'W') {
      await wGo.promise;
      return ctx.waitForEvent('go', 'never-3', { timeoutMs: 800 });
    }
    if (p.n === 'X') return ctx.waitForEvent('go', 'never-x', { timeoutMs: 1200 });
    if (p.n === 'A') throw new Error('A fails for good'); // the key stays blocked behind it
    return null;
  });
  const c1 = await lateClient();
  await c1.query('BEGIN');
  const a = await queue.enqueue('w3', { n: 'A' }, { sequence: 'k3', client: c1, maxAttempts: 1 } as never);
  const w = await queue.enqueue('w3', { n: 'W' }, { sequence: 'k3' });
  await expect.poll(() => started.includes('W')).toBe(true);
  await c1.query('COMMIT');
  wGo.open();
  const x = await queue.enqueue('w3', { n: 'X' });
  // W times out and ends; then A runs and dies; X, unrelated, times out and ends
  await expect
    .poll(() => statuses([a.id, w.id, x.id]), { timeout: 15_000 })
    .toEqual(['dead', 'done', 'done']);
  await worker.stop();
  expect(started.filter((n) => n !== 'X')).toEqual(['W', 'W', 'A']);
});

test('a suspended head cancelled: its key moves on', async () => {
  const { queue, worker, started } = await recording('w4', async (p, ctx) => {
    if (p.n === 'W') await ctx.waitForEvent('go', 'ev-4');
  });
  const w = await queue.enqueue('w4', { n: 'W' }, { sequence: 'k4' });
  const n = await queue.enqueue('w4', { n: 'N' }, { sequence: 'k4' });
  await expect.poll(() => rows([w.id])).toEqual([{ status: 'waiting', claims: 1 }]);
  await queue.cancel(w.id);
  await expect.poll(() => statuses([w.id, n.id])).toEqual(['cancelled', 'done']);
  await worker.stop();
  expect(started).toEqual(['W', 'N']);
});
