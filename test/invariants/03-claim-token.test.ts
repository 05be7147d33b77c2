/**
 * SPEC §1.3 — ownership is a claim token, not just a worker id: every claim returns a lease
 * {id, workerId, attempt, token} whose token no other claim of that job ever gets, and every
 * owner transition matches all four fields. A lease from any other claim of the same job changes
 * nothing — even when the same worker id holds the job again with the same attempt number,
 * which release() (attempt given back) and requeue() (attempts reset) make possible.
 *
 * Caught before the token existed (issue 8, defect 1), each test below failed on the
 * {id, workerId, attempt} guard: claim → release → claim let complete(firstLease) return true
 * and store the stale result; dead → requeue → claim by the same worker let the zombie's
 * renewLease and fail succeed (fail killed the new run); completeMany answered true for both a
 * stale and a live lease of one job.
 *
 * Deliberate breaks seen failing: `claims = $4::bigint` → `$4::bigint IS NOT NULL` in LEASE_GUARD of
 * src/store/statements.ts (the release and requeue ABA tests); dropping `AND j.claims = c.token`
 * from completeMany (the per-lease answers test); dropping `claims = claims + 1` from the claim
 * (every test: the tokens of two claims were equal).
 */
import { describe, expect, test } from 'vitest';
import { ValidationError } from '../../src/errors.js';
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
    expect(fresh?.token).not.toBe(stale?.token);
    const before = await queue.get(id);

    expect(await queue.complete(stale!, 'stale result')).toBe(false);
    expect(await queue.fail(stale!, new Error('stale failure'))).toBeNull();
    expect(await queue.renewLease(stale!, 3_600_000)).toBe(false);
    expect(await queue.release(stale!)).toBe(false);
    expect(await queue.get(id)).toEqual(before);

    expect(await queue.complete(fresh!, 'fresh result')).toBe(true);
    expect(await queue.get(id)).toMatchObject({ status: 'done', result: 'fresh result', attempts: 2 });
  });

  test('ABA through release(): the same worker claims the same attempt again; the first lease is dead', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('token.release', {});
    const [first] = await queue.claim('worker-R', { tasks: ['token.release'] });
    expect(await queue.release(first!)).toBe(true);
    const [second] = await queue.claim('worker-R', { tasks: ['token.release'] });
    // Everything but the token is equal: release gave the attempt back.
    expect(second).toMatchObject({ id, workerId: 'worker-R', attempt: first?.attempt });
    expect(second?.token).not.toBe(first?.token);

    expect(await queue.complete(first!, 'stale result')).toBe(false);
    expect(await queue.renewLease(first!)).toBe(false);
    expect(await queue.fail(first!, new Error('stale'))).toBeNull();
    expect(await queue.release(first!)).toBe(false);
    expect(await queue.get(id)).toMatchObject({ status: 'running', result: null, lastError: null });

    expect(await queue.complete(second!, 'live result')).toBe(true);
    expect(await queue.get(id)).toMatchObject({ status: 'done', result: 'live result' });
  });

  test('ABA through requeue(): a zombie of a dead job cannot renew or fail its new run', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('token.requeue', {}, { maxAttempts: 1 });
    const [zombie] = await queue.claim('worker-Z', { tasks: ['token.requeue'] });
    await db.expireLease(id);
    expect(await queue.reap()).toEqual([id]);
    expect((await queue.get(id))?.status).toBe('dead');
    expect(await queue.requeue(id)).toBe(true);
    const [fresh] = await queue.claim('worker-Z', { tasks: ['token.requeue'] });
    // requeue reset attempts: the new claim has the zombie's attempt number too.
    expect(fresh).toMatchObject({ id, workerId: 'worker-Z', attempt: 1 });
    expect(fresh?.token).not.toBe(zombie?.token);

    expect(await queue.renewLease(zombie!, 3_600_000)).toBe(false);
    expect(await queue.fail(zombie!, new Error('zombie failure'))).toBeNull();
    expect(await queue.get(id)).toMatchObject({
      status: 'running',
      lastError: expect.stringMatching(/^LeaseExpired/),
    });
    expect(await queue.complete(fresh!, 'fresh')).toBe(true);
  });

  test('completeMany answers per lease: a stale and a live lease of one job, and a lease listed twice', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('token.many', {});
    const [first] = await queue.claim('worker-M', { tasks: ['token.many'] });
    await queue.release(first!);
    const [live] = await queue.claim('worker-M', { tasks: ['token.many'] });
    const { id: otherId } = await queue.enqueue('token.many.other', {});
    const [other] = await queue.claim('worker-M', { tasks: ['token.many.other'] });

    const answers = await queue.completeMany([
      { lease: first!, result: 'stale' },
      { lease: live!, result: 'live' },
      { lease: other!, result: 'other' },
      { lease: live!, result: 'live again' },
    ]);
    expect(answers).toEqual([false, true, true, false]);
    expect(await queue.get(id)).toMatchObject({ status: 'done', result: 'live' });
    expect(await queue.get(otherId)).toMatchObject({ status: 'done', result: 'other' });
  });

  test('every field of the lease must match', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('token.fields', {});
    const [job] = await queue.claim('worker-B', { tasks: ['token.fields'] });
    const lease = { id, workerId: 'worker-B', attempt: 1, token: job!.token };
    expect(job).toMatchObject(lease);

    expect(await queue.complete({ ...lease, workerId: 'worker-C' })).toBe(false);
    expect(await queue.complete({ ...lease, attempt: 2 })).toBe(false);
    expect(await queue.complete({ ...lease, token: String(Number(lease.token) + 1) })).toBe(false);
    const { id: otherId } = await queue.enqueue('token.other', {});
    expect(await queue.complete({ ...lease, id: otherId })).toBe(false);
    expect((await queue.get(id))?.status).toBe('running');

    // A lease without its token is bad input, not a lost lease.
    const { token: _, ...tokenless } = lease;
    await expect(queue.complete(tokenless as never)).rejects.toBeInstanceOf(ValidationError);
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
  });

  test('workerId is set only while running; attemptedBy keeps who ran it (SPEC §2)', async () => {
    const queue = db.queue({ backoff: { baseMs: 0, capMs: 0 } });
    const { id } = await queue.enqueue('token.history', {}, { maxAttempts: 3 });
    const [a] = await queue.claim('worker-1', { tasks: ['token.history'] });
    expect(await queue.get(id)).toMatchObject({ status: 'running', workerId: 'worker-1' });
    expect(await queue.fail(a!, new Error('first'))).toBe('pending');
    expect(await queue.get(id)).toMatchObject({ status: 'pending', workerId: null, leaseUntil: null });
    const [b] = await queue.claim('worker-2', { tasks: ['token.history'] });
    await db.expireLease(id);
    await queue.reap();
    expect(await queue.get(id)).toMatchObject({ status: 'pending', workerId: null });
    const [c] = await queue.claim('worker-3', { tasks: ['token.history'] });
    expect(b?.token).not.toBe(c?.token);
    expect(await queue.complete(c!, 'ok')).toBe(true);
    expect(await queue.get(id)).toMatchObject({
      status: 'done',
      workerId: null,
      leaseUntil: null,
      attemptedBy: ['worker-1', 'worker-2', 'worker-3'],
    });
  });
});
