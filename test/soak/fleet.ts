/**
 * The soak's child processes — workers and the producer — and what the soak does to them:
 * SIGKILL, SIGSTOP/SIGCONT, SIGTERM (a graceful stop with a bound). Each child's stdout and
 * stderr go to a log file in the run folder (a crash's stack trace lands there), its records to
 * a records file. A child that exits when the soak did not end it, or ends badly after a SIGTERM,
 * counts as a crash.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { REPO_ROOT } from '../support/spawn.js';

export type Role = 'worker' | 'producer';

export interface Proc {
  /** `w2.3`: worker slot 2, third process in that slot; `p.1`: the producer. */
  name: string;
  role: Role;
  slot: number;
  pid: number;
  startedAt: number;
  exitedAt: number | null;
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
  /** What the soak did to end it. */
  endedBy: 'kill' | 'term' | null;
  termAt: number | null;
  /** Did not exit within the bound after SIGTERM (then SIGKILLed). */
  hung: boolean;
  /** Ended on its own, or badly after SIGTERM. */
  crashed: boolean;
  recordsFile: string;
  logFile: string;
  readonly child: ChildProcess;
  readonly exited: Promise<void>;
}

export class Fleet {
  readonly procs: Proc[] = [];
  private readonly generations = new Map<string, number>();

  constructor(
    private readonly runDir: string,
    private readonly onCrash: (proc: Proc) => void,
  ) {}

  /** Starts `script` (a file of test/soak/) with its config; `config` gets `name` and `recordsFile`. */
  spawn(
    role: Role,
    slot: number,
    script: string,
    config: (name: string, recordsFile: string) => object,
  ): Proc {
    const key = `${role}${slot}`;
    const gen = (this.generations.get(key) ?? 0) + 1;
    this.generations.set(key, gen);
    const name = role === 'worker' ? `w${slot}.${gen}` : `p.${gen}`;
    const recordsFile = path.join(this.runDir, `${name}.jsonl`);
    const logFile = path.join(this.runDir, `${name}.log`);
    const log = openSync(logFile, 'a');
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        path.join(REPO_ROOT, 'test/soak', script),
        JSON.stringify(config(name, recordsFile)),
      ],
      // Its own process group: a Ctrl-C reaches the soak only, which then ends its children.
      { cwd: REPO_ROOT, stdio: ['ignore', log, log, 'ipc'], detached: true },
    );
    closeSync(log);
    let resolveExit!: () => void;
    const proc: Proc = {
      name,
      role,
      slot,
      pid: child.pid ?? -1,
      startedAt: Date.now(),
      exitedAt: null,
      exit: null,
      endedBy: null,
      termAt: null,
      hung: false,
      crashed: false,
      recordsFile,
      logFile,
      child,
      exited: new Promise<void>((resolve) => {
        resolveExit = resolve;
      }),
    };
    child.on('error', () => undefined);
    child.once('exit', (code, signal) => {
      proc.exitedAt = Date.now();
      proc.exit = { code, signal };
      const badStop = proc.endedBy === 'term' && !proc.hung && (code !== 0 || signal !== null);
      if (proc.endedBy === null || badStop) {
        proc.crashed = true;
        this.onCrash(proc);
      }
      resolveExit();
    });
    this.procs.push(proc);
    return proc;
  }

  live(role?: Role): Proc[] {
    return this.procs.filter((p) => p.exitedAt === null && (role === undefined || p.role === role));
  }

  /** SIGKILL (a fault). Resolves once it has exited. */
  async kill(proc: Proc): Promise<void> {
    if (proc.exitedAt !== null) return;
    proc.endedBy ??= 'kill';
    proc.child.kill('SIGKILL');
    await proc.exited;
  }

  /** Any other signal (the producer's SIGUSR2: stop the load). */
  signal(proc: Proc, signal: NodeJS.Signals): void {
    if (proc.exitedAt === null) proc.child.kill(signal);
  }

  pause(proc: Proc): void {
    proc.child.kill('SIGSTOP');
  }

  resume(proc: Proc): void {
    proc.child.kill('SIGCONT');
  }

  /** SIGTERM, then SIGKILL if it has not exited within `boundMs` (counted as hung). */
  async terminate(proc: Proc, boundMs: number): Promise<void> {
    if (proc.exitedAt !== null) return;
    proc.endedBy = 'term';
    proc.termAt = Date.now();
    proc.child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      proc.exited,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, boundMs);
      }),
    ]);
    clearTimeout(timer);
    if (proc.exitedAt === null) {
      proc.hung = true;
      proc.child.kill('SIGCONT');
      proc.child.kill('SIGKILL');
      await proc.exited;
    }
  }

  /** Clean-up: SIGKILL every child still running. */
  async killAll(): Promise<void> {
    await Promise.all(
      this.live().map(async (proc) => {
        proc.endedBy ??= 'kill';
        proc.child.kill('SIGKILL');
        await proc.exited;
      }),
    );
  }
}

/** The first lines of a child's log: where a crash's error and stack trace begin. */
export function logHead(proc: Proc, lines = 14): string {
  return readLog(proc).slice(0, lines).join('\n');
}

/**
 * One line on why a child crashed, from its log: the error's message and SQLSTATE, and whether
 * it was an unhandled 'error' event (an EventEmitter, here a pg client, with no listener).
 */
export function crashCause(proc: Proc): string {
  const log = readLog(proc);
  const text = log.join('\n');
  const message =
    log.find((line) => /^(\w*Error|error|soak worker)\b.*:/.test(line.trim()))?.trim() ?? describeExit(proc);
  const code = /code: '([0-9A-Z]{5})'/.exec(text)?.[1];
  const unhandled = text.includes("Unhandled 'error' event") ? "unhandled 'error' event: " : '';
  return `${unhandled}${message}${code ? ` (${code})` : ''}`;
}

function readLog(proc: Proc): string[] {
  if (!existsSync(proc.logFile)) return [];
  return readFileSync(proc.logFile, 'utf8').trimEnd().split('\n');
}

/** How a child ended, for logs. */
export function describeExit(proc: Proc): string {
  if (!proc.exit) return 'running';
  return proc.exit.signal ? `signal ${proc.exit.signal}` : `exit code ${proc.exit.code}`;
}
