/**
 * `skiplock/adapters` (SPEC §9): an ORM's or driver's open transaction as the `client` of
 * `enqueue`, `enqueueMany` and `complete` — the job then exists if and only if that transaction
 * commits. Each adapter is typed by the few methods it calls and imports nothing of its
 * library, which stays an optional peer dependency.
 *
 * @example
 * import { fromKysely } from 'skiplock/adapters';
 * await db.transaction().execute(async (trx) => {
 *   await queue.enqueue('email.send', { to }, { client: fromKysely(trx) });
 * });
 *
 * @packageDocumentation
 */
export { type DrizzleTransaction, fromDrizzle } from './drizzle.js';
export { fromKnex, type KnexTransaction } from './knex.js';
export { fromKysely, type KyselyTransaction } from './kysely.js';
export { fromPostgresJs, type PostgresJsTransaction } from './postgres-js.js';
export { fromPrisma, type PrismaTransaction } from './prisma.js';
