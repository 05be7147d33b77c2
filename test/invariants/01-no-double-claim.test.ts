/**
 * Guards SPEC §1.1 — No double claim: claiming is one statement (UPDATE … WHERE id IN (SELECT …
 * FOR UPDATE SKIP LOCKED LIMIT n) RETURNING …), and under any number of claimers, in one process
 * or many, a job is never running for two owners at once. Also SPEC §2's claim order
 * (priority ASC, run_after ASC, id ASC among pending jobs with run_after <= now()) and the
 * tasks/queues filters of claim().
 *
 * Every claim is written to a ledger table in the test schema; the ledger must hold each job
 * exactly once, every job must end `done` with attempts = 1, and every owner's complete() must win.
 *
 * Deliberate break seen failing (in a private copy of the tree, never here): removing both
 * `FOR UPDATE SKIP LOCKED` and the outer `AND status = 'pending'` re-check from the claim
 * statement in src/store/statements.ts. Both concurrent tests then fail: jobs appear in the
 * ledger two or more times under different workers, end with attempts > 1, and first owners'
 * complete() calls are lost. Removing only `SKIP LOCKED` (keeping FOR UPDATE) makes claimers
 * block on each other and deadlock, which fails the "no deadlock or serialization failure"
 * check; removing only the outer re-check is masked by FOR UPDATE (the intended defence in
 * depth). Breaking the claim's ORDER BY or its `run_after <= now()` fails the ordering test.
 */
import { afterEach, beforeAll, beforeEach, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import type { Queue } from '../../src/queue.js';
import type { ClaimedJob } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import {
  allSettledOrThrow,
  type ClaimLoopReport,
  claimUntilEmpty,
  prng,
  sumReports,
} from './fixtures/claim-loop.js';
import { killAllFixtures, spawnFixture } from './fixtures/spawn.js';

const db = useTestDatabase();
const LEDGER = `${quoteIdent(TEST_SCHEMA)}.claim_ledger`;

beforeAll(async () => {
  await db.sql(`CREATE TABLE ${LEDGER} (job_id bigint NOT NULL, worker text NOT NULL, attempt int NOT NULL)`);
});

beforeEach(async () => {
  await db.sql(`TRUNCATE ${db.jobs}, ${LEDGER}`);
});

afterEach(killAllFixtures);

const byId = (a: string, b: string) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0);
const ids = (jobs: readonly { id: string }[]) => jobs.map((job) => job.id);

async function enqueueLedgerJobs(queue: Queue, count: number): Promise<string[]> {
  const results = await queue.enqueueMany(
    Array.from({ length: count }, (_, i) => ({ task: 'ledger', payload: { i }, priority: i % 5 })),
  );
  expect(results.every((r) => r.created)).toBe(true);
  return results.map((r) => r.id);
}

async function recordClaims(workerId: string, jobs: readonly ClaimedJob[]): Promise<void> {
  await db.sql(
    `INSERT INTO ${LEDGER} (job_id, worker, attempt) SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[])`,
    [ids(jobs), jobs.map(() => workerId), jobs.map((job) => job.attempt)],
  );
}

