/**
 * Enqueue batching under failure and contention (SPEC §3: "Any error of one caller never fails
 * another"; "Batch statements lock rows in a deterministic order").
 *
 * Caught before the fix (issue 8, defects 4 and 5):
 *  - a follow-up statement of a shared batch (the dedupe holder lookup) failing after the batch
 *    INSERT had committed rejected every caller of the batch, including those whose rows were
 *    written (callers retry, and create duplicates): the first test saw all three calls reject;
 *  - two enqueueMany batches sharing dedupe keys in opposite orders deadlocked (40P01) in 3 of 3
 *    rounds: the second test failed with "deadlock detected".
 * Deliberate break seen failing: `ORDER BY dedupe_key, ord` → `ORDER BY ord` in insertMany
 * (the deadlock test).
 *
 * The failing lookup is injected at the driver seam — a real pg.Pool on the real database whose
 * query() refuses one statement — since no SQL can make a plain SELECT fail on demand.
 */
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();

/**
 * A real pg.Pool whose clients fail every statement matching `refuse` while `fault.armed` is
 * true (pool.query and checked-out sessions alike).
 */
function faultyPool(url: string, refuse: RegExp) {
  const fault = { armed: false, refused: 0 };
  class FaultyClient extends pg.Client {
    // biome-ignore lint/suspicious/noExplicitAny: pg's overloaded query signature.
    override query(config: any, values?: any, callback?: any): any {
      const text: string = typeof config === 'string' ? config : config.text;
      if (fault.armed && refuse.test(text)) {
        fault.refused++;
        const error = Object.assign(new Error('injected: connection reset'), { code: 'ECONNRESET' });
        const cb = typeof values === 'function' ? values : callback;
        if (typeof cb === 'function') {
          process.nextTick(() => cb(error));
          return undefined;
        }
        return Promise.reject(error);
      }
      return super.query(config, values, callback);
    }
  }
  const pool = new pg.Pool({ connectionString: url, max: 4, Client: FaultyClient });
  pool.on('error', () => undefined);
  return { pool, fault };
}

describe('enqueue batching', () => {
  test('a shared batch whose follow-up fails after its INSERT committed: each caller gets its own fate', async () => {
    const { pool, fault } = faultyPool(db.url, /dedupe_key = ANY/);
    const queue = new Queue({ pool, schema: TEST_SCHEMA });
    try {
      const holder = await queue.enqueue('batch.fate', { holder: true }, { dedupeKey: 'fate:held' });
      fault.armed = true;
      const [plain, keyed, hit] = await Promise.allSettled([
        queue.enqueue('batch.fate', { n: 1 }),
        queue.enqueue('batch.fate', { n: 2 }, { dedupeKey: 'fate:new' }),
        queue.enqueue('batch.fate', { n: 3 }, { dedupeKey: 'fate:held' }), // needs the lookup
      ]);
      fault.armed = false;
      expect(fault.refused).toBe(1); // one batch, one lookup
      // Written rows: their callers learn it, so they do not retry and duplicate them.
      expect(plain).toMatchObject({ status: 'fulfilled', value: { created: true } });
      expect(keyed).toMatchObject({ status: 'fulfilled', value: { created: true } });
      // The dedupe hit alone fails (nothing of it was written: retrying it is safe).
      expect(hit.status).toBe('rejected');
      const rows = await db.sql<{ id: string; payload: unknown }>(
        `SELECT id::text AS id, payload FROM ${db.jobs} WHERE task = 'batch.fate' ORDER BY id`,
      );
      expect(rows.map((r) => r.payload)).toEqual([{ holder: true }, { n: 1 }, { n: 2 }]);
      const ids = rows.map((r) => r.id);
      expect(ids).toContain((plain as PromiseFulfilledResult<{ id: string }>).value.id);
      expect(ids).toContain((keyed as PromiseFulfilledResult<{ id: string }>).value.id);
      expect(ids[0]).toBe(holder.id);
    } finally {
      await queue.close();
      await pool.end();
    }
  });

  test('enqueueMany with dedupe keys whose lookup fails writes nothing (one transaction)', async () => {
    const { pool, fault } = faultyPool(db.url, /dedupe_key = ANY/);
    const queue = new Queue({ pool, schema: TEST_SCHEMA });
    try {
      await queue.enqueue('batch.atomic', {}, { dedupeKey: 'atomic:held' });
      fault.armed = true;
      await expect(
        queue.enqueueMany([
          { task: 'batch.atomic', payload: { n: 1 } },
          { task: 'batch.atomic', payload: { n: 2 }, dedupeKey: 'atomic:held' },
        ]),
      ).rejects.toThrow(/injected/);
      fault.armed = false;
      expect(await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = 'batch.atomic'`)).toHaveLength(1);
    } finally {
      await queue.close();
      await pool.end();
    }
  });

  test('two batches sharing 2,000 dedupe keys in opposite orders never deadlock', async () => {
    const queue = db.queue({ poolSize: 4 });
    for (let round = 0; round < 3; round++) {
      const keys = Array.from({ length: 2_000 }, (_, i) => `dl:${round}:${i}`);
      const specs = keys.map((dedupeKey, i) => ({ task: 'batch.deadlock', payload: { i }, dedupeKey }));
      const [forward, backward] = await Promise.all([
        queue.enqueueMany(specs),
        queue.enqueueMany([...specs].reverse()),
      ]);
      // Every key was created once, by one of the two batches; the other got the holder's id.
      const backwardByKey = new Map([...specs].reverse().map((s, i) => [s.dedupeKey, backward[i]!]));
      let created = 0;
      specs.forEach((spec, i) => {
        const a = forward[i]!;
        const b = backwardByKey.get(spec.dedupeKey)!;
        expect(a.id).toBe(b.id);
        expect(Number(a.created) + Number(b.created)).toBe(1);
        created += Number(a.created) + Number(b.created);
      });
      expect(created).toBe(keys.length);
    }
    // And inside callers' own transactions, which hold their locks until commit.
    const keys = Array.from({ length: 500 }, (_, i) => ({
      task: 'batch.deadlock.tx',
      dedupeKey: `dltx:${i}`,
    }));
    await Promise.all([
      queue.transaction((client) => queue.enqueueMany(keys, { client })),
      queue.transaction((client) => queue.enqueueMany([...keys].reverse(), { client })),
    ]);
    const [row] = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${db.jobs} WHERE task = 'batch.deadlock.tx'`,
    );
    expect(row?.n).toBe(500);
  });
});
