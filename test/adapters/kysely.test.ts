/**
 * `fromKysely` (SPEC §9) through the adapter conformance suite (./conformance.ts), on Kysely's
 * PostgresDialect with a CamelCasePlugin (which must not rename the columns Skiplock reads).
 * Also: a Kysely transaction passed as `client` without the adapter is refused, naming
 * skiplock/adapters.
 *
 * Deliberate breaks seen failing: the statements run through `trx` instead of
 * `trx.withoutPlugins()` (the CamelCasePlugin renamed dedupe_key: the dedupe hit and the row
 * shape failed); the parameters dropped (every statement failed to bind).
 */
import { CamelCasePlugin, Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { expect, test } from 'vitest';
import { fromKysely } from '../../src/adapters/index.js';
import { ValidationError } from '../../src/errors.js';
import type { Queryable } from '../../src/types.js';
import { adapterSuite } from './conformance.js';

let db: Kysely<Record<string, never>>;

const suite = adapterSuite('kysely', async (url) => {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  db = new Kysely<Record<string, never>>({
    dialect: new PostgresDialect({ pool }),
    plugins: [new CamelCasePlugin()],
  });
  return {
    transaction: (fn) => db.transaction().execute((trx) => fn(fromKysely(trx))),
    onNonTransaction: () => fromKysely(db),
    close: () => db.destroy(),
  };
});

test('a Kysely transaction passed without the adapter is refused, naming skiplock/adapters', async () => {
  await db.transaction().execute(async (trx) => {
    const enqueue = suite.queue().enqueue('adapter.kysely.raw', {}, { client: trx as unknown as Queryable });
    await expect(enqueue).rejects.toThrow(ValidationError);
    await expect(enqueue).rejects.toThrow(/skiplock\/adapters/);
  });
});
