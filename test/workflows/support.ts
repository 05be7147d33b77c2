/**
 * What the workflow tests share: claiming and finishing one job by task, sessions that hold a
 * row lock or a transaction open, and waiting until some backends wait for a lock.
 */
import pg from 'pg';
import { expect } from 'vitest';
import { PermanentError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import type { ClaimedJob, JobStatus } from '../../src/types.js';
import type { TestDatabase } from '../support/database.js';

/** Claims the one due job of `task` (fails the test when there is none). */
export async function claimOne(queue: Queue, task: string, workerId = 'flow-test'): Promise<ClaimedJob> {
  const [job] = await queue.claim(workerId, { tasks: [task] });
  if (!job) throw new Error(`no ${task} job to claim`);
  return job;
}

/** Claims the one due job of `task` and ends it done (result `{ from: task }`) or dead. */
export async function finish(queue: Queue, task: string, how: 'done' | 'dead' = 'done'): Promise<void> {
  const job = await claimOne(queue, task);
  if (how === 'done') expect(await queue.complete(job, { from: task })).toBe(true);
  else expect(await queue.fail(job, new PermanentError('boom'))).toBe('dead');
}

/** Backends of the test database waiting for a lock. */
export async function lockWaiters(db: TestDatabase): Promise<number> {
  const rows = await db.sql<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE datname = current_database() AND wait_event_type = 'Lock'`,
  );
  return rows[0]?.n ?? 0;
}

/** Resolves once at least `n` backends of the test database wait for a lock. */
export async function untilLockWaiters(db: TestDatabase, n: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while ((await lockWaiters(db)) < n) {
    if (Date.now() > deadline) throw new Error(`${n} lock waiters never appeared`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A session of its own with an open transaction, committed or rolled back on demand. */
export interface OpenTransaction {
  readonly client: pg.Client;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

const open = new Set<pg.Client>();

/** Rolls back and closes the transactions a test left open (a failed test must not hang its file). */
export async function closeOpenTransactions(): Promise<void> {
  const clients = [...open];
  open.clear();
  await Promise.all(clients.map((client) => client.end().catch(() => undefined)));
}

export async function openTransaction(db: TestDatabase): Promise<OpenTransaction> {
  const client = new pg.Client({ connectionString: db.url });
  client.on('error', () => undefined);
  await client.connect();
  open.add(client);
  await client.query('BEGIN');
  const end = async (how: 'COMMIT' | 'ROLLBACK') => {
    try {
      await client.query(how);
    } finally {
      open.delete(client);
      await client.end();
    }
  };
  return { client, commit: () => end('COMMIT'), rollback: () => end('ROLLBACK') };
}

/** A session of its own that holds a row lock on job `id` until `release()`. */
export async function holdRow(db: TestDatabase, id: string): Promise<{ release(): Promise<void> }> {
  const tx = await openTransaction(db);
  await tx.client.query(`SELECT 1 FROM ${db.jobs} WHERE id = $1 FOR NO KEY UPDATE`, [id]);
  return { release: () => tx.commit() };
}

/** A job's status and counter of unsatisfied dependencies, read from the primary. */
export async function stateOf(
  db: TestDatabase,
  id: string,
): Promise<{ status: JobStatus; depsLeft: number } | null> {
  const rows = await db.sql<{ status: JobStatus; deps_left: number }>(
    `SELECT status, deps_left FROM ${db.jobs} WHERE id = $1`,
    [id],
  );
  const row = rows[0];
  return row ? { status: row.status, depsLeft: row.deps_left } : null;
}

/** Resolves with `promise`'s outcome, or with 'pending' if it has not settled after `ms`. */
export async function settledWithin<T>(
  promise: Promise<T>,
  ms: number,
): Promise<{ status: 'fulfilled'; value: T } | { status: 'rejected'; reason: unknown } | 'pending'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'pending'>((resolve) => {
    timer = setTimeout(() => resolve('pending'), ms);
  });
  const outcome = promise.then(
    (value) => ({ status: 'fulfilled' as const, value }),
    (reason: unknown) => ({ status: 'rejected' as const, reason }),
  );
  try {
    return await Promise.race([outcome, late]);
  } finally {
    clearTimeout(timer);
  }
}
