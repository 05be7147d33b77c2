/**
 * SPEC §8 no leader: eight worker processes share a per-second schedule for 60+ ticks while
 * workers are SIGKILLed and restarted (two at a time every few seconds, and once all of them
 * for a few seconds). Every tick enqueues exactly one job — the handler is a no-op, so a tick
 * fired a second time after its first job finished would show as a second job with the same
 * tick — and the only ticks without a job are those of the full outage that catchUp 'latest'
 * leaves out (all but the latest of them).
 *
 * Break: drop `FOR UPDATE OF sc SKIP LOCKED` from the scheduler's lockDue (store/schedule.ts):
 * racing workers fire ticks twice (each tick's first job is done before the second firing).
 */
import type { ChildProcess } from 'node:child_process';
import { afterAll, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';
import { killChildren, startFixture } from '../support/spawn.js';

const db = useTestDatabase();
const FIXTURE = 'test/schedule/fixtures/schedule-worker.ts';
const children: ChildProcess[] = [];
afterAll(() => killChildren(children));

/** Starts a worker process; resolves once it printed `ready`. */
async function startWorker(): Promise<ChildProcess> {
  const fixture = startFixture(FIXTURE, { DATABASE_URL: db.url });
  children.push(fixture.child);
  const deadline = Date.now() + 30_000;
  while (!fixture.stdout().includes('ready')) {
    if (fixture.child.exitCode !== null || Date.now() > deadline) {
      throw new Error(`schedule worker did not start: ${fixture.stderr()}`);
    }
    await sleep(50);
  }
  return fixture.child;
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
  await queue.schedule('fleet', { cron: '* * * * * *', task: 'fleet.tick' });
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
  // Only ticks of the full outage may be missing (catchUp 'latest' runs only the latest of them).
  const window = outage as { from: number; to: number };
  const outside = missing.filter((tick) => tick < window.from - 1_000 || tick > window.to + 1_000);
  expect(
    outside.map((t) => new Date(t).toISOString()),
    'ticks missing while workers ran',
  ).toEqual([]);
  expect(missing.length).toBeLessThanOrEqual(Math.ceil((window.to - window.from) / 1_000) + 1);
}, 150_000);
