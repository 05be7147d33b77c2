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
 * - the server is still running on this folder → fast shutdown of that orphan, so we own the next one;
 * - the pid is dead or belongs to another program → the stale file is removed.
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
  if (Number.isInteger(pid) && pid > 0 && (await isPostgres(pid))) {
    await stopProcess(pid);
    await fs.rm(pidFile, { force: true });
    return { kind: 'stopped', pid };
  }
  await fs.rm(pidFile, { force: true });
  return { kind: 'removed-pid-file', pid };
}

async function isPostgres(pid: number): Promise<boolean> {
  if (!isRunning(pid)) return false;
  try {
    return (await fs.readFile(`/proc/${pid}/cmdline`, 'utf8')).includes('postgres');
  } catch {
    return true; // alive, and no /proc to tell otherwise: treat as the server
  }
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
