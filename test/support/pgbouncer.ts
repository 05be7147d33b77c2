/**
 * A real PgBouncer in transaction mode in front of the test server, for test/pgbouncer/*.
 *
 * It runs Debian's binary (`/usr/sbin/pgbouncer`, 1.18 on Debian 12; `$PGBOUNCER` overrides the
 * path) in the foreground with its own ini in a temp folder: `pool_mode = transaction`, a free
 * port on 127.0.0.1, no unix socket, `auth_type = any` (clients are not authenticated; every
 * server connection logs in as the test server's user), and one wildcard database entry, so the
 * per-file databases of test/support/database.ts are reachable by name through it. As root it
 * drops to the `postgres` user (`-u`): PgBouncer refuses to run as root.
 *
 * `describeWithPgBouncer` skips its tests with a note when the binary is missing, unless
 * `SKIPLOCK_REQUIRE_PGBOUNCER=1` (set by .ci/run, which installs it): then they fail.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { freePort } from './ports.js';

/** The PgBouncer binary the tests run. */
export const PGBOUNCER_BIN = process.env.PGBOUNCER ?? '/usr/sbin/pgbouncer';

export interface PgBouncerSettings {
  /** Server connections per database/user pair (PgBouncer's `default_pool_size`; default 10). */
  defaultPoolSize?: number;
  /** Most client connections (`max_client_conn`; default 500). */
  maxClientConn?: number;
  /** PgBouncer's `ignore_startup_parameters` (default: none, as a stock PgBouncer). */
  ignoreStartupParameters?: string;
}

/** A running PgBouncer. */
export interface PgBouncer {
  readonly port: number;
  /** `serverUrl` with PgBouncer's host and port instead of the server's (same database, user). */
  url(serverUrl: string): string;
  /** What PgBouncer logged so far (its stderr), for assertion messages. */
  log(): string;
  /** SIGTERM (immediate shutdown), SIGKILL after 5 s; resolves when it has exited. */
  stop(): Promise<void>;
}

/** Why PgBouncer cannot run here, or null when it can. */
export function pgbouncerMissing(): string | null {
  try {
    accessSync(PGBOUNCER_BIN, constants.X_OK);
    return null;
  } catch {
    return `PgBouncer not found at ${PGBOUNCER_BIN} (install it: apt-get install -y pgbouncer; or set PGBOUNCER)`;
  }
}

/**
 * `describe` for tests that need PgBouncer: skipped with a note when it is missing, failed
 * instead when `SKIPLOCK_REQUIRE_PGBOUNCER=1`.
 */
export function describeWithPgBouncer(name: string, body: () => void): void {
  const missing = pgbouncerMissing();
  if (missing === null) {
    describe(name, body);
  } else if (process.env.SKIPLOCK_REQUIRE_PGBOUNCER === '1') {
    describe(name, () => {
      it('needs PgBouncer', () => {
        throw new Error(`${missing}; SKIPLOCK_REQUIRE_PGBOUNCER=1 makes that a failure`);
      });
    });
  } else {
    console.warn(`${name}: ${missing}: skipped. SKIPLOCK_REQUIRE_PGBOUNCER=1 turns this skip into a failure`);
    describe(name, () => {
      it.skip(`skipped: ${missing}. SKIPLOCK_REQUIRE_PGBOUNCER=1 turns this skip into a failure`, () => {});
    });
  }
}

/** Starts PgBouncer in transaction mode in front of the server of `serverUrl`. */
export async function startPgBouncer(
  serverUrl: string,
  settings: PgBouncerSettings = {},
): Promise<PgBouncer> {
  const server = new URL(serverUrl);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'skiplock-pgbouncer-'));
  const ini = join(dir, 'pgbouncer.ini');
  const login = [
    `host=${server.hostname}`,
    `port=${server.port || '5432'}`,
    `user=${decodeURIComponent(server.username) || 'postgres'}`,
    ...(server.password ? [`password=${decodeURIComponent(server.password)}`] : []),
  ].join(' ');
  writeFileSync(
    ini,
    [
      '[databases]',
      `* = ${login}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = any',
      'pool_mode = transaction',
      `default_pool_size = ${settings.defaultPoolSize ?? 10}`,
      `max_client_conn = ${settings.maxClientConn ?? 500}`,
      // By default no ignore_startup_parameters: Skiplock in pooler mode (preparedStatements:
      // false) must work on a stock PgBouncer.
      ...(settings.ignoreStartupParameters
        ? [`ignore_startup_parameters = ${settings.ignoreStartupParameters}`]
        : []),
      'log_connections = 0',
      'log_disconnections = 0',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  const asRoot = process.getuid?.() === 0;
  const args = [...(asRoot ? ['-u', runAsUser()] : []), ini];
  const child = spawn(PGBOUNCER_BIN, args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    log += chunk;
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // Never leave one (or its folder) behind a test process that exits without stop().
  const killOnExit = () => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', killOnExit);
  const stop = async () => {
    process.off('exit', killOnExit);
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await listening(child, () => log, port);
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    port,
    url(url: string) {
      const through = new URL(url);
      through.hostname = '127.0.0.1';
      through.port = String(port);
      return through.toString();
    },
    log: () => log,
    stop,
  };
}

/** Resolves once PgBouncer logs that it listens; rejects with its log if it exits or stalls. */
function listening(child: ChildProcess, log: () => string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail('did not start within 10 s'), 10_000);
    const onData = () => {
      if (log().includes(`listening on 127.0.0.1:${port}`)) {
        cleanup();
        resolve();
      }
    };
    const onExit = (code: number | null) => fail(`exited with code ${code}`);
    function cleanup() {
      clearTimeout(timer);
      child.stderr?.off('data', onData);
      child.off('exit', onExit);
    }
    function fail(why: string) {
      cleanup();
      reject(new Error(`PgBouncer (${PGBOUNCER_BIN}) ${why}; its log:\n${log()}`));
    }
    child.stderr?.on('data', onData);
    child.once('exit', onExit);
    onData();
  });
}

/** The `postgres` user when it exists (Debian's package runs PgBouncer as it), else `nobody`. */
function runAsUser(): string {
  try {
    return /^postgres:/m.test(readFileSync('/etc/passwd', 'utf8')) ? 'postgres' : 'nobody';
  } catch {
    return 'nobody';
  }
}
