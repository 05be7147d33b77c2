/**
 * SPEC §9 adapters: what goes through each library's transaction is stored exactly as through a
 * pg client — JSON strings that look like numbers or JSON, text with `?`, `$1`, `?|`, `$$`,
 * quotes and backslashes (Knex's placeholder rewrite), arrays of nulls, extreme numbers, a
 * 300 KB payload, Unicode, dedupe keys with `?`/`$1`, runAt to the millisecond. In an already
 * aborted ORM transaction every enqueue path rejects with a DatabaseError 25P02 and writes
 * nothing (the throttle's savepoint statements were passed through unwrapped before). A
 * statement's SQLSTATE survives each library, and a throttle still works after a savepoint the
 * caller rolled back to — except on postgres.js (and Drizzle on it), whose `sql.begin` rejects
 * once any statement failed, even one rolled back to a savepoint (docs/integrations.md).
 *
 * From a review: the aborted-transaction test failed for all 7 before toDatabaseError wrapped
 * the savepoint statements in Enqueuer.atomically (now atomically, db/atomically.ts).
 */

import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import knex from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { fromDrizzle, fromKnex, fromKysely, fromPostgresJs, fromPrisma } from '../../src/adapters/index.js';
import { DatabaseError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import type { Queryable } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { generateClient } from './prisma-client.js';

const db = useTestDatabase();
type Tx = <T>(fn: (c: Queryable) => Promise<T>) => Promise<T>;
const libs: Record<string, { tx: Tx; close: () => Promise<unknown> }> = {};
let queue: Queue;

beforeAll(async () => {
  queue = db.queue();
  const PrismaClient = await generateClient('skiplock-prisma-fidelity');
  const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url, max: 2 }) });
  libs.prisma = {
    tx: (fn) => prisma.$transaction((tx) => fn(fromPrisma(tx))),
    close: () => prisma.$disconnect(),
  };
  const k = knex({ client: 'pg', connection: db.url, pool: { min: 0, max: 2 } });
  libs.knex = { tx: (fn) => k.transaction((trx) => fn(fromKnex(trx))), close: () => k.destroy() };
  const ky = new Kysely<Record<string, never>>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 2 }) }),
  });
  libs.kysely = {
    tx: (fn) => ky.transaction().execute((trx) => fn(fromKysely(trx))),
    close: () => ky.destroy(),
  };
  const p1 = new pg.Pool({ connectionString: db.url, max: 2 });
  const d1 = drizzlePg(p1);
  libs.drizzlePg = { tx: (fn) => d1.transaction((tx) => fn(fromDrizzle(tx))), close: () => p1.end() };
  const s2 = postgres(db.url, { max: 2, onnotice: () => undefined });
  const d2 = drizzlePostgresJs(s2);
  libs.drizzlePgJs = { tx: (fn) => d2.transaction((tx) => fn(fromDrizzle(tx))), close: () => s2.end() };
  const s3 = postgres(db.url, { max: 2, onnotice: () => undefined });
  libs.postgresJs = {
    tx: async (fn) => (await s3.begin((tx) => fn(fromPostgresJs(tx)))) as never,
    close: () => s3.end(),
  };
  const p4 = new pg.Pool({ connectionString: db.url, max: 2 });
  libs.pgReference = {
    tx: async (fn) => {
      const c = await p4.connect();
      try {
        await c.query('BEGIN');
        const r = await fn(c);
        await c.query('COMMIT');
        return r;
      } catch (e) {
        await c.query('ROLLBACK');
        throw e;
      } finally {
        c.release();
      }
    },
    close: () => p4.end(),
  };
});
afterAll(async () => {
  for (const l of Object.values(libs)) await l.close();
});

const payloads: unknown[] = [
  '123',
  'true',
  'null',
  '{"a":1}',
  '',
  '[1,2]',
  ' 1 ',
  'a?b $1 ?| ?& :: -- c /* d */ $$ e $$ \'f\' "g" \\? \\\\?',
  { s: 'x\'y"z', q: '?', d: '$1', n: '$$' },
  [null, null],
  [1, null, 'x', [null]],
  { d: '2024-01-01T00:00:00.000Z' },
  1e21,
  0.30000000000000004,
  12345678901234568, // beyond 2^53, exact as a double
  -1.5e-300,
  { big: 'x'.repeat(300_000) },
  { date: '2024-03-10T02:30:00' },
  'ü\u2028😀',
];
const names = ['prisma', 'knex', 'kysely', 'drizzlePg', 'drizzlePgJs', 'postgresJs', 'pgReference'];

