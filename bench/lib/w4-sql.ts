/**
 * W4-sql (issue 25, SPEC §13): producers outside Node.js.
 *
 * 1. Single enqueues through each system's own SQL function — Skiplock's `<schema>.enqueue(task,
 *    payload)`, graphile-worker's `add_job(identifier, payload)` — `w4Calls` calls on
 *    `w4InFlight` connections of their own (node-postgres, autocommit: one call, one
 *    transaction, one commit each, as a trigger or a script in another language makes them),
 *    after 32 warm-up calls. Both functions send a NOTIFY per call, so both pay PostgreSQL's
 *    commit-time notify lock. Then the call's own cost: one connection, one call after another,
 *    with synchronous_commit off in that session (µs per call).
 * 2. Skiplock only: `enqueue_many` of `w4SqlBatch` jobs from Python (clients/python on psycopg
 *    3, one call and a commit) against the library's `queue.enqueueMany` of as many (one call,
 *    its own commit), alternating, `w4SqlBatches` calls each after a warm-up call of each. The
 *    Python side runs in its own process (the venv of .ci/run, or $SKIPLOCK_PYTHON); without it,
 *    part 2 is skipped with a note.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { Queue } from '../../src/index.js';
import { SkiplockDriver } from '../systems/skiplock.js';
import { type SystemDriver, TASK } from '../systems/types.js';
import { REPO_DIR } from './paths.js';
import { median, withTimeout } from './util.js';
import type { Metrics, RunContext } from './workloads.js';

/** The Python of part 2: $SKIPLOCK_PYTHON, else the venv .ci/run makes; null when neither exists. */
function python(): string | null {
  const path = process.env.SKIPLOCK_PYTHON || join(REPO_DIR, '.ci', 'venv', 'bin', 'python');
  return existsSync(path) ? path : null;
}

export async function w4Sql(driver: SystemDriver, ctx: RunContext): Promise<Metrics> {
  const statement = driver.sqlEnqueue?.();
  if (!statement) throw new Error(`not supported: ${driver.noSqlEnqueue ?? 'no SQL enqueue function'}`);
  const { w4Calls, w4InFlight } = ctx.sizes;
  await withTimeout(driver.reset(), 120_000, 'reset');
  const clients = Array.from(
    { length: w4InFlight },
    () => new pg.Client({ connectionString: ctx.env.databaseUrl, application_name: 'skiplock-bench-w4sql' }),
  );
  const metrics: Metrics = {};
  try {
    for (const client of clients) {
      client.on('error', () => {});
      await client.connect();
    }
    // each connection one lane: w4InFlight calls in flight, one per connection, autocommitted
    const lanes = async (count: number, from: number): Promise<void> => {
      let next = 0;
      await Promise.all(
        clients.map(async (client) => {
          while (next < count)
            await client.query(statement, [TASK, JSON.stringify({ i: from + next++, t: 0 })]);
        }),
      );
    };
    await lanes(32, -1_000_000); // warm-up: every connection has planned the call
    const t0 = performance.now();
    await withTimeout(lanes(w4Calls, 0), Math.max(60_000, w4Calls * 20), 'SQL enqueues');
    const ms = performance.now() - t0;
    metrics.jobsPerSec = (w4Calls / ms) * 1000;
    const stored = await driver.remaining();
    if (stored !== w4Calls + 32) throw new Error(`${stored} jobs stored after ${w4Calls + 32} calls`);
    // the call's own cost: one connection, calls one after another, its commits not waiting for
    // the disk (synchronous_commit off in that session only) — what is left is the function's
    // work and the round trip, the figure a busy machine disturbs least
    const solo = clients[0] as pg.Client;
    await solo.query('SET synchronous_commit TO off');
    const soloCalls = Math.min(w4Calls, 2_000);
    const t1 = performance.now();
    for (let i = 0; i < soloCalls; i++)
      await solo.query(statement, [TASK, JSON.stringify({ i: -i - 1, t: 0 })]);
    metrics.soloCallUs = ((performance.now() - t1) * 1000) / soloCalls;
  } finally {
    await Promise.all(clients.map((client) => client.end().catch(() => {})));
  }
  if (driver instanceof SkiplockDriver) Object.assign(metrics, await batches(driver, ctx));
  return metrics;
}

