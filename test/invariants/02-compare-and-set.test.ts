/**
 * SPEC §1.2 — every transition is a compare-and-set with RETURNING: the WHERE guards the
 * expected status and owner, and the caller learns from the returned row whether it won.
 *
 * Deliberate break seen failing: dropping `status = 'running'` from LEASE_GUARD in
 * src/store/statements.ts made a second complete() return true and let fail() overwrite a
 * done job ("a finished job is never moved by its old owner" and "exactly one of ten racing
 * completes wins" both failed).
 */
import { describe, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

describe('§1.2 compare-and-set transitions', () => {
  test('exactly one of ten racing completes of the same lease wins', async () => {
    const queue = db.queue();
    await queue.enqueue('cas.race', {});
    const [job] = await queue.claim('w-race', { tasks: ['cas.race'] });
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => queue.complete(job!, { i })));
    expect(results.filter(Boolean)).toHaveLength(1);
    const stored = await queue.get(job!.id);
    expect(stored?.status).toBe('done');
    expect(stored?.result).toEqual({ i: results.indexOf(true) });
  });

  test('a finished job is never moved by its old owner', async () => {
    const queue = db.queue();
    await queue.enqueue('cas.finished', { n: 1 });
    const [job] = await queue.claim('w-fin', { tasks: ['cas.finished'] });
    expect(await queue.complete(job!, 'first')).toBe(true);
    const before = await queue.get(job!.id);

    expect(await queue.complete(job!, 'second')).toBe(false);
    expect(await queue.fail(job!, new Error('late'))).toBeNull();
    expect(await queue.renewLease(job!)).toBe(false);
    expect(await queue.release(job!)).toBe(false);

    const after = await queue.get(job!.id);
    expect(after).toEqual(before);
  });

  test('racing fail and complete: exactly one wins and the row matches the winner', async () => {
    const queue = db.queue();
    for (let i = 0; i < 20; i++) await queue.enqueue('cas.mixed', { i }, { maxAttempts: 5 });
    const jobs = await queue.claim('w-mixed', { tasks: ['cas.mixed'], limit: 20 });
    expect(jobs).toHaveLength(20);
    for (const job of jobs) {
      const [completed, failed] = await Promise.all([queue.complete(job, 'ok'), queue.fail(job, 'boom')]);
      expect(Number(completed) + Number(failed !== null)).toBe(1);
      const row = await queue.get(job.id);
      expect(row?.status).toBe(completed ? 'done' : 'pending');
    }
  });

  test('requeue only moves a dead job, cancel only an active one', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('cas.admin', {}, { maxAttempts: 1 });
    expect(await queue.requeue(id)).toBe(false); // pending, not dead
    const [job] = await queue.claim('w-admin', { tasks: ['cas.admin'] });
    expect(await queue.fail(job!, 'x')).toBe('dead');
    expect(await queue.cancel(id)).toBe(false); // dead is finished
    const racing = await Promise.all([queue.requeue(id), queue.requeue(id), queue.requeue(id)]);
    expect(racing.filter(Boolean)).toHaveLength(1);
    expect((await queue.get(id))?.status).toBe('pending');
    expect(await queue.cancel(id)).toBe(true);
    expect(await queue.cancel(id)).toBe(false);
    expect((await queue.get(id))?.status).toBe('cancelled');
  });

  test('a failure after cancel() ends the job cancelled instead of retrying it', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('cas.cancel-fail', {}, { maxAttempts: 5 });
    const [job] = await queue.claim('w-cf', { tasks: ['cas.cancel-fail'] });
    expect(await queue.cancel(id)).toBe(true);
    expect(await queue.fail(job!, new Error('failed before it heard of the cancel'))).toBe('cancelled');
    expect(await queue.claim('w-cf', { tasks: ['cas.cancel-fail'] })).toEqual([]);
    expect((await queue.get(id))?.status).toBe('cancelled');
  });

  test('claim never takes a job another transition already moved', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('cas.claim', {});
    expect(await queue.cancel(id)).toBe(true);
    expect(await queue.claim('w-claim', { tasks: ['cas.claim'] })).toEqual([]);
  });
});
