import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The repository root (tsx resolves from here). */
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** A fixture running in a child Node process, its output gathered as it comes. */
export interface RunningFixture {
  readonly child: import('node:child_process').ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code (null when killed by a signal). */
  readonly exited: Promise<number | null>;
}

/** Starts a TypeScript fixture in a child Node process (through tsx). */
export function startFixture(file: string, env: Record<string, string>): RunningFixture {
  const child = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: REPO_ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  return { child, stdout: () => stdout, stderr: () => stderr, exited };
}

/**
 * Starts a fixture that prints `ready` once it is up (a worker process); resolves with its child
 * process then, or throws with its stderr if it exits or takes longer than `timeoutMs`.
 */
export async function startReadyFixture(
  file: string,
  env: Record<string, string>,
  timeoutMs = 30_000,
): Promise<import('node:child_process').ChildProcess> {
  const fixture = startFixture(file, env);
  const deadline = Date.now() + timeoutMs;
  while (!fixture.stdout().includes('ready')) {
    if (fixture.child.exitCode !== null || Date.now() > deadline) {
      fixture.child.kill('SIGKILL');
      throw new Error(`${file} did not start: ${fixture.stderr()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return fixture.child;
}

/** Runs a TypeScript fixture in a child Node process (through tsx); resolves with its output. */
export async function runFixture(
  file: string,
  env: Record<string, string>,
  timeoutMs = 60_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const fixture = startFixture(file, env);
  const error = new Promise<never>((_, reject) => fixture.child.once('error', reject));
  const timer = setTimeout(() => fixture.child.kill('SIGKILL'), timeoutMs);
  try {
    const code = await Promise.race([fixture.exited, error]);
    return { code, stdout: fixture.stdout(), stderr: fixture.stderr() };
  } finally {
    clearTimeout(timer);
  }
}

/** SIGKILLs the child processes still running and resolves once every one has exited. */
export async function killChildren(
  children: readonly import('node:child_process').ChildProcess[],
): Promise<void> {
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGKILL');
        }),
    ),
  );
}
