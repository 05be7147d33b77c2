/**
 * Statements that must hold their locks together, whoever owns the connection: our pool, a pool
 * the caller passed, or the caller's own client (then under a savepoint of the caller's open
 * transaction). The enqueuer's dedupe and throttle rounds and the flows' writes run through it.
 */
import pg from 'pg';
import { toDatabaseError } from './database-error.js';
import { type Executor, inTransaction, type PoolExecutor } from './executor.js';

/**
 * Runs `fn` so that its statements hold their locks together until they are all done: in a
 * transaction of its own on our pool (no `db`) or on a pool you passed; on your client, under
 * a savepoint of your open transaction (rolled back to on failure, leaving your transaction
 * usable) — or, when the client is not in a transaction, in one of its own. A throttle's
 * window-row lock must be held until its job is written (§8).
 */
export async function atomically<T>(
  db: Executor | undefined,
  ownPool: PoolExecutor,
  schema: string,
  fn: (tx: Executor) => Promise<T>,
): Promise<T> {
  if (db === undefined) return inTransaction(ownPool, fn);
  if (isPool(db)) return inTransaction(db, fn);
  try {
    await db.query('SAVEPOINT skiplock_enqueue');
  } catch (error) {
    // 25P01: not in a transaction
    if ((error as { code?: string }).code !== '25P01') throw toDatabaseError(error, schema);
    return ownTransaction(db, fn);
  }
  try {
    const result = await fn(db);
    await db.query('RELEASE SAVEPOINT skiplock_enqueue').catch((error: unknown) => {
      throw toDatabaseError(error, schema);
    });
    return result;
  } catch (error) {
    await db.query('ROLLBACK TO SAVEPOINT skiplock_enqueue').catch(() => undefined);
    throw error;
  }
}

/**
 * A pg Pool — of this copy of pg or another (duck-typed: it counts its clients). A pool passed
 * as `client` has no transaction of the caller's to join: the statements get one of their own.
 * (`client` must otherwise be one connection: an adapter that spreads queries over a pool
 * cannot hold a transaction at all.)
 */
function isPool(db: Executor): db is PoolExecutor {
  return db instanceof pg.Pool || typeof (db as { totalCount?: unknown }).totalCount === 'number';
}

/** BEGIN … COMMIT on a client that is not in a transaction (ROLLBACK if `fn` throws). */
async function ownTransaction<T>(db: Executor, fn: (tx: Executor) => Promise<T>): Promise<T> {
  await db.query('BEGIN');
  try {
    const result = await fn(db);
    await db.query('COMMIT');
    return result;
  } catch (error) {
    await db.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}
