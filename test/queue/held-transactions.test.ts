/**
 * Issue 21, the class audit (docs/state-machine.md, "Reads beyond the locked row"): the queue's
 * statements whose outcome depends on rows other than the ones they lock — dedupe holders,
 * debounce holders, throttle windows, the queued job of a key of scope 'pending', a queue's or a
 * group's running jobs and starts, the completed-and-deleted counter, a waited-for job — each
 * with the competing transaction held open across the statement, then the final state asserted
 * (statuses, counters, answers) and the jobs driven to their end.
 *
 * The trap: in READ COMMITTED a statement that waits for a lock re-checks only the row it
 * waited for once the lock is granted, and reads everything else from the snapshot it took
 * before it waited. Each test names the break that made it fail (in a private copy of src/).
 */
import { afterEach, describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { claimWithLimits } from '../../src/engine/queues.js';
import { DedupeConflictError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import type { ClaimedJob, EnqueueResult, JobStatus } from '../../src/types.js';
import { type TestDatabase, useTestDatabase } from '../support/database.js';
import {
  closeOpenTransactions,
  lockWaiters,
  openTransaction,
  settledWithin,
  untilLockWaiters,
} from '../workflows/support.js';

const db: TestDatabase = useTestDatabase();
afterEach(closeOpenTransactions);
const PENDING = { scope: 'pending' } as const;

let seq = 0;
/** A name of its own for each test's task, key or queue. */
const fresh = (what: string) => `ht.${what}.${++seq}`;

/** A worker's claim pass (limited queues first, then the plain claim) for one task. */
async function claimPass(queue: Queue, task: string, limit = 10): Promise<ClaimedJob[]> {
  const errors: unknown[] = [];
  const { jobs } = await claimWithLimits(engineOf(queue), {
    workerId: 'ht',
    limit,
    idle: limit,
    leaseMs: 60_000,
    tasks: [task],
    queues: null,
    onError: (error) => errors.push(error),
  });
  expect(errors).toEqual([]);
  return jobs;
}

/** Claims the one due job of `task` through the claim pass (fails the test when there is none). */
async function claimOne(queue: Queue, task: string): Promise<ClaimedJob> {
  const [job, ...more] = await claimPass(queue, task, 1);
  if (!job) throw new Error(`no ${task} job to claim`);
  expect(more).toEqual([]);
  return job;
}

/** Every job of `task`: id, status, attempts, payload and last_error, oldest first. */
async function jobsOf(task: string) {
  return db.sql<{
    id: string;
    status: JobStatus;
    attempts: number;
    payload: unknown;
    last_error: string | null;
  }>(
    `SELECT j.id::text AS id, status, attempts, payload, last_error FROM ${db.jobs} AS j WHERE task = $1 ORDER BY j.id`,
    [task],
  );
}

async function statusOf(id: string): Promise<JobStatus | null> {
  const rows = await db.sql<{ status: JobStatus }>(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id]);
  return rows[0]?.status ?? null;
}

/** Claims and completes every due job of `task`, one at a time; their ids. */
async function drain(queue: Queue, task: string): Promise<string[]> {
  const ids: string[] = [];
  for (;;) {
    const [job] = await claimPass(queue, task, 1);
    if (!job) return ids;
    expect(await queue.complete(job, null)).toBe(true);
    ids.push(job.id);
  }
}

/** Resolves once `condition()` holds (polled; a wait on an event, not a sleep). */
async function until(condition: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`${what} never happened`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('§1.7 dedupe: the holder of a key whose insert or completion is in flight', () => {
  // Break: insertOne and insertMany as a check-then-insert (`INSERT … SELECT … WHERE NOT EXISTS
  // (an active job of the key)` instead of ON CONFLICT DO NOTHING): the NOT EXISTS read the
  // snapshot, missed the uncommitted holder, and the insert then waited on the unique index and
  // failed with 23505 once the holder committed (the three "commits" cases); with the holder's
  // completion in flight it answered a hit at once instead of waiting (both cases: no lock waiter
  // within 10 s). The "rolls back" cases passed.
  const paths = {
    'enqueue (batched)': (q: Queue, task: string, key: string) =>
      q.enqueue(task, 'second', { dedupeKey: key }),
    'enqueue on a client (one INSERT)': (q: Queue, task: string, key: string) =>
      q.enqueue(task, 'second', { dedupeKey: key, client: db.pool }),
    enqueueMany: async (q: Queue, task: string, key: string) =>
      (await q.enqueueMany([{ task, payload: 'second', dedupeKey: key }]))[0] as EnqueueResult,
  };
  for (const [name, enqueue] of Object.entries(paths)) {
    for (const end of ['commits', 'rolls back'] as const) {
      test(`${name} of a key your open transaction is inserting: waits; the transaction ${end}`, async () => {
        const queue = db.queue({ poolSize: 4 });
        const task = fresh('dedupe');
        const key = fresh('key');
        const tx = await openTransaction(db);
        const first = await queue.enqueue(task, 'first', { dedupeKey: key, client: tx.client });
        expect(first.created).toBe(true);
        const second = enqueue(db.queue({ poolSize: 2 }), task, key);
        await untilLockWaiters(db, 1); // the arbiter index waits for the transaction
        if (end === 'commits') await tx.commit();
        else await tx.rollback();
        const answer = await second;
        const rows = await jobsOf(task);
        if (end === 'commits') {
          expect(answer).toEqual({ id: first.id, created: false });
          expect(rows.map((r) => [r.id, r.payload])).toEqual([[first.id, 'first']]);
        } else {
          expect(answer.created).toBe(true);
          expect(rows.map((r) => [r.id, r.payload])).toEqual([[answer.id, 'second']]);
        }
        // exactly one active job for the key, which runs; then the key is free
        expect(await drain(queue, task)).toEqual([rows[0]?.id]);
        expect((await queue.enqueue(task, 'third', { dedupeKey: key })).created).toBe(true);
      });
    }
  }

  for (const end of ['commits', 'rolls back'] as const) {
    test(`an enqueue of a key whose holder's completion is in flight: waits; the completion ${end}`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('dedupe.done');
      const key = fresh('key');
      const holder = await queue.enqueue(task, 'holder', { dedupeKey: key });
      const lease = await claimOne(queue, task);
      const tx = await openTransaction(db);
      expect(await queue.complete(lease, 'ok', { client: tx.client })).toBe(true);
      const next = queue.enqueue(task, 'next', { dedupeKey: key });
      await untilLockWaiters(db, 1);
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      const answer = await next;
      if (end === 'commits') {
        expect(answer.created).toBe(true);
        expect(answer.id).not.toBe(holder.id);
        expect(await statusOf(holder.id)).toBe('done');
        expect(await drain(queue, task)).toEqual([answer.id]);
      } else {
        expect(answer).toEqual({ id: holder.id, created: false });
        expect(await statusOf(holder.id)).toBe('running');
        expect(await queue.complete(lease, 'ok')).toBe(true);
        expect((await jobsOf(task)).map((r) => r.status)).toEqual(['done']);
      }
    });
  }
});

describe('§8 debounce: a holder that a claim in flight makes running', () => {
  // Break: the DO UPDATE's condition on the holder read from the statement's snapshot (`WHERE
  // (SELECT x.status = 'pending' AND x.attempts = 0 FROM jobs AS x WHERE x.id = j.id)` instead of
  // `j.status = 'pending' AND j.attempts = 0`): the debounced enqueue replaced the payload of the
  // job the claim had started ("commits": replaced true). The status alone read so still passed:
  // `j.attempts = 0`, read on the locked version, also tells a claimed holder.
  for (const end of ['commits', 'rolls back'] as const) {
    test(`the claim ${end}: the running holder is never replaced; a pending one is`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('debounce');
      const key = fresh('key');
      const options = { dedupeKey: key, dedupe: { replace: true } };
      const holder = await queue.enqueue(task, 'old', options);
      const tx = await openTransaction(db);
      const [claimed] = await engineOf(queue).store.claim.claim(tx.client, 'held', 1, 60_000, [task], null);
      expect(claimed?.id).toBe(holder.id);
      const debounced = queue.enqueue(task, 'new', options);
      await untilLockWaiters(db, 1); // ON CONFLICT DO UPDATE waits for the claimed row
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      const answer = await debounced;
      const [row, ...more] = await jobsOf(task);
      expect(more).toEqual([]);
      if (end === 'commits') {
        expect(answer).toEqual({ id: holder.id, created: false, replaced: false });
        expect(row).toMatchObject({ id: holder.id, status: 'running', payload: 'old', attempts: 1 });
        expect(await queue.complete(claimed as ClaimedJob, null)).toBe(true);
      } else {
        expect(answer).toEqual({ id: holder.id, created: false, replaced: true });
        expect(row).toMatchObject({ id: holder.id, status: 'pending', payload: 'new', attempts: 0 });
        const lease = await claimOne(queue, task);
        expect(lease.payload).toBe('new');
        expect(await queue.complete(lease, null)).toBe(true);
      }
      expect((await jobsOf(task)).map((r) => r.status)).toEqual(['done']);
    });
  }
});

