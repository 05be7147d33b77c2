/**
 * The Python client (clients/python) for test/producers/*: a Python with psycopg 3 and pytest —
 * `$SKIPLOCK_PYTHON`, else the venv `.ci/run` makes (`.ci/venv/bin/python`; by hand:
 * `python3 -m venv .ci/venv && .ci/venv/bin/pip install ./clients/python 'psycopg[binary]' pytest`).
 * The client itself is imported from the working tree (`PYTHONPATH=clients/python/src`), never
 * from a copy installed earlier.
 *
 * `describeWithPython` skips its tests with a note when that Python is missing or lacks psycopg,
 * unless `SKIPLOCK_REQUIRE_PYTHON=1` (set by .ci/run): then they fail.
 */
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { REPO_ROOT } from './spawn.js';

/** The Python the tests run. */
export const PYTHON = process.env.SKIPLOCK_PYTHON || join(REPO_ROOT, '.ci', 'venv', 'bin', 'python');

/** The client's source folder (put first on PYTHONPATH). */
export const CLIENT_SRC = join(REPO_ROOT, 'clients', 'python', 'src');

/** The environment of a Python child: the working tree's client first. */
export function pythonEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const path = process.env.PYTHONPATH ? `${CLIENT_SRC}:${process.env.PYTHONPATH}` : CLIENT_SRC;
  return { ...process.env, PYTHONPATH: path, PYTHONDONTWRITEBYTECODE: '1', ...extra };
}

let missing: string | null | undefined;

/** Why the Python client cannot run here, or null when it can. */
export function pythonMissing(): string | null {
  if (missing !== undefined) return missing;
  if (!existsSync(PYTHON)) {
    missing = `no Python at ${PYTHON} (make the venv: python3 -m venv .ci/venv && .ci/venv/bin/pip install ./clients/python 'psycopg[binary]' pytest; or set SKIPLOCK_PYTHON)`;
    return missing;
  }
  const probe = spawnSync(PYTHON, ['-c', 'import psycopg, pytest, skiplock'], {
    env: pythonEnv(),
    encoding: 'utf8',
  });
  missing =
    probe.status === 0
      ? null
      : `${PYTHON} cannot import psycopg, pytest and skiplock (${(probe.stderr || probe.error?.message || '').trim().split('\n').at(-1)}): pip install ./clients/python 'psycopg[binary]' pytest`;
  return missing;
}

/**
 * `describe` for tests that need the Python client: skipped with a note when it is missing,
 * failed instead when `SKIPLOCK_REQUIRE_PYTHON=1`.
 */
export function describeWithPython(name: string, body: () => void): void {
  const why = pythonMissing();
  if (why === null) {
    describe(name, body);
  } else if (process.env.SKIPLOCK_REQUIRE_PYTHON === '1') {
    describe(name, () => {
      it('needs the Python client', () => {
        throw new Error(`${why}; SKIPLOCK_REQUIRE_PYTHON=1 makes that a failure`);
      });
    });
  } else {
    console.warn(`${name}: ${why}: skipped. SKIPLOCK_REQUIRE_PYTHON=1 turns this skip into a failure`);
    describe(name, () => {
      it.skip(`skipped: ${why}. SKIPLOCK_REQUIRE_PYTHON=1 turns this skip into a failure`, () => {});
    });
  }
}

/** A long-lived Python process answering one JSON request per line (a line protocol driver). */
export interface PythonDriver {
  request<T = unknown>(message: unknown): Promise<T>;
  close(): Promise<void>;
}

/** Starts `script` (a driver reading JSON lines on stdin, answering JSON lines on stdout). */
export function startPythonDriver(script: string): PythonDriver {
  const child: ChildProcessWithoutNullStreams = spawn(PYTHON, [script], {
    cwd: REPO_ROOT,
    env: pythonEnv(),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let buffer = '';
  let stderr = '';
  const waiting: { resolve(line: string): void; reject(error: Error): void }[] = [];
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      waiting.shift()?.resolve(line);
    }
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  let closed = false;
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  void exited.then(() => {
    closed = true;
    for (const w of waiting.splice(0)) w.reject(new Error(`the Python driver exited: ${stderr}`));
  });
  return {
    request<T>(message: unknown): Promise<T> {
      return new Promise<string>((resolve, reject) => {
        if (closed) return reject(new Error(`the Python driver exited: ${stderr}`));
        waiting.push({ resolve, reject });
        child.stdin.write(`${JSON.stringify(message)}\n`);
      }).then((line) => JSON.parse(line) as T);
    },
    async close() {
      child.stdin.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
