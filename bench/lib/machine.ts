/** The machine, the servers and the versions, for the report. */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { adminPool } from './db.js';
import { REPO_DIR } from './paths.js';

export interface MachineInfo {
  cpu: string;
  cores: number;
  memoryGiB: number;
  os: string;
  node: string;
  postgres: string;
  postgresSettings: string;
  git: string;
}

function osName(): string {
  try {
    const text = readFileSync('/etc/os-release', 'utf8');
    const name = /^PRETTY_NAME="?([^"\n]*)"?/m.exec(text)?.[1];
    return `${name ?? os.type()}, kernel ${os.release()}`;
  } catch {
    return `${os.type()} ${os.release()}`;
  }
}

function gitDescription(): string {
  try {
    const run = (...args: string[]) =>
      execFileSync('git', args, {
        cwd: REPO_DIR,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }).trim();
    const commit = run('rev-parse', '--short', 'HEAD');
    const dirty = run('status', '--porcelain', '--untracked-files=no', '--', 'src').length > 0;
    return `commit ${commit}${dirty ? ' with uncommitted changes in src/' : ''}`;
  } catch {
    return 'not a git checkout';
  }
}

export async function machineInfo(databaseUrl: string): Promise<MachineInfo> {
  const cpus = os.cpus();
  let postgres = 'unknown';
  let postgresSettings = 'unknown';
  try {
    const pool = adminPool(databaseUrl);
    postgres =
      (await pool.query<{ v: string }>('SELECT version() AS v')).rows[0]?.v.split(' on ')[0] ?? postgres;
    const { rows } = await pool.query<{ name: string; setting: string; unit: string | null }>(
      `SELECT name, setting, unit FROM pg_settings
        WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'max_connections', 'wal_level')
        ORDER BY name`,
    );
    postgresSettings = rows
      .map((r) =>
        r.name === 'shared_buffers'
          ? `${r.name}=${(Number(r.setting) * 8) / 1024} MB`
          : `${r.name}=${r.setting}`,
      )
      .join(', ');
  } catch (error) {
    postgres = `unreachable (${error instanceof Error ? error.message : String(error)})`;
  }
  return {
    cpu: cpus[0]?.model.trim() ?? 'unknown',
    cores: os.availableParallelism(),
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    os: osName(),
    node: process.version,
    postgres,
    postgresSettings,
    git: gitDescription(),
  };
}

export function loadAverage(): string {
  return os
    .loadavg()
    .map((n) => n.toFixed(2))
    .join(' / ');
}
