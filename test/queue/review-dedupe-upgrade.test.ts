/**
 * Review of migration 23 (2026-12-04): the upgrade path from a schema at version 20–22 that holds
 * what migration 23's header describes — a job with a dedupe key suspended by ctx.waitForEvent
 * (its key freed: `waiting` is outside jobs_dedupe_key_idx) and a second job of the key enqueued
 * meanwhile. Migration 23 refuses new such waits but leaves this one: the emit of its event makes
 * it pending beside the second job and fails on jobs_dedupe_key_idx, so no waiter of the event
 * (of any key) is woken and the event stays unset; the reaper's timeout pass fails the same way.
 * Migration 24 repairs it: such a waiter gives its (already unheld) dedupe key up. Both tests
 * failed before that repair (23505 on jobs_dedupe_key_idx, the other waiter left waiting).
 */
import { describe, expect, test } from 'vitest';
import { engineOf } from '../../src/engine/engine.js';
import { useTestDatabase } from '../support/database.js';
import { schemaAt as schemaAtVersion } from '../support/schema-at.js';

const db = useTestDatabase();

const schemaAt = (name: string, version: number) => schemaAtVersion(db, name, version);

const status = async (s: string, ids: string[]) =>
  (
    await db.sql<{ status: string }>(
      `SELECT status FROM ${s}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [ids],
    )
  ).map((r) => r.status);

describe('review: migration 24 on a version-22 schema with a keyed job waiting for an event', () => {
  for (const wake of ['emit', 'timeout'] as const) {
    test(`${wake}: the other waiters of the event are woken after the upgrade`, async () => {
      const schema = `review_dd_${wake}`;
      const s = await schemaAt(schema, 22);
      const timeout = wake === 'timeout' ? `now() - interval '1 minute'` : 'NULL';
      const ins = async (task: string, key: string | null) =>
        (
          (await db.sql<{ id: string }>(
            `INSERT INTO ${s}.jobs (task, dedupe_key) VALUES ($1, $2) RETURNING id::text AS id`,
            [task, key],
          )) as [{ id: string }]
        )[0].id;
      // X (key d) suspended by version 22's step_wait; Y (key d) enqueued while X waited; Z waits too
      const x = await ins('v22.keyed', null);
      const z = await ins('v22.other', null);
      await db.sql(`INSERT INTO ${s}.events (name) VALUES ('ev-dd')`);
      for (const id of [x, z]) {
        await db.sql(
          `UPDATE ${s}.jobs SET status = 'waiting', claims = 1, has_steps = true, wait_event = 'ev-dd',
                                wait_timeout = ${timeout} WHERE id = $1`,
          [id],
        );
        await db.sql(
          `INSERT INTO ${s}.job_steps (job_id, name, kind, event, wake_at, resolved) VALUES ($1, 'w', 'event', 'ev-dd', ${timeout}, false)`,
          [id],
        );
      }
      await db.sql(`UPDATE ${s}.jobs SET dedupe_key = 'd' WHERE id = $1`, [x]);
      const y = await ins('v22.keyed', 'd');
      const queue = db.queue({ schema });
      await queue.migrate();
      // before the repair both threw 23505 on jobs_dedupe_key_idx and woke nobody
      if (wake === 'emit') expect(await queue.emitEvent('ev-dd', 1)).toBe(true);
      else await engineOf(queue).steps.wakeTimedOut();
      expect(await status(s, [z])).toEqual(['pending']);
      // the keyed waiter gave its key up and was woken too; the job that holds the key keeps it
      expect(await status(s, [x, y])).toEqual(['pending', 'pending']);
      const keys = await db.sql<{ id: string; dedupe_key: string | null }>(
        `SELECT id::text AS id, dedupe_key FROM ${s}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
        [[x, y]],
      );
      expect(keys.map((k) => k.dedupe_key)).toEqual([null, 'd']);
    });
  }
});
