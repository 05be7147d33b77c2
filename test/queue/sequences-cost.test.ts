/**
 * Review finding 3: every claim, of any queue, ran sequence_pass(1000) while another queue's
 * sequenced jobs were arriving — up to 1,000 keys' advisory locks held at once and claims of
 * 400–700 ms. Now one claim's pass looks at 32 keys at most, as a statement of its own. Failed
 * before (one claim advanced all 1,000 keys: 0 noted keys left; checked by reverting src/).
 */
import { expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);

test('a claim of an unsequenced queue advances at most 32 noted keys of another queue', async () => {
  const queue = db.queue();
  await queue.enqueue('p', 'plain', { queue: 'P' });
  await queue.enqueueMany(
    Array.from({ length: 1000 }, (_, i) => ({ task: 's', payload: i, queue: 'S', sequence: `k${i}` })),
  );
  const got = await queue.claim('w', { queues: ['P'], limit: 1 });
  expect(got.map((j) => j.payload)).toEqual(['plain']);
  const [left] = await db.sql<{ n: number }>(
    `SELECT count(DISTINCT sequence)::int AS n FROM ${S}.sequence_arrivals`,
  );
  expect(left?.n).toBe(1000 - 32);
  const [pending] = await db.sql<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${db.jobs} WHERE queue = 'S' AND status = 'pending'`,
  );
  expect(pending?.n).toBe(32);
});
