/**
 * requeueDead: keyset batches of dead → pending; a batch holding a dead job whose dedupe key is
 * active again falls back to one job at a time and skips only that one.
 *
 * Deliberate break seen failing: ordering the fallback's ids by their text form (the bug that
 * `ORDER BY id` over `id::text AS id` had) left job 2 dead and counted the skip twice.
 */
import { expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

test('requeueDead requeues every dead job but the one whose key is taken, across batches', async () => {
  const queue = db.queue({ schema: 'requeue_dead' });
  await queue.migrate();
  const jobs = '"requeue_dead".jobs';
  // Dead ids 2 and 1000…1999 (ids with different digit counts), one of them holding a key.
  await db.sql(`SELECT setval('"requeue_dead".jobs_id_seq', 1)`);
  await db.sql(`INSERT INTO ${jobs} (task, status) VALUES ('t', 'dead')`); // id 2
  await db.sql(`SELECT setval('"requeue_dead".jobs_id_seq', 999)`);
  await db.sql(
    `INSERT INTO ${jobs} (task, status, attempts, dedupe_key)
     SELECT 't', 'dead', 3, CASE WHEN i = 1500 THEN 'taken' END FROM generate_series(1000, 1999) i`,
  );
  await queue.enqueue('t', {}, { dedupeKey: 'taken' }); // the key is active again
  const progress: number[] = [];
  const result = await queue.requeueDead({}, (p) => progress.push(p.requeued));
  expect(result).toEqual({ requeued: 1_000, skipped: 1 });
  expect((await queue.get('2'))?.status).toBe('pending');
  expect((await queue.get('1500'))?.status).toBe('dead');
  expect((await queue.counts()).dead).toBe(1);
  expect(progress.at(-1)).toBe(1_000);
  expect(await queue.requeueDead({ task: 'nothing-dead' })).toEqual({ requeued: 0, skipped: 0 });
});
