/**
 * Kysely: a `Transaction` (the `trx` of `db.transaction().execute(async (trx) => …)`, or a
 * controlled transaction) as a Skiplock client.
 */
import type { Queryable } from '../types.js';
import { driverError, hasMethod, pgRows, requireTransaction } from './shared.js';

/** A compiled query, shaped as Kysely's `CompiledQuery.raw(sql, parameters)` makes it. */
interface RawCompiledQuery {
  readonly sql: string;
  readonly parameters: readonly unknown[];
  readonly query: {
    readonly kind: 'RawNode';
    readonly sqlFragments: readonly string[];
    readonly parameters: readonly never[];
  };
  readonly queryId: { readonly queryId: string };
}

/** What Skiplock calls on a Kysely transaction (structural: Kysely itself is never imported). */
export interface KyselyTransaction {
  readonly isTransaction: boolean;
  withoutPlugins(): {
    // biome-ignore lint/suspicious/noExplicitAny: Kysely's own CompiledQuery type is not imported.
    executeQuery(query: any): Promise<{ rows: readonly unknown[] }>;
  };
}

let queryIds = 0;

/**
 * A Skiplock client on a Kysely transaction: the job exists if and only if `trx` commits.
 * Statements run without the instance's plugins (a CamelCasePlugin would rename the columns
 * Skiplock reads).
 *
 * @example
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values(order).execute();
 *   await queue.enqueue(sendReceipt, { orderId: order.id }, { client: fromKysely(trx) });
 * });
 */
export function fromKysely(trx: KyselyTransaction): Queryable {
  requireTransaction(
    hasMethod(trx, 'withoutPlugins') && trx.isTransaction === true,
    'a Kysely transaction: the trx of db.transaction().execute(async (trx) => …), not the Kysely instance',
  );
  const executor = trx.withoutPlugins();
  return {
    async query(text, values = []) {
      const compiled: RawCompiledQuery = {
        sql: text,
        parameters: values,
        query: { kind: 'RawNode', sqlFragments: [text], parameters: [] },
        queryId: { queryId: `skiplock-${++queryIds}` },
      };
      try {
        return { rows: pgRows((await executor.executeQuery(compiled)).rows) };
      } catch (error) {
        throw driverError(error);
      }
    },
  };
}
