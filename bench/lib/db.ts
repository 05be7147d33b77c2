/** The runner's own PostgreSQL connections (schema resets, counts, W6 setup), separate from the systems'. */
import pg from 'pg';

const pools = new Map<string, pg.Pool>();

/** A small pool on `url`, shared by everything in this process; closed by closeAdminPools(). */
export function adminPool(url: string): pg.Pool {
  let pool = pools.get(url);
  if (!pool) {
    pool = new pg.Pool({ connectionString: url, max: 3, application_name: 'skiplock-bench-admin' });
    pool.on('error', () => {}); // an idle admin connection that dies is replaced on next use
    pools.set(url, pool);
  }
  return pool;
}

/** Closes the pool on `url` (e.g. before dropping its database). */
export async function closeAdminPool(url: string): Promise<void> {
  const pool = pools.get(url);
  pools.delete(url);
  await pool?.end().catch(() => {});
}

export async function closeAdminPools(): Promise<void> {
  const all = [...pools.values()];
  pools.clear();
  await Promise.all(all.map((pool) => pool.end().catch(() => {})));
}

/** A quoted SQL identifier. */
export function ident(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

export async function dropSchema(url: string, schema: string): Promise<void> {
  await adminPool(url).query(`DROP SCHEMA IF EXISTS ${ident(schema)} CASCADE`);
}
