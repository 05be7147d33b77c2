/**
 * SPEC §11 a statement that takes many heads out advances all their keys, set-based (migration
 * 22): a completion of 300 heads in one statement, keys with JSON's and SQL's awkward
 * characters; a head whose leaving statement fails (its savepoint rolled back) leaves no key
 * behind for a later statement; a key whose next job was cancelled meanwhile, and a key with
 * nothing behind its head, in the same statement as the rest.
 *
 * Deliberate breaks seen failing (in this tree, each restored after its run):
 *  - the statement trigger never firing (`WHEN (false AND …)`): "300 heads" found 0 of 300 keys
 *    advanced.
 *  - the row trigger keeping only the last key (`set_config(…, to_json(OLD.sequence)::text ||
 *    ',', true)`): "300 heads" advanced 1 key.
 *  - sequence_advance_many without its slow path (`slow := '{}'`), and the claim's pass over a
 *    late commit: test/queue/sequences.test.ts "… goes first (id order)" claimed the later job,
 *    and "the next job is cancelled while the advance waits for its row" left C waiting.
 *  - sequence_left not clearing the list it took (no `set_config(…, '', true)`): "a failed
 *    statement …" read the key back after the statement that advanced it.
 */
import { describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { leavingSetting } from '../../src/migrations/022-sequence-batch-advance.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);

const AWKWARD = ['a,b', 'quote"d', "it's", 'back\\slash', '],["x', 'line\nbreak', 'ключ', '🔑', ' ', 'null'];

describe('one statement, many heads', () => {
  test('300 heads completed in one statement: every key’s next job pending, one per key; a cancelled next job skipped', async () => {
    const queue = db.queue();
    const keys = [...AWKWARD, ...Array.from({ length: 290 }, (_, i) => `k${i}`)];
    // three jobs per key (the last key: one job only, nothing behind its head)
    const specs = [];
    for (let n = 0; n < 3; n++) {
      for (const [i, key] of keys.entries()) {
        if (i === keys.length - 1 && n > 0) continue;
        specs.push({ task: 'seq.b', payload: { key, n }, sequence: key });
      }
    }
    const ids = (await queue.enqueueMany(specs)).map((r) => r.id);
    // each claim's pass advances up to its bound of arrived keys: claim until every head runs
    const heads = [];
    for (let i = 0; i < 50 && heads.length < keys.length; i++)
      heads.push(...(await queue.claim('w-b', { tasks: ['seq.b'], limit: 1_000 })));
    expect(heads.length).toBe(keys.length);
    // key k5's second job is cancelled first: its third job is the one to advance
    const second = ids[keys.length + keys.indexOf('k5')] as string;
    expect(await queue.cancel(second)).toBeTruthy();
    // every head done in ONE statement (what a worker's completion batch is)
    const done = await db.sql<{ n: number }>(
      `WITH d AS (UPDATE ${S}.jobs SET status = 'done', updated_at = now() WHERE id = ANY ($1::bigint[]) RETURNING 1)
       SELECT count(*)::int AS n FROM d`,
      [heads.map((h) => h.id)],
    );
    expect(done[0]?.n).toBe(keys.length);
    const pending = await db.sql<{ sequence: string; n: number; payload: { n: number } }>(
      `SELECT sequence, count(*) OVER (PARTITION BY sequence)::int AS n, payload FROM ${S}.jobs WHERE status = 'pending'`,
    );
    expect(pending.length).toBe(keys.length - 1); // the last key has nothing behind its head
    expect(new Set(pending.map((r) => r.sequence))).toEqual(new Set(keys.slice(0, -1)));
    expect(pending.every((r) => r.n === 1)).toBe(true);
    for (const row of pending) expect(row.payload.n, row.sequence).toBe(row.sequence === 'k5' ? 2 : 1);
  });

  test('a failed statement leaves no key behind (its savepoint undoes the list); a statement that ends takes its list', async () => {
    const queue = db.queue();
    await queue.enqueueMany([
      { task: 'seq.f', payload: 'A', sequence: 'fk' },
      { task: 'seq.f', payload: 'B', sequence: 'fk' },
    ]);
    const [head] = await queue.claim('w-f', { tasks: ['seq.f'] });
    // another session holds the key: the statement's row trigger has listed it when the
    // statement trigger's wait for the key's lock times out
    const holder = await db.pool.connect();
    const client = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT pg_advisory_xact_lock(${S}.sequence_lock_id('fk'))`);
      await client.query('BEGIN');
      await client.query("SET LOCAL lock_timeout = '200ms'");
      await client.query('SAVEPOINT s');
      await expect(
        client.query(`UPDATE ${S}.jobs SET status = 'done' WHERE id = $1`, [head?.id]),
      ).rejects.toThrow(/lock timeout/);
      await client.query('ROLLBACK TO SAVEPOINT s');
      const setting = await client.query<{ v: string | null }>('SELECT current_setting($1, true) AS v', [
        leavingSetting(TEST_SCHEMA),
      ]);
      expect(setting.rows[0]?.v ?? '').toBe('');
      expect(
        (await client.query(`SELECT status FROM ${S}.jobs WHERE id = $1`, [head?.id])).rows[0]?.status,
      ).toBe('running');
      // the holder gone, the same statement succeeds: its statement trigger takes and clears the list
      await holder.query('COMMIT');
      await client.query(`UPDATE ${S}.jobs SET status = 'done' WHERE id = $1`, [head?.id]);
      const after = await client.query<{ v: string | null }>('SELECT current_setting($1, true) AS v', [
        leavingSetting(TEST_SCHEMA),
      ]);
      expect(after.rows[0]?.v ?? '').toBe('');
      await client.query('COMMIT');
    } finally {
      client.release();
      holder.release();
    }
    const rows = await db.sql<{ payload: string; status: string }>(
      `SELECT payload, status FROM ${S}.jobs WHERE sequence = 'fk' ORDER BY id`,
    );
    expect(rows.map((r) => `${r.payload}:${r.status}`)).toEqual(['A:done', 'B:pending']);
  });
});
