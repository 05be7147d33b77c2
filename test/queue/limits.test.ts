/**
 * SPEC §8 global limits across worker processes: eight workers of concurrency 20 drain a queue
 * with `concurrency: 5` — never more than 5 handlers at once (their start/end stamps), at about
 * the rate 5 slots allow — and a queue with `rateLimit: { limit: 50, periodMs: 1000 }` — no
 * window of one second holds more than 50 starts (the starts the database logged).
 *
 * Breaks seen failing: the limited claim without its advisory lock (store/queues.ts queueLock
 * made a no-op) ran 15 and 30 handlers at once; without logging starts (the `logged` CTE removed) the
 * rate-limited queue drained in one burst (200 starts in a second).
 */
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';
import { killChildren, startReadyFixture } from '../support/spawn.js';

const db = useTestDatabase();
const children: ChildProcess[] = [];

async function startWorker(): Promise<ChildProcess> {
  const child = await startReadyFixture('test/queue/fixtures/limited-worker.ts', { DATABASE_URL: db.url });
  children.push(child);
  return child;
}

beforeAll(async () => {
  await Promise.all(Array.from({ length: 8 }, () => startWorker()));
}, 90_000);
afterAll(() => killChildren(children));

async function drain(queueName: string, timeoutMs: number): Promise<number> {
  const started = Date.now();
  for (;;) {
    const [row] = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${db.jobs} WHERE queue = $1 AND status <> 'done'`,
      [queueName],
    );
    if (row?.n === 0) return Date.now() - started;
    if (Date.now() - started > timeoutMs)
      throw new Error(`${queueName}: ${row?.n} jobs not done after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Most intervals [start, end) that overlap at one instant. */
function maxOverlap(spans: { start: number; end: number }[]): number {
  const edges = spans.flatMap((s) => [
    { at: s.start, d: 1 },
    { at: s.end, d: -1 },
  ]);
  edges.sort((a, b) => a.at - b.at || a.d - b.d); // an end before a start at the same instant
  let now = 0;
  let max = 0;
  for (const edge of edges) {
    now += edge.d;
    max = Math.max(max, now);
  }
  return max;
}

/** Most timestamps in any window [t, t + windowMs). */
function maxInWindow(times: number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let max = 0;
  let first = 0;
  for (let last = 0; last < sorted.length; last++) {
    while ((sorted[last] as number) - (sorted[first] as number) >= windowMs) first++;
    max = Math.max(max, last - first + 1);
  }
  return max;
}

test('concurrency 5, drained by 8 processes × 20 slots: never more than 5 handlers at once', async () => {
  const queue = db.queue();
  await queue.configureQueue('limited.c5', { concurrency: 5 });
  // 20 bursts of 5: each one's NOTIFY wakes all eight workers, which race for the limited claim.
  const began = Date.now();
  for (let burst = 0; burst < 20; burst++) {
    await queue.enqueueMany(
      Array.from({ length: 5 }, () => ({ task: 'limits.job', payload: { ms: 150 }, queue: 'limited.c5' })),
    );
    await new Promise((resolve) => setTimeout(resolve, 75));
  }
  const elapsed = Date.now() - began + (await drain('limited.c5', 60_000));
  const rows = await db.sql<{ result: { start: number; end: number; pid: number } }>(
    `SELECT result FROM ${db.jobs} WHERE queue = 'limited.c5'`,
  );
  const spans = rows.map((row) => row.result);
  expect(maxOverlap(spans)).toBeLessThanOrEqual(5);
  expect(maxOverlap(spans)).toBeGreaterThanOrEqual(4); // the limit is used, not starved
  // 100 jobs × 150 ms over 5 slots is 3 s; generous for a busy 2-core machine.
  expect(elapsed).toBeLessThan(12_000);
}, 90_000);

test('rateLimit 50 per second across 8 processes: no one-second window holds more than 50 starts', async () => {
  const queue = db.queue();
  await queue.configureQueue('limited.r50', { rateLimit: { limit: 50, periodMs: 1_000 } });
  await queue.enqueueMany(
    Array.from({ length: 200 }, () => ({ task: 'limits.job', payload: { ms: 1 }, queue: 'limited.r50' })),
  );
  const elapsed = await drain('limited.r50', 60_000);
  const rows = await db.sql<{ started: number }>(
    `SELECT extract(epoch FROM run_started_at) * 1000 AS started FROM ${db.jobs} WHERE queue = 'limited.r50'`,
  );
  const starts = rows.map((row) => Number(row.started));
  expect(maxInWindow(starts, 1_000)).toBeLessThanOrEqual(50);
  // 200 starts at 50 per second: the first 50 at once, then a window every second: ≥ 3 s.
  expect(elapsed).toBeGreaterThanOrEqual(2_900);
  expect(elapsed).toBeLessThan(15_000);
}, 90_000);
