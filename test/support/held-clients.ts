/**
 * Raw `pg` clients on the test database, for transactions a test holds open against the code
 * under test; every one is ended after the file's tests (an error on a client a test killed on
 * purpose is ignored).
 */
import pg from 'pg';
import { afterAll, expect } from 'vitest';
import type { TestDatabase } from './database.js';

export function heldClients(db: TestDatabase): () => Promise<pg.Client> {
  const clients: pg.Client[] = [];
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
  });
  return async () => {
    const c = new pg.Client({ connectionString: db.url });
    c.on('error', () => undefined);
    await c.connect();
    clients.push(c);
    return c;
  };
}

/** Resolves once some backend of the test database waits for a lock (a held transaction blocks it). */
export async function someoneBlocked(db: TestDatabase): Promise<void> {
  await expect
    .poll(
      async () =>
        (
          await db.sql<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
          )
        )[0]?.n ?? 0,
    )
    .toBeGreaterThan(0);
}
