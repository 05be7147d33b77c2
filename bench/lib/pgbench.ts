/**
 * The server's own transaction ceiling: pgbench, one-row UPDATE per transaction, N clients, with
 * synchronous_commit on, on + a pg_notify in each transaction, and off. Runs in a database of its
 * own, created and dropped here.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { adminPool, closeAdminPool, ident } from './db.js';

export const PGBENCH_DB = 'skiplock_bench_pgbench';

export const PGBENCH_MODES = [
  { key: 'durable', label: 'synchronous_commit on', script: 'update', options: '' },
  {
    key: 'notify',
    label: 'synchronous_commit on + pg_notify per transaction',
    script: 'notify',
    options: '',
  },
  { key: 'async', label: 'synchronous_commit off', script: 'update', options: '-c synchronous_commit=off' },
] as const;
export type PgbenchMode = (typeof PGBENCH_MODES)[number]['key'];

const ROWS = 1_000;
const SCRIPTS = {
  update: `\\set id random(1, ${ROWS})\nUPDATE bench_counter SET n = n + 1 WHERE id = :id;\n`,
  notify: `\\set id random(1, ${ROWS})\nBEGIN;\nUPDATE bench_counter SET n = n + 1 WHERE id = :id;\nSELECT pg_notify('skiplock_bench', 'x');\nCOMMIT;\n`,
};

/** pgbench from $PGBENCH, PATH, or the newest /usr/lib/postgresql/N/bin. */
export function findPgbench(): string | null {
  if (process.env.PGBENCH && existsSync(process.env.PGBENCH)) return process.env.PGBENCH;
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && existsSync(join(dir, 'pgbench'))) return join(dir, 'pgbench');
  }
  try {
    const majors = readdirSync('/usr/lib/postgresql')
      .map(Number)
      .filter((n) => Number.isInteger(n))
      .sort((a, b) => b - a);
    for (const major of majors) {
      const path = `/usr/lib/postgresql/${major}/bin/pgbench`;
      if (existsSync(path)) return path;
    }
  } catch {
    // no Debian PostgreSQL layout
  }
  return null;
}

export class Pgbench {
  private dir: string | null = null;
  private readonly url: string;

  constructor(
    private readonly databaseUrl: string,
    readonly binary: string,
    private readonly clients: number,
  ) {
    const url = new URL(databaseUrl);
    url.pathname = `/${PGBENCH_DB}`;
    this.url = url.toString();
  }

  async setup(): Promise<void> {
    const admin = adminPool(this.databaseUrl);
    await admin.query(`DROP DATABASE IF EXISTS ${ident(PGBENCH_DB)}`);
    await admin.query(`CREATE DATABASE ${ident(PGBENCH_DB)}`);
    const pool = adminPool(this.url);
    await pool.query('CREATE TABLE bench_counter (id integer PRIMARY KEY, n bigint NOT NULL DEFAULT 0)');
    await pool.query(`INSERT INTO bench_counter (id) SELECT generate_series(1, ${ROWS})`);
    await pool.query('VACUUM ANALYZE bench_counter');
    this.dir = mkdtempSync(join(tmpdir(), 'skiplock-pgbench-'));
    for (const [name, text] of Object.entries(SCRIPTS)) writeFileSync(join(this.dir, `${name}.sql`), text);
  }

  /** Transactions per second of one pgbench run (without initial connection time). */
  run(mode: PgbenchMode, seconds: number): Promise<number> {
    const spec = PGBENCH_MODES.find((m) => m.key === mode);
    if (!spec || !this.dir) return Promise.reject(new Error('pgbench: not set up'));
    const args = [
      '-n',
      '-c',
      String(this.clients),
      '-j',
      '2',
      '-T',
      String(seconds),
      '-f',
      join(this.dir, `${spec.script}.sql`),
      this.url,
    ];
    return new Promise((resolve, reject) => {
      const child = spawn(this.binary, args, {
        env: { ...process.env, PGOPTIONS: spec.options },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
      });
      child.stderr.on('data', (chunk: Buffer) => {
        out += chunk.toString();
      });
      const timer = setTimeout(() => child.kill('SIGKILL'), (seconds + 60) * 1000);
      child.on('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      child.on('close', (code) => {
        clearTimeout(timer);
        const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(out)?.[1];
        if (code === 0 && tps) resolve(Number(tps));
        else reject(new Error(`pgbench exited with ${code}: ${out.trim().split('\n').slice(-2).join(' ')}`));
      });
    });
  }

  async cleanup(): Promise<void> {
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
    this.dir = null;
    // The pgbench database's admin pool must be gone before DROP DATABASE.
    await closeAdminPool(this.url);
    await adminPool(this.databaseUrl).query(`DROP DATABASE IF EXISTS ${ident(PGBENCH_DB)} WITH (FORCE)`);
  }
}
