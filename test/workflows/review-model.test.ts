/**
 * Review of SPEC §10 (flows-review): the dependency trigger against a model. Random flows go
 * through random transitions — complete, fail for good, fail and retry, release, cancel (waiting,
 * pending, running), requeue, and new jobs that depend on existing ones (either policy) — and
 * after every step each job's counter and status must follow from its dependencies' statuses:
 * deps_left counts exactly the edges not satisfied (done, or dead/cancelled for
 * onDependencyFailure 'run'); a waiting job has one left and, with 'cancel', no failed one; a job
 * that has not run yet is pending or running only with none left; a job a failure cancelled
 * names a dependency that is still dead or cancelled. (It passed: it guards the trigger.)
 */
import { expect, test } from 'vitest';
import { PermanentError } from '../../src/errors.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

interface Row {
  id: string;
  task: string;
  status: string;
  deps_left: number;
  run_on_dependency_failure: boolean;
  cancelled_by: string | null;
  attempts: number;
}

/** A small deterministic generator (LCG), so a failing seed can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

test.each([1, 2, 3])(
  'random transitions keep every counter and status consistent (seed %i)',
  async (seed) => {
    const queue = db.queue({ poolSize: 3 });
    const rand = random(seed);
    const pick = <T>(xs: T[]): T | undefined =>
      xs.length > 0 ? xs[Math.floor(rand() * xs.length)] : undefined;
    const prefix = `model${seed}.`;
    // each job its own task, so a step can claim exactly the job it picked
    await queue.enqueueFlow(
      Array.from({ length: 12 }, (_, i) => ({
        ref: `n${i}`,
        task: `${prefix}${i}`,
        maxAttempts: 1000,
        dependsOn: Array.from({ length: i }, (_, j) => `n${j}`).filter(() => rand() < 0.25),
        onDependencyFailure: rand() < 0.3 ? ('run' as const) : ('cancel' as const),
      })),
    );
    const deps = db.jobs.replace(/jobs$/, 'job_dependencies');
    const read = () =>
      db.sql<Row>(
        `SELECT id::text, task, status, deps_left, run_on_dependency_failure, cancelled_by::text, attempts
       FROM ${db.jobs} WHERE task LIKE $1 ORDER BY id`,
        [`${prefix}%`],
      );
    const claim = async (job: Row | undefined) =>
      job ? (await queue.claim('model-worker', { tasks: [job.task] }))[0] : undefined;
    let next = 100;
    const log: string[] = [];
    for (let step = 0; step < 150; step++) {
      const rows = await read();
      const having = (...statuses: string[]) => rows.filter((r) => statuses.includes(r.status));
      const r = rand();
      if (r < 0.3) {
        const lease = await claim(pick(having('pending')));
        if (lease) log.push(`complete ${lease.id}: ${await queue.complete(lease, lease.id)}`);
      } else if (r < 0.45) {
        const lease = await claim(pick(having('pending')));
        if (lease) log.push(`fail for good ${lease.id}: ${await queue.fail(lease, new PermanentError('x'))}`);
      } else if (r < 0.5) {
        const lease = await claim(pick(having('pending')));
        if (lease)
          log.push(`retry ${lease.id}: ${await queue.fail(lease, new Error('x'), { retryInMs: 0 })}`);
      } else if (r < 0.6) {
        const job = pick(having('waiting', 'pending'));
        if (job) log.push(`cancel ${job.status} ${job.id}: ${await queue.cancel(job.id)}`);
      } else if (r < 0.65) {
        const lease = await claim(pick(having('pending')));
        if (lease) {
          await queue.cancel(lease.id);
          log.push(`cancel running ${lease.id}: ${await queue.fail(lease, new Error('aborted'))}`);
        }
      } else if (r < 0.8) {
        const job = pick(having('dead'));
        if (job) log.push(`requeue ${job.id}: ${await queue.requeue(job.id)}`);
      } else if (r < 0.9) {
        const on = [
          ...new Set([pick(rows)?.id, pick(rows)?.id].filter((id) => id !== undefined)),
        ] as string[];
        const policy = rand() < 0.3 ? 'run' : 'cancel';
        const { id } = await queue.enqueue(`${prefix}${next++}`, null, {
          dependsOn: on,
          onDependencyFailure: policy,
          maxAttempts: 1000,
        });
        log.push(`enqueue ${id} (${policy}) on ${on.join(',')}`);
      } else {
        const lease = await claim(pick(having('pending')));
        if (lease) log.push(`release ${lease.id}: ${await queue.release(lease)}`);
      }

      const now = await read();
      const edges = await db.sql<{ job_id: string; depends_on: string }>(
        `SELECT d.job_id::text, d.depends_on::text FROM ${deps} AS d JOIN ${db.jobs} AS j ON j.id = d.job_id
       WHERE j.task LIKE $1`,
        [`${prefix}%`],
      );
      const byId = new Map(now.map((row) => [row.id, row]));
      const failed = (d: Row) => d.status === 'dead' || d.status === 'cancelled';
      for (const job of now) {
        const on = edges.filter((e) => e.job_id === job.id).map((e) => byId.get(e.depends_on) as Row);
        const left = on.filter(
          (d) => !(d.status === 'done' || (job.run_on_dependency_failure && failed(d))),
        ).length;
        const why = `job ${JSON.stringify(job)}\ndepends on ${JSON.stringify(on)}\nafter:\n${log.join('\n')}`;
        expect(job.deps_left, why).toBe(left);
        if (job.status === 'waiting') {
          expect(left, why).toBeGreaterThan(0);
          if (!job.run_on_dependency_failure) expect(on.some(failed), why).toBe(false);
        }
        if ((job.status === 'pending' || job.status === 'running') && job.attempts === 0) {
          expect(left, why).toBe(0);
        }
        if (job.status === 'cancelled' && job.cancelled_by !== null) {
          const by = byId.get(job.cancelled_by);
          expect(by !== undefined && failed(by), why).toBe(true);
        }
      }
    }
  },
);
