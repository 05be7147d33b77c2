/**
 * SPEC §12 exactly-once of transactional steps and replay of completed ones, under processes
 * killed at random points: 200 jobs of a five-step handler (test/steps/fixtures/step-worker.ts)
 * run across 4 worker processes, and the test SIGKILLs a random one every 0.8–1.5 s while at
 * least three are up (a replacement starts in the background), at most 12 times, until every job
 * is done (STEPS_CRASH_KILLS=200: the issue's 200 kills, below). Then:
 * - every job is done, and its result is the five values stored as its steps (the values of its
 *   first successful steps: a later run got them back instead of running fn);
 * - each transactional step (s1, s3, s5) left exactly one ledger row, the one whose tag is its
 *   stored value — its writes happened exactly once however often the job was cut;
 * - for each plain step (s2, s4), whose fn may run again when the process died between fn and
 *   the commit of its checkpoint (at-least-once), the stored value is the tag of the *last* run
 *   of that fn: once a checkpoint committed, the fn never ran again.
 *
 * Deliberate break tried (then restored), with an inconclusive result: the transactional step
 * committing its transaction first and writing its checkpoint afterwards (30 ms later, on the
 * pool) made the test fail, but on its completion count (175 of 200 done within the deadline on a
 * machine at load 20–30), not on the ledger check it targets. The ledger check itself is proven
 * only by its passing runs (12 kills, 111 jobs cut and run again, none with two ledger rows).
 */
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { killChildren, startReadyFixture } from '../support/spawn.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);
/**
 * The issue's size is 200 SIGKILLs: STEPS_CRASH_KILLS=200 runs it (more jobs, so that the kills
 * keep meeting running ones: 8 per kill; kills every 0.3–0.6 s; several minutes, so not in the
 * suite). The suite's run: at most 12 kills over 200 jobs.
 */
const KILLS = Number(process.env.STEPS_CRASH_KILLS ?? 12);
const FULL = KILLS > 12;
const JOBS = FULL ? KILLS * 8 : 200;
const PAUSE: [number, number] = FULL ? [300, 300] : [800, 700];
const DEADLINE_MS = FULL ? 60_000 + KILLS * 1_500 : 45_000;
const WORKERS = 4;
const FIXTURE = 'test/steps/fixtures/step-worker.ts';
const children: ChildProcess[] = [];

afterAll(() => killChildren(children));

async function startWorker(): Promise<ChildProcess> {
  const child = await startReadyFixture(FIXTURE, {
    SKIPLOCK_FIXTURE_URL: db.url,
    SKIPLOCK_FIXTURE_SCHEMA: TEST_SCHEMA,
  });
  children.push(child);
  return child;
}

