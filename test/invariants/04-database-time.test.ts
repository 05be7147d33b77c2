/**
 * SPEC §1.4 — time is the database's: every now(), lease and run_after comparison happens in
 * SQL, so a process with a wrong clock behaves correctly.
 *
 * The process clock is set 25 years into the past (vi.setSystemTime fakes Date only), while
 * the tests check each timestamp against the database's own now().
 *
 * Deliberate break seen failing: computing run_after in JavaScript
 * (`new Date(Date.now() + delayMs)` passed as runAt in Queue.enqueue) made "delayMs counts from
 * the database's now()" fail (run_after landed in 2001), and the delayed job became claimable.
 */
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

/** Milliseconds between two timestamp columns of a job, computed by the database. */
async function gapMs(id: string, later: string, earlier: string): Promise<number> {
  const [row] = await db.sql<{ ms: string }>(
    `SELECT extract(epoch FROM ${later} - ${earlier}) * 1000 AS ms FROM ${db.jobs} WHERE id = $1`,
    [id],
  );
  return Math.round(Number(row?.ms));
}

describe('§1.4 database time', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(new Date('2001-01-01T00:00:00Z'));
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  test('delayMs counts from the database now(), and the job is not claimable early', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('time.delay', {}, { delayMs: 90_000 });
    expect(await gapMs(id, 'run_after', 'created_at')).toBe(90_000);
    const [row] = await db.sql<{ future: boolean }>(
      `SELECT run_after > now() + interval '80 seconds' AS future FROM ${db.jobs} WHERE id = $1`,
      [id],
    );
    expect(row?.future).toBe(true);
    expect(await queue.claim('w-time', { tasks: ['time.delay'] })).toEqual([]);
  });

  test('enqueueMany delays count from the database now() too', async () => {
    const queue = db.queue();
    const [a, b] = await queue.enqueueMany([
      { task: 'time.many', payload: 1, delayMs: 30_000 },
      { task: 'time.many', payload: 2 },
    ]);
    expect(await gapMs(a!.id, 'run_after', 'created_at')).toBe(30_000);
    expect(await gapMs(b!.id, 'run_after', 'created_at')).toBe(0);
  });

  test('the lease is now() + leaseMs in database time', async () => {
    const queue = db.queue();
    await queue.enqueue('time.lease', {});
    const [job] = await queue.claim('w-time', { tasks: ['time.lease'], leaseMs: 45_000 });
    expect(await gapMs(job!.id, 'lease_until', 'run_started_at')).toBe(45_000);
    // The job's timestamps are the server's, not the faked 2001 process clock.
    expect(job!.runStartedAt!.getUTCFullYear()).toBeGreaterThan(2020);
  });

  test('backoff and retryInMs schedule the retry from the database now()', async () => {
    const queue = db.queue({ backoff: { baseMs: 7_000, capMs: 600_000 } });
    const { id } = await queue.enqueue('time.retry', {}, { maxAttempts: 5 });
    let [job] = await queue.claim('w-time', { tasks: ['time.retry'] });
    expect(await queue.fail(job!, 'first')).toBe('pending');
    expect(await gapMs(id, 'run_after', 'updated_at')).toBe(7_000); // computeBackoff(1, 7000)

    await db.sql(`UPDATE ${db.jobs} SET run_after = now() WHERE id = $1`, [id]);
    [job] = await queue.claim('w-time', { tasks: ['time.retry'] });
    expect(await queue.fail(job!, 'second')).toBe('pending');
    expect(await gapMs(id, 'run_after', 'updated_at')).toBe(14_000); // computeBackoff(2, 7000)

    await db.sql(`UPDATE ${db.jobs} SET run_after = now() WHERE id = $1`, [id]);
    [job] = await queue.claim('w-time', { tasks: ['time.retry'] });
    expect(await queue.fail(job!, 'third', { retryInMs: 1_234 })).toBe('pending');
    expect(await gapMs(id, 'run_after', 'updated_at')).toBe(1_234);
  });

  test('lease expiry is judged by the database clock', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('time.reap', {});
    await queue.claim('w-time', { tasks: ['time.reap'], leaseMs: 60_000 });
    // The process believes it is 2001, far before any lease: reap still only follows SQL time.
    expect(await queue.reap()).toEqual([]);
    await db.expireLease(id);
    expect(await queue.reap()).toEqual([id]);
  });
});
