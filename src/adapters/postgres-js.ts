/**
 * postgres.js: the `tx` of `sql.begin(async (tx) => …)` as a Skiplock client.
 *
 * postgres.js serialises each parameter by the type the server gives it, not by its JS value:
 * a JSON text bound to a `jsonb` parameter would be JSON.stringify'd again (stored as a JSON
 * string), so each string goes as a {@link TextParameter} — its text wherever a text is
 * expected, its parsed value where the serialiser asks for JSON. Arrays go as they are: the
 * server types them (Skiplock casts each, `$1::text[]`) and postgres.js serialises them so; an
 * array already written as a literal (the batch statements bind theirs so) goes as that string.
 */
import type { Queryable } from '../types.js';
import { driverError, hasMethod, pgRows, requireTransaction } from './shared.js';

/** What Skiplock calls on a postgres.js transaction (structural: postgres.js is never imported). */
export interface PostgresJsTransaction {
  // biome-ignore lint/suspicious/noExplicitAny: postgres.js's parameter types are not imported.
  unsafe(query: string, parameters?: any[]): PromiseLike<ArrayLike<unknown>>;
  // biome-ignore lint/suspicious/noExplicitAny: only checked to be there (a transaction has it).
  savepoint: (...args: any[]) => unknown;
}

/** A string parameter that serialises as itself, whether as text (`'' + x`) or as JSON (`JSON.stringify(x)`). */
class TextParameter {
  constructor(private readonly text: string) {}
  toString(): string {
    return this.text;
  }
  /** Only a json/jsonb parameter's serialiser asks: the text is then Skiplock's JSON. */
  toJSON(): unknown {
    return JSON.parse(this.text);
  }
}

/** Per statement text: the parameters it casts to an array type (`$3::text[]`). */
const arrayParametersOf = new Map<string, ReadonlySet<number>>();

/**
 * The numbers of the parameters that `text` casts to an array type. Skiplock binds those as
 * array literals (strings); postgres.js's array serialiser passes a string through as it is, but
 * not a {@link TextParameter}. Skiplock's statements cast every array parameter.
 */
function arrayParameters(text: string): ReadonlySet<number> {
  let found = arrayParametersOf.get(text);
  if (found === undefined) {
    found = new Set([...text.matchAll(/\$(\d+)::[a-z0-9_]+\[\]/gi)].map((m) => Number(m[1])));
    if (arrayParametersOf.size < 1_000) arrayParametersOf.set(text, found);
  }
  return found;
}

/**
 * A Skiplock client on a postgres.js transaction: the job exists if and only if `tx` commits.
 *
 * @example
 * await sql.begin(async (tx) => {
 *   await tx`INSERT INTO orders ${tx(order)}`;
 *   await queue.enqueue(sendReceipt, { orderId: order.id }, { client: fromPostgresJs(tx) });
 * });
 */
export function fromPostgresJs(tx: PostgresJsTransaction): Queryable {
  requireTransaction(
    hasMethod(tx, 'unsafe') && hasMethod(tx, 'savepoint'),
    'a postgres.js transaction: the tx of sql.begin(async (tx) => …), not the sql instance',
  );
  return {
    async query(text, values = []) {
      const arrays = arrayParameters(text);
      const parameters = values.map((value, i) =>
        typeof value === 'string' && !arrays.has(i + 1) ? new TextParameter(value) : value,
      );
      try {
        return { rows: pgRows(await tx.unsafe(text, parameters)) };
      } catch (error) {
        throw driverError(error);
      }
    },
  };
}
