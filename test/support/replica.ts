/**
 * A real streaming replica for tests (SPEC §7): a throwaway primary (initdb, wal_level=replica,
 * a replication line in pg_hba.conf) and a standby made by `pg_basebackup -R`, each on a free
 * port of 127.0.0.1, in one temp folder that is removed on stop — also when starting fails.
 *
 * It needs PostgreSQL server binaries with pg_basebackup (the npm package of the embedded server
 * has none): `SKIPLOCK_REPLICA_PG_BIN`, else the newest `/usr/lib/postgresql/<major>/bin`. The
 * shared server on port 5432 is never touched. As root the servers run as uid 65534, as
 * src/embedded does (initdb and postgres refuse root).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import pg from 'pg';
import { NOBODY, type RunAs } from '../../src/embedded/binaries.js';
import { freePort } from './ports.js';

/** A primary and its streaming standby. */
export interface StreamingPair {
  /** `postgres://postgres@127.0.0.1:PORT/postgres` of the primary. */
  primaryUrl: string;
  /** The same for the standby (read-only, in recovery). */
  standbyUrl: string;
  /** Fast shutdown of the standby only (the primary keeps running). Idempotent. */
  stopStandby(): Promise<void>;
  /** Stops both servers and removes their folder. Idempotent. */
  stop(): Promise<void>;
}

/** The folder of server binaries that has pg_basebackup, or null when this machine has none. */
export function replicaBinaries(): string | null {
  const given = process.env.SKIPLOCK_REPLICA_PG_BIN;
  if (given) return existsSync(path.join(given, 'pg_basebackup')) ? given : null;
  const root = '/usr/lib/postgresql';
  let majors: string[];
  try {
    majors = readdirSync(root).filter((name) => /^\d+$/.test(name));
  } catch {
    return null;
  }
  majors.sort((a, b) => Number(b) - Number(a));
  for (const major of majors) {
    const bin = path.join(root, major, 'bin');
    if (['initdb', 'postgres', 'pg_basebackup'].every((file) => existsSync(path.join(bin, file)))) return bin;
  }
  return null;
}

/** Starts a primary and a streaming standby of it; resolves once the standby streams. */
export async function startStreamingPair(bin: string): Promise<StreamingPair> {
  const runAs = process.getuid?.() === 0 ? NOBODY : null;
  const root = await fs.mkdtemp(path.join(os.tmpdir(), 'skiplock-replica-'));
  await fs.chmod(root, 0o711); // the unprivileged server must reach its folders, not list them
  const servers: Server[] = [];
  const stopAll = async () => {
    await Promise.all(servers.map((server) => server.stop()));
    await fs.rm(root, { recursive: true, force: true });
  };
  try {
    const primaryDir = await ownedDir(root, 'primary', runAs);
    const standbyDir = await ownedDir(root, 'standby', runAs);
    const env = { HOME: root, PGPASSFILE: path.join(root, 'no-pgpass') };
    await run(
      path.join(bin, 'initdb'),
      ['-D', primaryDir, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8', '--locale=C'],
      runAs,
      env,
    );
    await fs.appendFile(path.join(primaryDir, 'pg_hba.conf'), '\nhost replication all 127.0.0.1/32 trust\n');
    const primary = await startServer(bin, primaryDir, runAs, [
      '-c',
      'wal_level=replica',
      '-c',
      'max_wal_senders=4',
    ]);
    servers.push(primary);
    await run(
      path.join(bin, 'pg_basebackup'),
      [
        '-h',
        '127.0.0.1',
        '-p',
        String(primary.port),
        '-U',
        'postgres',
        '-D',
        standbyDir,
        '-R',
        '-X',
        'stream',
        '-c',
        'fast',
        '--no-sync',
      ],
      runAs,
      env,
    );
    const standby = await startServer(bin, standbyDir, runAs, ['-c', 'hot_standby=on']);
    servers.push(standby);
    await waitUntil(standby.url, "SELECT status = 'streaming' AS ok FROM pg_stat_wal_receiver", 30_000);
    let stopped: Promise<void> | undefined;
    return {
      primaryUrl: primary.url,
      standbyUrl: standby.url,
      stopStandby: () => standby.stop(),
      stop: () => {
        stopped ??= stopAll();
        return stopped;
      },
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
}

interface Server {
  port: number;
  url: string;
  stop(): Promise<void>;
}

async function ownedDir(root: string, name: string, runAs: RunAs | null): Promise<string> {
  const dir = path.join(root, name);
  await fs.mkdir(dir, { mode: 0o700 });
  if (runAs) await fs.chown(dir, runAs.uid, runAs.gid);
  return dir;
}

/** Starts `postgres` on a free port with its log in the folder above; resolves once it answers. */
async function startServer(
  bin: string,
  dataDir: string,
  runAs: RunAs | null,
  extra: string[],
): Promise<Server> {
  const port = await freePort();
  const log = await fs.open(`${dataDir}.log`, 'a');
  let child: ChildProcess;
  try {
    const args = ['-D', dataDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1'];
    args.push('-c', 'unix_socket_directories=', '-c', 'fsync=off', ...extra);
    child = spawn(path.join(bin, 'postgres'), args, {
      stdio: ['ignore', log.fd, log.fd],
      ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
    });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
  } finally {
    await log.close();
  }
  // A test process that dies without its afterAll leaves no server behind.
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  let stopping: Promise<void> | undefined;
  const server: Server = {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop: () => {
      stopping ??= shutdown(child).finally(() => process.off('exit', killOnExit));
      return stopping;
    },
  };
  try {
    await waitUntil(server.url, 'SELECT true AS ok', 30_000, child, `${dataDir}.log`);
  } catch (error) {
    await server.stop();
    throw error;
  }
  return server;
}

/** Fast shutdown (SIGINT); SIGKILL when it takes more than 10 s. */
async function shutdown(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGINT');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

/** Polls `query` (one row with a boolean `ok`) until it is true; fails with the server log. */
async function waitUntil(
  url: string,
  query: string,
  timeoutMs: number,
  child?: ChildProcess,
  logFile?: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child && (child.exitCode !== null || child.signalCode !== null)) {
      throw new Error(`postgres exited while starting:\n${await tail(logFile)}`);
    }
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
      const { rows } = await client.query<{ ok: boolean }>(query);
      if (rows[0]?.ok === true) return;
    } catch {
      // not yet
    } finally {
      await client.end().catch(() => undefined);
    }
    if (Date.now() > deadline)
      throw new Error(`${url} did not answer "${query}" in time:\n${await tail(logFile)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function run(
  file: string,
  args: string[],
  runAs: RunAs | null,
  env: Record<string, string>,
): Promise<void> {
  const { code, output } = await new Promise<{ code: number | null; output: string }>((resolve, reject) => {
    const child = spawn(file, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
      ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
    });
    let text = '';
    child.stdout.on('data', (chunk: Buffer) => {
      text += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      text += chunk.toString();
    });
    child.once('error', reject);
    child.once('close', (exitCode) => resolve({ code: exitCode, output: text }));
  });
  if (code !== 0) throw new Error(`${path.basename(file)} failed (exit ${code}):\n${output.slice(-2_000)}`);
}

async function tail(logFile: string | undefined): Promise<string> {
  if (!logFile) return '';
  return (await fs.readFile(logFile, 'utf8').catch(() => '(no log)')).slice(-2_000);
}
