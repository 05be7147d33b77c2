/**
 * Review finding 7: a cancel of a never-started head and a pass putting that head back to waiting
 * (a late commit) deadlocked — the pass held the key's lock and waited for the head's row, the
 * cancel held the row and its trigger waited for the key's lock. Failed before the fix ("deadlock
 * detected" from one side; checked by reverting src/). Now the advance locks the head's row with
 * SKIP LOCKED first and leaves the key noted when it is held.
 */
import { expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test('cancel of a never-started head vs a pass putting it back for a late commit: no deadlock', async () => {
  const queue = db.queue();
  const key = 'k-dl';
  const c1 = await db.pool.connect();
  await c1.query('BEGIN');
  const a = await queue.enqueue('t', 'A', { sequence: key, client: c1 } as never);
  const h = await queue.enqueue('t', 'H', { sequence: key });
  await queue.claim('other', { queues: ['nothing-here'] }); // the pass: H pending
  await c1.query('COMMIT'); // A committed late: noted
  c1.release();
  // the cancel has locked H's row ...
  const canceller = await db.pool.connect();
  await canceller.query('BEGIN');
  await canceller.query(`SELECT id FROM ${db.jobs} WHERE id = $1 FOR NO KEY UPDATE`, [h.id]);
  // ... a claim's pass takes the key's lock and meets H's row
  const claim = queue.claim('w', { queues: ['nothing-here'] }).then(
    () => 'claim ok',
    (e: Error) => `claim: ${e.message}`,
  );
  await sleep(300);
  // ... the cancel's update of H fires the trigger, which takes the key's lock
  const cancel = canceller.query(`UPDATE ${db.jobs} SET status = 'cancelled' WHERE id = $1`, [h.id]).then(
    () => 'cancel ok',
    (e: Error) => `cancel: ${e.message}`,
  );
  const outcomes = await Promise.all([claim, cancel]);
  await canceller.query('COMMIT');
  canceller.release();
  expect(outcomes).toEqual(['claim ok', 'cancel ok']);
  // the key goes on in id order: A is the head now
  await queue.claim('other', { queues: ['nothing-here'] });
  expect((await queue.get(a.id))?.status).toBe('pending');
});
