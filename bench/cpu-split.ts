/**
 * Where a drain's CPU goes: the worker process (process.cpuUsage) against everything else on the
 * machine (/proc/stat: PostgreSQL, on a machine that runs nothing else). One worker process in
 * this process, on DATABASE_URL, a fresh schema `bench_cpu_split`:
 *
 *   MODE=single  N=50000  W2-style: no-op single-job handler, concurrency 100, prefetch 1,000
 *   MODE=batch   N=50000  W-batch-style: a batch handler of 100, 10 batches at once
 *   MODE=steps   N=5000   W-steps-style: 10 no-op ctx.step per job (C sets the concurrency)
 *
 *   DATABASE_URL=postgres://… MODE=batch npx tsx bench/cpu-split.ts
 *
 * Linux only (/proc/stat, USER_HZ 100). Not pass/fail: a profile for docs/batches.md and
 * docs/steps.md.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Queue, Worker } from '../src/index.js';
import type { JobContext } from '../src/worker/options.js';
import { closeAdminPools, dropSchema } from './lib/db.js';

const URL = process.env.DATABASE_URL;
if (!URL) throw new Error('set DATABASE_URL');
const MODE = process.env.MODE ?? 'single';
const N = Number(process.env.N ?? (MODE === 'steps' ? 5_000 : 50_000));
const STEPS = Number(process.env.STEPS ?? 10);
const SCHEMA = 'bench_cpu_split';

/** Busy and total clock ticks of the whole machine. */
function machine(): { busy: number; total: number } {
  const fields = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').split(/\s+/).slice(1).map(Number);
  const total = fields.reduce((a, b) => a + b, 0);
  return { busy: total - (fields[3] ?? 0) - (fields[4] ?? 0), total };
}

await dropSchema(URL, SCHEMA);
await closeAdminPools();
const queue = new Queue({ connectionString: URL, schema: SCHEMA });
await queue.migrate();
for (let i = 0; i < N; i += 5_000)
  await queue.enqueueMany(
    Array.from({ length: Math.min(5_000, N - i) }, (_, j) => ({ task: 't', payload: { i: i + j } })),
  );

let done = 0;
let finish!: () => void;
const finished = new Promise<void>((resolve) => {
  finish = resolve;
});
const count = (n: number) => {
  done += n;
  if (done >= N) finish();
};
const tasks =
  MODE === 'batch'
    ? { t: { batch: { maxSize: 100 }, handler: async (items: readonly unknown[]) => count(items.length) } }
    : MODE === 'steps'
      ? {
          t: async (_payload: unknown, ctx: JobContext) => {
            for (let s = 0; s < STEPS; s++) await ctx.step(`s${s}`, () => s);
            count(1);
            return null;
          },
        }
      : { t: () => count(1) };
const concurrency = MODE === 'batch' ? 1_000 : Number(process.env.C ?? 100);
const worker = new Worker({ queue, tasks: tasks as never, concurrency, prefetch: 1_000 });

const m0 = machine();
const u0 = process.cpuUsage();
const t0 = performance.now();
await worker.start();
await finished;
await worker.stop();
const seconds = (performance.now() - t0) / 1000;
const u = process.cpuUsage(u0);
const m1 = machine();
const workerCpu = (u.user + u.system) / 1e6;
const busy = (m1.busy - m0.busy) / 100;
const perJob = (s: number) => ((s / N) * 1e6).toFixed(1);
console.log(
  `${MODE}: ${Math.round(N / seconds).toLocaleString('en')} jobs/s over ${seconds.toFixed(2)} s; ` +
    `worker CPU ${workerCpu.toFixed(2)} s (${perJob(workerCpu)} µs/job); the rest of the machine ` +
    `${(busy - workerCpu).toFixed(2)} s (${perJob(busy - workerCpu)} µs/job); machine busy ` +
    `${Math.round((100 * (m1.busy - m0.busy)) / (m1.total - m0.total))} %`,
);
await queue.close();
