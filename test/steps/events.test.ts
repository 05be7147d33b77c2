/**
 * SPEC §12 events as set-once latches and ctx.waitForEvent: emitted before the wait (returned at
 * once), after it (the waiting job made pending, exactly once), twice (the second a no-op), in a
 * rolled-back transaction (nothing set, nobody woken), with a timeout (null); 1,000 jobs on one
 * event all woken by the one emit; no lost wake-up when the emit races the wait — proven with
 * each side's transaction held open at the worst moment, and with 500 raced rounds through a
 * worker; flows: a job waiting for an event is not done, so its dependents wait.
 *
 * Deliberate breaks seen failing (then restored):
 * - `emit_event` (migration 20) setting the event and waking the waiters in one statement (two
 *   CTEs: one snapshot, taken before its row lock was granted): "waiter registered first and held
 *   open" failed (the job stayed waiting after the emit returned true — the EvalPlanQual/snapshot
 *   trap), and so did the 500 raced rounds (6 jobs left waiting).
 * - `step_wait` reading the event without FOR SHARE *and* without its preceding
 *   `INSERT … ON CONFLICT DO NOTHING`: "emitter first and held open" failed (the waiter never
 *   waited for the emit, and suspended on an event being set). Without FOR SHARE alone it still
 *   passed: the insert's unique check also waits for the emit's uncommitted version of the row —
 *   each of the two makes the waiter wait; both are kept.
 */
import { expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { DatabaseError } from '../../src/errors.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { heldClients, someoneBlocked } from '../support/held-clients.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);
const client = heldClients(db);

async function status(id: string): Promise<string | undefined> {
  return (await db.sql<{ status: string }>(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id]))[0]?.status;
}

/** A waiting handler: returns what waitForEvent gave, counting its runs. */
function waiter(runs: Map<string, number>, timeoutMs?: number) {
  return async (payload: { event: string }, ctx: JobContext) => {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
    const got = await ctx.waitForEvent('got', payload.event, timeoutMs === undefined ? {} : { timeoutMs });
    return { got };
  };
}

test('emit before the wait, after it, twice; in a rolled-back transaction; with a timeout', async () => {
  const queue = db.queue();
  const runs = new Map<string, number>();
  const worker = db.worker({
    queue,
    tasks: { 'ev.wait': waiter(runs), 'ev.timeout': waiter(runs, 300) },
    pollIntervalMs: 60_000,
  });
  await worker.start();

  // before: the wait returns it at once
  expect(await queue.emitEvent('early', { n: 1 })).toBe(true);
  const a = await queue.enqueue('ev.wait', { event: 'early' });
  const jobA = await queue.waitFor(a.id, { timeoutMs: 20_000 });
  expect(jobA.result).toEqual({ got: { payload: { n: 1 } } });
  expect(runs.get(a.id)).toBe(1);

  // after: the job waits (no lease, attempt given back), the emit makes it pending
  const b = await queue.enqueue('ev.wait', { event: 'late' });
  await expect.poll(() => status(b.id)).toBe('waiting');
  const [waiting] = await db.sql<{
    attempts: number;
    lease_until: Date | null;
    worker_id: string | null;
    wait_event: string;
  }>(`SELECT attempts, lease_until, worker_id, wait_event FROM ${db.jobs} WHERE id = $1`, [b.id]);
  expect(waiting).toEqual({ attempts: 0, lease_until: null, worker_id: null, wait_event: 'late' });
  const steps = await queue.steps(b.id);
  expect(steps).toMatchObject([{ name: 'got', kind: 'event', pending: true, event: 'late', value: null }]);

  // in a rolled-back transaction: nothing set, nobody woken
  const tx = await client();
  await tx.query('BEGIN');
  expect(await queue.emitEvent('late', 'rolled back', { client: tx })).toBe(true);
  await tx.query('ROLLBACK');
  expect(await status(b.id)).toBe('waiting');
  expect(await db.sql(`SELECT set_at FROM ${S}.events WHERE name = 'late'`)).toEqual([{ set_at: null }]);

  expect(await queue.emitEvent('late', { n: 2 })).toBe(true);
  const jobB = await queue.waitFor(b.id, { timeoutMs: 20_000 });
  expect(jobB.result).toEqual({ got: { payload: { n: 2 } } });
  expect(jobB.attempts).toBe(1);
  expect(runs.get(b.id)).toBe(2);

  // twice: the second changes nothing
  expect(await queue.emitEvent('late', { n: 3 })).toBe(false);
  expect(await db.sql(`SELECT payload FROM ${S}.events WHERE name = 'late'`)).toEqual([
    { payload: { n: 2 } },
  ]);
  expect((await queue.steps(b.id))[0]).toMatchObject({ name: 'got', value: { payload: { n: 2 } } });
  expect((await queue.steps(b.id))[0]?.pending).toBeUndefined();

  // a timeout: null
  const c = await queue.enqueue('ev.timeout', { event: 'never' });
  const jobC = await queue.waitFor(c.id, { timeoutMs: 20_000 });
  expect(jobC.result).toEqual({ got: null });
  expect(jobC.attempts).toBe(1);
  // an event emitted after the timeout answered changes nothing for it
  await queue.emitEvent('never', 'too late');
  expect((await queue.steps(c.id))[0]?.value).toBeNull();

  // bad input: a typed error, nothing written
  await expect(queue.emitEvent('', 1)).rejects.toMatchObject({ code: 'ERR_VALIDATION' });
  await expect(queue.emitEvent('nan', Number.NaN)).rejects.toMatchObject({ code: 'ERR_VALIDATION' });
  expect(await db.sql(`SELECT 1 FROM ${S}.events WHERE name = 'nan'`)).toEqual([]);
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
});