describe('§8 throttle: a window your open transaction is taking', () => {
  // Break: windowLock answering from the snapshot (`RETURNING (SELECT x.until > clock_timestamp()
  // FROM dedupe_windows AS x WHERE x.key = w.key)`, the lock still taken): the waiting enqueue
  // read the window as free, and once the first job had finished it inserted a second one in
  // the window ("commits": created true, two jobs).
  for (const end of ['commits', 'rolls back'] as const) {
    test(`the transaction ${end}: the waiting enqueue decides on the window it left`, async () => {
      const first = db.queue({ poolSize: 4 });
      const second = db.queue({ poolSize: 4 });
      const task = fresh('throttle');
      const key = fresh('key');
      const options = { dedupeKey: key, dedupe: { windowMs: 60_000 } };
      // the second enqueue pauses before its insert (if it gets that far) until the first
      // job has finished: only the window, not the active job's index entry, can stop it then
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      let reachedInsert = false;
      const statements = engineOf(second).store.enqueue;
      const insertOne = statements.insertOne.bind(statements);
      statements.insertOne = async (executor, job) => {
        reachedInsert = true;
        await gate;
        return insertOne(executor, job);
      };
      const tx = await openTransaction(db);
      const taken = await first.enqueue(task, 'first', { ...options, client: tx.client });
      expect(taken.created).toBe(true);
      const waiting = second.enqueue(task, 'second', options);
      await until(async () => reachedInsert || (await lockWaiters(db)) >= 1, 'the second enqueue waiting');
      if (end === 'commits') {
        await tx.commit();
        expect(await drain(first, task)).toEqual([taken.id]); // the window's job has finished
      } else {
        await tx.rollback();
      }
      open();
      const answer = await waiting;
      const rows = await jobsOf(task);
      const windows = await db.sql<{ job_id: string; live: boolean }>(
        `SELECT job_id::text AS job_id, until > clock_timestamp() AS live FROM ${quoteIdent(engineOf(first).schema)}.dedupe_windows WHERE key = $1`,
        [key],
      );
      if (end === 'commits') {
        expect(answer).toEqual({ id: taken.id, created: false });
        expect(rows.map((r) => [r.id, r.status])).toEqual([[taken.id, 'done']]);
      } else {
        expect(answer.created).toBe(true);
        expect(rows.map((r) => [r.id, r.status, r.payload])).toEqual([[answer.id, 'pending', 'second']]);
        expect(await drain(first, task)).toEqual([answer.id]);
      }
      // exactly one job in the window, which names it; the key stays taken after it finished
      expect(windows).toEqual([{ job_id: rows[0]?.id, live: true }]);
      expect(await first.enqueue(task, 'later', options)).toEqual({ id: rows[0]?.id, created: false });
    });
  }
});

