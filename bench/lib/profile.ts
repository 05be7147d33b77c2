/**
 * `--profile`: W2 (and W2d) as a per-job budget. One worker process enqueues the W2 jobs itself
 * (batch API, untimed for the rate), then drains them as W2 does; per job, for each phase:
 *
 *   - Node CPU of that process (process.cpuUsage in it: user + system), its GC (count, time)
 *     and JS heap allocation (V8's GCProfiler, lib/gc.ts), peak RSS;
 *   - PostgreSQL CPU of the backends serving that process: each TCP connection of the child
 *     (its sockets in /proc/<pid>/fd and /proc/<pid>/net/tcp*) is matched to its backend by
 *     client port in pg_stat_activity, and each backend's on-CPU time read from
 *     /proc/<backend>/schedstat (ns) every 100 ms and at each phase boundary; backends that
 *     appear during a phase count from their start. The server's background processes
 *     (WAL writer, checkpointer, background writer, autovacuum) are summed apart: they serve the
 *     whole server;
 *   - WAL: pg_current_wal_insert_lsn() before and after each phase (the whole server's);
 *   - with pg_stat_statements (`--pg embedded` preloads it, and the child then connects as a
 *     role of its own so that its statements are told apart): per-statement calls, execution
 *     time, rows and WAL bytes, and their sums;
 *   - BullMQ on Redis: the Redis server's CPU (INFO cpu) instead.
 *
 * This needs the database on this machine (a local TCP address) and read access to its
 * processes' /proc entries (root, or the same user); otherwise the server columns say why not.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import type pg from 'pg';
import type { ChildResult, PhaseFigures } from '../child.js';
import { BullMQDriver } from '../systems/bullmq.js';
import type { SystemDriver } from '../systems/types.js';
import { WorkerChild } from './child-process.js';
import { adminPool } from './db.js';
import { readStatements, resetStatements, type StatementRow } from './statements.js';
import { waitFor, wallNow, withTimeout } from './util.js';
import type { Metrics, RunContext } from './workloads.js';

/** Background processes of the server whose CPU is reported apart (they serve every database). */
const BACKGROUND_TYPES = new Set([
  'walwriter',
  'checkpointer',
  'background writer',
  'autovacuum worker',
  'autovacuum launcher',
  'walsummarizer',
]);

/** On-CPU time of a process in ns (/proc/<pid>/schedstat), or null when it is gone or unreadable. */
function cpuNs(pid: number): number | null {
  try {
    const first = readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0];
    const ns = Number(first);
    return Number.isFinite(ns) ? ns : null;
  } catch {
    return null;
  }
}