test(
  `${JOBS} five-step jobs across 4 processes SIGKILLed at random (${FULL ? KILLS : 'up to 12'} times): every job done with its first values, transactional steps exactly once`,
  async () => {
    await db.sql('CREATE TABLE public.step_ledger (job_id bigint, step text, tag text)');
    await db.sql('CREATE TABLE public.step_runs (seq bigserial, job_id bigint, step text, tag text)');
    const queue = db.queue();
    const live = await Promise.all(Array.from({ length: WORKERS }, () => startWorker()));
    const { id: first } = (
      await queue.enqueueMany(
        Array.from({ length: JOBS }, (_, i) => ({ task: 'steps.crash', payload: { i }, maxAttempts: 50 })),
      )
    )[0]!;
    const done = async () =>
      (await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE status = 'done'`))[0]
        ?.n ?? 0;
    let kills = 0;
    // a replacement starts in the background (a process start is slow on a loaded machine), so the
    // kills keep coming while it does; at least two started workers are left after each kill
    const starting: Promise<void>[] = [];
    const deadline = Date.now() + DEADLINE_MS;
    while ((await done()) < JOBS && Date.now() < deadline) {
      await sleep(PAUSE[0] + Math.floor(Math.random() * PAUSE[1]));
      if (kills >= KILLS || live.length < 3) continue;
      const [victim] = live.splice(Math.floor(Math.random() * live.length), 1);
      victim?.kill('SIGKILL');
      kills++;
      starting.push(startWorker().then((child) => void live.push(child)));
    }
    if ((await done()) < JOBS)
      process.stdout.write(
        `steps crash test: not done: ${JSON.stringify(await db.sql(`SELECT status, attempts, left(last_error, 120) AS e, count(*)::int AS n FROM ${db.jobs} GROUP BY 1, 2, 3 ORDER BY n DESC LIMIT 8`))}\n`,
      );
    expect(await done()).toBe(JOBS);
    expect(kills).toBeGreaterThan(FULL ? KILLS - 1 : 3);
    await Promise.allSettled(starting);
    for (const child of live) child.kill('SIGTERM');

    const jobs = await db.sql<{ id: string; result: string[]; attempts: number }>(
      `SELECT id::text AS id, result, attempts FROM ${db.jobs} WHERE id >= $1 ORDER BY id`,
      [first],
    );
    const steps = await db.sql<{ job_id: string; name: string; value: string }>(
      `SELECT job_id::text AS job_id, name, value #>> '{}' AS value FROM ${S}.job_steps ORDER BY job_id, name`,
    );
    const ledger = await db.sql<{ job_id: string; step: string; tag: string }>(
      'SELECT job_id::text AS job_id, step, tag FROM public.step_ledger',
    );
    const runs = await db.sql<{ job_id: string; step: string; tag: string }>(
      'SELECT job_id::text AS job_id, step, tag FROM public.step_runs ORDER BY seq',
    );
    const stored = new Map<string, string>();
    for (const s of steps) stored.set(`${s.job_id}/${s.name}`, s.value);
    const ledgerBy = new Map<string, string[]>();
    for (const row of ledger)
      ledgerBy.set(`${row.job_id}/${row.step}`, [
        ...(ledgerBy.get(`${row.job_id}/${row.step}`) ?? []),
        row.tag,
      ]);
    const lastRun = new Map<string, string>();
    for (const row of runs) lastRun.set(`${row.job_id}/${row.step}`, row.tag);

    const problems: string[] = [];
    let cut = 0;
    for (const job of jobs) {
      if (job.attempts > 1) cut++;
      const values = ['s1', 's2', 's3', 's4', 's5'].map((name) => stored.get(`${job.id}/${name}`));
      if (JSON.stringify(job.result) !== JSON.stringify(values))
        problems.push(
          `job ${job.id}: result ${JSON.stringify(job.result)} is not its stored steps ${JSON.stringify(values)}`,
        );
      for (const name of ['s1', 's3', 's5']) {
        const rows = ledgerBy.get(`${job.id}/${name}`) ?? [];
        if (rows.length !== 1 || rows[0] !== stored.get(`${job.id}/${name}`))
          problems.push(
            `job ${job.id} ${name}: ledger ${JSON.stringify(rows)}, stored ${stored.get(`${job.id}/${name}`)}`,
          );
      }
      for (const name of ['s2', 's4']) {
        if (lastRun.get(`${job.id}/${name}`) !== stored.get(`${job.id}/${name}`))
          problems.push(
            `job ${job.id} ${name}: fn ran after its checkpoint committed (last run ${lastRun.get(`${job.id}/${name}`)}, stored ${stored.get(`${job.id}/${name}`)})`,
          );
      }
    }
    expect(problems).toEqual([]);
    // the kills did cut jobs mid-way (else this test proves nothing)
    expect(cut).toBeGreaterThan(0);
    process.stdout.write(
      `steps crash test: ${kills} kills, ${cut} jobs ran more than once, ${runs.length} plain-step fn runs for ${2 * JOBS} steps\n`,
    );
  },
  DEADLINE_MS + 45_000,
);