describe("§8 scope 'pending': a key whose queued job your open transaction is enqueuing", () => {
  /** A running job of a key of scope 'pending' (no queued one yet), and a transaction that enqueues one. */
  async function runningWithOpenEnqueue(queue: Queue, task: string, key: string) {
    const a = await queue.enqueue(task, 'a', { dedupeKey: key, dedupe: PENDING, maxAttempts: 5 });
    const lease = await claimOne(queue, task);
    expect(lease.id).toBe(a.id);
    const tx = await openTransaction(db);
    const b = await queue.enqueue(task, 'b', { dedupeKey: key, dedupe: PENDING, client: tx.client });
    expect(b.created).toBe(true);
    return { lease, a: a.id, b: b.id, tx };
  }

  // Breaks: HOLDER (waiting form) answering the queued job from the outer statement's snapshot
  // (`CASE WHEN pending_holder(…) IS NULL OR true THEN (SELECT q.id FROM jobs AS q WHERE
  // q.pending_key = k.pending_key AND q.status = 'pending' …) END`: the lock still taken first):
  // fail and release missed the queued job committed while they waited, put the old job back to
  // pending and failed on jobs_pending_key_idx (23505) — both "commits" cases. reap without its
  // busy-key guard (`h.id IS DISTINCT FROM 0` removed): it reaped the job while the key was busy
  // (both reap cases). The requeue cases hold whatever the requeue's own key lock does (removed:
  // still green): the unique index waits for the transaction's insert and decides.
  for (const end of ['commits', 'rolls back'] as const) {
    test(`fail with a retry waits for the key; the transaction ${end}`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('pending.fail');
      const key = fresh('key');
      const { lease, a, b, tx } = await runningWithOpenEnqueue(queue, task, key);
      const failing = queue.fail(lease, new Error('boom'), { retryInMs: 60_000 });
      await untilLockWaiters(db, 1); // the key's lock
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      if (end === 'commits') {
        expect(await failing).toBe('cancelled');
        const [old, queued] = await jobsOf(task);
        expect(old).toMatchObject({ id: a, status: 'cancelled' });
        expect(old?.last_error).toMatch(new RegExp(`^Superseded: job ${b} was already queued`));
        // the queued job took the retry over: the attempt count and the backoff
        expect(queued).toMatchObject({ id: b, status: 'pending', attempts: 1 });
        expect(queued?.last_error).toMatch(
          new RegExp(`^Took over from job ${a} \\(superseded after attempt 1\\)`),
        );
        expect(await claimPass(queue, task)).toEqual([]); // waits out the backoff
      } else {
        expect(await failing).toBe('pending');
        expect((await jobsOf(task)).map((r) => [r.id, r.status])).toEqual([[a, 'pending']]);
        // it is the key's queued job again
        expect(await queue.enqueue(task, 'c', { dedupeKey: key, dedupe: PENDING })).toEqual({
          id: a,
          created: false,
        });
      }
    });

    test(`release waits for the key; the transaction ${end}`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('pending.release');
      const key = fresh('key');
      const { lease, a, b, tx } = await runningWithOpenEnqueue(queue, task, key);
      const releasing = queue.release(lease);
      await untilLockWaiters(db, 1);
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      expect(await releasing).toBe(true);
      if (end === 'commits') {
        const [old, queued] = await jobsOf(task);
        expect(old).toMatchObject({ id: a, status: 'cancelled' });
        expect(old?.last_error).toMatch(new RegExp(`^Superseded: job ${b}`));
        expect(queued).toMatchObject({ id: b, status: 'pending', attempts: 0, last_error: null });
        expect(await drain(queue, task)).toEqual([b]);
      } else {
        expect((await jobsOf(task)).map((r) => [r.id, r.status, r.attempts])).toEqual([[a, 'pending', 0]]);
        expect(await drain(queue, task)).toEqual([a]);
      }
    });

    test(`reap of an expired lease passes the busy key by; the transaction ${end}, the next pass decides`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('pending.reap');
      const key = fresh('key');
      const { lease, a, b, tx } = await runningWithOpenEnqueue(queue, task, key);
      await db.expireLease(lease.id);
      // never waits for the key's lock (the owner finishing the job may hold it): the next pass
      expect(await settledWithin(queue.reap(), 5_000)).toEqual({ status: 'fulfilled', value: [] });
      expect(await statusOf(a)).toBe('running');
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      expect(await queue.reap()).toEqual([a]);
      if (end === 'commits') {
        const [old, queued] = await jobsOf(task);
        expect(old).toMatchObject({ id: a, status: 'cancelled' });
        expect(old?.last_error).toMatch(/^Superseded: job .*\nLeaseExpired/);
        expect(queued).toMatchObject({ id: b, status: 'pending', attempts: 1 });
        expect(queued?.last_error).toMatch(/^Took over from job .*LeaseExpired/);
        expect(await drain(queue, task)).toEqual([b]);
      } else {
        expect((await jobsOf(task)).map((r) => [r.id, r.status, r.attempts])).toEqual([[a, 'pending', 1]]);
        expect(await drain(queue, task)).toEqual([a]);
      }
    });

    test(`requeue of a dead job of the key waits for it; the transaction ${end}`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('pending.requeue');
      const key = fresh('key');
      const dead = await queue.enqueue(task, 'a', { dedupeKey: key, dedupe: PENDING, maxAttempts: 1 });
      expect(await queue.fail(await claimOne(queue, task), new Error('boom'))).toBe('dead');
      const tx = await openTransaction(db);
      const b = await queue.enqueue(task, 'b', { dedupeKey: key, dedupe: PENDING, client: tx.client });
      const requeueing = settledWithin(queue.requeueOrThrow(dead.id), 10_000);
      await untilLockWaiters(db, 1);
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      const outcome = await requeueing;
      if (end === 'commits') {
        expect(outcome).toMatchObject({ status: 'rejected' });
        expect((outcome as { reason: unknown }).reason).toBeInstanceOf(DedupeConflictError);
        expect((await jobsOf(task)).map((r) => [r.id, r.status])).toEqual([
          [dead.id, 'dead'],
          [b.id, 'pending'],
        ]);
        expect(await drain(queue, task)).toEqual([b.id]);
      } else {
        expect(outcome).toEqual({ status: 'fulfilled', value: { id: dead.id, status: 'pending' } });
        expect((await jobsOf(task)).map((r) => [r.id, r.status])).toEqual([[dead.id, 'pending']]);
        expect(await drain(queue, task)).toEqual([dead.id]);
      }
    });
  }

  // Found by this audit, failed before the fix: fail() decided whether the key's queued job
  // takes its retry over from the statement's snapshot of the failing job (`cancel_requested_at
  // IS NULL` in HOLDER's source, read before the statement waited for the key's lock), and
  // pending_holder wrote the takeover before the failing row was locked. A cancel that committed
  // while fail waited for the key: the job ended cancelled by the request (cancel() answered
  // true), yet the queued job had taken over its attempt and its 60 s backoff, as if the job had
  // been superseded — no serial order gives that (queued job: attempts 1, run_after now + 60 s,
  // last_error "Took over from job …"). Fixed in store/outcome.ts: fail locks its row after the
  // key's lock (`failing`) and writes the takeover only when no cancel is requested there.

  test('a cancel that commits while fail waits for the key: the queued job takes nothing over', async () => {
    const queue = db.queue({ poolSize: 4 });
    const task = fresh('pending.cancel');
    const key = fresh('key');
    const a = await queue.enqueue(task, 'a', { dedupeKey: key, dedupe: PENDING, maxAttempts: 5 });
    const lease = await claimOne(queue, task);
    const b = await queue.enqueue(task, 'b', { dedupeKey: key, dedupe: PENDING });
    const tx = await openTransaction(db);
    // your transaction enqueues the key again (a hit on b): it holds the key's lock
    expect(await queue.enqueue(task, 'c', { dedupeKey: key, dedupe: PENDING, client: tx.client })).toEqual({
      id: b.id,
      created: false,
    });
    const failing = queue.fail(lease, new Error('boom'), { retryInMs: 60_000 });
    await untilLockWaiters(db, 1);
    expect(await settledWithin(queue.cancel(a.id), 5_000)).toEqual({ status: 'fulfilled', value: true });
    await tx.commit();
    expect(await failing).toBe('cancelled');
    const [old, queued] = await jobsOf(task);
    expect(old).toMatchObject({ id: a.id, status: 'cancelled' });
    // cancelled by its request (cancel() came first): the queued job is as it was
    expect(queued).toMatchObject({ id: b.id, status: 'pending', attempts: 0, last_error: null });
    expect(await drain(queue, task)).toEqual([b.id]);
  });

  // Break: insertPending as a check-then-insert (`… FROM locked WHERE NOT EXISTS (a pending job
  // of the key)` instead of ON CONFLICT DO NOTHING): after the key's lock, the NOT EXISTS read
  // the snapshot taken before the wait, missed the retry that had gone back to pending, and the
  // insert failed on jobs_pending_key_idx (23505) — "commits" failed, "rolls back" passed.
  for (const end of ['commits', 'rolls back'] as const) {
    test(`an enqueue of the key while a retry of its running job is in flight waits for the key; the retry ${end}`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('pending.retry');
      const key = fresh('key');
      const a = await queue.enqueue(task, 'a', { dedupeKey: key, dedupe: PENDING, maxAttempts: 5 });
      const lease = await claimOne(queue, task);
      const tx = await openTransaction(db);
      // the retry, in a transaction still open: back to pending under the key's lock
      expect(await engineOf(queue).store.outcome.fail(tx.client, lease, 'Error: boom', 0)).toBe('pending');
      const enqueueing = queue.enqueue(task, 'b', { dedupeKey: key, dedupe: PENDING });
      await untilLockWaiters(db, 1);
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      const answer = await enqueueing;
      if (end === 'commits') {
        // the retry is the key's queued job: a hit
        expect(answer).toEqual({ id: a.id, created: false });
        expect((await jobsOf(task)).map((r) => [r.id, r.status, r.attempts])).toEqual([[a.id, 'pending', 1]]);
        expect(await drain(queue, task)).toEqual([a.id]);
      } else {
        // still running: the new job is the one queued behind it
        expect(answer.created).toBe(true);
        expect((await jobsOf(task)).map((r) => [r.id, r.status])).toEqual([
          [a.id, 'running'],
          [answer.id, 'pending'],
        ]);
        expect(await claimPass(queue, task)).toEqual([]);
        expect(await queue.complete(lease, null)).toBe(true);
        expect(await drain(queue, task)).toEqual([answer.id]);
      }
    });
  }

  // Break: the picks' running-holder filter removed (migration 10's `blocked` returning ''): the
  // claim after the commit took the queued job while the claimed one ran and failed on
  // jobs_pending_key_running_idx (23505).
  test('an enqueue of a key whose queued job a claim in flight takes: waits; the next job waits for the running one', async () => {
    const queue = db.queue({ poolSize: 4 });
    const task = fresh('pending.claim');
    const key = fresh('key');
    const a = await queue.enqueue(task, 'a', { dedupeKey: key, dedupe: PENDING });
    const tx = await openTransaction(db);
    const [claimed] = await engineOf(queue).store.claim.claim(tx.client, 'held', 1, 60_000, [task], null);
    expect(claimed?.id).toBe(a.id);
    const enqueueing = queue.enqueue(task, 'b', { dedupeKey: key, dedupe: PENDING });
    await untilLockWaiters(db, 1); // the queued index's entry of a, being claimed
    await tx.commit();
    const b = await enqueueing;
    expect(b.created).toBe(true);
    // every snapshot that sees b pending sees a's claim: no claim takes b while a runs
    expect(await claimPass(queue, task)).toEqual([]);
    expect(await queue.complete(claimed as ClaimedJob, null)).toBe(true);
    expect(await drain(queue, task)).toEqual([b.id]);
    expect((await jobsOf(task)).map((r) => r.status)).toEqual(['done', 'done']);
  });
});