/** Part 2: Python's enqueue_many against the library's enqueueMany, alternating. */
async function batches(driver: SkiplockDriver, ctx: RunContext): Promise<Metrics> {
  const { w4SqlBatch: size, w4SqlBatches: count } = ctx.sizes;
  const binary = python();
  const queue = driver.queue();
  let py: PythonBatches | null = null;
  try {
    if (binary === null) {
      ctx.log('W4-sql: no Python venv (.ci/venv or $SKIPLOCK_PYTHON): enqueue_many from Python not measured');
    } else {
      py = new PythonBatches(binary, ctx.env.databaseUrl, driver.schema, size);
    }
    const library: number[] = [];
    const fromPython: number[] = [];
    for (let round = -1; round < count; round++) {
      const ms = await libraryBatch(queue, size, round);
      if (round >= 0) library.push(ms);
      if (py) {
        const pyMs = await withTimeout(py.batch(), 60_000, 'enqueue_many from Python');
        if (round >= 0) fromPython.push(pyMs);
      }
    }
    const out: Metrics = { libManyJobsPerSec: (size / median(library)) * 1000, libManyMs: median(library) };
    if (fromPython.length > 0) {
      out.pyManyJobsPerSec = (size / median(fromPython)) * 1000;
      out.pyManyMs = median(fromPython);
      out.pyVsLib = (out.pyManyJobsPerSec as number) / (out.libManyJobsPerSec as number);
    }
    return out;
  } finally {
    await py?.close();
    await queue.close();
  }
}

async function libraryBatch(queue: Queue, size: number, round: number): Promise<number> {
  const specs = Array.from({ length: size }, (_, j) => ({
    task: TASK,
    payload: { i: 10_000_000 + round * size + j, t: 0 },
  }));
  const t0 = performance.now();
  await queue.enqueueMany(specs);
  return performance.now() - t0;
}

/** A Python process that runs one enqueue_many of `size` jobs (and its commit) per line it reads, answering the time in ms. */
const PY_BATCHES = `
import json, sys, time
import psycopg, skiplock
url, schema, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = psycopg.connect(url)
for n, line in enumerate(sys.stdin):
    jobs = [("${TASK}", {"i": 20_000_000 + n * size + j, "t": 0}) for j in range(size)]
    t0 = time.perf_counter()
    skiplock.enqueue_many(conn, jobs, schema=schema)
    conn.commit()
    print(json.dumps((time.perf_counter() - t0) * 1000), flush=True)
`;

class PythonBatches {
  private readonly child: ChildProcessWithoutNullStreams;
  private buffer = '';
  private stderr = '';
  private waiting: { resolve(line: string): void; reject(error: Error): void } | null = null;

  constructor(binary: string, url: string, schema: string, size: number) {
    this.child = spawn(binary, ['-c', PY_BATCHES, url, schema, String(size)], {
      env: { ...process.env, PYTHONPATH: join(REPO_DIR, 'clients', 'python', 'src') },
    });
    this.child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      this.buffer += chunk;
      const nl = this.buffer.indexOf('\n');
      if (nl < 0 || !this.waiting) return;
      const line = this.buffer.slice(0, nl);
      this.buffer = this.buffer.slice(nl + 1);
      const { resolve } = this.waiting;
      this.waiting = null;
      resolve(line);
    });
    this.child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr += chunk;
    });
    this.child.once('exit', () => this.waiting?.reject(new Error(`Python exited: ${this.stderr.trim()}`)));
  }

  batch(): Promise<number> {
    return new Promise<string>((resolve, reject) => {
      if (this.child.exitCode !== null) return reject(new Error(`Python exited: ${this.stderr.trim()}`));
      this.waiting = { resolve, reject };
      this.child.stdin.write('go\n');
    }).then(Number);
  }

  async close(): Promise<void> {
    this.child.stdin.end();
    if (this.child.exitCode === null) await new Promise((resolve) => this.child.once('exit', resolve));
  }
}
