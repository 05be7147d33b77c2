/**
 * `skiplock dev` (SPEC §6) as a user runs it, in a child process with no DATABASE_URL: it starts
 * an embedded PostgreSQL in the given folder, serves the dashboard on the printed URL, runs demo
 * jobs to completion, prints a DATABASE_URL that works, and on Ctrl-C (SIGINT) exits 0 leaving no
 * server behind (no postgres process on the folder, no dashboard port). A second run on the same
 * folder reuses the data. After a SIGKILL (no chance to clean up) the PostgreSQL server outlives
 * it; the next run finds it, says so, stops it and starts its own.
 *
 * Deliberate breaks seen failing (each in a private copy of the repository):
 * - clearStalePid() returning `{ kind: 'none' }` at once: the run after the SIGKILL exited 1
 *   ("PostgreSQL exited with code 1 while starting": the orphan still held postmaster.pid);
 * - dev.ts: the signal handler not calling `wake()`: Ctrl-C printed "stopping" but the process
 *   never exited (killed by the test after 15 s);
 * - dev.ts: the database's stop left out of `stops`: the process printed "stopped" and hung on
 *   the server's child handle (killed after 15 s); with a `process.exit(0)` added after that
 *   line, it exited 0 and the test caught "postgres <pid> still running after skiplock dev exited".
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { isRunning } from '../../src/embedded/stale-server.js';
import { freePort } from '../support/ports.js';
import { jobsTable, TEST_SCHEMA } from '../support/schema.js';
import { REPO_ROOT } from '../support/spawn.js';

const folders: string[] = [];
const children = new Set<ChildProcessWithoutNullStreams>();

afterAll(async () => {
  // Whatever a failed test left: our dev processes, then servers still running on our folders.
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  const pids = await Promise.all(folders.map((dir) => postmasterPid(dataDirOf(dir)).catch(() => null)));
  for (const pid of pids) if (pid !== null && alive(pid)) process.kill(pid, 'SIGINT');
  for (const pid of pids) {
    if (pid !== null)
      await waitFor(() => !alive(pid), 15_000, `postgres ${pid} to stop`).catch(() => undefined);
  }
  for (const pid of pids) if (pid !== null && alive(pid)) process.kill(pid, 'SIGKILL');
  await Promise.all(folders.map((dir) => fs.rm(dir, { recursive: true, force: true })));
});

/** A new temporary folder; `skiplock dev` gets `<folder>/data` (and keeps its server in data/pgdata). */
async function tempFolder(): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'skiplock-dev-test-'));
  folders.push(dir);
  return dataDirOf(dir);
}

function dataDirOf(folder: string): string {
  return path.join(folder, 'data');
}

/** Running and not a zombie (an exited orphan waits for init to reap it). */
const alive = isRunning;

/** The postmaster's pid, from the first line of `<dataDir>/pgdata/postmaster.pid`. */
async function postmasterPid(dir: string): Promise<number> {
  const text = await fs.readFile(path.join(dir, 'pgdata', 'postmaster.pid'), 'utf8');
  const pid = Number.parseInt(text.split('\n')[0] ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`bad postmaster.pid: ${JSON.stringify(text)}`);
  return pid;
}

/** Processes whose command line names `dir` (Linux: /proc), i.e. a server left on that folder. */
async function processesOn(dir: string): Promise<string[]> {
  const found: string[] = [];
  const entries = await fs.readdir('/proc').catch(() => [] as string[]);
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const cmdline = await fs.readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const state = await fs.readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (cmdline.includes(dir) && !/^\d+ \(.*\) Z /.test(state))
      found.push(`${entry}: ${cmdline.replaceAll('\0', ' ')}`);
  }
  return found;
}

async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

interface DevRun {
  child: ChildProcessWithoutNullStreams;
  stdout: () => string;
  stderr: () => string;
  dashboard: string;
  databaseUrl: string;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function spawnDev(dataDir: string, port: number) {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
  delete env.DATABASE_URL;
  delete env.SKIPLOCK_ADMIN_TOKEN;
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'src/cli/main.ts',
      '--schema',
      TEST_SCHEMA,
      'dev',
      '--data-dir',
      dataDir,
      '--port',
      String(port),
      '--rate',
      '20',
    ],
    { cwd: REPO_ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  children.add(child);
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  // 'close', not 'exit': 'exit' may come before the last output has been read from the pipes,
  // and the tests read the output once the process has ended.
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('close', (code, signal) => resolve({ code, signal })),
  );
  return { child, stdout: () => out, stderr: () => err, exit };
}

