/**
 * Adversarial chaos for §11: KEYS keys, jobs enqueued in autocommit and in transactions held
 * open for a random while (late commits, some rolled back), random cancels of jobs of the keys
 * (waiting, pending or dead), handlers that sometimes die for good (maxAttempts 1: the key blocks)
 * and a loop that requeues or cancels dead heads, 3 workers (one listen:false). Afterwards, for
 * every key: no two executions overlapped; jobs enqueued in autocommit started in id order among
 * themselves; every job ended done or cancelled (the keys drained), none left waiting.
 */
import pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const KEYS = 8;
const ROUNDS = Number(process.env.ADV_ROUNDS ?? 150);
const clients: pg.Client[] = [];
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const rnd = (n: number) => Math.floor(Math.random() * n);

test('chaos: cancels, late commits, dead heads requeued or cancelled: no overlap, drained', {
  timeout: 240_000,
}, async () => {
  const queue = db.queue();
  const running = new Map<string, string>(); // key → job id running
  const violations: string[] = [];
  const starts = new Map<string, string[]>(); // key → job ids in start order
  const died = new Set<string>(); // a job dies once, then runs when requeued
  const handler = async (
    p: { key: string; die: boolean },
    ctx: { job: { id: string; attempts: number } },
  ) => {
    const other = running.get(p.key);
    if (other !== undefined) violations.push(`key ${p.key}: ${ctx.job.id} started while ${other} runs`);
    running.set(p.key, ctx.job.id);
    const list = starts.get(p.key) ?? [];
    list.push(ctx.job.id);
    starts.set(p.key, list);
    await sleep(rnd(15));
    running.delete(p.key);
    if (p.die && !died.has(ctx.job.id)) {
      died.add(ctx.job.id);
      throw new Error('dies');
    }
  };
  const workers = [
    db.worker({ queue: db.queue(), concurrency: 8, pollIntervalMs: 1000, tasks: { c: handler as never } }),
    db.worker({ queue: db.queue(), concurrency: 8, pollIntervalMs: 1000, tasks: { c: handler as never } }),
    db.worker({
      queue: db.queue(),
      concurrency: 4,
      pollIntervalMs: 300,
      listen: false,
      tasks: { c: handler as never },
    }),
  ];
  for (const w of workers) await w.start();

  const plain = new Set<string>();
  const all: string[] = [];
  const held: Promise<void>[] = [];
  let settled = 0;
  const settledCount = async () => settled;
  for (let r = 0; r < ROUNDS; r++) {
    const key = `k${rnd(KEYS)}`;
    const die = Math.random() < 0.1;
    const kind = rnd(10);
    if (kind < 6) {
      const j = await queue.enqueue('c', { key, die }, { sequence: key, maxAttempts: 1 });
      plain.add(j.id);
      all.push(j.id);
    } else if (kind < 8 && held.length - (await settledCount()) < 8) {
      const c = new pg.Client({ connectionString: db.url });
      c.on('error', () => undefined);
      clients.push(c);
      await c.connect();
      await c.query('BEGIN');
      const j = await queue.enqueue('c', { key, die }, { sequence: key, maxAttempts: 1, client: c } as never);
      const rollback = Math.random() < 0.2;
      if (!rollback) all.push(j.id);
      held.push(
        (async () => {
          await sleep(rnd(400));
          await c.query(rollback ? 'ROLLBACK' : 'COMMIT');
          await c.end();
          settled++;
        })(),
      );
    } else {
      // cancel some job of the key in any state
      const [row] = await db.sql<{ id: string }>(
        `SELECT id::text FROM ${db.jobs} WHERE sequence = $1 AND status IN ('waiting','pending','dead') ORDER BY random() LIMIT 1`,
        [key],
      );
      if (row) await queue.cancel(row.id).catch(() => undefined);
    }
    if (r % 10 === 0) {
      // dead heads: requeue or cancel, at random
      for (const d of await db.sql<{ id: string }>(`SELECT id::text FROM ${db.jobs} WHERE status = 'dead'`)) {
        if (Math.random() < 0.5) await queue.requeue(d.id).catch(() => undefined);
        else await queue.cancel(d.id).catch(() => undefined);
      }
    }
    await sleep(rnd(10));
  }
  await Promise.all(held);
  // drain: requeue dead heads until nothing is left active
  const deadline = Date.now() + 120_000;
  for (;;) {
    for (const d of await db.sql<{ id: string }>(`SELECT id::text FROM ${db.jobs} WHERE status = 'dead'`))
      await queue.requeue(d.id).catch(() => undefined);
    const [left] = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${db.jobs} WHERE status IN ('waiting','pending','running','dead')`,
    );
    if (left?.n === 0 || Date.now() > deadline) break;
    await sleep(200);
  }
  for (const w of workers) await w.stop();
  const final = await db.sql<{ id: string; sequence: string; status: string }>(
    `SELECT id::text, sequence, status FROM ${db.jobs} ORDER BY id`,
  );
  const stuck = final.filter((f) => !['done', 'cancelled'].includes(f.status));
  expect(violations).toEqual([]);
  expect(stuck, JSON.stringify(await queue.sequences())).toEqual([]);
  expect(final.map((f) => f.id).sort()).toEqual([...all].sort());
  // autocommit jobs start in id order among themselves (first start of each)
  for (const [key, ids] of starts) {
    const firsts = [...new Set(ids)].filter((id) => plain.has(id)).map(BigInt);
    const sorted = [...firsts].sort((a, b) => (a < b ? -1 : 1));
    expect(firsts, `key ${key}`).toEqual(sorted);
  }
});
