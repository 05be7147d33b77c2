/**
 * SPEC §1.8 — retries are built in: exponential backoff base·2^(attempts-1), capped, optional
 * jitter; after max_attempts the job goes dead and keeps its last_error; requeue brings a dead
 * job back with attempts reset.
 *
 * Deliberate break seen failing: changing computeBackoff's exponent to `attempts` (one doubling
 * too many) failed "the seed's schedule" and the database-side retry gaps; making fail() clear
 * last_error on dead failed "dead keeps its last_error".
 */
import { describe, expect, test } from 'vitest';
import { computeBackoff } from '../../src/core/backoff.js';
import { ValidationError } from '../../src/errors.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

describe('§1.8 computeBackoff', () => {
  test('the seed’s schedule: 5 s doubling, capped at 600 s', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((n) => computeBackoff(n))).toEqual([
      5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 600_000,
    ]);
    expect(computeBackoff(0)).toBe(5_000);
    expect(computeBackoff(5_000)).toBe(600_000); // no overflow to Infinity
    expect(computeBackoff(3, 1_000, 3_000)).toBe(3_000);
  });

  test('jitter stays inside its band', () => {
    const draws = [0, 0.25, 0.5, 0.999];
    for (const r of draws) {
      const full = computeBackoff(3, 1_000, 60_000, 'full', () => r);
      expect(full).toBeGreaterThanOrEqual(0);
      expect(full).toBeLessThanOrEqual(4_000);
      const equal = computeBackoff(3, 1_000, 60_000, 'equal', () => r);
      expect(equal).toBeGreaterThanOrEqual(2_000);
      expect(equal).toBeLessThanOrEqual(4_000);
    }
    expect(computeBackoff(3, 1_000, 60_000, 'none', () => 0)).toBe(4_000);
  });

  test('bad arguments are a ValidationError', () => {
    expect(() => computeBackoff(Number.NaN)).toThrow(ValidationError);
    expect(() => computeBackoff(1, -1)).toThrow(ValidationError);
    expect(() => computeBackoff(1, 1, 1, 'sometimes' as 'full')).toThrow(ValidationError);
  });
});

describe('§1.8 retries in the queue', () => {
  test('fail → pending after the backoff, then dead at maxAttempts keeping last_error', async () => {
    const queue = db.queue({ backoff: { baseMs: 2_000, capMs: 5_000 } });
    const { id } = await queue.enqueue('retry.flow', { n: 1 }, { maxAttempts: 3 });
    const gaps: number[] = [];
    for (let attempt = 1; attempt <= 3; attempt++) {
      await db.sql(`UPDATE ${db.jobs} SET run_after = now() WHERE id = $1`, [id]); // make it due now
      const [job] = await queue.claim('w-retry', { tasks: ['retry.flow'] });
      expect(job?.attempt).toBe(attempt);
      const outcome = await queue.fail(job!, new Error(`failure ${attempt}`));
      expect(outcome).toBe(attempt < 3 ? 'pending' : 'dead');
      const [row] = await db.sql<{ gap: string }>(
        `SELECT extract(epoch FROM run_after - updated_at) * 1000 AS gap FROM ${db.jobs} WHERE id = $1`,
        [id],
      );
      gaps.push(Math.round(Number(row?.gap)));
    }
    expect(gaps.slice(0, 2)).toEqual([2_000, 4_000]);
    const dead = await queue.get(id);
    expect(dead).toMatchObject({ status: 'dead', attempts: 3 });
    expect(dead?.lastError).toMatch(/^Error: failure 3/);
    expect(dead?.lastError).toContain('08-retries.test.ts'); // the stack is kept
  });

  test('a non-Error throw value is described, and last_error is bounded', async () => {
    const queue = db.queue();
    await queue.enqueue('retry.values', {}, { maxAttempts: 5 });
    let [job] = await queue.claim('w-values', { tasks: ['retry.values'] });
    await queue.fail(job!, { reason: 'quota', retryable: true }, { retryInMs: 0 });
    expect((await queue.get(job!.id))?.lastError).toBe(
      'Non-Error thrown: {"reason":"quota","retryable":true}',
    );

    [job] = await queue.claim('w-values', { tasks: ['retry.values'] });
    await queue.fail(job!, 'x'.repeat(50_000), { retryInMs: 0 });
    const text = (await queue.get(job!.id))?.lastError ?? '';
    expect(text.length).toBeLessThanOrEqual(8_000);
    expect(text.endsWith('[truncated]')).toBe(true);
  });

  test('requeue brings a dead job back with attempts reset, and it runs again', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('retry.requeue', { n: 2 }, { maxAttempts: 1 });
    const [job] = await queue.claim('w-requeue', { tasks: ['retry.requeue'] });
    expect(await queue.fail(job!, new Error('permanent'))).toBe('dead');
    expect(await queue.requeue(id)).toBe(true);
    const back = await queue.get(id);
    expect(back).toMatchObject({ status: 'pending', attempts: 0, leaseUntil: null });
    const [again] = await queue.claim('w-requeue', { tasks: ['retry.requeue'] });
    expect(again).toMatchObject({ id, attempt: 1 });
    expect(await queue.complete(again!)).toBe(true);
  });

  test('requeue of a dead job whose key is taken again is a DedupeConflictError, nothing changes', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('retry.key', {}, { dedupeKey: 'retry-key', maxAttempts: 1 });
    const [job] = await queue.claim('w-key', { tasks: ['retry.key'] });
    await queue.fail(job!, 'dead now');
    const other = await queue.enqueue('retry.key', {}, { dedupeKey: 'retry-key' });
    expect(other.created).toBe(true);
    await expect(queue.requeue(id)).rejects.toMatchObject({ code: 'ERR_DEDUPE_CONFLICT' });
    expect((await queue.get(id))?.status).toBe('dead');
  });
});
