/**
 * `fromKnex` (SPEC §9) through the adapter conformance suite (./conformance.ts), on Knex's `pg`
 * client: Skiplock's `$n` placeholders rewritten to Knex's `?`.
 *
 * Deliberate breaks seen failing: the statements run by the parent client (`raw` of the
 * transaction client's prototype: on the pool, each committing on its own — the invisibility,
 * rollback and batch tests failed); the values bound in their own order instead of the
 * placeholders' (the batch statement's $11/$10 and every enqueue failed).
 */
import knex from 'knex';
import { fromKnex } from '../../src/adapters/index.js';
import { adapterSuite } from './conformance.js';

adapterSuite('knex', async (url) => {
  const db = knex({ client: 'pg', connection: url, pool: { min: 0, max: 2 } });
  return {
    transaction: (fn) => db.transaction((trx) => fn(fromKnex(trx))),
    onNonTransaction: () => fromKnex(db),
    close: () => db.destroy(),
  };
});