describe('§8 limits: a limited claim whose transaction is still open', () => {
  /** Running jobs of `queue`, by group. */
  async function runningByGroup(queue: string): Promise<Record<string, number>> {
    const rows = await db.sql<{ g: string | null; n: number }>(
      `SELECT group_key AS g, count(*)::int AS n FROM ${db.jobs} WHERE queue = $1 AND status = 'running' GROUP BY 1 ORDER BY 1`,
      [queue],
    );
    return Object.fromEntries(rows.map((r) => [r.g ?? '-', r.n]));
  }

  // Break: the queue's claim lock taken inside the claim statement (pg_advisory_xact_lock in a
  // LATERAL of its `cfg` CTE, waited for) instead of tried by a statement of its own before it:
  // the other claimer no longer answered while the claim was held (both cases: still pending
  // after 5 s) — and, let through, it waited for the held claim's commit, counted running jobs
  // and starts from its older snapshot and claimed 3 more (5 running, or 5 starts, limit 3).
  const limits = {
    concurrency: { concurrency: 3 },
    rateLimit: { rateLimit: { limit: 3, periodMs: 60_000 } },
  };
  for (const [name, limit] of Object.entries(limits)) {
    test(`${name} 3: held claim of 2; the other claimer gets nothing meanwhile, then only the room left`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const other = db.queue({ poolSize: 4 });
      const q = fresh('limited');
      const task = fresh('limited.task');
      await queue.configureQueue(q, limit);
      await queue.enqueueMany(Array.from({ length: 6 }, (_, i) => ({ task, payload: i, queue: q })));
      const { store } = engineOf(queue);
      const tx = await openTransaction(db);
      expect(await store.queues.tryLock(tx.client, q)).toBe(true);
      const held = await store.queues.claimLimited(tx.client, 'held', q, 2, [task], 60_000);
      expect(held.jobs).toHaveLength(2);
      // the lock is tried, never waited for: the other claimer answers at once, with nothing
      expect(await settledWithin(claimPass(other, task), 5_000)).toEqual({ status: 'fulfilled', value: [] });
      await tx.commit();
      const after = await claimPass(other, task);
      expect(after).toHaveLength(1);
      expect(await claimPass(other, task)).toEqual([]);
      expect(await runningByGroup(q)).toEqual({ '-': 3 });
      const starts = await db.sql<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${quoteIdent(engineOf(queue).schema)}.queue_starts WHERE queue = $1`,
        [q],
      );
      expect(starts[0]?.n).toBe(name === 'rateLimit' ? 3 : 0);
      for (const lease of [...held.jobs, ...after]) expect(await queue.complete(lease, null)).toBe(true);
      // concurrency: room again; rate limit: the window is full for a minute
      expect(await claimPass(other, task)).toHaveLength(name === 'concurrency' ? 3 : 0);
    });
  }

  // Break: pick_groups without its per-group lock (the try-lock treated as taken): the other
  // claimer's recount did not see the held claim's uncommitted job and took group a's whole room
  // again (claimed a, b, a) — 3 of group a running with groupConcurrency 2.
  test('groupConcurrency 2 (no queue lock): a held claim locks its group; the other claimer takes the other group, then the room left', async () => {
    const queue = db.queue({ poolSize: 4 });
    const other = db.queue({ poolSize: 4 });
    const q = fresh('grouped');
    const task = fresh('grouped.task');
    await queue.configureQueue(q, { groupConcurrency: 2 });
    await queue.enqueueMany([
      ...Array.from({ length: 4 }, (_, i) => ({ task, payload: i, queue: q, group: 'a' })),
      { task, payload: 'b', queue: q, group: 'b' },
    ]);
    const tx = await openTransaction(db);
    const held = await engineOf(queue).store.queues.claimLimited(
      tx.client,
      'held',
      q,
      1,
      [task],
      60_000,
      null,
      true,
    );
    expect(held.jobs.map((j) => j.group)).toEqual(['a']);
    // group a's lock is held: skipped, not waited for
    const meanwhile = await settledWithin(claimPass(other, task), 5_000);
    expect(meanwhile).toMatchObject({ status: 'fulfilled' });
    expect((meanwhile as { value: ClaimedJob[] }).value.map((j) => j.group)).toEqual(['b']);
    await tx.commit();
    const after = await claimPass(other, task);
    expect(after.map((j) => j.group)).toEqual(['a']);
    expect(await claimPass(other, task)).toEqual([]);
    expect(await runningByGroup(q)).toEqual({ a: 2, b: 1 });
    for (const lease of [...held.jobs, ...after]) expect(await queue.complete(lease, null)).toBe(true);
    expect((await claimPass(other, task)).map((j) => j.group)).toEqual(['a', 'a']);
  });

  // The one window this audit leaves open (docs/state-machine.md): a plain claim reads which
  // queues are restricted from its snapshot, and its jobs stay invisible to a limited claim's
  // count until it commits. A plain claim in flight while configureQueue restricts its queue
  // (here: held open in a transaction, which stands for the statement's few milliseconds) can
  // take the queue over its new limit — by that one claim's jobs, once. The next claims respect
  // the limit: nothing until the running jobs are below it, never above it again.
  // Break: the plain pick without its restricted-queue filter (pick_pending's `queue <> ALL
  // (…)` removed): the claim pass's plain claim took 7 jobs of the limited queue.
  test('a plain claim in flight when configureQueue sets a limit: over by that claim once, then the limit holds', async () => {
    const queue = db.queue({ poolSize: 4 });
    const q = fresh('restricted');
    const task = fresh('restricted.task');
    await queue.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ task, payload: i, queue: q })));
    const tx = await openTransaction(db);
    const inFlight = await engineOf(queue).store.claim.claim(tx.client, 'in-flight', 3, 60_000, [task], null);
    expect(inFlight).toHaveLength(3);
    await queue.configureQueue(q, { concurrency: 2 });
    const limited = await claimPass(queue, task);
    expect(limited).toHaveLength(2); // it cannot see the in-flight claim's jobs
    await tx.commit();
    expect(await runningByGroup(q)).toEqual({ '-': 5 }); // the window: over the limit by 3
    const leases = [...inFlight, ...limited];
    const maxRunning: number[] = [];
    while (leases.length > 0) {
      expect(await queue.complete(leases.shift() as ClaimedJob, null)).toBe(true);
      leases.push(...(await claimPass(queue, task)));
      maxRunning.push((await runningByGroup(q))['-'] ?? 0);
    }
    // nothing claimed while 2 or more ran; the limit held from then on
    expect(maxRunning.slice(0, 3)).toEqual([4, 3, 2]);
    expect(Math.max(...maxRunning.slice(3))).toBeLessThanOrEqual(2);
    expect((await jobsOf(task)).every((r) => r.status === 'done')).toBe(true);
  });
});