/** The exactly-once properties, from the ledger and the jobs table. */
async function expectEachClaimedExactlyOnce(
  expectedIds: readonly string[],
  report: ClaimLoopReport,
  expectedClaims: number,
): Promise<void> {
  const duplicates = await db.sql(
    `SELECT job_id::text AS id, count(*)::int AS claims, array_agg(worker ORDER BY worker) AS workers
     FROM ${LEDGER} GROUP BY job_id HAVING count(*) > 1 ORDER BY job_id LIMIT 5`,
  );
  expect(duplicates, 'jobs claimed more than once').toEqual([]);
  const [ledger] = await db.sql<{ claims: number; jobs: number }>(
    `SELECT count(*)::int AS claims, count(DISTINCT job_id)::int AS jobs FROM ${LEDGER}`,
  );
  expect(ledger).toEqual({ claims: expectedIds.length, jobs: expectedIds.length });
  const [attempts] = await db.sql<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${LEDGER} WHERE attempt <> 1`,
  );
  expect(attempts?.n, 'claims whose lease was not the first attempt').toBe(0);
  const [missing] = await db.sql<{ n: number }>(
    `SELECT count(*)::int AS n FROM unnest($1::bigint[]) AS e(id)
     WHERE NOT EXISTS (SELECT 1 FROM ${LEDGER} l WHERE l.job_id = e.id)`,
    [expectedIds],
  );
  expect(missing?.n, 'enqueued jobs never claimed').toBe(0);
  const states = await db.sql(
    `SELECT status, attempts, count(*)::int AS n FROM ${db.jobs} GROUP BY status, attempts ORDER BY status, attempts`,
  );
  expect(states).toEqual([{ status: 'done', attempts: 1, n: expectedIds.length }]);
  expect(report.notMine, 'claimed jobs not running for their claimer').toBe(0);
  expect(report.lostCompletes, "owners' complete() calls that lost").toBe(0);
  expect(report.claimed).toBe(expectedClaims);
  expect(report.transientErrors, 'claims that failed with a deadlock or serialization failure').toBe(0);
}

test('12 claimers, each on its own pool, claim each of 3,000 jobs exactly once', async () => {
  const seeder = db.queue({ poolSize: 2 });
  const jobIds = await enqueueLedgerJobs(seeder, 3_000);
  const claimers = Array.from({ length: 12 }, () => db.queue({ poolSize: 2 }));
  await Promise.all(claimers.map((queue) => queue.counts())); // connected before the race starts

  const reports = await allSettledOrThrow(
    claimers.map((queue, w) =>
      claimUntilEmpty(queue, `w${w}`, prng(0x5eed + w), (jobs) => recordClaims(`w${w}`, jobs)),
    ),
  );

  expect(reports.filter((r) => r.claimed > 0).length, 'claimers that got work').toBeGreaterThan(1);
  await expectEachClaimedExactlyOnce(jobIds, sumReports(reports), 3_000);
});

test('3 worker processes claim each of 1,500 jobs exactly once', async () => {
  const seeder = db.queue({ poolSize: 2 });
  const jobIds = await enqueueLedgerJobs(seeder, 1_500);
  const children = Array.from({ length: 3 }, (_, i) =>
    spawnFixture('test/invariants/fixtures/claimer.ts', {
      DATABASE_URL: db.url,
      SKIPLOCK_TEST_SCHEMA: TEST_SCHEMA,
      WORKER_ID: `proc-${i}`,
      CLAIM_LOOPS: '3',
      SEED: String(0xc0ffee + i),
    }),
  );
  for (const child of children) expect(await child.nextLine()).toBe('ready');
  for (const child of children) child.send('go'); // all start together
  const reports = await Promise.all(
    children.map(async (child) => JSON.parse(await child.nextLine()) as ClaimLoopReport),
  );
  const exits = await Promise.all(children.map((child) => child.exited));
  expect(exits, children.map((c) => c.stderr()).join('\n')).toEqual(
    children.map(() => ({ code: 0, signal: null })),
  );

  const workers = await db.sql<{ worker: string }>(`SELECT DISTINCT worker FROM ${LEDGER}`);
  expect(workers.length, 'processes that got work').toBeGreaterThan(1);
  await expectEachClaimedExactlyOnce(jobIds, sumReports(reports), 1_500);
});

test('claim order is priority, then run_after, then id; a job due in the future is not claimed', async () => {
  const queue = db.queue({ poolSize: 2 });
  const [clock] = await db.sql<{ now: Date }>('SELECT now() AS now');
  const at = (seconds: number) => new Date(clock!.now.getTime() + seconds * 1000);
  // Inserted in an order unrelated to the claim order; ties on (priority, run_after) fall to id.
  const specs = [
    { key: 'p5-old10-a', priority: 5, runAt: at(-10) },
    { key: 'p1-old1', priority: 1, runAt: at(-1) },
    { key: 'p5-old20', priority: 5, runAt: at(-20) },
    { key: 'p1-old5-a', priority: 1, runAt: at(-5) },
    { key: 'p5-old10-b', priority: 5, runAt: at(-10) },
    { key: 'future', priority: -100, runAt: at(3_600) },
    { key: 'p3-old30', priority: 3, runAt: at(-30) },
    { key: 'p1-old5-b', priority: 1, runAt: at(-5) },
    { key: 'neg-old1', priority: -2, runAt: at(-1) },
  ];
  const enqueued = await queue.enqueueMany(
    specs.map((s) => ({ task: 'order', payload: s.key, priority: s.priority, runAt: s.runAt })),
  );
  const jobs = specs.map((s, i) => ({ ...s, id: enqueued[i]!.id }));
  const expected = jobs
    .filter((j) => j.key !== 'future')
    .sort((a, b) => a.priority - b.priority || a.runAt.getTime() - b.runAt.getTime() || byId(a.id, b.id))
    .map((j) => j.key);
  expect(expected).toEqual([
    'neg-old1',
    'p1-old5-a',
    'p1-old5-b',
    'p1-old1',
    'p3-old30',
    'p5-old20',
    'p5-old10-a',
    'p5-old10-b',
  ]);
  const keyOf = new Map(jobs.map((j) => [j.id, j.key]));

  // One at a time: the statement's own ORDER BY decides each pick.
  const picked: string[] = [];
  for (let i = 0; i < 5; i++) {
    const claimed = await queue.claim('one-by-one', { limit: 1 });
    expect(claimed).toHaveLength(1);
    picked.push(keyOf.get(claimed[0]!.id)!);
  }
  expect(picked).toEqual(expected.slice(0, 5));
  // A batch takes the next jobs in order and returns them in claim order.
  const batch = await queue.claim('batch', { limit: 100 });
  expect(batch.map((job) => keyOf.get(job.id))).toEqual(expected.slice(5));
  // The future job, although it has the best priority, is never due.
  expect(await queue.claim('late', { limit: 100 })).toEqual([]);
  const future = jobs.find((j) => j.key === 'future')!;
  expect(await queue.get(future.id)).toMatchObject({ status: 'pending', attempts: 0 });
  // Due in database time: once its run_after has passed, it is claimed.
  await db.sql(`UPDATE ${db.jobs} SET run_after = now() - interval '1 millisecond' WHERE id = $1`, [
    future.id,
  ]);
  expect(ids(await queue.claim('late', { limit: 100 }))).toEqual([future.id]);
});

test('claim takes only the given tasks and queues', async () => {
  const queue = db.queue({ poolSize: 2 });
  const combos = [
    { task: 'a', queue: 'q1' },
    { task: 'a', queue: 'q2' },
    { task: 'b', queue: 'q1' },
    { task: 'b', queue: 'q2' },
  ];
  const specs = combos.flatMap((c) => [
    { ...c, payload: 1 },
    { ...c, payload: 2 },
    { ...c, payload: 'future', delayMs: 3_600_000 },
  ]);
  const enqueued = await queue.enqueueMany(specs);
  const idsWhere = (pick: (s: (typeof specs)[number]) => boolean) =>
    specs
      .map((s, i) => ({ s, id: enqueued[i]!.id }))
      .filter(({ s }) => s.payload !== 'future' && pick(s))
      .map(({ id }) => id)
      .sort(byId);
  const claimSorted = async (options: { tasks?: string[]; queues?: string[] }) =>
    ids(await queue.claim('filtered', { limit: 100, ...options })).sort(byId);

  expect(await claimSorted({ tasks: ['nope'] })).toEqual([]);
  expect(await claimSorted({ queues: ['nope'] })).toEqual([]);
  expect(await claimSorted({ tasks: ['a'], queues: ['q2'] })).toEqual(
    idsWhere((s) => s.task === 'a' && s.queue === 'q2'),
  );
  expect(await claimSorted({ queues: ['q1'] })).toEqual(idsWhere((s) => s.queue === 'q1'));
  expect(await claimSorted({ tasks: ['b', 'zzz'] })).toEqual(
    idsWhere((s) => s.task === 'b' && s.queue === 'q2'),
  );
  expect(await claimSorted({})).toEqual([]);
  const left = await db.sql(
    `SELECT status, payload, count(*)::int AS n FROM ${db.jobs} GROUP BY status, payload ORDER BY status, payload::text`,
  );
  expect(left).toEqual([
    { status: 'pending', payload: 'future', n: 4 },
    { status: 'running', payload: 1, n: 4 },
    { status: 'running', payload: 2, n: 4 },
  ]);
});
