/**
 * Guards SPEC §1.5 — Nothing is lost: every job ends `done`, `dead` or `cancelled`, or is
 * `pending`, or is `running` under a live lease; a crashed worker's jobs come back through the
 * reaper when the lease expires in database time (recovery by lease ownership, never by guessing
 * a timeout), and a crash spends the attempt so a poison job ends `dead`. Leases are expired in
 * SQL (`db.expireLease`) or by waiting for a real short lease while polling the database: no
 * clock stubs, no fixed sleeps.
 *
 * Deliberate breaks seen failing (in a private copy of the tree, never here), all in the reap
 * statement of src/store/statements.ts:
 * - dropping `lease_until < now()` (from both the CTE and the outer re-check): the live-lease
 *   test fails at once (reap() returns a job whose lease is live), and the conservation run fails.
 * - reaping to 'pending' whatever the attempts (no `attempts >= max_attempts THEN 'dead'`): the
 *   poison job never dies.
 * - dropping `FOR UPDATE SKIP LOCKED` and the outer `status = 'running' AND lease_until < now()`
 *   re-check: concurrent reapers report the same ids twice.
 * Dropping `lease_until < now()` from only one of the CTE or the outer re-check is masked by the
 * other. Outside reap, making release() leave the job 'running' (lease cleared) fails the
 * conservation run at the first release.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, beforeEach, expect, test } from 'vitest';
import { DedupeConflictError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import type { ClaimedJob, JobStatus, Lease } from '../../src/types.js';
import { JOB_STATUSES } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { prng } from './fixtures/claim-loop.js';
import { killAllFixtures, spawnFixture } from './fixtures/spawn.js';

const db = useTestDatabase();

beforeEach(async () => {
  await db.sql(`TRUNCATE ${db.jobs}`);
});

afterEach(killAllFixtures);

const byId = (a: string, b: string) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0);
const sortedIds = (ids: Iterable<string>) => [...ids].sort(byId);

/** Polls the database until `check` holds (no fixed sleeps: each round asks the database). */
async function pollUntil(what: string, check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await delay(20);
  }
}