test('emitEvent in a REPEATABLE READ transaction is refused (its snapshot could hide waiters)', async () => {
  const queue = db.queue();
  const tx = await client();
  await tx.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await expect(queue.emitEvent('rr', 1, { client: tx })).rejects.toBeInstanceOf(DatabaseError);
  await tx.query('ROLLBACK');
});

test('no lost wake-up, waiter registered first and held open: the emit waits for it, then wakes it', async () => {
  const queue = db.queue();
  const { id } = await queue.enqueue('ev.held', {});
  const [lease] = await queue.claim('held-waiter', { leaseMs: 60_000 });
  expect(lease?.id).toBe(id);
  const tx = await client();
  await tx.query('BEGIN');
  const { rows } = await tx.query(
    `SELECT state FROM ${S}.step_wait($1, $2, $3, $4::bigint, 'got', 'held-1', NULL)`,
    [lease!.id, lease!.workerId, lease!.attempt, lease!.token],
  );
  expect(rows[0].state).toBe('waiting');
  // the emit starts while the waiter's registration is uncommitted: it must wait for it
  const emitted = queue.emitEvent('held-1', 'payload');
  await someoneBlocked(db);
  await tx.query('COMMIT');
  expect(await emitted).toBe(true);
  expect(await status(id)).toBe('pending');
  expect(await db.sql(`SELECT wait_event FROM ${db.jobs} WHERE id = $1`, [id])).toEqual([
    { wait_event: null },
  ]);
  expect(await queue.cancel(id)).toBe(true); // out of the next test's claims
});

test('no lost wake-up, emitter first and held open: the waiter waits for its commit, then gets the event at once', async () => {
  const queue = db.queue();
  const { id } = await queue.enqueue('ev.held', {});
  const [lease] = await queue.claim('held-waiter-2', { leaseMs: 60_000 });
  // the event's row exists, not set (as when another job waits for it already): the emit then
  // holds a row lock on it, which only FOR SHARE waits for (an insert of the name waits only for
  // an uncommitted insert)
  await db.sql(`INSERT INTO ${S}.events (name) VALUES ('held-2')`);
  const tx = await client();
  await tx.query('BEGIN');
  expect(await queue.emitEvent('held-2', { first: true }, { client: tx })).toBe(true);
  const waited = engineOf(queue).steps.wait(lease!, 'got', 'held-2', null);
  await someoneBlocked(db);
  await tx.query('COMMIT');
  expect(await waited).toEqual({ state: 'set', valueJson: '{"payload": {"first": true}}' });
  expect(await status(id)).toBe('running');
  // and an emit that rolls back while a waiter waited for it: the waiter then suspends
  const other = await queue.enqueue('ev.held', {});
  const [lease2] = await queue.claim('held-waiter-3', { leaseMs: 60_000 });
  expect(lease2?.id).toBe(other.id);
  const tx2 = await client();
  await tx2.query('BEGIN');
  await queue.emitEvent('held-3', 1, { client: tx2 });
  const waited2 = engineOf(queue).steps.wait(lease2!, 'got', 'held-3', null);
  await someoneBlocked(db);
  await tx2.query('ROLLBACK');
  expect((await waited2).state).toBe('waiting');
  expect(await status(other.id)).toBe('waiting');
});