describe.each(names)('%s', (name) => {
  test('payloads, keys and runAt stored as given (enqueue and enqueueMany)', async () => {
    const task = `fid.${name}?$1`;
    const runAt = new Date(Date.UTC(2030, 0, 1, 12, 34, 56, 789));
    const ids = await libs[name]!.tx(async (client) => {
      const one: string[] = [];
      for (const [i, payload] of payloads.entries())
        one.push((await queue.enqueue(task, payload, { client, dedupeKey: `k?${i}$1`, runAt })).id);
      const many = await queue.enqueueMany(
        payloads.map((payload) => ({ task, payload, runAt })),
        { client },
      );
      return [...one, ...many.map((r) => r.id)];
    });
    const rows = await db.sql<{ id: string; payload: unknown; dedupe_key: string | null; run_after: Date }>(
      `SELECT id::text, payload, dedupe_key, run_after FROM ${db.jobs} WHERE id = ANY($1::bigint[]) ORDER BY ${db.jobs}.id`,
      [ids],
    );
    expect(rows.map((r) => r.payload)).toEqual([...payloads, ...payloads]);
    expect(rows.slice(0, payloads.length).map((r) => r.dedupe_key)).toEqual(
      payloads.map((_, i) => `k?${i}$1`),
    );
    for (const r of rows) expect(r.run_after.toISOString()).toBe(runAt.toISOString());
    const job = await queue.get(ids[0]!);
    expect(job?.payload).toBe('123');
  });

  test('an aborted transaction: enqueue rejects with SQLSTATE 25P02 and nothing is written anywhere', async () => {
    const task = `abort.${name}`;
    const seen: unknown[] = [];
    await libs[name]!.tx(async (client) => {
      await client.query('SELECT 1/0').catch(() => undefined);
      for (const opts of [
        {},
        { dedupeKey: 'a', dedupe: { windowMs: 1000 } },
        { dedupeKey: 'b', dedupe: { replace: true } },
      ]) {
        try {
          await queue.enqueue(task, {}, { client, ...opts } as never);
          seen.push('ok');
        } catch (e) {
          seen.push(
            `${e instanceof DatabaseError ? 'DatabaseError' : 'other'}:${(e as { sqlState?: string }).sqlState ?? (e as { code?: string }).code}`,
          );
        }
      }
      throw new Error('rollback');
    }).catch((e) => expect(String(e)).toMatch(/rollback|25P02|aborted/));
    expect(seen).toEqual(['DatabaseError:25P02', 'DatabaseError:25P02', 'DatabaseError:25P02']);
    expect(await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = $1`, [task])).toEqual([]);
  });

  // postgres.js's sql.begin rejects once any statement failed, even one rolled back to a savepoint
  test('a failed statement keeps its SQLSTATE; after a rollback to a savepoint a throttle still works (postgres.js: the transaction ends, nothing commits)', async () => {
    const task = `sqlstate.${name}`;
    // postgres.js's sql.begin rejects once any statement failed, even one rolled back to a
    // savepoint (docs/integrations.md); the other libraries keep the transaction usable
    const endsTransaction = name === 'postgresJs' || name === 'drizzlePgJs';
    const outcome = await libs[name]!.tx(async (client) => {
      let code: unknown;
      try {
        await client.query('SAVEPOINT u');
        await client.query(`SELECT 1::int / 0`);
      } catch (e) {
        code = (e as { code?: string }).code;
        await client.query('ROLLBACK TO SAVEPOINT u');
      }
      const r = await queue.enqueue(
        task,
        { ok: 1 },
        { client, dedupeKey: `${task}:t`, dedupe: { windowMs: 60_000 } },
      );
      return { code, created: r.created };
    }).then(
      (out) => ({ committed: true, out }),
      (error: unknown) => ({ committed: false, code: (error as { code?: string }).code }),
    );
    const rows = await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = $1`, [task]);
    if (endsTransaction) {
      expect(outcome).toEqual({ committed: false, code: '22012' });
      expect(rows).toHaveLength(0);
    } else {
      expect(outcome).toEqual({ committed: true, out: { code: '22012', created: true } });
      expect(rows).toHaveLength(1);
    }
  });
});