async function statusesOf(ids: readonly string[]) {
  return db.sql<{
    id: string;
    status: JobStatus;
    attempts: number;
    leased: boolean;
    last_error: string | null;
  }>(
    `SELECT id::text AS id, status, attempts, lease_until IS NOT NULL AS leased, last_error
     FROM ${db.jobs} WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [ids],
  );
}

test('a live lease is never reaped; an expired one is, spending the attempt, until the job is dead', async () => {
  const queue = db.queue({ poolSize: 2 });
  const { id } = await queue.enqueue('poison', { crashes: 'always' }, { maxAttempts: 3 });
  const { id: steadyId } = await queue.enqueue('steady', {});
  const [steady] = await queue.claim('steady-worker', { tasks: ['steady'], leaseMs: 600_000 });
  expect(steady?.id).toBe(steadyId);

  for (let attempt = 1; attempt <= 3; attempt++) {
    const [job] = await queue.claim(`crasher-${attempt}`, { tasks: ['poison'], leaseMs: 600_000 });
    expect(job).toMatchObject({ id, attempt, status: 'running' });
    // Live leases (this one and the steady job's): nothing to reap, nothing changes.
    expect(await queue.reap()).toEqual([]);
    expect(await queue.get(id)).toMatchObject({ status: 'running', attempts: attempt });

    await db.expireLease(id); // the worker "crashed" and its lease ran out, in database time
    expect(await queue.reap()).toEqual([id]);
    const reaped = await queue.get(id);
    expect(reaped).toMatchObject({
      status: attempt < 3 ? 'pending' : 'dead',
      attempts: attempt, // the crash spent the attempt
      leaseUntil: null,
    });
    expect(reaped?.lastError).toMatch(/^LeaseExpired/);
    // The crashed owner's lease no longer owns anything; reaping again finds nothing.
    expect(await queue.complete(job!)).toBe(false);
    expect(await queue.reap()).toEqual([]);
  }

  expect(await queue.claim('anyone', { tasks: ['poison'] })).toEqual([]); // dead jobs are not claimed
  expect(await queue.get(id)).toMatchObject({ status: 'dead', attempts: 3 });
  // The job under a live lease was never touched, and its owner still finishes it.
  expect(await queue.get(steadyId)).toMatchObject({ status: 'running', attempts: 1, lastError: null });
  expect(await queue.complete(steady!)).toBe(true);
});

test("a SIGKILLed worker's jobs come back through reap() once their leases expire", async () => {
  const queue = db.queue({ poolSize: 2 });
  const enqueued = await queue.enqueueMany(
    Array.from({ length: 20 }, (_, i) => ({ task: 'crash', payload: { i } })),
  );
  const ids = sortedIds(enqueued.map((e) => e.id));

  const child = spawnFixture('test/invariants/fixtures/claim-and-hang.ts', {
    DATABASE_URL: db.url,
    SKIPLOCK_TEST_SCHEMA: TEST_SCHEMA,
    WORKER_ID: 'doomed',
    CLAIM_LIMIT: '20',
    LEASE_MS: '1500',
  });
  const { ids: claimed } = JSON.parse(await child.nextLine()) as { ids: string[] };
  expect(sortedIds(claimed)).toEqual(ids);
  child.process.kill('SIGKILL');
  expect(await child.exited).toEqual({ code: null, signal: 'SIGKILL' });

  // The crash changed nothing in the database: still running, owned by the dead worker.
  const running = await db.sql<{ status: string; worker_id: string; leased: boolean }>(
    `SELECT DISTINCT status, worker_id, lease_until IS NOT NULL AS leased FROM ${db.jobs}`,
  );
  expect(running).toEqual([{ status: 'running', worker_id: 'doomed', leased: true }]);

  await pollUntil('the 20 leases to expire in database time', async () => {
    const [row] = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${db.jobs} WHERE status = 'running' AND lease_until < now()`,
    );
    return row?.n === 20;
  });
  expect(sortedIds(await queue.reap())).toEqual(ids);
  for (const row of await statusesOf(ids)) {
    expect(row).toMatchObject({ status: 'pending', attempts: 1, leased: false });
    expect(row.last_error).toMatch(/^LeaseExpired/);
  }

  const rescued = await queue.claim('rescuer', { limit: 50, leaseMs: 600_000 });
  expect(sortedIds(rescued.map((job) => job.id))).toEqual(ids);
  expect(rescued.every((job) => job.attempt === 2)).toBe(true);
  expect(await Promise.all(rescued.map((job) => queue.complete(job)))).toEqual(rescued.map(() => true));
  const final = await db.sql(`SELECT status, attempts, count(*)::int AS n FROM ${db.jobs} GROUP BY 1, 2`);
  expect(final).toEqual([{ status: 'done', attempts: 2, n: 20 }]);
});

test('6 concurrent reapers: every expired job is reclaimed by exactly one of them', async () => {
  const seeder = db.queue({ poolSize: 2 });
  const reapers = Array.from({ length: 6 }, () => db.queue({ poolSize: 1 }));
  for (let round = 0; round < 3; round++) {
    const task = `reap-${round}`;
    await seeder.enqueueMany(Array.from({ length: 200 }, (_, i) => ({ task, payload: { i } })));
    const claimed = await seeder.claim('doomed', { tasks: [task], limit: 200, leaseMs: 600_000 });
    expect(claimed).toHaveLength(200);
    await db.sql(
      `UPDATE ${db.jobs} SET lease_until = now() - interval '1 second' WHERE status = 'running' AND task = $1`,
      [task],
    );
    await Promise.all(reapers.map((queue) => queue.counts())); // connected, so the reaps start together

    const results = await Promise.all(reapers.map((queue) => queue.reap()));
    const all = results.flat();
    const seen = new Map<string, number>();
    for (const id of all) seen.set(id, (seen.get(id) ?? 0) + 1);
    expect(
      [...seen].filter(([, n]) => n > 1),
      'ids reaped more than once',
    ).toEqual([]);
    expect(sortedIds(all)).toEqual(sortedIds(claimed.map((job) => job.id)));
    const states = await db.sql(
      `SELECT status, attempts, count(*)::int AS n FROM ${db.jobs} WHERE task = $1 GROUP BY 1, 2`,
      [task],
    );
    expect(states).toEqual([{ status: 'pending', attempts: 1, n: 200 }]);
  }
});

