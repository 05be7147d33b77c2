/**
 * Knex: the `trx` of `knex.transaction(async (trx) => …)` (or `await knex.transaction()`) as a
 * Skiplock client, on the `pg` client.
 */
import type { Queryable } from '../types.js';
import { toQuestionMarks } from './question-marks.js';
import { driverError, hasMethod, pgRows, requireTransaction } from './shared.js';

/** What Skiplock calls on a Knex transaction (structural: Knex is never imported). */
export interface KnexTransaction {
  readonly isTransaction?: boolean;
  // biome-ignore lint/suspicious/noExplicitAny: Knex's binding and result types are not imported.
  raw(sql: string, bindings: any): PromiseLike<any>;
}

/**
 * A Skiplock client on a Knex transaction: the job exists if and only if `trx` commits.
 * Skiplock's `$1…$n` placeholders are rewritten to Knex's `?` with the values bound in order.
 *
 * @example
 * await knex.transaction(async (trx) => {
 *   await trx('orders').insert(order);
 *   await queue.enqueue(sendReceipt, { orderId: order.id }, { client: fromKnex(trx) });
 * });
 */
export function fromKnex(trx: KnexTransaction): Queryable {
  requireTransaction(
    hasMethod(trx, 'raw') && trx.isTransaction === true,
    'a Knex transaction: the trx of knex.transaction(async (trx) => …), not the knex instance',
  );
  return {
    async query(text, values = []) {
      const { sql, bindings } = toQuestionMarks(text, values);
      let result: { rows?: unknown[] } | undefined;
      try {
        result = await trx.raw(sql, bindings);
      } catch (error) {
        throw driverError(error);
      }
      return { rows: pgRows(result?.rows ?? []) };
    },
  };
}
