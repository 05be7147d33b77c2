/**
 * SPEC §1.3 — ownership is a claim token {id, workerId, attempt}, not just a worker id: a lease
 * from an earlier claim of the same job changes nothing, even when the same worker id holds it
 * again (the ABA case the seed's worker_id guard is open to).
 *
 * Deliberate break seen failing: dropping `attempts = $3` from LEASE_GUARD in
 * src/store/statements.ts let the stale lease complete the new attempt (the ABA test failed:
 * complete returned true and the job became done with the stale result).
 */
import { describe, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

describe('§1.3 claim token', () => {
  test('ABA: lease expires, reap, same worker claims again; the stale lease changes nothing', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('token.aba', { n: 1 }, { maxAttempts: 5 });
    const [stale] = await queue.claim('worker-A', { tasks: ['token.aba'] });
    expect(stale?.attempt).toBe(1);

    await db.expireLease(id);
    expect(await queue.reap()).toEqual([id]);
    const [fresh] = await queue.claim('worker-A', { tasks: ['token.aba'] });
    expect(fresh).toMatchObject({ id, workerId: 'worker-A', attempt: 2 });
    const before = await queue.get(id);

    expect(await queue.complete(stale!, 'stale result')).toBe(false);
    expect(await queue.fail(stale!, new Error('stale failure'))).toBeNull();
    expect(await queue.renewLease(stale!, 3_600_000)).toBe(false);
    expect(await queue.release(stale!)).toBe(false);
    expect(await queue.get(id)).toEqual(before);

    expect(await queue.complete(fresh!, 'fresh result')).toBe(true);
    expect(await queue.get(id)).toMatchObject({ status: 'done', result: 'fresh result', attempts: 2 });
  });

  test('every field of the lease must match', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('token.fields', {});
    const [job] = await queue.claim('worker-B', { tasks: ['token.fields'] });
    const lease = { id, workerId: 'worker-B', attempt: 1 };
    expect(job).toMatchObject(lease);

    expect(await queue.complete({ ...lease, workerId: 'worker-C' })).toBe(false);
    expect(await queue.complete({ ...lease, attempt: 2 })).toBe(false);
    const { id: otherId } = await queue.enqueue('token.other', {});
    expect(await queue.complete({ ...lease, id: otherId })).toBe(false);
    expect((await queue.get(id))?.status).toBe('running');

    expect(await queue.complete(lease)).toBe(true);
  });

  test('renewLease extends only the current claim, in database time', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('token.renew', {}, { maxAttempts: 3 });
    const [first] = await queue.claim('worker-R', { tasks: ['token.renew'], leaseMs: 1_000 });
    expect(await queue.renewLease(first!, 60_000)).toBe(true);
    const [row] = await db.sql<{ ms: number }>(
      `SELECT extract(epoch FROM lease_until - now()) * 1000 AS ms FROM ${db.jobs} WHERE id = $1`,
      [id],
    );
    expect(Number(row?.ms)).toBeGreaterThan(50_000);
    expect(Number(row?.ms)).toBeLessThanOrEqual(60_000);

    expect(await queue.release(first!)).toBe(true);
    const [second] = await queue.claim('worker-R', { tasks: ['token.renew'] });
    // release gave the attempt back, so the new claim has the same attempt number: the lease is
    // equal again, which is why the Worker discards a released job's late outcome itself.
    expect(second?.attempt).toBe(1);
  });
});
