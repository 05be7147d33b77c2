/**
 * One soak run, phase by phase:
 *
 *   start ──▶ running (load + faults) ──▶ draining ──▶ stopping ──▶ verified
 *
 * It owns everything it starts — the database, the proxy, the child processes, the run folder —
 * and {@link SoakRun.cleanup} ends them all, whatever phase the run reached.
 */
import { writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SoakDatabase } from './database.js';
import { type Fault, FaultInjector } from './faults.js';
import { SCHEDULE } from './features.js';
import { crashCause, describeExit, Fleet, type Proc } from './fleet.js';
import type { Edge } from './flow-checks.js';
import type { Transition } from './history.js';
import type { SoakOptions } from './options.js';
import type { ProducerProcessConfig } from './producer-process.js';
import { TcpProxy } from './proxy.js';
import { type ProducerRecord, readRecords, type WorkerRecord } from './records.js';
import { markdownReport, type RunInfo, textReport } from './report.js';
import { Rng } from './rng.js';
import { cleanStaleRuns, createRunDir, removeRunDir } from './run-dir.js';
import type { ScheduleWindow } from './schedule-checks.js';
import { STEPPED_SQL, type SteppedRow } from './step-checks.js';
import { type JobRow, type LedgerRow, verify } from './verify.js';
import type { WorkerProcessConfig } from './worker-process.js';

type Phase = 'starting' | 'running' | 'draining' | 'stopping' | 'done';

/** A worker's stop timeout: short, so that a stop past it is part of every graceful restart. */
const STOP_TIMEOUT_MS = 1_000;
const POLL_INTERVAL_MS = 5_000;
const REAP_INTERVAL_MS = 1_000;
const STATUS_EVERY_MS = 10_000;
/** A worker gets this long after SIGTERM before it counts as hung. */
const STOP_BOUND_MS = STOP_TIMEOUT_MS + 20_000;

export class SoakRun {
  private phase: Phase = 'starting';
  private runDir: string | null = null;
  private db: SoakDatabase | null = null;
  private proxy: TcpProxy | null = null;
  private fleet: Fleet | null = null;
  private cleaning: Promise<void> | null = null;
  private readonly crashes = new Map<string, { count: number; at: number }>();
  private readonly rng: Rng;
  /** The schedule's first tick (ms), from the setup. */
  private firstTickMs = 0;

  constructor(
    private readonly opts: SoakOptions,
    private readonly log: (line: string) => void,
  ) {
    this.rng = new Rng(opts.seed);
  }

  /** Runs the soak to its verdict: 0 passed, 1 a must-be-zero figure is not zero. */
  async run(): Promise<number> {
    const { db, fleet } = await this.start();
    this.phase = 'running';
    this.spawnProducer();
    const startedAt = new Date();
    const injector = this.injector(db);
    const status = setInterval(() => void this.statusLine(injector.faults.length), STATUS_EVERY_MS);
    await this.injectFaults(injector, startedAt.getTime() + this.opts.minutes * 60_000);

    this.log('the producer stops its load, the schedule pauses; draining');
    this.phase = 'draining';
    await this.stopLoad(fleet);
    await db.pauseSchedule();
    const drainStart = Date.now();
    const drained = await this.drain(db, Math.max(90_000, 12 * this.opts.leaseMs));
    const drainS = drained ? (Date.now() - drainStart) / 1000 : null;
    this.log(
      drained ? `drained in ${drainS?.toFixed(1)} s` : 'drain timed out: jobs are still pending or running',
    );
    clearInterval(status);
    // After the drain: the producer's waitFor calls have had every finish to see.
    for (const p of fleet.live('producer')) await fleet.terminate(p, 30_000);

    this.phase = 'stopping';
    this.log('stopping the workers (SIGTERM)');
    await Promise.all(fleet.live('worker').map((w) => fleet.terminate(w, STOP_BOUND_MS)));
    const durationS = (Date.now() - startedAt.getTime()) / 1000;
    return this.verdict(db, fleet, injector.faults, { startedAt, durationS, drainS });
  }

