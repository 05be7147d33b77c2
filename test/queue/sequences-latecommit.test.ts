/**
 * Review finding reproductions (sequences), kept as tests. Each failed on the branch before the
 * fix (checked by reverting src/: the limited-queue late commit ran H before A, the claim racing a
 * held key lock took H, the new key's first job started behind the backlog — at position >= 3,
 * the plain claim that ran the pass returned [] and a listen:false worker idled its poll
 * interval). The fix: every pick skips a head whose key is noted, and the pass runs as a statement
 * of its own before both the plain and the limited claim.
 */
import { expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

for (const limited of [true, false]) {
  test(`late commit visible before any claim, ${limited ? 'limited queue' : 'plain queue (control)'}: id order`, async () => {
    const queue = db.queue();
    const q = limited ? 'lim' : 'plain';
    const key = `k-${q}`;
    if (limited) await queue.configureQueue(q, { concurrency: 5 });
    const c1 = await db.pool.connect();
    await c1.query('BEGIN');
    const a = await queue.enqueue('t', 'A', { sequence: key, queue: q, client: c1 } as never);
    const h = await queue.enqueue('t', 'H', { sequence: key, queue: q });
    expect(BigInt(a.id) < BigInt(h.id)).toBe(true);
    await queue.claim('other', { queues: ['nothing-here'] }); // some claim's pass advances the key: H pending
    expect((await queue.get(h.id))?.status).toBe('pending');
    await c1.query('COMMIT');
    c1.release();
    // both A and H are committed and visible now; H has never started
    const started: string[] = [];
    const worker = db.worker({
      concurrency: 1,
      prefetch: 0,
      queues: [q],
      pollIntervalMs: 60_000,
      tasks: {
        t: async (p: unknown) => {
          started.push(String(p));
        },
      },
    });
    await worker.start();
    await expect.poll(() => started.length, { timeout: 10_000 }).toBe(2);
    await worker.stop();
    expect(started).toEqual(['A', 'H']);
  });
}

test('plain queue: a concurrent pass holds the key (modelled by holding its lock): the claim takes H, A visible', async () => {
  const { quoteIdent } = await import('../../src/db/identifier.js');
  const { TEST_SCHEMA } = await import('../support/schema.js');
  const S = quoteIdent(TEST_SCHEMA);
  const queue = db.queue();
  const key = 'k-race';
  const c1 = await db.pool.connect();
  await c1.query('BEGIN');
  const a = await queue.enqueue('t', 'A', { sequence: key, queue: 'race', client: c1 } as never);
  const h = await queue.enqueue('t', 'H', { sequence: key, queue: 'race' });
  await queue.claim('other', { queues: ['nothing-here'] });
  expect((await queue.get(h.id))?.status).toBe('pending');
  await c1.query('COMMIT');
  c1.release();
  // another worker's pass has just try-locked the key (it is between its lock and its update of H)
  const w1 = await db.pool.connect();
  await w1.query('BEGIN');
  await w1.query(`SELECT pg_advisory_xact_lock(${S}.sequence_lock_id($1))`, [key]);
  const got = await queue.claim('w2', { queues: ['race'] });
  await w1.query('COMMIT');
  w1.release();
  // A (smaller id, committed before this claim began) must go first; H has never started
  expect(got.map((j) => j.payload)).not.toContain('H');
  void a;
});
