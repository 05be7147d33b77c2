/**
 * The embedded PostgreSQL launcher (SPEC §6): runs as root through an unprivileged uid, keeps a
 * persistent data folder between runs, and recovers from a stale postmaster.pid or an orphan
 * server left by a SIGKILLed parent.
 *
 * Deliberate break seen failing: making clearStalePid() a no-op failed both the stale-pid and
 * the orphan tests (PostgreSQL refused to start: "lock file postmaster.pid already exists").
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { startEmbeddedPostgres } from '../../src/embedded/embedded-postgres.js';
import { isRunning } from '../../src/embedded/stale-server.js';
import { REPO_ROOT } from '../support/spawn.js';

const folders: string[] = [];
async function tempDir(): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'skiplock-embedded-test-'));
  folders.push(dir);
  return path.join(dir, 'data');
}
afterAll(async () => {
  await Promise.all(folders.map((dir) => fs.rm(dir, { recursive: true, force: true })));
});

async function query(url: string, text: string): Promise<unknown[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text)).rows;
  } finally {
    await client.end();
  }
}

/** Running and not a zombie (an exited orphan waits for init to reap it). */
const alive = isRunning;

describe('embedded PostgreSQL', () => {
  test('a persistent data folder is reused by the next start', async () => {
    const dataDir = await tempDir();
    const first = await startEmbeddedPostgres({ dataDir });
    await query(first.connectionString, 'CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)');
    await first.stop();
    await first.stop(); // idempotent
    expect(alive(first.pid)).toBe(false);

    const second = await startEmbeddedPostgres({ dataDir });
    try {
      expect(await query(second.connectionString, 'SELECT n FROM kept')).toEqual([{ n: 42 }]);
      const [row] = (await query(second.connectionString, 'SHOW server_version')) as {
        server_version: string;
      }[];
      expect(row?.server_version).toMatch(/^18\./);
    } finally {
      await second.stop();
    }
    await expect(fs.stat(path.join(dataDir, 'PG_VERSION'))).resolves.toBeTruthy();
  });

  test('a temporary data folder is removed on stop', async () => {
    const server = await startEmbeddedPostgres({ fast: true });
    expect(await query(server.connectionString, 'SELECT 1 AS one')).toEqual([{ one: 1 }]);
    await server.stop();
    await expect(fs.stat(server.dataDir)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  test('a stale postmaster.pid whose process is gone is cleared', async () => {
    const dataDir = await tempDir();
    const server = await startEmbeddedPostgres({ dataDir, fast: true });
    await server.stop();
    // A pid that is certainly not running: the largest possible pid value.
    await fs.writeFile(path.join(dataDir, 'postmaster.pid'), `4194304\n${dataDir}\n`);
    const again = await startEmbeddedPostgres({ dataDir, fast: true });
    await again.stop();
  });

  // Issue 8 defect 11: pids are recycled, so the pid in a stale postmaster.pid may name anyone's
  // process. Before the fix, clearStalePid() sent SIGINT to any live process whose command line
  // contained "postgres": both tests below failed (the look-alike `sleep` and the other
  // cluster's server were stopped).
  test('a stale postmaster.pid naming an unrelated live process: it survives, the server starts', async () => {
    const dataDir = await tempDir();
    const server = await startEmbeddedPostgres({ dataDir, fast: true });
    await server.stop();
    // `sleep 60` calling itself "postgres": the old check took it for the server.
    const unrelated = spawn('sleep', ['60'], { argv0: 'postgres', stdio: 'ignore' });
    try {
      await new Promise((resolve) => unrelated.once('spawn', resolve));
      const pid = unrelated.pid as number;
      await fs.writeFile(path.join(dataDir, 'postmaster.pid'), `${pid}\n${dataDir}\n`);
      const again = await startEmbeddedPostgres({ dataDir, fast: true });
      try {
        expect(again.recovered).toEqual({ kind: 'removed-pid-file', pid });
        expect(alive(pid)).toBe(true);
        expect(await query(again.connectionString, 'SELECT 3 AS three')).toEqual([{ three: 3 }]);
      } finally {
        await again.stop();
      }
      expect(alive(pid)).toBe(true);
    } finally {
      unrelated.kill('SIGKILL');
    }
  });

  test("a stale postmaster.pid naming another cluster's running server leaves that server alone", async () => {
    const other = await startEmbeddedPostgres({ fast: true });
    try {
      const dataDir = await tempDir();
      const server = await startEmbeddedPostgres({ dataDir, fast: true });
      await server.stop();
      await fs.writeFile(path.join(dataDir, 'postmaster.pid'), `${other.pid}\n${dataDir}\n`);
      const again = await startEmbeddedPostgres({ dataDir, fast: true });
      await again.stop();
      expect(again.recovered).toEqual({ kind: 'removed-pid-file', pid: other.pid });
      expect(alive(other.pid)).toBe(true);
      expect(await query(other.connectionString, 'SELECT 4 AS four')).toEqual([{ four: 4 }]);
    } finally {
      await other.stop();
    }
  });

  test('an orphan server left by a SIGKILLed parent is stopped and replaced', async () => {
    const dataDir = await tempDir();
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/embedded/fixtures/orphan.ts'], {
      cwd: REPO_ROOT,
      env: { ...process.env, DATA_DIR: dataDir },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes('\n')) resolve(out.trim());
      });
      child.once('exit', (code) => reject(new Error(`fixture exited early (${code})`)));
    });
    const orphan = JSON.parse(line) as { pid: number; port: number };
    child.kill('SIGKILL');
    await new Promise((resolve) => child.once('exit', resolve));
    expect(alive(orphan.pid)).toBe(true); // the server outlived its parent

    const server = await startEmbeddedPostgres({ dataDir, fast: true });
    try {
      expect(server.recovered).toEqual({ kind: 'stopped', pid: orphan.pid });
      expect(alive(orphan.pid)).toBe(false);
      expect(await query(server.connectionString, 'SELECT 2 AS two')).toEqual([{ two: 2 }]);
    } finally {
      await server.stop();
    }
  });
});