/** Spawns `skiplock dev` and resolves once it has printed its dashboard URL and DATABASE_URL. */
async function startDev(dataDir: string): Promise<DevRun> {
  const port = await freePort();
  const { child, stdout, stderr, exit } = spawnDev(dataDir, port);
  const ready = new Promise<void>((resolve, reject) => {
    const check = () => {
      if (/^ {2}DATABASE_URL=\S+/m.test(stdout())) resolve();
    };
    child.stdout.on('data', check);
    void exit.then(({ code, signal }) =>
      reject(new Error(`skiplock dev exited early (${code ?? signal}):\n${stdout()}\n${stderr()}`)),
    );
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  try {
    await ready;
  } finally {
    clearTimeout(timer);
  }
  const dashboard = /^ {2}dashboard (http:\/\/\S+)$/m.exec(stdout())?.[1];
  const databaseUrl = /^ {2}DATABASE_URL=(\S+)/m.exec(stdout())?.[1];
  if (!dashboard || !databaseUrl) throw new Error(`no dashboard or DATABASE_URL line in:\n${stdout()}`);
  expect(dashboard).toBe(`http://127.0.0.1:${port}/`);
  return { child, stdout, stderr, dashboard, databaseUrl, exit };
}

async function ops(run: DevRun): Promise<{ pending: number; running: number; done: number; dead: number }> {
  const response = await fetch(new URL('/api/ops', run.dashboard));
  expect(response.status).toBe(200);
  return (await response.json()) as { pending: number; running: number; done: number; dead: number };
}

/**
 * Sends SIGINT (twice at once with `echo`: npm and tsx relay one Ctrl-C twice) and expects a
 * clean exit within 15 s, with no server left; returns how long it took.
 */
async function stopDev(run: DevRun, dataDir: string, echo = false): Promise<number> {
  const pid = await postmasterPid(dataDir);
  expect(alive(pid)).toBe(true);
  const started = Date.now();
  run.child.kill('SIGINT');
  if (echo) run.child.kill('SIGINT');
  const timer = setTimeout(() => run.child.kill('SIGKILL'), 15_000);
  const { code, signal } = await run.exit;
  clearTimeout(timer);
  expect({ code, signal }, `${run.stdout()}\n${run.stderr()}`).toEqual({ code: 0, signal: null });
  expect(Date.now() - started).toBeLessThan(15_000);
  expect(run.stdout()).toContain('skiplock dev: stopped; the database is shut down');
  expect(run.stderr()).not.toMatch(/while stopping|Error/);
  expect(alive(pid), `postgres ${pid} still running after skiplock dev exited`).toBe(false);
  expect(await processesOn(dataDir)).toEqual([]);
  await expect(fs.stat(path.join(dataDir, 'pgdata', 'postmaster.pid'))).rejects.toMatchObject({
    code: 'ENOENT',
  });
  await expect(fetch(new URL('/api/ops', run.dashboard))).rejects.toThrow();
  return Date.now() - started;
}

async function query<T>(url: string, text: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text)).rows as T[];
  } finally {
    await client.end();
  }
}