describe('cancel and requeue decide on the row they lock', () => {
  // Break: cancel's `target` without FOR NO KEY UPDATE (the status read from the snapshot): the
  // cancel of the job whose completion committed meanwhile answered true, a cancellation
  // requested of a job already done ("commits" failed).
  for (const end of ['commits', 'rolls back'] as const) {
    test(`cancel while the job's completion is held open: waits; the completion ${end}`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('cancel');
      const { id } = await queue.enqueue(task, null);
      const lease = await claimOne(queue, task);
      const tx = await openTransaction(db);
      expect(await queue.complete(lease, 'ok', { client: tx.client })).toBe(true);
      const cancelling = queue.cancel(id);
      await untilLockWaiters(db, 1);
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      const answer = await cancelling;
      const [after] = await db.sql<{ status: string; requested: boolean }>(
        `SELECT status, cancel_requested_at IS NOT NULL AS requested FROM ${db.jobs} WHERE id = $1`,
        [id],
      );
      if (end === 'commits') {
        expect(answer).toBe(false); // already done
        expect(after).toEqual({ status: 'done', requested: false });
      } else {
        expect(answer).toBe(true); // still running: cancellation requested
        expect(after).toEqual({ status: 'running', requested: true });
        expect(await queue.fail(lease, new Error('aborted'))).toBe('cancelled');
      }
    });
  }

  // Break: requeue's `target` without FOR NO KEY UPDATE: the requeue of the job a prune deleted
  // meanwhile found its snapshot's dead row, updated nothing and answered "it is dead: only dead
  // jobs can be requeued" (ConflictError) instead of "no such job" ("commits" failed).
  for (const end of ['commits', 'rolls back'] as const) {
    test(`requeue while a prune of the dead job is held open: waits; the prune ${end}`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('requeue');
      const { id } = await queue.enqueue(task, null, { maxAttempts: 1 });
      expect(await queue.fail(await claimOne(queue, task), new Error('boom'))).toBe('dead');
      const tx = await openTransaction(db);
      await tx.client.query(`DELETE FROM ${db.jobs} WHERE id = $1`, [id]); // pruneBatch's DELETE
      const requeueing = settledWithin(queue.requeueOrThrow(id), 10_000);
      await untilLockWaiters(db, 1);
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      const outcome = await requeueing;
      if (end === 'commits') {
        expect(outcome).toMatchObject({ status: 'rejected' });
        expect((outcome as { reason: Error }).reason.name).toBe('NotFoundError');
        expect(await statusOf(id)).toBeNull();
      } else {
        expect(outcome).toEqual({ status: 'fulfilled', value: { id, status: 'pending' } });
        expect(await drain(queue, task)).toEqual([id]);
      }
    });
  }
});

