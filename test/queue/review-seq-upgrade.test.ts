/**
 * Review of migration 24 (2026-12-04): the upgrade path from a version-22 schema that already
 * holds the state migration 24's header describes (a sequenced head suspended by
 * ctx.waitForEvent, and a job of its key with a smaller id made pending beside it by version 22's
 * advance). Without a repair the key had two heads, and waking the suspended one — by emitEvent or
 * by the reaper's timeout pass — violated jobs_sequence_head_idx, failing the wake of every other
 * job waiting on that event (emit) or due in that pass (reaper). Migration 24's repair puts the
 * never-started job back behind the suspended head (§11: a late commit runs right after the job
 * that started). Break seen failing: that repair left out (`expected [ 'pending', 'waiting' ]` for
 * J and X, the suspended head moved into the queue by the second repair instead).
 * When J has already run and died it cannot be un-started: the suspended job X joins the key's
 * queue instead (its wait stays registered), the dead J holds the key, and the emit wakes the
 * other waiters (failed before that repair: 23505, Y left waiting).
 */
import { describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { MIGRATIONS } from '../../src/migrations/migrate.js';
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

describe('review: migration 24 on a version-22 schema with a suspended sequence head', () => {
  test('emitEvent after the upgrade wakes the other waiters of the event (the key keeps one head)', async () => {
    const schema = 'review_v22_emit';
    const s = await schemaAt(schema, 22);
    const { j, x, y } = await v22TwoHeads(s, 'ev-emit', 'NULL');
    const queue = db.queue({ schema });
    await queue.migrate();
    let error: unknown = null;
    try {
      await queue.emitEvent('ev-emit', 1);
    } catch (e) {
      error = e;
    }
    // observed on main: error 23505 jobs_sequence_head_idx; Y and X still waiting, the event unset
    expect((error as { code?: string } | null)?.code ?? null).toBe(null);
    expect(await status(s, [y])).toEqual(['pending']);
    // one head for the key at all times
    const heads = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${s}.jobs WHERE sequence = 'k'
         AND (status IN ('pending', 'running', 'dead') OR (status = 'waiting' AND wait_event IS NOT NULL))`,
    );
    expect(heads[0]!.n).toBe(1);
    // the job that never started waits behind the head that did (§11 late commits)
    expect(await status(s, [j, x])).toEqual(['waiting', 'pending']);
  });

  test("the reaper's timeout pass (engine.steps.wakeTimedOut, as the Reaper runs it) after the upgrade wakes the other timed-out waits", async () => {
    const schema = 'review_v22_reap';
    const s = await schemaAt(schema, 22);
    const { y } = await v22TwoHeads(s, 'ev-reap', `now() - interval '1 minute'`);
    const queue = db.queue({ schema });
    await queue.migrate();
    let error: unknown = null;
    try {
      await engineOf(queue).steps.wakeTimedOut();
    } catch (e) {
      error = e;
    }
    expect((error as { code?: string } | null)?.code ?? null).toBe(null);
    expect(await status(s, [y])).toEqual(['pending']);
  });

  test('emitEvent after the upgrade, the second head having run and died: the suspended job waits behind it', async () => {
    const schema = 'review_v22_dead';
    const s = await schemaAt(schema, 22);
    const { j, x, y } = await v22TwoHeads(s, 'ev-dead', 'NULL');
    // the job made pending beside the suspended head ran and died (§11: a dead head holds its key)
    await db.sql(`UPDATE ${s}.jobs SET status = 'dead', claims = 1, attempts = 1 WHERE id = $1`, [j]);
    const queue = db.queue({ schema });
    await queue.migrate();
    expect(await queue.emitEvent('ev-dead', 1)).toBe(true);
    expect(await status(s, [y])).toEqual(['pending']);
    expect(await status(s, [j, x])).toEqual(['dead', 'waiting']);
    expect((await queue.sequences()).map((k) => [k.key, k.headId, k.headStatus, k.queued])).toEqual([
      ['k', j, 'dead', 1],
    ]);
  });

  for (const from of [22, 23]) {
    test(`migrate() from version ${from}: applies, and a sequenced head then suspends holding its key`, async () => {
      const schema = `review_from_v${from}`;
      await schemaAt(schema, from);
      const queue = db.queue({ schema });
      expect((await queue.migrate()).applied).toEqual(
        MIGRATIONS.filter((m) => m.version > from).map((m) => m.version),
      );
      const a = await queue.enqueue('t', 'A', { sequence: 'u' });
      const b = await queue.enqueue('t', 'B', { sequence: 'u' });
      const [claimed] = await queue.claim('w', { limit: 5 });
      expect(claimed?.id).toBe(a.id);
      const s = quoteIdent(schema);
      const [{ state }] = (await db.sql<{ state: string }>(
        `SELECT state FROM ${s}.step_wait($1, 'w', 1, $2::bigint, 'w', 'ev-up', 60000)`,
        [a.id, claimed!.token],
      )) as [{ state: string }];
      expect(state).toBe('waiting');
      expect(await queue.claim('w', { limit: 5 })).toEqual([]);
      expect((await queue.sequences()).map((k) => [k.key, k.headId, k.headStatus, k.queued])).toEqual([
        ['u', a.id, 'waiting', 1],
      ]);
      await queue.emitEvent('ev-up');
      expect(await status(s, [a.id, b.id])).toEqual(['pending', 'waiting']);
    });
  }
});
