import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The repository root (tsx resolves from here). */
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Runs a TypeScript fixture in a child Node process (through tsx); resolves with its output. */
export function runFixture(
  file: string,
  env: Record<string, string>,
  timeoutMs = 60_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
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
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
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