test('500 rounds of an emit racing the wait through a worker: every job ends done with the payload', async () => {
  const queue = db.queue();
  const runs = new Map<string, number>();
  const worker = db.worker({
    queue,
    tasks: { 'ev.race': waiter(runs) },
    concurrency: 20,
    pollIntervalMs: 60_000,
  });
  await worker.start();
  const ROUNDS = 500;
  const ids: string[] = [];
  for (let start = 0; start < ROUNDS; start += 50) {
    const round = Array.from({ length: 50 }, (_, i) => `race-${start + i}`);
    const jobs = await queue.enqueueMany(round.map((event) => ({ task: 'ev.race', payload: { event } })));
    ids.push(...jobs.map((j) => j.id));
    // the emits land spread over 0–300 ms: before some jobs are claimed, while others register
    // their wait, after others wait
    await Promise.all(
      round.map(async (event, i) => {
        await new Promise((r) => setTimeout(r, (i * 37) % 300));
        expect(await queue.emitEvent(event, { event })).toBe(true);
      }),
    );
  }
  await expect
    .poll(
      async () =>
        (await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = 'ev.race' AND status <> 'done'`)).length,
      {
        timeout: 30_000,
      },
    )
    .toBe(0);
  const results = await db.sql<{
    id: string;
    result: { got: { payload: { event: string } } };
    attempts: number;
    n: number;
  }>(
    `SELECT id::text AS id, result, attempts, payload->>'event' AS event FROM ${db.jobs} WHERE task = 'ev.race'`,
  );
  for (const job of results) {
    expect(job.result.got.payload.event).toBe((job as unknown as { event: string }).event);
    expect(job.attempts).toBe(1);
  }
  const suspendedOnes = [...runs.values()].filter((n) => n === 2).length;
  process.stdout.write(
    `event race: ${suspendedOnes} of ${ROUNDS} jobs waited, the rest found the event set\n`,
  );
  expect([...runs.values()].every((n) => n === 1 || n === 2)).toBe(true);
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
}, 60_000);

test('1,000 jobs waiting on one event all become pending, once, by one emit', async () => {
  const queue = db.queue();
  const runs = new Map<string, number>();
  const worker = db.worker({ queue, tasks: { 'ev.many': waiter(runs) }, concurrency: 20 });
  await worker.start();
  const jobs = await queue.enqueueMany(
    Array.from({ length: 1_000 }, () => ({ task: 'ev.many', payload: { event: 'go' } })),
  );
  await expect
    .poll(
      async () =>
        (await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = 'ev.many' AND status = 'waiting'`)).length,
      {
        timeout: 30_000,
      },
    )
    .toBe(1_000);
  await worker.stop();
  expect(await queue.emitEvent('go', 'now')).toBe(true);
  const counts = await db.sql<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM ${db.jobs} WHERE task = 'ev.many' GROUP BY status`,
  );
  expect(counts).toEqual([{ status: 'pending', n: 1_000 }]);
  expect(await queue.emitEvent('go', 'again')).toBe(false);
  const again = db.worker({ queue, tasks: { 'ev.many': waiter(runs) }, concurrency: 50 });
  await again.start();
  await expect
    .poll(
      async () =>
        (await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = 'ev.many' AND status <> 'done'`)).length,
      {
        timeout: 30_000,
      },
    )
    .toBe(0);
  for (const { id } of jobs) expect(runs.get(id)).toBe(2);
  await again.stop();
  await queue.close(); // connections are shared with other suites on this server
}, 90_000);

test('flows: a job waiting for an event is not done, so its dependents wait; prune keeps the events a waiting job needs', async () => {
  const queue = db.queue();
  const runs = new Map<string, number>();
  const worker = db.worker({
    queue,
    tasks: { 'ev.parent': waiter(runs), 'ev.child': async () => 'child ran' },
  });
  await worker.start();
  const parent = await queue.enqueue('ev.parent', { event: 'approve' });
  await expect.poll(() => status(parent.id)).toBe('waiting');
  // (the dependent is added once the parent waits: an enqueue with dependsOn whose commit locks a
  // pending dependency while a claim passes makes that claim skip it, with no hint after — a
  // lost wake-up of workflows reported separately, not this test's subject)
  const child = await queue.enqueue('ev.child', {}, { dependsOn: [parent.id] });
  expect(await status(child.id)).toBe('waiting');
  // an unset event that a waiting job needs is kept by prune (olderThanMs 0 takes everything else)
  await queue.emitEvent('unrelated', 1);
  await queue.prune({ olderThanMs: 0 });
  const names = (await db.sql<{ name: string }>(`SELECT name FROM ${S}.events`)).map((e) => e.name);
  expect(names).toContain('approve');
  expect(names).not.toContain('unrelated');
  expect(names).not.toContain('early');
  await queue.emitEvent('approve', 'yes');
  expect((await queue.waitFor(child.id, { timeoutMs: 20_000 })).status).toBe('done');
  expect((await queue.get(parent.id))?.result).toEqual({ got: { payload: 'yes' } });
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
});