  /** Ends every process the run started and removes its folder; safe to call more than once. */
  cleanup(): Promise<void> {
    this.cleaning ??= (async () => {
      this.phase = 'done';
      await bounded(this.fleet?.killAll());
      await bounded(this.proxy?.close());
      await bounded(this.db?.close(), 20_000); // a fast shutdown, SIGKILL after 15 s
      if (this.runDir && !this.opts.keep) removeRunDir(this.runDir);
      else if (this.runDir) this.log(`run folder kept: ${this.runDir}`);
    })();
    return this.cleaning;
  }

  get cleaningUp(): boolean {
    return this.cleaning !== null;
  }

  /** The database, the proxy lanes and the workers, up and running. */
  private async start(): Promise<{ db: SoakDatabase; fleet: Fleet }> {
    const { opts } = this;
    await cleanStaleRuns(this.log);
    this.runDir = await createRunDir();
    this.log(
      `skiplock soak: seed ${opts.seed}, ${opts.minutes} min, ${opts.workers} workers × ${opts.concurrency}, lease ${opts.leaseMs} ms, ~${opts.rate} jobs/s (folder ${this.runDir})`,
    );
    const db = await SoakDatabase.start(path.join(this.runDir, 'pgdata'));
    this.db = db;
    this.firstTickMs = await db.setup();
    this.log(`PostgreSQL ${db.version} (embedded) on port ${db.port}`);
    this.proxy = new TcpProxy(() => db.port);
    for (let slot = 1; slot <= opts.workers; slot++) await this.proxy.addLane(`w${slot}`);
    await this.proxy.addLane('p');
    const fleet = new Fleet(this.runDir, (proc) => this.onCrash(proc));
    this.fleet = fleet;
    for (let slot = 1; slot <= opts.workers; slot++) this.spawnWorker(slot);
    await this.waitForWorkers(fleet, 60_000);
    this.log(`${fleet.live('worker').length} workers started`);
    return { db, fleet };
  }

  private spawnWorker(slot: number): Proc {
    const { db, proxy, fleet, opts } = this.running();
    return fleet.spawn(
      'worker',
      slot,
      'worker-process.ts',
      (name, recordsFile): WorkerProcessConfig => ({
        name,
        recordsFile,
        connectionString: db.url(proxy.lane(`w${slot}`).port, `soak-${name}`),
        leaseMs: opts.leaseMs,
        concurrency: opts.concurrency,
        pollIntervalMs: POLL_INTERVAL_MS,
        reapIntervalMs: REAP_INTERVAL_MS,
        stopTimeoutMs: STOP_TIMEOUT_MS,
      }),
    );
  }

  private spawnProducer(): Proc {
    const { db, proxy, fleet, opts } = this.running();
    return fleet.spawn(
      'producer',
      0,
      'producer-process.ts',
      (name, recordsFile): ProducerProcessConfig => ({
        name,
        recordsFile,
        connectionString: db.url(proxy.lane('p').port, `soak-${name}`),
        seed: opts.seed + 7_919 * (fleet.procs.length + 1),
        rate: opts.rate,
      }),
    );
  }

  private running() {
    if (!this.db || !this.proxy || !this.fleet) throw new Error('the soak has not started');
    return { db: this.db, proxy: this.proxy, fleet: this.fleet, opts: this.opts };
  }

  /** Logs a crash and starts a new process in its slot after a growing delay (0.5 s → 5 s). */
  private onCrash(proc: Proc): void {
    this.log(`CRASH ${proc.name} (pid ${proc.pid}) ${describeExit(proc)}: ${crashCause(proc)}`);
    if (this.phase !== 'running' && this.phase !== 'draining') return;
    const key = `${proc.role}${proc.slot}`;
    const last = this.crashes.get(key);
    const count = last && Date.now() - last.at < 30_000 ? last.count + 1 : 1;
    this.crashes.set(key, { count, at: Date.now() });
    const delay = Math.min(5_000, 500 * 2 ** (count - 1));
    setTimeout(() => {
      if (this.phase !== 'running' && this.phase !== 'draining') return;
      const next = proc.role === 'worker' ? this.spawnWorker(proc.slot) : this.spawnProducer();
      this.log(`restarted ${proc.name} as ${next.name} (pid ${next.pid}) after ${delay} ms`);
    }, delay);
  }