/** Local ports of `pid`'s TCP connections to `remotePort` (its sockets matched in /proc/<pid>/net/tcp*). */
function connectionPorts(pid: number, remotePort: number): Set<number> {
  const inodes = new Set<string>();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const link = readlinkSync(`/proc/${pid}/fd/${fd}`);
        const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
        if (inode) inodes.add(inode);
      } catch {
        // closed meanwhile
      }
    }
  } catch {
    return new Set();
  }
  const ports = new Set<number>();
  const remoteHex = remotePort.toString(16).toUpperCase().padStart(4, '0');
  for (const file of ['tcp', 'tcp6']) {
    let text = '';
    try {
      text = readFileSync(`/proc/${pid}/net/${file}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      const local = cols[1];
      const remote = cols[2];
      const inode = cols[9];
      if (!local || !remote || !inode || !inodes.has(inode)) continue;
      if (remote.split(':')[1] !== remoteHex) continue;
      ports.add(Number.parseInt(local.split(':')[1] ?? '', 16));
    }
  }
  return ports;
}

/** Cumulative CPU (ns) of every process seen so far, by pid, in two groups. */
interface Snapshot {
  backends: Map<number, number>;
  background: Map<number, number>;
}

/**
 * Samples the CPU of the backends serving one child process, and of the server's background
 * processes, every 100 ms and on demand. A pid's last value is kept after it is gone.
 */
export class BackendSampler {
  private readonly backends = new Map<number, number>();
  private readonly background = new Map<number, number>();
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly port: number,
    private childPid: number,
  ) {}

  /**
   * A sampler for the server at `url`, or the reason there cannot be one (not local, or its
   * processes not readable).
   */
  static async open(url: string): Promise<BackendSampler | string> {
    const parsed = new URL(url);
    const host = parsed.hostname || 'localhost';
    if (!['127.0.0.1', 'localhost', '::1', '[::1]'].includes(host))
      return `the database is not on this machine (${host})`;
    const pool = adminPool(url);
    const { rows } = await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const pid = rows[0]?.pid ?? 0;
    if (cpuNs(pid) === null) return `/proc/${pid}/schedstat of a backend is not readable from here`;
    return new BackendSampler(pool, Number(parsed.port || 5432), 0);
  }

  /** Starts following `childPid` (its connections), sampling every 100 ms. */
  follow(childPid: number): void {
    this.childPid = childPid;
    this.timer ??= setInterval(() => void this.sample().catch(() => {}), 100);
    this.timer.unref();
  }

  /** One sample now (single-flight: a caller during a sample waits for it, then takes another). */
  async sample(): Promise<void> {
    for (let running = this.running; running !== null; running = this.running) await running;
    this.running = this.sampleOnce().finally(() => {
      this.running = null;
    });
    await this.running;
  }

  /** The values after a fresh sample. */
  async snapshot(): Promise<Snapshot> {
    await this.sample();
    return { backends: new Map(this.backends), background: new Map(this.background) };
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private async sampleOnce(): Promise<void> {
    const ports = this.childPid ? connectionPorts(this.childPid, this.port) : new Set<number>();
    const { rows } = await this.pool.query<{ pid: number; port: number | null; type: string }>(
      'SELECT pid, client_port AS port, backend_type AS type FROM pg_stat_activity',
    );
    for (const row of rows) {
      const child = row.type === 'client backend' && row.port !== null && ports.has(row.port);
      const group = child ? this.backends : BACKGROUND_TYPES.has(row.type) ? this.background : null;
      if (!group) continue;
      const ns = cpuNs(row.pid);
      if (ns !== null) group.set(row.pid, ns);
    }
  }
}

/** CPU (ms) used between two snapshots by a group; a pid absent from `from` counts from its start. */
function cpuBetween(from: Map<number, number>, to: Map<number, number>): number {
  let ns = 0;
  for (const [pid, value] of to) ns += value - (from.get(pid) ?? 0);
  return ns / 1e6;
}

async function walLsn(url: string): Promise<string> {
  const { rows } = await adminPool(url).query<{ lsn: string }>(
    'SELECT pg_current_wal_insert_lsn()::text AS lsn',
  );
  return rows[0]?.lsn ?? '0/0';
}

async function walBetween(url: string, from: string, to: string): Promise<number> {
  const { rows } = await adminPool(url).query<{ n: string }>(
    'SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn) AS n',
    [from, to],
  );
  return Number(rows[0]?.n ?? Number.NaN);
}

/** `url` with another user name. */
function asUser(url: string, user: string): string {
  const parsed = new URL(url);
  parsed.username = user;
  parsed.password = '';
  return parsed.toString();
}

/** The figures of one phase, per job. */
function phaseMetrics(prefix: string, jobs: number, figures: PhaseFigures): Metrics {
  return {
    [`${prefix}NodeUserUsPerJob`]: figures.userUs / jobs,
    [`${prefix}NodeSystemUsPerJob`]: figures.systemUs / jobs,
    [`${prefix}NodeUsPerJob`]: (figures.userUs + figures.systemUs) / jobs,
    [`${prefix}GcCount`]: figures.gc.collections,
    [`${prefix}GcUsPerJob`]: (figures.gc.ms * 1000) / jobs,
    [`${prefix}AllocBytesPerJob`]: figures.gc.allocatedBytes / jobs,
    [`${prefix}WallMs`]: figures.wallMs,
  };
}

/** Sums of one phase's statements, per job. */
function statementMetrics(prefix: string, jobs: number, rows: StatementRow[]): Metrics {
  const sum = (f: (r: StatementRow) => number) => rows.reduce((s, r) => s + f(r), 0);
  return {
    [`${prefix}StatementsPerJob`]: sum((r) => r.calls) / jobs,
    [`${prefix}ExecUsPerJob`]: (sum((r) => r.totalMs) * 1000) / jobs,
    [`${prefix}StatementWalPerJob`]: sum((r) => r.walBytes) / jobs,
  };
}

/**
 * W2 (W2d with `deleteCompleted`) profiled: see the file's comment. Timed as W2 (first handler
 * start → no unfinished job in the storage), so `jobsPerSec` compares with W2's.
 */
export async function w2Profile(
  driver: SystemDriver,
  ctx: RunContext,
  deleteCompleted = false,
): Promise<Metrics> {
  const { w2Jobs, w2Concurrency, w1Chunk } = ctx.sizes;
  const url = ctx.env.databaseUrl;
  const workload = deleteCompleted ? 'W2d' : 'W2';
  await withTimeout(driver.reset(), 120_000, 'reset');
  const onPostgres = !(driver instanceof BullMQDriver);
  const sampler = onPostgres ? await BackendSampler.open(url) : 'BullMQ on Redis: no PostgreSQL';
  const statements = onPostgres ? ctx.statements : undefined;
  const redis = driver instanceof BullMQDriver ? driver : null;
  const drainLimit = Math.max(120_000, w2Jobs * 10);
  const childEnv = statements ? { ...ctx.env, databaseUrl: asUser(url, statements.role) } : ctx.env;
  try {
    const before = typeof sampler === 'string' ? null : await sampler.snapshot();
    const lsn0 = onPostgres ? await walLsn(url) : '';
    const redis0 = (await redis?.redisCpuSeconds()) ?? null;
    if (statements) await resetStatements(url, statements.role);
    const { child } = await WorkerChild.start(
      {
        system: driver.name,
        env: childEnv,
        mode: 'drain',
        concurrency: w2Concurrency,
        expect: w2Jobs,
        ...(deleteCompleted ? { deleteCompleted: true } : {}),
        profile: { jobs: w2Jobs, chunk: w1Chunk },
        lifetimeMs: drainLimit * 2 + 120_000,
      },
      drainLimit,
      (pid) => {
        if (typeof sampler !== 'string') sampler.follow(pid);
      },
    );
    try {
      // the enqueue phase is over
      const enqueued = typeof sampler === 'string' ? null : await sampler.snapshot();
      const lsn1 = onPostgres ? await walLsn(url) : '';
      const redis1 = (await redis?.redisCpuSeconds()) ?? null;
      const enqueueStatements = statements ? await readStatements(url, statements.role) : [];
      if (statements) await resetStatements(url, statements.role);
      const queued = await driver.remaining();
      if (queued !== w2Jobs)
        throw new Error(`expected ${w2Jobs} queued jobs after the enqueue, found ${queued}`);
      child.go();
      const ready = await child.next('ready', 60_000);
      const handled = await child.next('handled', drainLimit);
      let left = -1;
      await waitFor(
        async () => {
          left = await driver.remaining();
          return left === 0;
        },
        60_000,
        `the last completions to be written (${left} unfinished)`,
        5,
      );
      const endAt = wallNow();
      const after = typeof sampler === 'string' ? null : await sampler.snapshot();
      const lsn2 = onPostgres ? await walLsn(url) : '';
      const redis2 = (await redis?.redisCpuSeconds()) ?? null;
      const drainStatements = statements ? await readStatements(url, statements.role) : [];
      const result: ChildResult = await child.stop();
      const profile = result.profile;
      if (!profile) throw new Error('the worker process sent no profile');
      const drainMs = endAt - result.firstJobAt;
      const metrics: Metrics = {
        jobsPerSec: (w2Jobs / drainMs) * 1000,
        drainMs,
        handlersDoneMs: (handled.at as number) - result.firstJobAt,
        startupMs: (ready.readyAt as number) - (ready.startedAt as number),
        rssMb: result.maxRssBytes / 2 ** 20,
        rssAfterEnqueueMb: profile.maxRssAfterEnqueueBytes / 2 ** 20,
        drainSampledRssMb: result.sampledPeakRssBytes / 2 ** 20,
        extraRuns: result.handled - w2Jobs,
        backgroundErrors: result.errors.length,
        ...phaseMetrics('enqueue', w2Jobs, profile.enqueue),
        ...phaseMetrics('drain', w2Jobs, profile.drain),
        startupCpuMs: profile.startupCpuUs / 1000,
        processNodeUsPerJob: (profile.processUserUs + profile.processSystemUs) / w2Jobs,
      };
      if (before && enqueued && after) {
        metrics.enqueueServerUsPerJob = (cpuBetween(before.backends, enqueued.backends) * 1000) / w2Jobs;
        metrics.drainServerUsPerJob = (cpuBetween(enqueued.backends, after.backends) * 1000) / w2Jobs;
        metrics.drainBackends = [...after.backends.keys()].filter(
          (pid) => !enqueued.backends.has(pid),
        ).length;
        metrics.drainBackgroundUsPerJob = (cpuBetween(enqueued.background, after.background) * 1000) / w2Jobs;
      }
      if (onPostgres) {
        metrics.enqueueWalPerJob = (await walBetween(url, lsn0, lsn1)) / w2Jobs;
        metrics.drainWalPerJob = (await walBetween(url, lsn1, lsn2)) / w2Jobs;
      }
      if (redis0 !== null && redis1 !== null && redis2 !== null) {
        metrics.enqueueServerUsPerJob = ((redis1 - redis0) * 1e6) / w2Jobs;
        metrics.drainServerUsPerJob = ((redis2 - redis1) * 1e6) / w2Jobs;
      }
      if (statements) {
        Object.assign(metrics, statementMetrics('enqueue', w2Jobs, enqueueStatements));
        Object.assign(metrics, statementMetrics('drain', w2Jobs, drainStatements));
        for (const [phase, rows] of [
          ['enqueue', enqueueStatements],
          ['drain', drainStatements],
        ] as const) {
          const key = `${workload} ${driver.name} ${phase}`;
          if (!statements.sink.has(key)) statements.sink.set(key, rows);
        }
      }
      return metrics;
    } finally {
      child.kill();
    }
  } finally {
    if (typeof sampler !== 'string') sampler.stop();
  }
}

/** Why a PostgreSQL system's server columns are empty, if they are (for the report's notes). */
export async function serverTimeUnavailable(url: string): Promise<string | null> {
  const sampler = await BackendSampler.open(url).catch((error: unknown) => String(error));
  if (typeof sampler === 'string') return sampler;
  sampler.stop();
  return null;
}
