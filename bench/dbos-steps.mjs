// W-steps on DBOS Transact (the peer of bench/steps.ts), for the comparison in docs/steps.md.
// DBOS is not a dependency of this repository: install it in a scratch folder and run this file
// from there (it resolves @dbos-inc/dbos-sdk from the current folder's node_modules):
//
//   mkdir -p /tmp/dbos-bench && cd /tmp/dbos-bench && npm init -y >/dev/null && npm install @dbos-inc/dbos-sdk@5.3.0
//   createdb -h 127.0.0.1 -U root steps_dbos
//   cd /tmp/dbos-bench && DBOS_URL=postgres://root@127.0.0.1:5432/steps_dbos node /path/to/bench/dbos-steps.mjs --jobs 5000 --steps 10
//
// The same shape as bench/steps.ts: `--jobs` workflows of `--steps` no-op steps (DBOS.runStep of a
// synchronous function), 100 running at once in this process, against as many workflows without
// steps (the cost of a workflow). DBOS starts each workflow itself (startWorkflow: its status row
// written, then run here) — there is no separate enqueue and claim as in a job queue.
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

const require = createRequire(pathToFileURL(`${process.cwd()}/`));
const { DBOS } = await import(pathToFileURL(require.resolve('@dbos-inc/dbos-sdk')).href);

const args = new Map();
for (let i = 2; i < process.argv.length; i += 2)
  args.set(process.argv[i].replace(/^--/, ''), process.argv[i + 1]);
const JOBS = Number(args.get('jobs') ?? 5000);
const STEPS = Number(args.get('steps') ?? 10);
const REPS = Number(args.get('reps') ?? 3);
const CONCURRENCY = 100;

DBOS.setConfig({ name: 'w-steps', systemDatabaseUrl: process.env.DBOS_URL });
const plain = DBOS.registerWorkflow(async () => null, { name: 'plain' });
const stepped = DBOS.registerWorkflow(
  async () => {
    for (let s = 0; s < STEPS; s++) await DBOS.runStep(async () => s, { name: `s${s}` });
    return null;
  },
  { name: 'stepped' },
);
await DBOS.launch();

async function run(workflow, n) {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < n) {
        next++;
        const handle = await DBOS.startWorkflow(workflow)();
        await handle.getResult();
      }
    }),
  );
  return (performance.now() - started) / 1000;
}

const fmt = (n) => Math.round(n).toLocaleString('en');
console.log(
  `DBOS W-steps: ${JOBS} workflows × ${STEPS} no-op steps, ${CONCURRENCY} at once; load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
for (let rep = 1; rep <= REPS; rep++) {
  const tPlain = await run(plain, JOBS);
  const tSteps = await run(stepped, JOBS);
  const perJob = (tPlain / JOBS) * 1e6;
  const perStep = ((tSteps - tPlain) / (JOBS * STEPS)) * 1e6;
  console.log(
    `rep ${rep}: plain ${fmt(JOBS / tPlain)} workflows/s (${perJob.toFixed(0)} µs each); stepped ${fmt(JOBS / tSteps)} workflows/s, ` +
      `${fmt((JOBS * STEPS) / tSteps)} steps/s (a step adds ${perStep.toFixed(0)} µs = ${(perStep / perJob).toFixed(2)} of a workflow); load ${loadavg()[0].toFixed(2)}`,
  );
}
await DBOS.shutdown();
