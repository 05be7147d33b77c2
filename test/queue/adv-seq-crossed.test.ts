/**
 * Adversarial: two sessions take heads of two keys out in opposite orders (a real deadlock, that
 * PostgreSQL breaks by aborting one); afterwards each key has exactly its next job pending.
 */
import pg from 'pg';
import { expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

test('crossed head completions: one session aborted by the deadlock detector, both keys advanced once', async () => {
  const queue = db.queue();
  const ids: Record<string, string[]> = {};
  for (const k of ['x', 'y']) {
    ids[k] = [];
    for (let i = 0; i < 3; i++) ids[k].push((await queue.enqueue('t', i, { sequence: k })).id);
  }
  await queue.claim('probe', { queues: ['none'] }); // a pass: both heads pending
  const [hx, hy] = [ids.x?.[0] as string, ids.y?.[0] as string];
  const a = new pg.Client({ connectionString: db.url });
  const b = new pg.Client({ connectionString: db.url });
  await a.connect();
  await b.connect();
  await a.query('BEGIN');
  await b.query('BEGIN');
  await a.query(`UPDATE ${db.jobs} SET status = 'cancelled' WHERE id = $1`, [hx]);
  await b.query(`UPDATE ${db.jobs} SET status = 'cancelled' WHERE id = $1`, [hy]);
  const ra = a.query(`UPDATE ${db.jobs} SET status = 'cancelled' WHERE id = $1`, [hy]).then(
    () => 'ok',
    (e: Error) => e.message,
  );
  const rb = b.query(`UPDATE ${db.jobs} SET status = 'cancelled' WHERE id = $1`, [hx]).then(
    () => 'ok',
    (e: Error) => e.message,
  );
  const [oa, ob] = await Promise.all([ra, rb]);
  expect([oa, ob].filter((o) => /deadlock/.test(o))).toHaveLength(1);
  await a.query(oa === 'ok' ? 'COMMIT' : 'ROLLBACK');
  await b.query(ob === 'ok' ? 'COMMIT' : 'ROLLBACK');
  await a.end();
  await b.end();
  const rows = await db.sql<{ id: string; status: string }>(
    `SELECT id::text, status FROM ${db.jobs} ORDER BY id`,
  );
  const st = Object.fromEntries(rows.map((r) => [r.id, r.status]));
  for (const k of ['x', 'y']) {
    const [h, n, m] = ids[k] as string[];
    expect([st[h as string], st[n as string], st[m as string]], k).toEqual([
      'cancelled',
      'pending',
      'waiting',
    ]);
  }
});
