/**
 * Polling workers behind a real PgBouncer in transaction mode (docs/pgbouncer.md): job latency
 * against the poll interval and the load, and how a burst is shared among the workers.
 *
 *   npx tsx bench/pgbouncer-poll.ts [--polls 1000,250,listen] [--rates 5,50,200] [--seconds 20]
 *                                   [--workers 4] [--bursts 10] [--work-ms 4]
 *
 * DATABASE_URL (default postgres://root@127.0.0.1:5432/test) names the server; the run creates
 * and drops a database of its own (`skiplock_bench_pgbouncer`). PgBouncer is Debian's binary,
 * started by test/support/pgbouncer.ts (transaction mode, default_pool_size 10). The workers are
 * `skiplock worker --no-listen` processes (concurrency 10) running
 * test/pgbouncer/fixtures/count-tasks.ts (a ledger insert straight to PostgreSQL, then 0 to --work-ms ms of "work").
 *
 * - latency: for each poll interval and rate, jobs are enqueued one by one at that rate for
 *   --seconds; latency = run_started_at − created_at (database time), p50/p90/p99. The poll
 *   interval `listen` is the reference without PgBouncer: LISTEN/NOTIFY, straight to PostgreSQL.
 * - bursts: --bursts times, 40 jobs in one enqueueMany into idle workers (1 s poll); per burst,
 *   the largest share one worker process ran.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { quoteIdent } from '../src/db/identifier.js';
import { Queue } from '../src/queue.js';
import { startPgBouncer } from '../test/support/pgbouncer.js';
import { REPO_ROOT } from '../test/support/spawn.js';
import { databaseUrl } from '../test/support/urls.js';

const SCHEMA = 'skiplock';
const DATABASE = 'skiplock_bench_pgbouncer';
const LEDGER = `${quoteIdent(SCHEMA)}.bouncer_executions`;
const JOBS = `${quoteIdent(SCHEMA)}.jobs`;

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? fallback) : fallback;
}
const numbers = (text: string) => text.split(',').map(Number);

const serverUrl = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const polls = arg('polls', '1000,250,listen').split(',');
const rates = numbers(arg('rates', '5,50,200'));
const seconds = Number(arg('seconds', '20'));
const workerCount = Number(arg('workers', '4'));
const bursts = Number(arg('bursts', '10'));
const workMs = arg('work-ms', '4');

async function admin(statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

/** Every worker process started, SIGKILLed at the end if still running. */
const spawned: ChildProcess[] = [];

/** `poll`: a poll interval in ms (`--no-listen`), or `listen` (LISTEN/NOTIFY). */
function startWorkers(url: string, poll: string): ChildProcess[] {
  return Array.from({ length: workerCount }, () =>
    spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'src/cli/main.ts',
        'worker',
        '--tasks',
        'test/pgbouncer/fixtures/count-tasks.ts',
        ...(poll === 'listen' ? [] : ['--no-listen', '--poll-interval-ms', poll]),
      ],
      {
        cwd: REPO_ROOT,
        env: {
          ...process.env,
          DATABASE_URL: url,
          LEDGER_URL: directUrl,
          SKIPLOCK_TEST_SCHEMA: SCHEMA,
          WORK_MS: workMs,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    ),
  ).map((child) => {
    spawned.push(child);
    // Pass the workers' failures on; their stop lines are noise here.
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      for (const line of chunk.split('\n'))
        if (line && !line.includes('stopping')) process.stderr.write(`${line}\n`);
    });
    return child;
  });
}

async function started(children: ChildProcess[]): Promise<void> {
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve, reject) => {
          let out = '';
          child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
            out += chunk;
            if (out.includes(' started: ')) resolve();
          });
          child.once('exit', (code) => reject(new Error(`a worker exited with code ${code}`)));
        }),
    ),
  );
  await sleep(1_500); // let the polls fall where they fall
}

