/**
 * `fromPostgresJs` (SPEC §9) through the adapter conformance suite (./conformance.ts): the
 * batch's arrays, nulls and JSON text typed by the server, not by postgres.js's guesses.
 *
 * Deliberate breaks seen failing: strings passed as they are (postgres.js JSON.stringify'd the
 * payload and the result again: stored as JSON strings, payload_type 'string'); the parameters
 * dropped (nothing bound).
 */
import postgres from 'postgres';
import { fromPostgresJs } from '../../src/adapters/index.js';
import { adapterSuite } from './conformance.js';

adapterSuite('postgres-js', async (url) => {
  const sql = postgres(url, { max: 2, onnotice: () => undefined });
  return {
    transaction: async (fn) => (await sql.begin((tx) => fn(fromPostgresJs(tx)))) as never,
    onNonTransaction: () => fromPostgresJs(sql as never),
    close: () => sql.end(),
  };
});
