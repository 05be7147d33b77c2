/** pg_stat_statements for `--profile` on a server that preloads it (`--pg embedded`). */
import { adminPool } from './db.js';

/** One statement of pg_stat_statements, summed over the child's calls in one phase. */
export interface StatementRow {
  query: string;
  calls: number;
  totalMs: number;
  rows: number;
  walBytes: number;
}

/** What the profile needs from `--pg embedded`: the role the child connects as (pg_stat_statements). */
export interface StatementsSetup {
  role: string;
  /** Where each run's statements go, by `${workload} ${system} ${phase}` (the first repetition's). */
  sink: Map<string, StatementRow[]>;
}

export async function resetStatements(url: string, role: string): Promise<void> {
  await adminPool(url).query(
    'SELECT pg_stat_statements_reset((SELECT oid FROM pg_roles WHERE rolname = $1), 0, 0)',
    [role],
  );
}

export async function readStatements(url: string, role: string): Promise<StatementRow[]> {
  const { rows } = await adminPool(url).query<{
    query: string;
    calls: string;
    total: number;
    rows: string;
    wal: string;
  }>(
    `SELECT query, calls, total_exec_time AS total, rows, wal_bytes AS wal
       FROM pg_stat_statements
      WHERE userid = (SELECT oid FROM pg_roles WHERE rolname = $1)
      ORDER BY total_exec_time DESC`,
    [role],
  );
  return rows.map((r) => ({
    query: r.query.replace(/\s+/g, ' ').trim(),
    calls: Number(r.calls),
    totalMs: Number(r.total),
    rows: Number(r.rows),
    walBytes: Number(r.wal),
  }));
}