test('conservation: after random operations every job is in exactly one state and counts() adds up', async () => {
  const random = prng(0x5_1_5);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const chance = (p: number) => random() < p;
  const queues = [db.queue({ poolSize: 2 }), db.queue({ poolSize: 2 })];
  const queueNames = ['alpha', 'beta'];
  const workers = ['w1', 'w2', 'w3'];
  const HOUR = 3_600_000;

  // The model: every job id ever created, and the lease we believe owns each running job.
  const known = new Set<string>();
  const held = new Map<string, ClaimedJob>();
  const stale: Lease[] = [];
  const expired = new Set<string>(); // held jobs whose lease we moved into the past
  const cancelRequested = new Set<string>(); // held jobs whose cancellation was requested
  const log: string[] = [];

  const sameLease = (a: Lease, b: Lease) =>
    a.id === b.id && a.workerId === b.workerId && a.attempt === b.attempt && a.token === b.token;
  const drop = (id: string) => {
    const lease = held.get(id);
    if (lease)
      stale.push({ id: lease.id, workerId: lease.workerId, attempt: lease.attempt, token: lease.token });
    held.delete(id);
    expired.delete(id);
    cancelRequested.delete(id);
  };
  const statusOf = async (id: string) =>
    (await db.sql<{ status: JobStatus }>(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id]))[0];
  const heldLease = () => (held.size === 0 ? undefined : pick([...held.values()]));
  const enqueueSpec = () => ({
    task: pick(['t1', 't2']),
    payload: { n: random() },
    queue: pick(queueNames),
    priority: Math.floor(random() * 4),
    maxAttempts: 1 + Math.floor(random() * 3),
    ...(chance(0.15) ? { delayMs: HOUR } : {}),
    ...(chance(0.2) ? { dedupeKey: `k${Math.floor(random() * 4)}` } : {}),
  });

  async function checkConservation(step: number): Promise<void> {
    const rows = await db.sql<{
      id: string;
      status: JobStatus;
      leased: boolean;
      owned: boolean;
      attempts: number;
      max_attempts: number;
    }>(
      `SELECT id::text AS id, status, lease_until IS NOT NULL AS leased, worker_id IS NOT NULL AS owned,
              attempts, max_attempts FROM ${db.jobs}`,
    );
    const where = `after step ${step}: ${log.slice(-3).join(' | ')}`;
    expect(sortedIds(rows.map((r) => r.id)), `nothing lost, nothing invented ${where}`).toEqual(
      sortedIds(known),
    );
    const byStatus = Object.fromEntries(JOB_STATUSES.map((s) => [s, 0])) as Record<JobStatus, number>;
    for (const row of rows) {
      expect(JOB_STATUSES, where).toContain(row.status);
      byStatus[row.status]++;
      if (row.status === 'running')
        expect({ id: row.id, leased: row.leased, owned: row.owned }, where).toEqual({
          id: row.id,
          leased: true,
          owned: true,
        });
      expect(row.attempts, where).toBeGreaterThanOrEqual(0);
      expect(row.attempts, where).toBeLessThanOrEqual(row.max_attempts);
    }
    // Exactly the jobs we hold leases on are running.
    expect(
      sortedIds(rows.filter((r) => r.status === 'running').map((r) => r.id)),
      `running = held leases ${where}`,
    ).toEqual(sortedIds(held.keys()));
    const counts = await pick(queues).counts();
    expect(counts, where).toEqual(byStatus);
    expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(rows.length);
  }

  for (let step = 0; step < 300; step++) {
    const queue: Queue = pick(queues);
    const op = pick([
      'enqueue',
      'enqueue',
      'enqueueMany',
      'claim',
      'claim',
      'claim',
      'complete',
      'fail',
      'release',
      'renew',
      'cancel',
      'expire',
      'expire',
      'reap',
      'stale',
      'requeue',
    ] as const);
    log.push(`${step}:${op}`);
    switch (op) {
      case 'enqueue':
      case 'enqueueMany': {
        const specs = Array.from(
          { length: op === 'enqueue' ? 1 : 1 + Math.floor(random() * 4) },
          enqueueSpec,
        );
        const { task, payload, ...options } = specs[0]!;
        const results =
          op === 'enqueue' ? [await queue.enqueue(task, payload, options)] : await queue.enqueueMany(specs);
        for (const result of results) {
          if (result.created) known.add(result.id);
          else expect(known.has(result.id), `a dedupe hit names a known job (${result.id})`).toBe(true);
        }
        break;
      }
      case 'claim': {
        const claimed = await queue.claim(pick(workers), {
          limit: 1 + Math.floor(random() * 4),
          leaseMs: HOUR,
          ...(chance(0.3) ? { queues: [pick(queueNames)] } : {}),
        });
        for (const job of claimed) {
          expect(held.has(job.id), `job ${job.id} claimed while already running`).toBe(false);
          expect(known.has(job.id)).toBe(true);
          held.set(job.id, job);
        }
        break;
      }
      case 'complete': {
        const lease = heldLease();
        if (!lease) break;
        expect(await queue.complete(lease, { step })).toBe(true);
        drop(lease.id);
        break;
      }
      case 'fail': {
        const lease = heldLease();
        if (!lease) break;
        const outcome = await queue.fail(lease, new Error(`step ${step}`), {
          retryInMs: chance(0.5) ? 0 : HOUR,
        });
        // (Failing a job whose cancellation was requested: only ownership is checked here.)
        if (cancelRequested.has(lease.id)) expect(outcome).not.toBeNull();
        else expect(outcome).toBe(lease.attempt >= lease.maxAttempts ? 'dead' : 'pending');
        drop(lease.id);
        break;
      }
      case 'release': {
        const lease = heldLease();
        if (!lease) break;
        expect(await queue.release(lease)).toBe(true);
        drop(lease.id);
        break;
      }
      case 'renew': {
        const lease = heldLease();
        if (!lease) break;
        expect(await queue.renewLease(lease, HOUR)).toBe(true);
        expired.delete(lease.id);
        break;
      }
      case 'cancel': {
        if (known.size === 0) break;
        const id = held.size > 0 && chance(0.5) ? pick([...held.keys()]) : pick([...known]);
        const before = await statusOf(id);
        const active = before?.status === 'pending' || before?.status === 'running';
        expect(await queue.cancel(id)).toBe(active);
        if (held.has(id)) cancelRequested.add(id);
        // A running job stays running (cancel requested) under its lease until its owner acts.
        break;
      }
      case 'expire': {
        const lease = heldLease();
        if (!lease) break;
        await db.expireLease(lease.id);
        expired.add(lease.id);
        break;
      }
      case 'reap': {
        const reaped = await queue.reap();
        expect(sortedIds(reaped), 'reap() takes exactly the expired leases').toEqual(sortedIds(expired));
        for (const id of reaped) drop(id);
        break;
      }
      case 'stale': {
        const lease = stale.length === 0 ? undefined : pick(stale);
        const current = lease && held.get(lease.id);
        // A stale lease equal to the current one (possible after release) is skipped.
        if (!lease || (current && sameLease(current, lease))) break;
        const attempt = pick(['complete', 'fail', 'release', 'renew'] as const);
        const outcome =
          attempt === 'complete'
            ? await queue.complete(lease)
            : attempt === 'fail'
              ? await queue.fail(lease, 'stale', { retryInMs: 0 })
              : attempt === 'release'
                ? await queue.release(lease)
                : await queue.renewLease(lease);
        expect(outcome, `stale lease ${JSON.stringify(lease)} used for ${attempt}`).toBe(
          attempt === 'fail' ? null : false,
        );
        break;
      }
      case 'requeue': {
        if (known.size === 0) break;
        const dead = await db.sql<{ id: string }>(
          `SELECT id::text AS id FROM ${db.jobs} WHERE status = 'dead'`,
        );
        const id = dead.length > 0 && chance(0.7) ? pick(dead).id : pick([...known]);
        const before = await statusOf(id);
        try {
          expect(await queue.requeue(id)).toBe(before?.status === 'dead');
        } catch (error) {
          // Its dedupe key is held by another active job: the job stays dead.
          expect(error).toBeInstanceOf(DedupeConflictError);
          expect(before?.status).toBe('dead');
        }
        break;
      }
    }
    await checkConservation(step);
  }

  // Drain: every job reaches a finished state, none is lost on the way.
  for (let round = 0; round < 50; round++) {
    for (const lease of [...held.values()]) {
      expect(await queues[0]!.complete(lease, 'drained')).toBe(true);
      drop(lease.id);
    }
    await db.sql(`UPDATE ${db.jobs} SET run_after = now() WHERE status = 'pending' AND run_after > now()`);
    const claimed = await queues[1]!.claim('drainer', { limit: 1000, leaseMs: HOUR });
    if (claimed.length === 0) break;
    for (const job of claimed) held.set(job.id, job);
  }
  await checkConservation(-1);
  const counts = await queues[0]!.counts();
  expect({ pending: counts.pending, running: counts.running }).toEqual({ pending: 0, running: 0 });
  expect(counts.done + counts.dead + counts.cancelled).toBe(known.size);
  expect(known.size).toBeGreaterThan(50);
});
