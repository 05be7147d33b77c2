/**
 * W-steps and W-sleep (SPEC §12, issue 24), on DATABASE_URL, Skiplock only, in this process (one
 * worker: concurrency 100, prefetch 1,000, as W2):
 *
 * - W-steps: `--jobs` (5,000) pre-enqueued jobs each running `--steps` (10) no-op steps (a
 *   synchronous fn returning its index), drained; against the same number of plain no-op jobs
 *   (the cost of a job) and `--jobs / --steps` flows of `--steps` chained jobs (the same work as
 *   jobs that depend on each other: Skiplock's own alternative to steps). Reports jobs/s,
 *   checkpoints/s and what one step adds over a plain job, as a fraction of a job.
 * - W-sleep: 1,000 jobs that sleep 100 ms: enqueue → resume latency and lateness after the
 *   stored instant, p50/p99.
 *
 *   DATABASE_URL=postgres://… npx tsx bench/steps.ts [--jobs 5000] [--steps 10] [--reps 3] [--concurrency 100]
 *
 * Each phase runs on a fresh schema. The machine's load average is printed with the figures.
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { Queue, Worker } from '../src/index.js';
import type { JobContext } from '../src/worker/options.js';

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2)
  args.set(process.argv[i]!.replace(/^--/, ''), process.argv[i + 1]!);
const URL = process.env.DATABASE_URL;
if (!URL) throw new Error('set DATABASE_URL');
const JOBS = Number(args.get('jobs') ?? 5_000);
const STEPS = Number(args.get('steps') ?? 10);
const REPS = Number(args.get('reps') ?? 3);
const SCHEMA = 'bench_steps';
const WORKER = { concurrency: Number(args.get('concurrency') ?? 100), prefetch: 1_000 };

async function fresh(): Promise<Queue> {
  const admin = new pg.Client({ connectionString: URL });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  await admin.end();
  const queue = new Queue({ connectionString: URL, schema: SCHEMA });
  await queue.migrate();
  return queue;
}

/** Starts a worker on `queue` with `tasks`, waits for `count` completions; the drain's seconds. */
async function drain(
  queue: Queue,
  tasks: Record<string, (p: unknown, ctx: JobContext) => unknown>,
  count: number,
) {
  const worker = new Worker({ queue, tasks, ...WORKER });
  let done = 0;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  worker.on('job:done', () => {
    if (++done === count) finish();
  });
  worker.on('error', ({ error }) => console.error(error));
  const started = performance.now();
  await worker.start();
  await finished;
  const seconds = (performance.now() - started) / 1000;
  await worker.stop();
  return seconds;
}

async function plain(): Promise<number> {
  const queue = await fresh();
  await queue.enqueueMany(Array.from({ length: JOBS }, (_, i) => ({ task: 'plain', payload: { i } })));
  const s = await drain(queue, { plain: () => null }, JOBS);
  await queue.close();
  return s;
}

async function stepped(): Promise<number> {
  const queue = await fresh();
  await queue.enqueueMany(Array.from({ length: JOBS }, (_, i) => ({ task: 'stepped', payload: { i } })));
  const s = await drain(
    queue,
    {
      stepped: async (_p, ctx) => {
        for (let i = 0; i < STEPS; i++) await ctx.step(`s${i}`, () => i);
        return null;
      },
    },
    JOBS,
  );
  const check = new pg.Client({ connectionString: URL });
  await check.connect();
  const rows = await check.query(`SELECT count(*)::int AS n FROM ${SCHEMA}.job_steps`);
  await check.end();
  if (rows.rows[0].n !== JOBS * STEPS)
    throw new Error(`expected ${JOBS * STEPS} checkpoints, found ${rows.rows[0].n}`);
  await queue.close();
  return s;
}

async function chained(): Promise<number> {
  const queue = await fresh();
  const flows = Math.floor(JOBS / STEPS);
  for (let f = 0; f < flows; f += 50) {
    await Promise.all(
      Array.from({ length: Math.min(50, flows - f) }, () =>
        queue.enqueueFlow(
          Array.from({ length: STEPS }, (_, i) => ({
            ref: `n${i}`,
            task: 'link',
            payload: { i },
            ...(i === 0 ? {} : { dependsOn: [`n${i - 1}`] }),
          })),
        ),
      ),
    );
  }
  const s = await drain(queue, { link: () => null }, flows * STEPS);
  await queue.close();
  return s;
}

async function sleepLatency(): Promise<{ p50: number; p99: number; late50: number; late99: number }> {
  const queue = await fresh();
  const N = 1_000;
  const enqueuedAt = new Map<string, number>();
  const resumed: number[] = [];
  const late: number[] = [];
  const until = new Map<string, number>();
  const worker = new Worker({
    queue,
    ...WORKER,
    tasks: {
      nap: async (_p: unknown, ctx: JobContext) => {
        await ctx.sleep('nap', 100);
        const now = Date.now();
        resumed.push(now - (enqueuedAt.get(ctx.job.id) ?? now));
        late.push(now - (until.get(ctx.job.id) ?? now));
        return null;
      },
    },
  });
  worker.on('job:suspended', ({ job, until: at }) => until.set(job.id, at?.getTime() ?? Number.NaN));
  let done = 0;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  worker.on('job:done', () => {
    if (++done === N) finish();
  });
  await worker.start();
  // one at a time, 5 ms apart (an idle worker woken by each enqueue, as W3)
  for (let i = 0; i < N; i++) {
    const at = Date.now();
    const { id } = await queue.enqueue('nap', { i });
    enqueuedAt.set(id, at);
    await new Promise((r) => setTimeout(r, 5));
  }
  await finished;
  await worker.stop();
  await queue.close();
  const pct = (xs: number[], p: number) =>
    [...xs].sort((a, b) => a - b)[Math.floor(xs.length * p)] ?? Number.NaN;
  return { p50: pct(resumed, 0.5), p99: pct(resumed, 0.99), late50: pct(late, 0.5), late99: pct(late, 0.99) };
}

const fmt = (n: number) => Math.round(n).toLocaleString('en');
console.log(
  `W-steps: ${JOBS} jobs × ${STEPS} no-op steps; worker ${JSON.stringify(WORKER)}; load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
for (let rep = 1; rep <= REPS; rep++) {
  const tPlain = await plain();
  const tSteps = await stepped();
  const tChain = await chained();
  const perJob = (tPlain / JOBS) * 1e6;
  const perStep = ((tSteps - tPlain) / (JOBS * STEPS)) * 1e6;
  const perChained = (tChain / (Math.floor(JOBS / STEPS) * STEPS)) * 1e6;
  console.log(
    `rep ${rep}: plain ${fmt(JOBS / tPlain)} jobs/s (${perJob.toFixed(0)} µs/job); ` +
      `stepped ${fmt(JOBS / tSteps)} jobs/s, ${fmt((JOBS * STEPS) / tSteps)} checkpoints/s (a step adds ${perStep.toFixed(0)} µs = ${(perStep / perJob).toFixed(2)} of a job); ` +
      `chain of ${STEPS}: ${fmt((Math.floor(JOBS / STEPS) * STEPS) / tChain)} jobs/s (${perChained.toFixed(0)} µs per chained job); load ${loadavg()[0]?.toFixed(2)}`,
  );
}
const sleep = await sleepLatency();
console.log(
  `W-sleep: 1,000 jobs, enqueue → sleep 100 ms → resume: p50 ${sleep.p50} ms, p99 ${sleep.p99} ms; after the stored instant: p50 ${sleep.late50} ms, p99 ${sleep.late99} ms; load ${loadavg()[0]?.toFixed(2)}`,
);
