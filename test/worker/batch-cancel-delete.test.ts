import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

async function row(id: string) {
  return (await db.sql<{ status: string }>(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id]))[0];
}

// §11 review finding 4 (reviewer's rv3): with retention 'delete', a cancel that committed after
// the batch statement (which left the completion to the deleting statement) while that statement
// waited for the row was not seen: the job was deleted as done. Run against the code before the
// fix (completeManyDelete without the cancel_requested_at check): the 'delete' case failed (the
// job was gone); the 'keep' case passed there too.

for (const completed of ['keep', 'delete'] as const) {
  test(`retention ${completed}: a cancel requested while the batch runs, committed just after it returns`, async () => {
    const queue = db.queue({ retention: { completed } });
    const ids = (
      await queue.enqueueMany(
        Array.from({ length: 2 }, (_, i) => ({ task: `c${completed}`, payload: { i }, priority: i })),
      )
    ).map((r) => r.id);
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    let returned = false;
    const worker = db.worker({
      queue,
      concurrency: 4,
      tasks: {
        [`c${completed}`]: {
          batch: { maxSize: 4 },
          handler: async () => {
            // the cancel's transaction has marked job 0 (not yet committed) while the batch runs
            await client.query('BEGIN');
            await client.query(`UPDATE ${db.jobs} SET cancel_requested_at = now() WHERE id = $1`, [ids[0]]);
            returned = true;
            return [{ r: 0 }, { r: 1 }];
          },
        },
      },
    });
    await worker.start();
    while (!returned) await sleep(10);
    await sleep(300);
    await client.query('COMMIT');
    await client.end();
    await sleep(500);
    await worker.stop();
    const r = await Promise.all(ids.map(row));
    expect(r[0]?.status).toBe('cancelled');
  }, 30_000);
}