  private injector(db: SoakDatabase): FaultInjector {
    const { proxy, fleet, opts } = this.running();
    return new FaultInjector({
      rng: this.rng,
      fleet,
      db,
      proxy,
      leaseMs: opts.leaseMs,
      stopTimeoutMs: STOP_TIMEOUT_MS,
      outageMs: [10_000, opts.quick ? 12_000 : 20_000],
      types: opts.faults,
      spawnWorker: (slot) => this.spawnWorker(slot),
      laneOf: (proc) => (proc.role === 'worker' ? `w${proc.slot}` : 'p'),
      log: this.log,
    });
  }

  /** Faults one after another until `until`, and until every type has come up once. */
  private async injectFaults(injector: FaultInjector, until: number): Promise<void> {
    await sleep(5_000); // warm-up: a backlog and handlers in flight before the first fault
    while (Date.now() < until || !injector.coveredAll()) {
      await injector.runOne();
      await sleep(this.opts.quick ? this.rng.int(1_500, 3_000) : this.rng.int(2_000, 6_000));
    }
  }

  /** Reads the outcome, prints the table (and the Markdown report), returns the exit code. */
  private async verdict(
    db: SoakDatabase,
    fleet: Fleet,
    faults: Fault[],
    run: Pick<RunInfo, 'startedAt' | 'durationS' | 'drainS'>,
  ): Promise<number> {
    this.log('verifying');
    const jobs = await db.query<JobRow>(JOBS_SQL, [], 30_000);
    const ledger = await db.query<LedgerRow>('SELECT job_id::text, run_id FROM soak.ledger', [], 30_000);
    const transitions = await db.query<Transition>(
      `SELECT job_id::text AS job, old_status AS "from", new_status AS "to",
              (extract(epoch FROM at) * 1000000)::float8 AS "atUs",
              (extract(epoch FROM run_started_at) * 1000000)::float8 AS "startedUs"
         FROM soak.transitions ORDER BY seq`,
      [],
      30_000,
    );
    const edges = await db.query<Edge>(
      'SELECT DISTINCT job_id::text, depends_on::text FROM soak.edges',
      [],
      30_000,
    );
    const next = await db.query<{ next_ms: number }>(
      `SELECT (extract(epoch FROM next_run_at) * 1000)::float8 AS next_ms FROM skiplock.schedules WHERE name = $1`,
      [SCHEDULE.name],
      30_000,
    );
    const schedule: ScheduleWindow | null = next[0]
      ? { firstTickMs: this.firstTickMs, nextRunAtMs: next[0].next_ms }
      : null;
    const stepped = await db.query<SteppedRow>(STEPPED_SQL, [], 30_000);
    const verdict = verify({
      procs: fleet.procs,
      faults,
      jobs,
      ledger,
      transitions,
      edges,
      schedule,
      stepped,
    });
    const { opts } = this;
    const info: RunInfo = {
      ...run,
      seed: opts.seed,
      minutes: opts.minutes,
      workers: opts.workers,
      concurrency: opts.concurrency,
      leaseMs: opts.leaseMs,
      rate: opts.rate,
      postgres: db.version.replace(/-beta.*$/, ''),
      node: process.version,
    };
    process.stdout.write(textReport(info, verdict));
    if (opts.keep && this.runDir) {
      // Every finding (the table shows 8 per kind) and the fault log, for a closer look.
      writeFileSync(
        path.join(this.runDir, 'verdict.json'),
        JSON.stringify({ info, verdict, faults }, null, 2),
      );
    }
    if (opts.report) {
      writeFileSync(opts.report, markdownReport(info, verdict, faults));
      this.log(`report written to ${opts.report}`);
    }
    return verdict.failed ? 1 : 0;
  }

