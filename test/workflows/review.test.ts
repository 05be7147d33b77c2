/**
 * Review of SPEC §10 (flows-review): each test here failed on the code it was written against
 * (f22808e); see the review report for causes and suggested fixes.
 *
 * - Lock order: a batched completion (completeMany) locks a job's dependents before the job;
 *   complete/fail/the reaper lock the job, then (in the trigger) its dependents; enqueue with
 *   dependsOn locks the jobs it depends on in id order. Two of these orders meet head-on when a
 *   new job depends on a job and on one of its dependents: deadlock_detected (40P01) for one
 *   caller, a second's stall for both.
 * - enqueue({ dependsOn }) in a caller's transaction holds a row lock on the running dependency
 *   until that transaction ends: its worker's completion waits for it, up to the statement
 *   timeout, and the job then runs again when its lease expires.
 * - prune deletes a done dependency of a job that a requeue can still bring back (cancelled by
 *   its other, dead, dependency): the job later runs without it.
 * - A ref named "__proto__" is lost from enqueueFlow's `jobs` and ctx.dependencies().
 * - Rolling upgrade: a worker of the previous version with retention 'delete' deletes a job on
 *   completion even when it has dependents (has_dependents is new); they wait forever.
 */
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { PermanentError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import type { ClaimedJob } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

async function claimOne(queue: Queue, task: string): Promise<ClaimedJob> {
  const [job] = await queue.claim('review-worker', { tasks: [task] });
  if (!job) throw new Error(`no ${task} job to claim`);
  return job;
}

async function finish(queue: Queue, task: string, how: 'done' | 'dead' = 'done'): Promise<void> {
  const job = await claimOne(queue, task);
  if (how === 'done') expect(await queue.complete(job, { from: task })).toBe(true);
  else expect(await queue.fail(job, new PermanentError('boom'))).toBe('dead');
}

/** Backends of this file's database waiting for a lock. */
async function lockWaiters(): Promise<number> {
  const rows = await db.sql<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE datname = current_database() AND wait_event_type = 'Lock'`,
  );
  return rows[0]?.n ?? 0;
}

async function untilLockWaiters(n: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while ((await lockWaiters()) < n) {
    if (Date.now() > deadline) throw new Error(`${n} lock waiters never appeared`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A session of its own that holds a row lock on job `id` until `release()`. */
async function holdRow(id: string): Promise<{ release(): Promise<void> }> {
  const client = new pg.Client({ connectionString: db.url });
  client.on('error', () => undefined);
  await client.connect();
  await client.query('BEGIN');
  await client.query(`SELECT 1 FROM ${db.jobs} WHERE id = $1 FOR NO KEY UPDATE`, [id]);
  return {
    async release() {
      await client.query('COMMIT');
      await client.end();
    },
  };
}

describe('lock order between completions and enqueue with dependsOn', () => {
  test('a batched completion of a job and an enqueue that depends on it and on its dependent both succeed', async () => {
    const queue = db.queue({ poolSize: 5 });
    const { jobs } = await queue.enqueueFlow([
      { ref: 'parent', task: 'lo1.parent' },
      { ref: 'child', task: 'lo1.child', dependsOn: ['parent'] },
    ]);
    const parent = jobs.parent as string;
    const child = jobs.child as string;
    const lease = await claimOne(queue, 'lo1.parent');
    // a third session holds the child for a moment, so that the two calls below interleave as
    // they may by chance: the completion locks the child (LOCK_DEPENDENTS) and then the parent;
    // the enqueue locks the parent and then the child (id order)
    const hold = await holdRow(child);
    const completing = queue.completeMany([{ lease, result: 1 }]);
    await untilLockWaiters(1);
    const enqueuing = queue.enqueue('lo1.after', null, { dependsOn: [parent, child] });
    await untilLockWaiters(2);
    await hold.release();
    const [completed, enqueued] = await Promise.allSettled([completing, enqueuing]);
    expect(completed).toEqual({ status: 'fulfilled', value: [true] });
    expect(enqueued.status).toBe('fulfilled');
  });

  test('a completion of a job and an enqueue that depends on it and on its dependent (listed first) both succeed', async () => {
    const queue = db.queue({ poolSize: 5 });
    // the dependent listed first: ids drawn in input order gave it the lower id, and the
    // enqueue's id-order locks then took the dependent before the dependency. Ids are now drawn
    // in topological order: the dependency's is the lower.
    const { jobs } = await queue.enqueueFlow([
      { ref: 'child', task: 'lo2.child', dependsOn: ['parent'] },
      { ref: 'parent', task: 'lo2.parent' },
    ]);
    const parent = jobs.parent as string;
    const child = jobs.child as string;
    expect(BigInt(parent) < BigInt(child)).toBe(true);
    const lease = await claimOne(queue, 'lo2.parent');
    // complete locks the parent, then (its trigger) the child; the enqueue locks the child, then
    // the parent
    const hold = await holdRow(parent);
    const completing = queue.complete(lease, 1);
    await untilLockWaiters(1);
    const enqueuing = queue.enqueue('lo2.after', null, { dependsOn: [child, parent] });
    await untilLockWaiters(2);
    await hold.release();
    const [completed, enqueued] = await Promise.allSettled([completing, enqueuing]);
    expect(completed).toEqual({ status: 'fulfilled', value: true });
    expect(enqueued.status).toBe('fulfilled');
  });
});

describe("enqueue with dependsOn in a caller's transaction", () => {
  // Was a known limitation, kept as test.fails until migration 15: the enqueue locked its
  // dependencies until the caller's transaction ended, and their completion waited for that lock —
  // past the statement timeout it failed (57014). The enqueue now holds FOR KEY SHARE only (no
  // transition waits for it) and decides its counter at the commit.
  test("the dependency's completion does not wait for the caller's transaction to end", async () => {
    const producer = db.queue({ poolSize: 3 });
    // the worker's queue: a short statement timeout stands for the default 30 s
    const worker = db.queue({ poolSize: 3, statementTimeoutMs: 1_500 });
    const { id: parent } = await producer.enqueue('tx.parent', null);
    const lease = await claimOne(worker, 'tx.parent');
    let enqueued!: () => void;
    const inTransaction = new Promise<void>((resolve) => {
      enqueued = resolve;
    });
    const transaction = producer.transaction(async (client) => {
      await producer.enqueue('tx.child', null, { dependsOn: [parent], client });
      enqueued();
      // the caller's own work after the enqueue, before its commit
      await new Promise((resolve) => setTimeout(resolve, 3_000));
    });
    await inTransaction;
    const completed = await worker.complete(lease, 'ok').catch((error: Error) => error.message);
    await transaction;
    expect(completed).toBe(true);
  });
});

describe('prune and dependents that a requeue brings back', () => {
  test('a done dependency of a job cancelled by another (dead) dependency is kept: its requeue brings the job back', async () => {
    const queue = db.queue();
    const { jobs } = await queue.enqueueFlow([
      { ref: 'x', task: 'pr.x', maxAttempts: 1 },
      { ref: 'y', task: 'pr.y' },
      { ref: 'c', task: 'pr.c', dependsOn: ['x', 'y'] },
    ]);
    await finish(queue, 'pr.y');
    await finish(queue, 'pr.x', 'dead');
    expect((await queue.get(jobs.c as string))?.status).toBe('cancelled');
    await queue.prune({ olderThanMs: 0, statuses: ['done'] });
    // y must survive: c can still run, and will read y's result
    expect((await queue.get(jobs.y as string))?.status).toBe('done');
    expect(await queue.requeue(jobs.x as string)).toBe(true);
    await finish(queue, 'pr.x');
    expect((await queue.get(jobs.c as string))?.status).toBe('pending');
    expect((await queue.dependenciesOf(jobs.c as string)).dependsOn).toHaveLength(2);
  });
});

describe('a ref named __proto__', () => {
  test("is a key of enqueueFlow's jobs", async () => {
    const queue = db.queue();
    const { jobs } = await queue.enqueueFlow([
      { ref: '__proto__', task: 'proto.a' },
      { ref: 'b', task: 'proto.b', dependsOn: ['__proto__'] },
    ]);
    expect(Object.keys(jobs).sort()).toEqual(['__proto__', 'b']);
    expect(Object.getPrototypeOf(jobs)).toBe(Object.prototype);
  });

  test('is a key of ctx.dependencies()', async () => {
    const queue = db.queue();
    const { jobs } = await queue.enqueueFlow([
      { ref: '__proto__', task: 'proto2.a' },
      { ref: 'b', task: 'proto2.b', dependsOn: ['__proto__'] },
    ]);
    await finish(queue, 'proto2.a');
    let seen: Record<string, unknown> = {};
    const worker = db.worker({
      queue,
      tasks: {
        'proto2.b': async (_payload, ctx) => {
          seen = await ctx.dependencies();
          return null;
        },
      },
      pollIntervalMs: 50,
    });
    await worker.start();
    try {
      expect((await queue.waitFor(jobs.b as string, { timeoutMs: 20_000 })).status).toBe('done');
    } finally {
      await worker.stop();
    }
    expect(Object.keys(seen)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(seen)).toBe(Object.prototype);
  });
});

describe('rolling upgrade', () => {
  test('a job completed by a worker of the previous version with retention delete unblocks its dependents', async () => {
    const queue = db.queue();
    const { jobs } = await queue.enqueueFlow([
      { ref: 'parent', task: 'old.parent' },
      { ref: 'child', task: 'old.child', dependsOn: ['parent'] },
    ]);
    const lease = await claimOne(queue, 'old.parent');
    // completeDelete as 9f5607d wrote it (before workflows): the row goes, whatever depends on it
    const deleted = await db.sql(
      `DELETE FROM ${db.jobs}
       WHERE id = $1 AND status = 'running' AND worker_id = $2 AND attempts = $3 AND claims = $4::bigint
       RETURNING id`,
      [lease.id, lease.workerId, lease.attempt, lease.token],
    );
    expect(deleted).toHaveLength(1);
    expect((await queue.get(jobs.child as string))?.status).toBe('pending');
  });
});
