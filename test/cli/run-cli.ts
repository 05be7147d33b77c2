/**
 * Runs the real `skiplock` command in a child process — `node --import tsx src/cli/main.ts …`
 * from the repository root, stdin/stdout/stderr piped (so never a TTY) — and hands back its exit
 * code and output. Shared by the CLI end-to-end tests in this folder.
 *
 * The child's environment is the parent's minus DATABASE_URL and NO_COLOR (a test that wants one
 * passes it), plus `env`. Spawns are limited to a few at a time: each one loads tsx and the whole
 * CLI (~1 s of CPU), and a dozen at once on a small CI machine only makes every one of them slow.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { expect } from 'vitest';
import { TEST_SCHEMA } from '../support/schema.js';
import { REPO_ROOT } from '../support/spawn.js';

export interface CliResult {
  /** Exit code; null when killed by a signal. */
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  /** DATABASE_URL of the child (none when omitted). */
  url?: string;
  /** Extra environment; `undefined` removes a variable. */
  env?: Record<string, string | undefined>;
  /** Prepend `--schema <TEST_SCHEMA>` (default true). */
  schema?: boolean;
  /** Kill it (SIGKILL) after this long (default 30 s). */
  timeoutMs?: number;
}

/** `[process.execPath, ...]` arguments of a CLI run. */
export function cliArgs(args: readonly string[], schema = true): string[] {
  return ['--import', 'tsx', 'src/cli/main.ts', ...(schema ? ['--schema', TEST_SCHEMA] : []), ...args];
}

/** The child's environment: the parent's without DATABASE_URL and NO_COLOR, plus `url` and `env`. */
export function cliEnv(url: string | undefined, extra: CliOptions['env'] = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.DATABASE_URL;
  delete env.NO_COLOR;
  delete env.FORCE_COLOR;
  if (url !== undefined) env.DATABASE_URL = url;
  for (const [name, value] of Object.entries(extra)) {
    if (value === undefined) delete env[name];
    else env[name] = value;
  }
  return env;
}

/** Spawns the CLI (not limited: for long-running commands such as `worker` and `dashboard`). */
export function spawnCli(args: readonly string[], options: CliOptions = {}): ChildProcess {
  return spawn(process.execPath, cliArgs(args, options.schema ?? true), {
    cwd: REPO_ROOT,
    env: cliEnv(options.url, options.env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

const MAX_RUNNING = Math.max(3, Math.min(8, availableParallelism() * 2));
let running = 0;
const waiting: (() => void)[] = [];

async function slot<T>(fn: () => Promise<T>): Promise<T> {
  if (running >= MAX_RUNNING) await new Promise<void>((resolve) => waiting.push(resolve));
  running++;
  try {
    return await fn();
  } finally {
    running--;
    waiting.shift()?.();
  }
}

/** Runs `skiplock <args>` to its end. */
export function runCli(args: readonly string[], options: CliOptions = {}): Promise<CliResult> {
  return slot(
    () =>
      new Promise<CliResult>((resolve, reject) => {
        const child = spawnCli(args, options);
        let stdout = '';
        let stderr = '';
        child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
          stdout += chunk;
        });
        child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
          stderr += chunk;
        });
        const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 30_000);
        child.once('error', reject);
        child.once('close', (code, signal) => {
          clearTimeout(timer);
          resolve({ code, signal, stdout, stderr });
        });
      }),
  );
}

/** What a run printed, for assertion messages. */
export function describeRun(result: CliResult): string {
  return `exit ${result.code}${result.signal ? ` (${result.signal})` : ''}\n--- stdout\n${result.stdout}--- stderr\n${result.stderr}`;
}

/** The parsed single JSON line of a successful `--json` run (exit 0, nothing on stderr). */
export function json<T = unknown>(result: CliResult): T {
  expect(result.code, describeRun(result)).toBe(0);
  expect(result.stderr, describeRun(result)).toBe('');
  expect(result.stdout, 'one JSON line on stdout').toMatch(/^[^\n]+\n$/);
  return JSON.parse(result.stdout) as T;
}

/** Exit 0, nothing on stderr; returns stdout. */
export function ok(result: CliResult): string {
  expect(result.code, describeRun(result)).toBe(0);
  expect(result.stderr, describeRun(result)).toBe('');
  return result.stdout;
}

/**
 * The error policy of SPEC §4: exit `code`, nothing on stdout, exactly one line on stderr that
 * starts with "skiplock: " and matches `message`, and no stack trace.
 */
export function oneLineError(result: CliResult, code: number, message: RegExp): void {
  expect(result.code, describeRun(result)).toBe(code);
  expect(result.stdout, describeRun(result)).toBe('');
  expect(result.stderr, describeRun(result)).toMatch(/^skiplock: [^\n]+\n$/);
  expect(result.stderr).not.toContain('    at ');
  expect(result.stderr).toMatch(message);
}

/** ANSI escape sequences (colour, cursor moves). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: looks for ANSI escapes.
export const ANSI = /\u001b\[/;
