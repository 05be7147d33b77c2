/**
 * A schema built migration by migration up to `version` (as an older release left it), for tests
 * of the upgrade path: `migrate()` on it then applies only the later migrations.
 */
import { quoteIdent } from '../../src/db/identifier.js';
import { MIGRATIONS } from '../../src/migrations/migrate.js';
import type { TestDatabase } from './database.js';

export async function schemaAt(db: TestDatabase, name: string, version: number): Promise<string> {
  const s = quoteIdent(name);
  await db.sql(`CREATE SCHEMA ${s}`);
  await db.sql(`CREATE TABLE ${s}.migrations (version integer PRIMARY KEY, name text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())`);
  for (const migration of MIGRATIONS.filter((m) => m.version <= version)) {
    await db.sql(migration.sql(s));
    await db.sql(`INSERT INTO ${s}.migrations (version, name) VALUES ($1, $2)`, [
      migration.version,
      migration.name,
    ]);
  }
  return s;
}
