import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';

/** What {@link clearStalePid} found. */
export type StaleServer =
  | { kind: 'none' }
  | { kind: 'removed-pid-file'; pid: number }
  | { kind: 'stopped'; pid: number };

/**
 * Deals with a `postmaster.pid` left by an earlier run (its parent was SIGKILLed, say):
 * - the pid is a PostgreSQL server running on this very folder (an orphan) → fast shutdown of
 *   it, so we own the next one;
 * - the pid is dead, or belongs to any other process → the stale file is removed and nothing is
 *   signalled. Pids are recycled: after a reboot or a long time the number may name anyone's
 *   process — another cluster's postmaster included — so it is signalled only when
 *   {@link isServerOf} proves it is this folder's server. (Should an orphan of this folder ever
 *   go unrecognised, PostgreSQL's own shared-memory interlock still refuses a second server.)
 */
export async function clearStalePid(dataDir: string): Promise<StaleServer> {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  let text: string;
  try {
    text = await fs.readFile(pidFile, 'utf8');
  } catch {
    return { kind: 'none' };
  }
  const pid = Number.parseInt(text.split('\n')[0] ?? '', 10);
  if (Number.isInteger(pid) && pid > 0 && (await isServerOf(pid, dataDir))) {
    await stopProcess(pid);
    await fs.rm(pidFile, { force: true });
    return { kind: 'stopped', pid };
  }
  await fs.rm(pidFile, { force: true });
  return { kind: 'removed-pid-file', pid };
}

/**
 * Whether `pid` is a running PostgreSQL server whose data folder is `dataDir`: its program is
 * `postgres` (or `postmaster`), and its working folder is `dataDir` (the server changes into its
 * data folder at start) or its `-D` argument names it. Anything that cannot be proven is false.
 */
export async function isServerOf(pid: number, dataDir: string): Promise<boolean> {
  if (!isRunning(pid)) return false;
  const args = await commandLine(pid);
  if (args === null || !/^(postgres|postmaster)$/.test(path.basename(args[0] ?? ''))) return false;
  const wanted = await fs.realpath(dataDir).catch(() => path.resolve(dataDir));
  const cwd = await fs.readlink(`/proc/${pid}/cwd`).catch(() => null);
  if (cwd !== null && cwd === wanted) return true;
  const dir = dataDirArgument(args);
  if (dir === null || !path.isAbsolute(dir)) return false; // a relative -D: only the cwd can tell
  return (await fs.realpath(dir).catch(() => path.resolve(dir))) === wanted;
}

/** The process's arguments: /proc on Linux, else `ps` (macOS); null when neither can tell. */
async function commandLine(pid: number): Promise<string[] | null> {
  try {
    const raw = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8');
    return raw.replace(/\0$/, '').split('\0');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || (await hasProc())) return null;
  }
  try {
    // No /proc: ps joins the arguments with spaces; good enough for a `-D /path` without spaces.
    const line = execFileSync('ps', ['-ww', '-o', 'command=', '-p', String(pid)], { encoding: 'utf8' });
    return line.trim().split(/\s+/);
  } catch {
    return null;
  }
}

async function hasProc(): Promise<boolean> {
  return fs.stat('/proc/self').then(
    () => true,
    () => false,
  );
}

/** The value of `-D dir` or `-Ddir` in the arguments (how src/embedded and pg_ctl start a server). */
function dataDirArgument(args: readonly string[]): string | null {
  for (let i = 1; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === '-D') return args[i + 1] ?? null;
    if (arg.startsWith('-D')) return arg.slice(2);
  }
  return null;
}

async function stopProcess(pid: number): Promise<void> {
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(pid, sig);
      return true;
    } catch {
      return false;
    }
  };
  signal('SIGINT');
  const deadline = Date.now() + 15_000;
  while (isRunning(pid)) {
    if (Date.now() > deadline) {
      signal('SIGKILL');
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Running, and not a zombie waiting for its parent to reap it (that one has exited already). */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return true; // no /proc: trust kill(0)
  }
}
