import { Queue, Worker } from './src/index.ts';
const url = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const N = Number(process.env.N ?? 20000);
for (const [batchCompletions, concurrency] of [[false, 100], [true, 100], [true, 500]] as const) {
  const q = new Queue({ connectionString: url, schema: 'w2_bench', poolSize: 12 });
  await q.migrate();
  await (q as any).pool.query('TRUNCATE w2_bench.jobs');
  for (let i = 0; i < N; i += 5000) await q.enqueueMany(Array.from({ length: Math.min(5000, N - i) }, (_, k) => ({ task: 'noop', payload: { k } })));
  let done = 0; let resolve!: () => void; const finished = new Promise<void>(r => resolve = r);
  const w = new Worker({ queue: q, concurrency, batchCompletions, tasks: { noop: async () => null } });
  w.on('job:done', () => { if (++done === N) resolve(); });
  const t0 = performance.now();
  await w.start();
  await finished;
  const ms = performance.now() - t0;
  console.log(`batchCompletions=${batchCompletions} concurrency=${concurrency}: ${Math.round(N / (ms / 1000))} jobs/s (rss ${Math.round(process.memoryUsage().rss / 1e6)} MB)`);
  await w.stop(); await q.close();
}
