/**
 * The plain claim returns a lean row per job (the columns that vary, the claim's time once, the
 * rare fields packed: src/store/fragments.ts CLAIMED_COLUMNS) and builds the ClaimedJob in Node.
 * Whatever it leaves to Node must come out exactly as the database holds it: every field of a
 * claimed job equals `get(id)` read right after the claim, for a first attempt and for a job
 * that carries every rare field (dedupe key, group, flow, progress, last error, a history).
 * And the rows come back in claim order whatever order the statement returned them in.
 *
 * Broken on purpose once each: `runStartedAt: new Date(nowMs + 1)` in claimedJob (job-row.ts)
 * failed the first test; `progress: null` in claimedJob failed the second; sorting
 * with `byPickPosition` for plain claims (every position null: no sort) failed the third.
 */
import { expect, test } from 'vitest';
import type { ClaimedJob, Job } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

/** The claimed job without its lease fields, as `get` shows it. */
function asJob(job: ClaimedJob): Job {
  const { attempt: _attempt, token: _token, ...rest } = job;
  return rest;
}

test('a claimed job is exactly what get(id) reads after the claim', async () => {
  const queue = db.queue();
  await queue.enqueue('fields.plain', { a: [1, 'two', { three: null }] }, { priority: 7, timeoutMs: 5_000 });
  await queue.enqueue('fields.plain', 'text payload', { maxAttempts: 9, delayMs: 0 });
  const jobs = await queue.claim('worker-fields', { limit: 10, leaseMs: 45_000, tasks: ['fields.plain'] });
  expect(jobs).toHaveLength(2);
  for (const job of jobs) {
    expect(asJob(job)).toEqual(await queue.get(job.id));
    expect(job.attempt).toBe(1);
    expect(job.attemptedBy).toEqual(['worker-fields']);
    expect(job.leaseUntil!.getTime() - job.runStartedAt!.getTime()).toBe(45_000);
  }
});

test('the rare fields of a job come back with the claim: dedupe key, group, flow, progress, last error, history', async () => {
  const queue = db.queue();
  const keyed = await queue.enqueue('fields.rare', { n: 1 }, { dedupeKey: 'rare-key', group: 'tenant-9' });
  const { flowId, jobs: refs } = await queue.enqueueFlow([
    { ref: 'rare', task: 'fields.rare', payload: { n: 2 }, group: 'tenant-8' },
  ]);
  const ids = [keyed.id, refs.rare as string];
  // a first attempt that reports progress and fails: the second claim sees all of it
  const first = await queue.claim('worker-a', { tasks: ['fields.rare'], limit: 10 });
  expect(first.map((job) => job.id).sort()).toEqual([...ids].sort());
  await db.sql(`UPDATE ${db.jobs} SET progress = '{"step": 3}'::jsonb WHERE id = ANY($1::bigint[])`, [ids]);
  for (const job of first)
    expect(await queue.fail(job, new Error('first attempt broke'), { retryInMs: 0 })).toBe('pending');
  const second = await queue.claim('worker-b', { tasks: ['fields.rare'], limit: 10 });
  expect(second).toHaveLength(2);
  for (const job of second) {
    expect(asJob(job)).toEqual(await queue.get(job.id));
    expect(job).toMatchObject({ progress: { step: 3 }, attemptedBy: ['worker-a', 'worker-b'], attempt: 2 });
    expect(job.lastError).toContain('first attempt broke');
  }
  const byId = new Map(second.map((job) => [job.id, job]));
  expect(byId.get(keyed.id)).toMatchObject({ dedupeKey: 'rare-key', group: 'tenant-9', flowId: null });
  expect(byId.get(refs.rare as string)).toMatchObject({ group: 'tenant-8', flowId, flowRef: 'rare' });
});

test('rows come back in claim order (priority, run_after, id) whatever order the statement gave', async () => {
  const queue = db.queue();
  // ids ascending against priority descending, and run_after spread within one priority
  const specs = Array.from({ length: 300 }, (_, i) => ({
    task: 'fields.order',
    payload: { i },
    priority: 300 - i,
  }));
  const ids = (await queue.enqueueMany(specs)).map((r) => r.id);
  await db.sql(
    `UPDATE ${db.jobs} SET run_after = now() - (id % 7) * interval '1 second', priority = priority % 3
     WHERE id = ANY($1::bigint[])`,
    [ids],
  );
  const expected = (
    await db.sql<{ jid: string }>(
      `SELECT id::text AS jid FROM ${db.jobs} WHERE id = ANY($1::bigint[]) ORDER BY priority, run_after, id`,
      [ids],
    )
  ).map((r) => r.jid);
  const claimed = await queue.claim('worker-order', { limit: 300, tasks: ['fields.order'] });
  expect(claimed.map((job) => job.id)).toEqual(expected);
});
