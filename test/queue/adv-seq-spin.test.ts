/**
 * A key whose lock a transaction holds open (here a head cancelled in a user's transaction;
 * queue.complete(lease, r, { client }) does the same) while a job of that key arrives: every
 * listening worker's pass finds the key busy. Before migration 24 the pass's hint ('sequence')
 * woke every worker for another pass at once, busy again…: 2 idle workers sent 2,754–3,458 hints
 * in 3 s. Now the hint is 'sequence-busy' and a worker passes again after
 * SEQUENCE_BUSY_RETRY_MS (100 ms): about 10 passes a second per worker. Break seen failing: the
 * worker treating 'sequence-busy' like 'sequence' (dirty + immediate wake).
 * The end state: the job runs once the transaction commits.
 */
import pg from 'pg';
import { expect, test } from 'vitest';
import { notifyChannel, quoteIdent } from '../../src/db/identifier.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);

test('key lock held 3 s by an open transaction while a job of it arrives: the workers pass again after a pause, not in a storm', async () => {
  const queue = db.queue();
  const started: string[] = [];
  const workers = [0, 1].map(() =>
    db.worker({
      queue: db.queue(),
      concurrency: 2,
      pollIntervalMs: 60_000,
      tasks: { s: async (p: string) => void started.push(p) },
    }),
  );
  for (const w of workers) await w.start();
  const h = await queue.enqueue('s', 'H', { sequence: 'hk', runAt: new Date(Date.now() + 3_600_000) });
  await expect.poll(async () => (await queue.get(h.id))?.status).toBe('pending');
  const listen = new pg.Client({ connectionString: db.url });
  await listen.connect();
  let hints = 0;
  listen.on('notification', () => hints++);
  await listen.query(`LISTEN ${quoteIdent(notifyChannel(TEST_SCHEMA))}`);
  const tx = new pg.Client({ connectionString: db.url });
  await tx.connect();
  await tx.query('BEGIN');
  await tx.query(`UPDATE ${S}.jobs SET status = 'cancelled' WHERE id = $1`, [h.id]); // trigger: key lock held
  const j = await queue.enqueue('s', 'J', { sequence: 'hk' });
  const before = hints;
  await new Promise((r) => setTimeout(r, 3000));
  const during = hints - before;
  await tx.query('COMMIT');
  await expect.poll(() => started).toEqual(['J']);
  expect(during).toBeGreaterThan(0); // the workers did come back to the key
  expect(during).toBeLessThan(150); // 2 workers × 10 passes a second × 3 s = 60; before: thousands
  for (const w of workers) await w.stop();
  await listen.end();
  await tx.end();
  void j;
});
