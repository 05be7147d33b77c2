/**
 * `fromPostgresJs` (SPEC §9) through the adapter conformance suite (./conformance.ts): the
 * batch's arrays, nulls and JSON text typed by the server, not by postgres.js's guesses.
 *
 * Deliberate breaks seen failing: strings passed as they are (postgres.js JSON.stringify'd the
 * payload and the result again: stored as JSON strings, payload_type 'string'); the parameters
 * dropped (nothing bound).
 */
import postgres from 'postgres';
import { describe, expect, test } from 'vitest';
import { fromPostgresJs } from '../../src/adapters/index.js';
import { ValidationError } from '../../src/errors.js';
import { useTestDatabase } from '../support/database.js';
import { adapterSuite } from './conformance.js';

adapterSuite('postgres-js', async (url) => {
  const sql = postgres(url, { max: 2, onnotice: () => undefined });
  return {
    transaction: async (fn) => (await sql.begin((tx) => fn(fromPostgresJs(tx)))) as never,
    onNonTransaction: () => fromPostgresJs(sql as never),
    close: () => sql.end(),
  };
});

describe('a column transform', () => {
  const db = useTestDatabase();
  test("postgres.camel renames Skiplock's columns: a ValidationError that names the transform, not a misread row", async () => {
    // Before: a dedupe hit read `dedupeKey` instead of `dedupe_key`, found no holder, and
    // failed with "kept conflicting with jobs that finished… retry the call" — which never helps.
    const sql = postgres(db.url, { max: 1, transform: postgres.camel, onnotice: () => undefined });
    const queue = db.queue();
    try {
      const error = await sql
        .begin(async (tx) => {
          await queue.enqueue('pgjs.camel', {}, { client: fromPostgresJs(tx), dedupeKey: 'camel' });
          await queue.enqueue('pgjs.camel', {}, { client: fromPostgresJs(tx), dedupeKey: 'camel' });
        })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as Error).message).toMatch(/renamed a column .*postgres\.camel/);
    } finally {
      await sql.end();
    }
  });
});
