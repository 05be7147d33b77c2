/** The runner's side of a worker child process (see child.ts): spawn, messages with time limits, kill. */
import { type ChildProcess, fork } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ChildResult, ChildSpec } from '../child.js';
import { TimeoutError } from './util.js';

/** child.mjs sits next to the runner's bundle. */
const CHILD_PATH = join(dirname(fileURLToPath(import.meta.url)), 'child.mjs');

interface Message {
  type: string;
  [key: string]: unknown;
}

export class WorkerChild {
  private readonly inbox: Message[] = [];
  private waiter: (() => void) | null = null;
  private exited: string | null = null;

  private constructor(private readonly child: ChildProcess) {
    child.on('message', (message: Message) => {
      this.inbox.push(message);
      this.waiter?.();
    });
    child.on('exit', (code, signal) => {
      this.exited = `worker process exited (${signal ?? `code ${code}`})`;
      this.waiter?.();
    });
    child.on('error', (error) => {
      this.exited = `worker process failed: ${error.message}`;
      this.waiter?.();
    });
  }

  /**
   * Forks a worker child and waits until its consumer runs — or, with `spec.hold` or
   * `spec.profile`, until it waits for {@link WorkerChild.go} (then `ready` is its 'waiting'
   * message). `onSpawn` gets the child's pid as soon as it is forked.
   */
  static async start(
    spec: ChildSpec,
    timeoutMs = 60_000,
    onSpawn?: (pid: number) => void,
  ): Promise<{ child: WorkerChild; ready: Message }> {
    // BENCH_PROFILE_DIR=dir: each worker child writes a CPU profile there (for the report's misses).
    const profile = process.env.BENCH_PROFILE_DIR;
    const proc = fork(CHILD_PATH, [JSON.stringify(spec)], {
      execPath: process.execPath,
      execArgv: profile ? ['--cpu-prof', `--cpu-prof-dir=${profile}`] : [],
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const child = new WorkerChild(proc);
    if (proc.pid !== undefined) onSpawn?.(proc.pid);
    try {
      return { child, ready: await child.next(spec.hold || spec.profile ? 'waiting' : 'ready', timeoutMs) };
    } catch (error) {
      child.kill();
      throw error;
    }
  }

  /** A held child starts its consumer now. */
  go(): void {
    this.child.send({ type: 'go' });
  }

  /** The next message of `type`; rejects on an 'error' message, the child's exit, or the time limit. */
  async next(type: string, timeoutMs: number): Promise<Message> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const index = this.inbox.findIndex((m) => m.type === type || m.type === 'error');
      if (index >= 0) {
        const [message] = this.inbox.splice(index, 1) as [Message];
        if (message.type === 'error') throw new Error(String(message.message));
        return message;
      }
      if (this.exited) throw new Error(this.exited);
      const left = deadline - Date.now();
      if (left <= 0) throw new TimeoutError(`waiting for the worker's "${type}"`, timeoutMs);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.waiter = null;
    }
  }

  /** Asks the child to stop its consumer and report; kills it if it does not answer in time. */
  async stop(
    window: { windowStart?: number; windowEnd?: number } = {},
    timeoutMs = 60_000,
  ): Promise<ChildResult> {
    try {
      if (this.exited) throw new Error(this.exited);
      this.child.send({ type: 'stop', ...window });
      return (await this.next('result', timeoutMs)) as unknown as ChildResult;
    } finally {
      this.kill();
    }
  }

  /** SIGKILL for this one child, unless it already exited. */
  kill(): void {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    // A profiling child writes its profile as it exits: give it a moment first.
    if (process.env.BENCH_PROFILE_DIR) setTimeout(() => this.kill(), 3_000).unref();
    else this.child.kill('SIGKILL');
  }
}
