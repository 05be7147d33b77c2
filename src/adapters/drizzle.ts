/**
 * Drizzle: the `tx` of `db.transaction(async (tx) => …)` as a Skiplock client, on the
 * node-postgres driver (`drizzle-orm/node-postgres`, whose execute answers `{ rows }`) or
 * postgres.js (`drizzle-orm/postgres-js`, which answers the rows themselves).
 */
import type { Queryable } from '../types.js';
import { arraysAsLiterals, driverError, hasMethod, pgRows, requireTransaction } from './shared.js';

/** What Skiplock calls on a Drizzle PostgreSQL transaction (structural: Drizzle is never imported). */
export interface DrizzleTransaction {
  // biome-ignore lint/suspicious/noExplicitAny: Drizzle's SQLWrapper type is not imported.
  execute(query: any): PromiseLike<unknown>;
  rollback(): unknown;
}

/**
 * One statement and its parameters as a Drizzle `SQLWrapper`: Drizzle builds the query to run
 * by calling `toQuery` on what `getSQL()` returns — the text is sent as it is, `$1…$n` and all,
 * with the values bound (`sql.raw` cannot bind values).
 */
function boundStatement(text: string, values: unknown[]) {
  const query = { sql: text, params: arraysAsLiterals(values) };
  return { getSQL: () => ({ toQuery: () => query }) };
}

/**
 * A Skiplock client on a Drizzle transaction: the job exists if and only if `tx` commits.
 *
 * @example
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values(order);
 *   await queue.enqueue(sendReceipt, { orderId: order.id }, { client: fromDrizzle(tx) });
 * });
 */
export function fromDrizzle(tx: DrizzleTransaction): Queryable {
  // A transaction has rollback(); the database object has not.
  requireTransaction(
    hasMethod(tx, 'execute') && hasMethod(tx, 'rollback'),
    'a Drizzle transaction: the tx of db.transaction(async (tx) => …), not the database object',
  );
  return {
    async query(text, values = []) {
      let result: unknown;
      try {
        result = await tx.execute(boundStatement(text, values));
      } catch (error) {
        throw driverError(error);
      }
      // postgres.js answers an array of rows; node-postgres a result with `rows`.
      const rows = Array.isArray(result) ? result : (result as { rows: unknown[] }).rows;
      return { rows: pgRows(rows) };
    },
  };
}
