/**
 * SPEC §13 — the Python client's own pytest suite (clients/python/tests), run against this
 * file's database on the suite's server: the embedded PostgreSQL 18 when DATABASE_URL is unset,
 * the machine's server otherwise (CI runs both, the second under an awkward schema name). So
 * `npm test` runs the Python tests wherever it runs, and `.ci/run` makes them required
 * (SKIPLOCK_REQUIRE_PYTHON=1: a missing venv fails instead of skipping; test/support/python.ts).
 *
 * The deliberate breaks that made pytest fail are listed in clients/python/tests/test_enqueue.py.
 * Here: test_defaults expecting priority 99 failed this test with pytest's report; with
 * SKIPLOCK_PYTHON=/nonexistent it skipped with the note, and failed with SKIPLOCK_REQUIRE_PYTHON=1.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';
import { describeWithPython, PYTHON, pythonEnv } from '../support/python.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { REPO_ROOT } from '../support/spawn.js';

const db = useTestDatabase();

function pytest(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-rs', 'tests'], {
      cwd: join(REPO_ROOT, 'clients', 'python'),
      env: pythonEnv({ SKIPLOCK_TEST_DATABASE_URL: db.url, SKIPLOCK_TEST_SCHEMA: TEST_SCHEMA }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

describeWithPython('the Python client (pytest, clients/python/tests)', () => {
  test('passes against this server', async () => {
    const { code, output } = await pytest();
    expect(code, output).toBe(0);
    const passed = Number(/(\d+) passed/.exec(output)?.[1] ?? 0);
    expect(passed, output).toBeGreaterThanOrEqual(40); // it ran them all, not an empty collection
    // skipped only when SQLAlchemy or Django is not installed (their examples); listed by -rs
    expect(output.replace(/SKIPPED.*(sqlalchemy|django).*\n?/gi, ''), output).not.toMatch(/SKIPPED/);
  }, 120_000);
});