  /** SIGUSR2 to the producer: it stops its load, finishes what is in flight and says so. */
  private async stopLoad(fleet: Fleet): Promise<void> {
    const producers = fleet.live('producer');
    for (const p of producers) fleet.signal(p, 'SIGUSR2');
    const deadline = Date.now() + 30_000;
    const stopped = (p: Proc) =>
      p.exitedAt !== null ||
      readRecords<ProducerRecord>(p.recordsFile).some((r) => r.type === 'life' && r.what === 'load-stopped');
    while (!producers.every(stopped) && Date.now() < deadline) await sleep(100);
  }

  /** Waits until each worker has recorded its start (or ended). */
  private async waitForWorkers(fleet: Fleet, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const pending = fleet
        .live('worker')
        .filter((p) => !readRecords<WorkerRecord>(p.recordsFile).some((r) => r.type === 'life'));
      if (pending.length === 0) return;
      if (Date.now() > deadline)
        throw new Error(`workers did not start: ${pending.map((p) => p.name).join(', ')}`);
      await sleep(200);
    }
  }

  /** Waits until no job is pending or running; false on timeout. */
  private async drain(db: SoakDatabase, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    let lastLine = Date.now();
    for (;;) {
      const rows = await db
        .query<{ active: number }>(
          `SELECT count(*) FILTER (WHERE status IN ('pending', 'running'))::int AS active FROM skiplock.jobs`,
        )
        .catch(() => [{ active: -1 }]);
      const active = rows[0]?.active ?? -1;
      if (active === 0) return true;
      if (Date.now() > deadline) return false;
      if (Date.now() - lastLine > STATUS_EVERY_MS) {
        lastLine = Date.now();
        this.log(`draining: ${active < 0 ? 'database unreachable' : `${active} jobs pending or running`}`);
      }
      await sleep(500);
    }
  }

  private async statusLine(faults: number): Promise<void> {
    const { db, fleet } = this.running();
    const crashes = fleet.procs.filter((p) => p.crashed).length;
    const tail = `workers ${fleet.live('worker').length} | faults ${faults} | crashes ${crashes}`;
    try {
      const rows = await db.query<{ status: string; n: number }>(
        'SELECT status, count(*)::int AS n FROM skiplock.jobs GROUP BY status ORDER BY status',
      );
      this.log(`status: ${rows.map((r) => `${r.status} ${r.n}`).join(', ') || 'no jobs yet'} | ${tail}`);
    } catch {
      this.log(`status: database unreachable | ${tail}`);
    }
  }
}

/** Every job the run wrote: the table's rows, and the rows prune deleted as they were then. */
const JOB_COLUMNS = `id::text, status, payload->>'ref' AS ref, payload->>'kind' AS kind,
       payload->>'finish' AS finish, result->>'run' AS result_run,
       last_error, attempts, max_attempts, worker_id, queue, group_key, dedupe_key, pending_key,
       run_on_dependency_failure AS run_on_failure,
       (extract(epoch FROM created_at) * 1000000)::float8 AS created_us,
       (extract(epoch FROM updated_at) * 1000)::float8 AS updated_ms,
       (extract(epoch FROM lease_until) * 1000)::float8 AS lease_ms`;
const JOBS_SQL = `
  SELECT ${JOB_COLUMNS}, false AS deleted FROM skiplock.jobs
  UNION ALL
  SELECT ${JOB_COLUMNS}, true AS deleted
    FROM soak.deleted AS d, jsonb_populate_record(NULL::skiplock.jobs, d.job) AS r
   WHERE NOT EXISTS (SELECT 1 FROM skiplock.jobs AS j WHERE j.id = d.job_id)`;

/** Waits for a clean-up step, but never forever and never with an error. */
async function bounded(step: Promise<void> | undefined, ms = 5_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    step?.catch(() => undefined),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    }),
  ]);
  clearTimeout(timer);
}
