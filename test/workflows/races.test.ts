/**
 * SPEC §10 under concurrency: a job becomes pending exactly once when its last dependency is
 * done, even when its dependencies finish at the same instant in different workers; batches of
 * completions whose jobs share dependents do not deadlock.
 *
 * Deliberate breaks seen failing: the trigger deciding "all done?" with NOT EXISTS over the
 * dependencies instead of the locked counter (500 parents: the child never became pending —
 * each finishing transaction saw the others' parents still running); the trigger without its
 * lock of the dependents (one per statement: the child stayed waiting, its counter at 1 — a
 * decrement was lost); completeMany without its LOCK_DEPENDENTS CTE (the shared-dependents test).
 */
import { describe, expect, test } from 'vitest';
import type { Queue } from '../../src/queue.js';
import type { Worker } from '../../src/worker/worker.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

/** Starts `n` workers on `queue` running `tasks`; returns them and the errors they report. */
async function workers(n: number, tasks: Record<string, () => Promise<unknown>>, batchCompletions = true) {
  const errors: string[] = [];
  const started: Worker[] = [];
  const queues: Queue[] = [];
  for (let i = 0; i < n; i++) {
    // no jobs held ahead of free slots: 8 × 64 slots run all the parents at once; each worker
    // with a queue (pool, completer) of its own, as in 8 processes (5 connections each: the
    // suite's other files share the server)
    const queue = db.queue({ poolSize: 5 });
    queues.push(queue);
    const worker = db.worker({
      queue,
      tasks,
      concurrency: 64,
      prefetch: 0,
      pollIntervalMs: 200,
      batchCompletions,
    });
    worker.on('error', ({ error, during }) => errors.push(`${during}: ${error.message}`));
    started.push(worker);
  }
  await Promise.all(started.map((w) => w.start()));
  const stop = async () => {
    await Promise.all(started.map((w) => w.stop()));
    await Promise.all(queues.map((q) => q.close()));
  };
  return { list: started, errors, stop };
}

async function until(check: () => Promise<boolean>, timeoutMs: number, what: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('exactly-once unblocking', () => {
  // batched: many parents per completing statement (which locks their dependents first);
  // unbatched: one parent per transaction (its trigger locks the child)
  test.each([
    ['batched', true],
    ['one per statement', false],
  ])(
    '500 parents completed at the same instant by 8 workers (%s): the child becomes pending once and runs once',
    async (_, batched) => {
      const queue = db.queue();
      const parents = Array.from({ length: 500 }, (_, i) => ({
        ref: `p${i}`,
        task: 'race.parent',
        payload: i,
      }));
      const { jobs } = await queue.enqueueFlow([
        ...parents,
        { ref: 'child', task: 'race.child', dependsOn: parents.map((p) => p.ref) },
      ]);
      const child = jobs.child as string;
      // every parent's handler waits until all 500 have started: they then finish together
      let startedParents = 0;
      let release!: () => void;
      const allStarted = new Promise<void>((resolve) => {
        release = resolve;
      });
      let childRuns = 0;
      const pool = await workers(
        8,
        {
          'race.parent': async () => {
            if (++startedParents === 500) release();
            await allStarted;
            return 'ok';
          },
          'race.child': async () => {
            childRuns++;
            return 'merged';
          },
        },
        batched,
      );
      try {
        await until(
          async () => (await queue.get(child))?.status === 'done',
          60_000,
          () =>
            `the child to be done (${startedParents} parents started; errors: ${pool.errors.slice(0, 3)})`,
        );
        // a second unblocking would show as a second run or a second claim
        await new Promise((resolve) => setTimeout(resolve, 300));
      } finally {
        release();
        await pool.stop();
      }
      expect(startedParents).toBe(500);
      expect(pool.errors).toEqual([]);
      expect(childRuns).toBe(1);
      const [row] = await db.sql<{ deps_left: number; attempts: number; status: string }>(
        `SELECT deps_left, attempts, status FROM ${db.jobs} WHERE id = $1`,
        [child],
      );
      expect(row).toEqual({ deps_left: 0, attempts: 1, status: 'done' });
      const parentRows = await db.sql<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${db.jobs} WHERE flow_ref LIKE 'p%' AND status = 'done' AND id = ANY($1::bigint[])`,
        [parents.map((p) => jobs[p.ref])],
      );
      expect(parentRows[0]?.n).toBe(500);
    },
    90_000,
  );

  test('batches of completions whose jobs share dependents in different orders do not deadlock', async () => {
    const queue = db.queue();
    // 400 parents; 20 fan-in jobs, each over a pseudo-random 30 % of them: a batch's triggers
    // lock shared dependents in different orders unless the batch locks them first, in one
    const parents = Array.from({ length: 400 }, (_, i) => ({ ref: `p${i}`, task: 'dl.parent', payload: i }));
    let seed = 42;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return seed / 2_147_483_648;
    };
    const sinks = Array.from({ length: 20 }, (_, k) => ({
      ref: `sink${k}`,
      task: 'dl.sink',
      dependsOn: parents.filter(() => random() < 0.3).map((p) => p.ref),
    }));
    const { jobs } = await queue.enqueueFlow([...parents, ...sinks]);
    const sinkIds = sinks.map((sink) => jobs[sink.ref]);
    let started = 0;
    let release!: () => void;
    const allStarted = new Promise<void>((resolve) => {
      release = resolve;
    });
    const pool = await workers(8, {
      'dl.parent': async () => {
        if (++started === 400) release();
        await allStarted;
        return null;
      },
      'dl.sink': async () => null,
    });
    try {
      await until(
        async () => {
          const rows = await db.sql<{ n: number }>(
            `SELECT count(*)::int AS n FROM ${db.jobs} WHERE id = ANY($1::bigint[]) AND status = 'done'`,
            [sinkIds],
          );
          return rows[0]?.n === 20;
        },
        60_000,
        () => `the fan-in jobs to be done (${started} parents started; errors: ${pool.errors.slice(0, 3)})`,
      );
    } finally {
      release();
      await pool.stop();
    }
    expect(started).toBe(400);
    expect(pool.errors).toEqual([]);
    const retried = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${db.jobs} WHERE task LIKE 'dl.%' AND attempts <> 1
         AND id >= $1::bigint`,
      [jobs.p0],
    );
    expect(retried[0]?.n).toBe(0);
  }, 90_000);
});
