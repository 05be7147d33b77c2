/**
 * SPEC §12 ctx.sleep: a sleeping job is pending at its instant with its lease and slot freed and
 * its attempt not spent; the wake-up timer of §1.9 runs it at the instant; on the run past the
 * instant the sleep resolves at once and the steps before it are not run again. A sleep survives
 * a worker restart.
 *
 * Deliberate break seen failing (then restored): `step_sleep` (migration 20) without
 * `attempts = attempts - 1`: "a sleep across a worker restart" failed (attempts 2, expected 1).
 */
import { expect, test } from 'vitest';
import { JobSuspended } from '../../src/errors.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

test('1,000 jobs sleeping 2 s take no slot, resume within the wake-up bound, attempts unchanged', async () => {
  const queue = db.queue();
  const SLEEPERS = 1_000;
  const QUICK = 200;
  const SLEEP_MS = 2_000;
  const before: Record<string, number> = {};
  const resumedAt = new Map<string, number>();
  let quickDone = 0;
  /** Sleepers resumed by the time the last quick job ran. */
  let resumedBeforeQuick = -1;
  const worker = db.worker({
    queue,
    concurrency: 10,
    prefetch: 0, // running in the database = in a slot
    pollIntervalMs: 60_000, // the wake-up timer, not the poll, must bring them back
    tasks: {
      'sleep.nap': async (_p: unknown, ctx: JobContext) => {
        await ctx.step('before', () => {
          before[ctx.job.id] = (before[ctx.job.id] ?? 0) + 1;
          return Date.now();
        });
        await ctx.sleep('nap', SLEEP_MS);
        resumedAt.set(ctx.job.id, Date.now());
        return 'rested';
      },
      'sleep.quick': async () => {
        quickDone++;
        if (quickDone === QUICK) resumedBeforeQuick = resumedAt.size;
        return 'quick';
      },
    },
  });
  const suspended: JobSuspended[] = [];
  const wakeAt = new Map<string, number>();
  worker.on('job:suspended', ({ job, until, kind }) => {
    suspended.push(new JobSuspended(job.id, kind, until, null));
    wakeAt.set(job.id, until?.getTime() ?? Number.NaN);
  });
  await worker.start();
  const sleepers = await queue.enqueueMany(
    Array.from({ length: SLEEPERS }, () => ({ task: 'sleep.nap', payload: {} })),
  );
  await expect.poll(() => suspended.length, { timeout: 20_000 }).toBe(SLEEPERS);
  const allSuspendedAt = Date.now();
  // every sleeper is pending, no lease, attempt given back
  const [state] = await db.sql<{ pending: number; running: number; attempts: number; leased: number }>(
    `SELECT count(*) FILTER (WHERE status = 'pending')::int AS pending, count(*) FILTER (WHERE status = 'running')::int AS running,
            max(attempts)::int AS attempts, count(lease_until)::int AS leased
     FROM ${db.jobs} WHERE task = 'sleep.nap'`,
  );
  // (the first ones may already be due again if suspending 1,000 took longer than 2 s)
  expect(state?.running).toBeLessThanOrEqual(10);
  expect(state?.attempts).toBeLessThanOrEqual(1);
  // the slots are free: quick jobs run while they sleep
  await queue.enqueueMany(Array.from({ length: QUICK }, () => ({ task: 'sleep.quick', payload: {} })));
  await expect.poll(() => quickDone, { timeout: 20_000 }).toBe(QUICK);
  // the quick jobs ran while the sleepers slept (unless suspending 1,000 took nearly 2 s here)
  const earliestWake = Math.min(...suspended.map((s) => s.until?.getTime() ?? Number.POSITIVE_INFINITY));
  if (allSuspendedAt < earliestWake - 1_000) expect(resumedBeforeQuick).toBe(0);
  await expect
    .poll(() => resumedAt.size, { timeout: 30_000 })
    .toBe(SLEEPERS)
    .catch(async (error: unknown) => {
      // seen once in CI (2026-12-04, Node 20 × PostgreSQL 15 pass): 997 of 1,000 resumed — say
      // where the others are, for the next look
      const missing = sleepers.filter(({ id }) => !resumedAt.has(id)).map(({ id }) => id);
      const rows = await db.sql(
        `SELECT id::text, status, run_after, now() AS now, claims, attempts, lease_until, worker_id
           FROM ${db.jobs} WHERE id = ANY($1::bigint[])`,
        [missing],
      );
      throw new Error(`not resumed: ${JSON.stringify(rows)}`, { cause: error });
    });
  const jobs = await db.sql<{ id: string }>(`SELECT id::text AS id FROM ${db.jobs} WHERE task = 'sleep.nap'`);
  await expect
    .poll(
      async () =>
        (await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = 'sleep.nap' AND status <> 'done'`)).length,
    )
    .toBe(0);
  for (const job of await db.sql<{ attempts: number }>(
    `SELECT attempts FROM ${db.jobs} WHERE task = 'sleep.nap'`,
  ))
    expect(job.attempts).toBe(1);
  expect(Object.values(before).every((n) => n === 1)).toBe(true);
  expect(jobs.length).toBe(SLEEPERS);
  // resume lateness: each job's instant (database time, as job:suspended said) to its resumption here
  const lateness = sleepers.map(({ id }) => (resumedAt.get(id) ?? 0) - (wakeAt.get(id) ?? 0));
  lateness.sort((a, b) => a - b);
  const p99 = lateness[Math.floor(lateness.length * 0.99)] ?? 0;
  process.stdout.write(
    `sleep: 1,000 sleepers of 2 s, resume lateness p50 ${lateness[500]} ms, p99 ${p99} ms\n`,
  );
  // generous: a loaded 2-core machine runs 1,000 resumptions through 10 slots
  expect(p99).toBeLessThan(15_000);
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
}, 90_000);

test('a sleep across a worker restart: the next worker runs it at its instant, the steps before it not again', async () => {
  const queue = db.queue();
  const runs: string[] = [];
  const tasks = {
    'sleep.restart': async (_p: unknown, ctx: JobContext) => {
      await ctx.step('first', () => {
        runs.push('first');
        return 1;
      });
      await ctx.sleep('wait', { until: new Date(Date.now() + 1_500) });
      runs.push('after');
      return 'woke';
    },
  };
  const a = db.worker({ queue, tasks });
  await a.start();
  const { id } = await queue.enqueue('sleep.restart', {});
  await expect.poll(async () => (await queue.get(id))?.status === 'pending' && runs.length === 1).toBe(true);
  await a.stop();
  const b = db.worker({ queue, tasks, pollIntervalMs: 60_000 });
  await b.start();
  const job = await queue.waitFor(id, { timeoutMs: 20_000 });
  expect(job.status).toBe('done');
  expect(job.attempts).toBe(1);
  expect(runs).toEqual(['first', 'after']);
  const steps = await queue.steps(id);
  expect(steps.map((s) => [s.name, s.kind])).toEqual([
    ['first', 'step'],
    ['wait', 'sleep'],
  ]);
  // the stored instant is the one of the first run (fixed once, database time)
  expect(steps[1]?.wakeAt).toBeInstanceOf(Date);
  expect(job.updatedAt.getTime()).toBeGreaterThanOrEqual(steps[1]!.wakeAt!.getTime() - 5);
  await b.stop();
  await queue.close(); // connections are shared with other suites on this server
});
