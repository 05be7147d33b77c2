/**
 * Review of migration 24 (2026-12-04): the upgrade path from a version-22 schema where the job of
 * smaller id that version 22's advance made pending beside a suspended sequence head has already
 * run and died. It cannot be un-started: migration 24's repair moves the suspended job into the
 * key's queue instead (its wait stays registered), so the key has one holder (the dead job) and
 * the emit wakes every other waiter of the event. Failed before that repair: 23505 on
 * jobs_sequence_head_idx, the other waiter left waiting.
 */
import { describe, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';
import { schemaAt as schemaAtVersion } from '../support/schema-at.js';

const db = useTestDatabase();

const schemaAt = (name: string, version: number) => schemaAtVersion(db, name, version);

/**
 * What version 22 leaves (migration 24's header): J (smaller id, committed late) pending beside
 * X, the key's former head, suspended waiting for `event`; and Y, an unsequenced job waiting for
 * the same event. Built as version 22's statements would leave it.
 */
async function v22TwoHeads(s: string, event: string, timeoutSql: string) {
  const [{ id: j }] = (await db.sql<{ id: string }>(
    `INSERT INTO ${s}.jobs (task, sequence) VALUES ('v22.late', 'k') RETURNING id::text AS id`,
  )) as [{ id: string }];
  const [{ id: x }] = (await db.sql<{ id: string }>(
    `INSERT INTO ${s}.jobs (task, sequence) VALUES ('v22.head', 'k') RETURNING id::text AS id`,
  )) as [{ id: string }];
  const [{ id: y }] = (await db.sql<{ id: string }>(
    `INSERT INTO ${s}.jobs (task) VALUES ('v22.other') RETURNING id::text AS id`,
  )) as [{ id: string }];
  await db.sql(`DELETE FROM ${s}.sequence_arrivals`);
  await db.sql(`INSERT INTO ${s}.events (name) VALUES ($1)`, [event]);
  for (const id of [x, y]) {
    await db.sql(
      `UPDATE ${s}.jobs SET status = 'waiting', claims = 1, has_steps = true, wait_event = $2,
                            wait_timeout = ${timeoutSql} WHERE id = $1`,
      [id, event],
    );
    await db.sql(
      `INSERT INTO ${s}.job_steps (job_id, name, kind, event, wake_at, resolved)
       VALUES ($1, 'w', 'event', $2, ${timeoutSql}, false)`,
      [id, event],
    );
  }
  // version 22's advance of the suspended head's key: the smaller id J pending
  await db.sql(`UPDATE ${s}.jobs SET status = 'pending' WHERE id = $1`, [j]);
  return { j, x, y };
}

const status = async (s: string, ids: string[]) =>
  (
    await db.sql<{ status: string }>(
      `SELECT status FROM ${s}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [ids],
    )
  ).map((r) => r.status);

describe('review (unfixed): migration 24 on a version-22 schema whose second head already ran and died', () => {
  test('emitEvent after the upgrade wakes the other waiters of the event', async () => {
    const schema = 'review_v22_dead';
    const s = await schemaAt(schema, 22);
    const { j, y } = await v22TwoHeads(s, 'ev-dead', 'NULL');
    // the job made pending beside the suspended head ran and died (§11: a dead head holds its key)
    await db.sql(`UPDATE ${s}.jobs SET status = 'dead', claims = 1, attempts = 1 WHERE id = $1`, [j]);
    const queue = db.queue({ schema });
    await queue.migrate();
    let error: unknown = null;
    try {
      await queue.emitEvent('ev-dead', 1);
    } catch (e) {
      error = e;
    }
    if (error) console.log('OBSERVED', String(error));
    expect(await status(s, [y])).toEqual(['pending']);
  });
});
