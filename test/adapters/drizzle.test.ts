/**
 * `fromDrizzle` (SPEC §9) through the adapter conformance suite (./conformance.ts), on both of
 * Drizzle's PostgreSQL drivers: node-postgres (execute answers `{ rows }`) and postgres.js
 * (execute answers the rows).
 *
 * Deliberate breaks seen failing: only `result.rows` read (the postgres.js suite failed: no
 * rows); arrays passed as they are (Drizzle's pass-through serialiser for timestamptz[] sent a
 * JS array: the batch failed); DrizzleQueryError not unwrapped (the SQLSTATE test failed in
 * both suites).
 */
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import { fromDrizzle } from '../../src/adapters/index.js';
import { adapterSuite } from './conformance.js';

adapterSuite('drizzle-node-postgres', async (url) => {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const db = drizzlePg(pool);
  return {
    transaction: (fn) => db.transaction((tx) => fn(fromDrizzle(tx))),
    onNonTransaction: () => fromDrizzle(db as never),
    close: () => pool.end(),
  };
});

adapterSuite('drizzle-postgres-js', async (url) => {
  const sql = postgres(url, { max: 2, onnotice: () => undefined });
  const db = drizzlePostgresJs(sql);
  return {
    transaction: (fn) => db.transaction((tx) => fn(fromDrizzle(tx))),
    onNonTransaction: () => fromDrizzle(db as never),
    close: () => sql.end(),
  };
});