async function stopped(children: ChildProcess[]): Promise<void> {
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGTERM');
        }),
    ),
  );
}

async function drained(pool: pg.Pool): Promise<void> {
  for (;;) {
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${JOBS} WHERE status <> 'done'`);
    if (rows[0].n === 0) return;
    await sleep(100);
  }
}

const directUrl = databaseUrl(serverUrl, DATABASE);

async function main(): Promise<void> {
  await admin(`DROP DATABASE IF EXISTS ${DATABASE} WITH (FORCE)`);
  await admin(`CREATE DATABASE ${DATABASE}`);
  const bouncer = await startPgBouncer(serverUrl, { defaultPoolSize: 10 });
  const pool = new pg.Pool({ connectionString: directUrl, max: 2 });
  const throughBouncer = new Queue({ connectionString: bouncer.url(directUrl), preparedStatements: false });
  const direct = new Queue({ connectionString: directUrl });
  try {
    await direct.migrate(); // straight to PostgreSQL (it works through PgBouncer too)
    await pool.query(
      `CREATE TABLE ${LEDGER} (job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL)`,
    );
    process.stdout.write(
      `PgBouncer transaction mode, ${workerCount} × \`skiplock worker --no-listen\` (concurrency 10), jobs of 0–${workMs} ms\n\n`,
    );
    process.stdout.write(
      '| poll interval | enqueue rate | jobs | p50 | p90 | p99 |\n|---|---|---|---|---|---|\n',
    );
    for (const poll of polls) {
      const listen = poll === 'listen';
      const queue = listen ? direct : throughBouncer;
      const children = startWorkers(listen ? directUrl : bouncer.url(directUrl), poll);
      await started(children);
      for (const rate of rates) {
        await pool.query(`TRUNCATE ${JOBS}, ${LEDGER}`);
        const total = Math.round(rate * seconds);
        const t0 = Date.now();
        const pending: Promise<unknown>[] = [];
        for (let i = 0; i < total; i++) {
          const due = t0 + (i * 1_000) / rate;
          if (due > Date.now()) await sleep(due - Date.now());
          pending.push(queue.enqueue('bouncer.count', { i }));
        }
        await Promise.all(pending);
        await drained(pool);
        const { rows } = await pool.query(
          `SELECT percentile_disc(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (
                    ORDER BY extract(epoch FROM run_started_at - created_at) * 1000) AS p
             FROM ${JOBS}`,
        );
        const [p50, p90, p99] = (rows[0].p as number[]).map((ms) => `${Math.round(ms)} ms`);
        const label = listen ? 'LISTEN, no PgBouncer' : `${poll} ms`;
        process.stdout.write(`| ${label} | ${rate}/s | ${total} | ${p50} | ${p90} | ${p99} |\n`);
      }
      await stopped(children);
    }

    const children = startWorkers(bouncer.url(directUrl), '1000');
    await started(children);
    const shares: number[] = [];
    for (let b = 0; b < bursts; b++) {
      await pool.query(`TRUNCATE ${JOBS}, ${LEDGER}`);
      await throughBouncer.enqueueMany(
        Array.from({ length: 40 }, (_, i) => ({ task: 'bouncer.count', payload: { i } })),
      );
      await drained(pool);
      const { rows } = await pool.query(`SELECT max(n)::int AS top FROM (
          SELECT count(*) AS n FROM ${LEDGER} GROUP BY pid) AS per_worker`);
      shares.push(rows[0].top);
      await sleep(500 + Math.random() * 1_000);
    }
    await stopped(children);
    process.stdout.write(
      `\nbursts of 40 jobs into ${workerCount} idle workers (1 s poll): the busiest worker ran ${shares.join(', ')}\n`,
    );
  } finally {
    for (const child of spawned)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await throughBouncer.close();
    await direct.close();
    await pool.end();
    await bouncer.stop();
    await admin(`DROP DATABASE IF EXISTS ${DATABASE} WITH (FORCE)`);
  }
}

await main();
