/**
 * SPEC §8 no leader: eight worker processes share a per-second schedule for 60+ ticks while
 * workers are SIGKILLed and restarted (two at a time every few seconds, and once all of them
 * for a few seconds). Every tick enqueues exactly one job — the handler is a no-op, so a tick
 * fired a second time after its first job finished would show as a second job with the same
 * tick — and, with catchUp covering the full outage, no tick is without a job: the ones that
 * passed while every worker was dead are fired when the first one is back.
 *
 * Break: drop `FOR UPDATE OF sc SKIP LOCKED` from the scheduler's lockDue (store/schedule.ts):
 * racing workers fire ticks twice (each tick's first job is done before the second firing).
 */
import type { ChildProcess } from 'node:child_process';
import { afterAll, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';
import { killChildren, startReadyFixture } from '../support/spawn.js';

const db = useTestDatabase();
const FIXTURE = 'test/schedule/fixtures/schedule-worker.ts';
const children: ChildProcess[] = [];
afterAll(() => killChildren(children));

/** Starts a worker process; resolves once it printed `ready`. */
async function startWorker(): Promise<ChildProcess> {
  const child = await startReadyFixture(FIXTURE, { DATABASE_URL: db.url });
  children.push(child);
  return child;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function kill(child: ChildProcess): Promise<void> {
  return killChildren([child]);
}

test('8 worker processes, a per-second schedule, kills and restarts: exactly one job per tick', async () => {
  const queue = db.queue();
  let alive = await Promise.all(Array.from({ length: 8 }, () => startWorker()));
  // overlap: true — every tick fires whether or not the previous tick's job has run yet (on a
  // loaded machine it may not have within a second, and overlap: false would skip the tick);
  // catchUp: 100 — ticks missed while no worker ran (the full outage), or while every worker
  // was too busy to fire on time, are fired late rather than skipped: none may be missing.
  await queue.schedule('fleet', {
    cron: '* * * * * *',
    task: 'fleet.tick',
    overlap: true,
    catchUp: 100,
  });
  const started = Date.now();
  let outage: { from: number; to: number } | null = null;

  while (Date.now() - started < 64_000) {
    await sleep(4_000);
    if (outage === null && Date.now() - started > 30_000) {
      // Every worker gone at once for a few seconds.
      const from = Date.now();
      await Promise.all(alive.map(kill));
      await sleep(3_500);
      const to = Date.now();
      alive = await Promise.all(Array.from({ length: 8 }, () => startWorker()));
      outage = { from, to };
      continue;
    }
    // Two random workers crash (possibly mid-firing), two new ones start.
    for (let i = 0; i < 2; i++) {
      const victim = alive.splice(Math.floor(Math.random() * alive.length), 1)[0];
      if (victim) await kill(victim);
    }
    alive.push(...(await Promise.all([startWorker(), startWorker()])));
  }
  await queue.pauseSchedule('fleet');
  await sleep(1_500); // the last firings commit; their jobs run
  await killChildren(alive);

  const rows = await db.sql<{ dedupe_key: string }>(
    `SELECT dedupe_key FROM ${db.jobs} WHERE task = 'fleet.tick' ORDER BY id`,
  );
  const ticks = rows.map((row) => Date.parse(row.dedupe_key.slice('skiplock:schedule:fleet:'.length)));
  const seen = new Map<number, number>();
  for (const tick of ticks) seen.set(tick, (seen.get(tick) ?? 0) + 1);
  const doubled = [...seen].filter(([, n]) => n > 1).map(([tick]) => new Date(tick).toISOString());
  expect(doubled, 'ticks fired more than once').toEqual([]);

  const sorted = [...seen.keys()].sort((a, b) => a - b);
  const first = sorted[0] as number;
  const last = sorted.at(-1) as number;
  expect(sorted.length).toBeGreaterThanOrEqual(55);
  const missing: number[] = [];
  for (let tick = first; tick <= last; tick += 1_000) if (!seen.has(tick)) missing.push(tick);
  expect(
    missing.map((t) => new Date(t).toISOString()),
    'ticks without a job',
  ).toEqual([]);
  // The outage's ticks were fired late, by the first worker back (catchUp), not skipped.
  const window = outage as { from: number; to: number };
  expect(
    sorted.filter((tick) => tick > window.from && tick < window.to - 1_000).length,
  ).toBeGreaterThanOrEqual(2);
}, 150_000);