describe('counters and waits', () => {
  // Break: the counter's upsert adding to the snapshot's value (`DO UPDATE SET n = (SELECT x.n
  // FROM counters AS x WHERE x.name = c.name AND x.shard = c.shard) + excluded.n`): the
  // completion that waited for the shard's row wrote 0 + 1 over the committed 1 — 16 counted
  // instead of 17 ("commits"; "rolls back" passed).
  for (const end of ['commits', 'rolls back'] as const) {
    test(`completed-and-deleted counter: a completion waits for a held shard; the holder ${end}; every completion counted once`, async () => {
      const schema = end === 'commits' ? 'held_count_c' : 'held_count_r';
      const queue = db.queue({ schema, poolSize: 4, retention: { completed: 'delete' } });
      await queue.migrate();
      const counters = `${quoteIdent(schema)}.counters`;
      await db.sql(
        `INSERT INTO ${counters} (name, shard, n) SELECT 'completed_deleted', s, 0 FROM generate_series(0, 15) AS s`,
      );
      await queue.enqueue('ht.count', null);
      const [lease] = await queue.claim('w', { tasks: ['ht.count'] });
      // 16 deleting completions in flight, one in each shard
      const tx = await openTransaction(db);
      await tx.client.query(`UPDATE ${counters} SET n = n + 1 WHERE name = 'completed_deleted'`);
      const completing = queue.complete(lease as ClaimedJob, null);
      await untilLockWaiters(db, 1);
      if (end === 'commits') await tx.commit();
      else await tx.rollback();
      expect(await completing).toBe(true);
      const sum = await db.sql<{ n: number }>(
        `SELECT sum(n)::int AS n FROM ${counters} WHERE name = 'completed_deleted'`,
      );
      expect(sum[0]?.n).toBe(end === 'commits' ? 17 : 1);
      expect((await queue.counts()).done).toBe(end === 'commits' ? 17 : 1);
      expect(await db.jobCount(schema)).toBe(0);
    });
  }

  // Break: the skipped row's answer marked as hinted (`coalesce(wait_hint, true)` in
  // requestFinishHint's second branch): the waiter trusted a hint that was never set, looked
  // once and never asked again ("two looks at the locked row never happened"); with the safety
  // poll at ten minutes the wait could not end.
  test('waitFor on a job whose completion is held open: skipped, asked again, resolves with the committed outcome', async () => {
    const queue = db.queue({ poolSize: 4 });
    engineOf(queue).waitTuning = { pollMs: 50, safetyPollMs: 600_000 };
    const observe = engineOf(queue).store.observe;
    const request = observe.requestFinishHint.bind(observe);
    const answers: boolean[] = [];
    observe.requestFinishHint = async (executor, id) => {
      const found = await request(executor, id);
      answers.push(found?.hinted === true);
      return found;
    };
    const { id } = await queue.enqueue('ht.wait', null);
    const lease = await claimOne(queue, 'ht.wait');
    const tx = await openTransaction(db);
    expect(await queue.complete(lease, { v: 1 }, { client: tx.client })).toBe(true);
    const waiting = queue.waitFor(id, { timeoutMs: 20_000 });
    waiting.catch(() => undefined); // asserted below; a failed test must not leave it unheard
    await until(() => answers.length >= 2, 'two looks at the locked row'); // never waited for
    expect(answers.slice(0, 2)).toEqual([false, false]);
    expect(await settledWithin(waiting, 50)).toBe('pending');
    await tx.commit();
    const outcome = await settledWithin(waiting, 5_000);
    expect(outcome).toMatchObject({ status: 'fulfilled', value: { id, status: 'done', result: { v: 1 } } });
  });
});
