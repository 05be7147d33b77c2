import { type Executor, inTransaction, type PoolExecutor } from '../db/executor.js';
import { quoteIdent } from '../db/identifier.js';
import { MigrationError } from '../errors.js';
import { initial } from './001-initial.js';
import { finishedIndex } from './002-finished-index.js';
import { claimToken } from './003-claim-token.js';
import { counters } from './004-counters.js';
import { pickFunction } from './005-pick-function.js';
import { schedules } from './006-schedules.js';
import { queues } from './007-queues.js';
import { dedupeWindows } from './008-dedupe-windows.js';
import { groups } from './009-groups.js';
import { pendingScope } from './010-pending-scope.js';
import { progress } from './011-progress.js';
import { waitHints } from './012-wait-hints.js';
import { traceContext } from './013-trace-context.js';
import { workflows } from './014-workflows.js';
import { dependencyCommit } from './015-dependency-commit.js';
import { cachedPicks } from './016-cached-picks.js';
import { producers } from './017-producers.js';
import { producerFixes } from './018-producer-fixes.js';
import { sequences } from './019-sequences.js';
import { steps } from './020-steps.js';
import { dependencyWake } from './021-dependency-wake.js';
import { sequenceBatchAdvance } from './022-sequence-batch-advance.js';
import { heldKeysWait } from './023-held-keys-wait.js';
import { sequenceWait } from './024-sequence-wait.js';
import type { Migration } from './migration.js';

/** Every migration, in order. Append only: a released migration never changes. */
export const MIGRATIONS: readonly Migration[] = [
  initial,
  finishedIndex,
  claimToken,
  counters,
  pickFunction,
  schedules,
  queues,
  dedupeWindows,
  groups,
  pendingScope,
  progress,
  waitHints,
  traceContext,
  workflows,
  dependencyCommit,
  cachedPicks,
  producers,
  producerFixes,
  sequences,
  steps,
  dependencyWake,
  sequenceBatchAdvance,
  heldKeysWait,
  sequenceWait,
];

/** The schema version this package needs. */
export const LATEST_VERSION = MIGRATIONS.at(-1)?.version ?? 0;

/** Advisory lock namespace of migrations ('sklk'); the second key is the schema's hash. */
const MIGRATION_LOCK = 0x736b6c6b;

/** What `migrate()` did. */
export interface MigrateResult {
  schema: string;
  /** Versions applied by this call (empty when the schema was already up to date). */
  applied: number[];
  /** The schema's version afterwards. */
  version: number;
}

/**
 * Brings `schema` up to {@link LATEST_VERSION} in one transaction under an advisory lock
 * (SPEC §2), so any number of processes may call it at once: the first applies, the others
 * wait, then find nothing left to do.
 */
export async function migrate(pool: PoolExecutor, schema: string): Promise<MigrateResult> {
  const s = quoteIdent(schema);
  return inTransaction(pool, async (db) => {
    await db.query('SELECT pg_advisory_xact_lock($1::int, hashtext($2))', [MIGRATION_LOCK, schema]);
    await db.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
    await db.query(
      `CREATE TABLE IF NOT EXISTS ${s}.migrations (
         version    integer     PRIMARY KEY,
         name       text        NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
    const current = await schemaVersion(db, s);
    if (current > LATEST_VERSION) {
      throw new MigrationError(
        `Schema "${schema}" is at version ${current}, newer than this skiplock package knows (${LATEST_VERSION}): upgrade skiplock instead of migrating down`,
      );
    }
    const applied: number[] = [];
    for (const migration of MIGRATIONS) {
      if (migration.version <= current) continue;
      await db.query(migration.sql(s));
      await db.query(`INSERT INTO ${s}.migrations (version, name) VALUES ($1, $2)`, [
        migration.version,
        migration.name,
      ]);
      applied.push(migration.version);
    }
    return { schema, applied, version: Math.max(current, LATEST_VERSION) };
  });
}

async function schemaVersion(db: Executor, s: string): Promise<number> {
  const { rows } = await db.query(`SELECT coalesce(max(version), 0)::int AS version FROM ${s}.migrations`);
  return Number(rows[0]?.version ?? 0);
}
