/**
 * Review finding 6: pick_aged locked every candidate it read (FOR NO KEY UPDATE SKIP LOCKED per
 * priority: distinct priorities × p_limit rows), so a claim of 50 in a queue of 5,000 jobs at
 * 5,000 priorities held all 5,000 rows and a second claimer found nothing lockable. Failed before
 * the fix (0 rows lockable; checked by reverting src/). Now candidates are read without locks and
 * only the best p_limit are locked.
 */
import { expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);

test('an aging pick locks only the jobs it returns, in effective-priority order', async () => {
  const queue = db.queue();
  await queue.configureQueue('agd', { priorityAging: { everyMs: 3_600_000 } });
  await queue.enqueueMany(
    Array.from({ length: 500 }, (_, i) => ({ task: 't', payload: i, queue: 'agd', priority: 500 - i })),
  );
  const c = await db.pool.connect();
  try {
    await c.query('BEGIN');
    const picked = await c.query<{ id: string }>(
      `SELECT id::text FROM ${S}.pick_aged(50, NULL, $1, clock_timestamp(), NULL, NULL) AS id`,
      ['agd'],
    );
    expect(picked.rows).toHaveLength(50);
    const prios = await db.sql<{ priority: number }>(
      `SELECT priority FROM ${db.jobs} WHERE id = ANY($1::bigint[]) ORDER BY priority`,
      [picked.rows.map((r) => r.id)],
    );
    expect(prios.map((r) => r.priority)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    const [lockable] = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM (SELECT id FROM ${db.jobs} WHERE queue = 'agd' AND status = 'pending'
       FOR UPDATE SKIP LOCKED) AS x`,
    );
    expect(lockable?.n).toBe(450);
  } finally {
    await c.query('ROLLBACK');
    c.release();
  }
});
