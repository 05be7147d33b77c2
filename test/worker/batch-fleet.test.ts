/**
 * SPEC §11 batch handlers across processes, through the real CLI: 4 `skiplock worker`
 * processes (concurrency 100; BATCH_FLEET_CONCURRENCY=250 makes each claim take two batches'
 * worth, split in the worker) drain 10,000 jobs — two batch tasks of maxSize 100
 * (test/worker/fixtures/batch-tasks.ts) and a single-job task beside them. Each batch records
 * itself in a ledger table from its handler. Every job must end `done` with attempts 1 and its
 * own result, completed exactly once (a trigger counts the updates that leave a row `done`);
 * every batch job ran in exactly one batch; no batch is over 100 jobs; every batch holds jobs of
 * one task only; batches are real (far fewer than one per job); more than one process got work.
 * The workers then stop on SIGTERM with exit code 0.
 *
 * Deliberate breaks seen failing (each made in src/, this file run, the break undone):
 *  1. The batch claim loop claiming every task of the worker (`[...settings.tasks.keys()]`
 *     instead of `[task]` in Worker.batchLoop): the test failed (batches mixed tasks).
 *  2. Worker.batchLoop's accept starting one batch with the whole claim instead of splitting it
 *     by maxSize, run with BATCH_FLEET_CONCURRENCY=250 (claims of 200): the test failed (batches
 *     over 100).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { killChildren, REPO_ROOT } from '../support/spawn.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);
const LEDGER = `${S}.batch_ledger`;
const COMPLETIONS = `${S}.batch_completions`;
const FIXTURE = 'test/worker/fixtures/batch-tasks.ts';
const WORKERS = 4;
const CONCURRENCY = Number(process.env.BATCH_FLEET_CONCURRENCY ?? 100);
const TOTAL = 10_000;
const MAX_SIZE = 100;

const children: ChildProcess[] = [];

function startCliWorker(): {
  child: ChildProcess;
  started: Promise<void>;
  exited: Promise<number | null>;
  stderr: () => string;
} {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'src/cli/main.ts',
      'worker',
      '--tasks',
      FIXTURE,
      '--schema',
      TEST_SCHEMA,
      '--concurrency',
      String(CONCURRENCY),
    ],
    {
      cwd: REPO_ROOT,
      env: { ...process.env, DATABASE_URL: db.url, SKIPLOCK_TEST_SCHEMA: TEST_SCHEMA },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  children.push(child);
  let out = '';
  let err = '';
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  const started = new Promise<void>((resolve, reject) => {
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (chunk: string) => {
      out += chunk;
      if (/^skiplock worker \S+ started: /m.test(out)) resolve();
    });
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      err += chunk;
    });
    void exited.then((code) =>
      reject(new Error(`worker exited (code ${code}) before starting; stderr:\n${err}`)),
    );
  });
  started.catch(() => undefined);
  return { child, started, exited, stderr: () => err };
}

beforeAll(async () => {
  await db.sql(`CREATE TABLE ${LEDGER} (
    batch_id uuid NOT NULL, job_id bigint NOT NULL, task text NOT NULL, size int NOT NULL, pid int NOT NULL)`);
  await db.sql(`CREATE TABLE ${COMPLETIONS} (job_id bigint NOT NULL)`);
  await db.sql(`CREATE FUNCTION ${S}.batch_count_completion() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      INSERT INTO ${COMPLETIONS} (job_id) VALUES (NEW.id);
      RETURN NULL;
    END $fn$`);
  await db.sql(`CREATE TRIGGER batch_count_completion AFTER UPDATE ON ${db.jobs}
    FOR EACH ROW WHEN (NEW.status = 'done' AND OLD.status <> 'done') EXECUTE FUNCTION ${S}.batch_count_completion()`);
});

afterAll(async () => {
  await killChildren(children);
});

async function one<T>(sql: string, values: unknown[] = []): Promise<T> {
  const [row] = await db.sql<{ v: T }>(sql, values);
  return row?.v as T;
}

test('4 CLI workers drain 10,000 jobs in batches of ≤ 100, one task per batch, each job done exactly once', async () => {
  const workers = Array.from({ length: WORKERS }, startCliWorker);
  await Promise.all(workers.map((w) => w.started));

  // 6,000 fleet.a, 3,000 fleet.b, 1,000 fleet.single, interleaved
  const tasks = [
    'fleet.a',
    'fleet.b',
    'fleet.a',
    'fleet.single',
    'fleet.a',
    'fleet.b',
    'fleet.a',
    'fleet.b',
    'fleet.a',
    'fleet.a',
  ];
  const queue = db.queue({ poolSize: 2 });
  const enqueued = await queue.enqueueMany(
    Array.from({ length: TOTAL }, (_, i) => ({ task: tasks[i % tasks.length] as string, payload: { i } })),
  );
  expect(enqueued.every((e) => e.created)).toBe(true);

  const deadline = Date.now() + 60_000;
  while ((await one<number>(`SELECT count(*)::int AS v FROM ${db.jobs} WHERE status = 'done'`)) < TOTAL) {
    if (Date.now() > deadline)
      throw new Error(`not all done within 60 s; stderr:\n${workers.map((w) => w.stderr()).join('\n')}`);
    await sleep(100);
  }
  for (const worker of workers) worker.child.kill('SIGTERM');
  expect(await Promise.all(workers.map((w) => w.exited))).toEqual(workers.map(() => 0));

  // every job done once, attempts 1, its own result
  const states = await db.sql(
    `SELECT status, attempts, count(*)::int AS n, bool_and(result = payload -> 'i') AS own_result
     FROM ${db.jobs} GROUP BY status, attempts`,
  );
  expect(states).toEqual([{ status: 'done', attempts: 1, n: TOTAL, own_result: true }]);
  expect(await one<number>(`SELECT count(*)::int AS v FROM ${COMPLETIONS}`)).toBe(TOTAL);
  expect(await one<number>(`SELECT count(DISTINCT job_id)::int AS v FROM ${COMPLETIONS}`)).toBe(TOTAL);

  // every batch job in exactly one batch
  const batchJobs = await one<number>(
    `SELECT count(*)::int AS v FROM ${db.jobs} WHERE task <> 'fleet.single'`,
  );
  expect(batchJobs).toBe(9_000);
  expect(await one<number>(`SELECT count(*)::int AS v FROM ${LEDGER}`)).toBe(batchJobs);
  expect(await one<number>(`SELECT count(DISTINCT job_id)::int AS v FROM ${LEDGER}`)).toBe(batchJobs);
  expect(
    await one<number>(
      `SELECT count(*)::int AS v FROM ${db.jobs} j WHERE task <> 'fleet.single'
       AND NOT EXISTS (SELECT 1 FROM ${LEDGER} l WHERE l.job_id = j.id)`,
    ),
  ).toBe(0);

  // no batch over 100; one task per batch; sizes as recorded
  const batches = await db.sql<{ size: number; tasks: number; rows: number }>(
    `SELECT max(size)::int AS size, count(DISTINCT task)::int AS tasks, count(*)::int AS rows
     FROM ${LEDGER} GROUP BY batch_id`,
  );
  expect(Math.max(...batches.map((b) => b.size))).toBeLessThanOrEqual(MAX_SIZE);
  expect(
    batches.filter((b) => b.tasks !== 1),
    'batches of more than one task',
  ).toEqual([]);
  expect(
    batches.filter((b) => b.rows !== b.size),
    'batches whose size is not their row count',
  ).toEqual([]);
  expect(batches.length, 'batches, not one call per job').toBeLessThan(batchJobs / 10);
  expect(await one<number>(`SELECT count(DISTINCT pid)::int AS v FROM ${LEDGER}`)).toBeGreaterThan(1);
  // the ledger's tasks are the jobs' own
  expect(
    await one<number>(
      `SELECT count(*)::int AS v FROM ${LEDGER} l JOIN ${db.jobs} j ON j.id = l.job_id WHERE j.task <> l.task`,
    ),
  ).toBe(0);
}, 120_000);