describe('skiplock dev', { timeout: 120_000 }, () => {
  test('starts, serves the dashboard, completes jobs, stops cleanly; a second run reuses the data', async () => {
    const dataDir = await tempFolder();

    const t0 = Date.now();
    const first = await startDev(dataDir);
    const startMs = Date.now() - t0;
    expect(first.stdout()).toMatch(/PostgreSQL 18\.[\d.]+ \(embedded\), data in .*, ready in \d+ ms/);
    expect(first.stdout()).toMatch(/worker {4}\S+: 9 demo tasks, ~20 jobs\/s/);
    expect(first.stdout()).not.toContain('left running by an earlier run');
    expect(first.databaseUrl).toMatch(/^postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres$/);

    // The dashboard page and the API answer; demo jobs complete.
    const page = await fetch(first.dashboard);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('data-testid="job-list"');
    await waitFor(async () => (await ops(first)).done > 5, 30_000, 'more than 5 done jobs');
    const doneJobs = (await (
      await fetch(new URL('/api/jobs?status=done&limit=5', first.dashboard))
    ).json()) as {
      jobs: { id: string; task: string; result: unknown }[];
    };
    expect(doneJobs.jobs.length).toBe(5);
    const kept = doneJobs.jobs[0] as { id: string; task: string };

    // The printed DATABASE_URL works from another process, on the schema that dev migrated.
    const [row] = await query<{ done: number }>(
      first.databaseUrl,
      `SELECT count(*)::int AS done FROM ${jobsTable(TEST_SCHEMA)} WHERE status = 'done'`,
    );
    expect(row?.done).toBeGreaterThan(5);

    const stopMs = await stopDev(first, dataDir);

    // Again on the same folder: no initdb, the earlier jobs are there.
    const t1 = Date.now();
    const second = await startDev(dataDir);
    const restartMs = Date.now() - t1;
    expect(second.stdout()).not.toContain('left running by an earlier run');
    const again = await fetch(new URL(`/api/jobs/${kept.id}`, second.dashboard));
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ id: kept.id, task: kept.task, status: 'done' });
    const stopAgainMs = await stopDev(second, dataDir, true);
    console.log(
      `skiplock dev: first start ${startMs} ms (with initdb), Ctrl-C to exit ${stopMs} ms; restart ${restartMs} ms, Ctrl-C to exit ${stopAgainMs} ms`,
    );
  });

  test('a Ctrl-C during start-up (initdb) still exits 0 and leaves no server', async () => {
    const dataDir = await tempFolder();
    const run = spawnDev(dataDir, await freePort());
    await waitFor(() => run.stdout().startsWith('skiplock dev\n'), 30_000, 'the first line');
    run.child.kill('SIGINT');
    const timer = setTimeout(() => run.child.kill('SIGKILL'), 30_000);
    const result = await run.exit;
    clearTimeout(timer);
    expect(result, `${run.stdout()}\n${run.stderr()}`).toEqual({ code: 0, signal: null });
    expect(run.stdout()).toContain('skiplock dev: stopped; the database is shut down');
    expect(run.stdout()).not.toContain('DATABASE_URL=');
    expect(await processesOn(dataDir)).toEqual([]);
    await expect(fs.stat(path.join(dataDir, 'pgdata', 'postmaster.pid'))).rejects.toMatchObject({
      code: 'ENOENT',
    });
  });

  test('after a SIGKILL the orphan PostgreSQL is found, stopped and replaced', async () => {
    const dataDir = await tempFolder();

    const first = await startDev(dataDir);
    await waitFor(async () => (await ops(first)).done > 0, 30_000, 'a done job');
    const doneBefore = (await ops(first)).done;
    const orphan = await postmasterPid(dataDir);
    first.child.kill('SIGKILL');
    expect(await first.exit).toEqual({ code: null, signal: 'SIGKILL' });
    // Nothing cleaned up: the server outlived its parent and still answers.
    expect(alive(orphan)).toBe(true);
    expect(await query(first.databaseUrl, 'SELECT 1 AS one')).toEqual([{ one: 1 }]);

    const t0 = Date.now();
    const second = await startDev(dataDir);
    const recoverMs = Date.now() - t0;
    expect(second.stdout()).toContain(`stopped a PostgreSQL left running by an earlier run (pid ${orphan})`);
    expect(alive(orphan)).toBe(false);
    expect(await postmasterPid(dataDir)).not.toBe(orphan);
    await waitFor(async () => (await ops(second)).done > doneBefore + 5, 30_000, 'new done jobs');
    const stopMs = await stopDev(second, dataDir);
    console.log(
      `skiplock dev: start after a SIGKILL (stopping the orphan) ${recoverMs} ms, Ctrl-C to exit ${stopMs} ms`,
    );
  });
});
