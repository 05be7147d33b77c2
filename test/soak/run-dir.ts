/**
 * The run folder (`$TMPDIR/skiplock-soak-XXXX`): the server's data, every child's records and
 * log. Removed at the end of a run, also when it fails or is interrupted. A soak that was itself
 * SIGKILLed cannot clean up: its workers end on their own (their IPC channel closes), and the
 * next run removes its folder and stops its orphaned server.
 */
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const PREFIX = 'skiplock-soak-';
const OWNER_FILE = 'soak.pid';

export async function createRunDir(): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), PREFIX));
  writeFileSync(path.join(dir, OWNER_FILE), String(process.pid));
  return dir;
}

export function removeRunDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** Removes the folders of earlier runs whose soak process is gone, stopping their orphaned server. */
export async function cleanStaleRuns(log: (line: string) => void): Promise<void> {
  for (const name of readdirSync(os.tmpdir())) {
    if (!name.startsWith(PREFIX)) continue;
    const dir = path.join(os.tmpdir(), name);
    const owner = readPid(path.join(dir, OWNER_FILE));
    if (owner !== null && alive(owner)) continue; // a soak running right now
    const postmaster = readPid(path.join(dir, 'pgdata', 'postmaster.pid'));
    if (postmaster !== null && alive(postmaster) && commandLine(postmaster).includes(dir)) {
      process.kill(postmaster, 'SIGQUIT');
      for (let waited = 0; alive(postmaster) && waited < 10_000; waited += 50) await sleep(50);
      log(`stopped the orphaned PostgreSQL (pid ${postmaster}) of an interrupted run in ${dir}`);
    }
    removeRunDir(dir);
  }
}

function readPid(file: string): number | null {
  if (!existsSync(file)) return null;
  const pid = Number.parseInt(readFileSync(file, 'utf8').split('\n')[0] ?? '', 10);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}
