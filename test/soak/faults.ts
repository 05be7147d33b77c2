/**
 * The fault injector: one fault at a time, of a type drawn from a shuffled deck (so every type
 * comes up once before any comes up twice), each logged when it begins and when it ends.
 *
 * | type                 | what it does                                                              |
 * |----------------------|---------------------------------------------------------------------------|
 * | kill-worker          | SIGKILL a worker, start a new one in its slot 0.5–2 s later               |
 * | pause-worker         | SIGSTOP a worker for its lease + 1–4 s, then SIGCONT                      |
 * | terminate-backends   | pg_terminate_backend on 1–4 worker/producer connections, `idle in transaction` ones first |
 * | db-restart-fast      | fast shutdown of PostgreSQL, start again at once                          |
 * | db-restart-immediate | immediate shutdown (crash recovery at start), start again at once         |
 * | db-outage            | fast shutdown, 10–20 s down, start again                                  |
 * | partition            | one worker's proxy lane (or every lane) drops silently for lease + 2–5 s, then heals |
 * | graceful-restart     | a rolling deploy: start a new worker in the slot, SIGTERM the old one     |
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { SoakDatabase } from './database.js';
import { describeExit, type Fleet, type Proc } from './fleet.js';
import type { TcpProxy } from './proxy.js';
import { readRecords, type WorkerRecord } from './records.js';
import type { Rng } from './rng.js';

export const FAULT_TYPES = [
  'kill-worker',
  'pause-worker',
  'terminate-backends',
  'db-restart-fast',
  'db-restart-immediate',
  'db-outage',
  'partition',
  'graceful-restart',
] as const;

export type FaultType = (typeof FAULT_TYPES)[number];

export interface Fault {
  n: number;
  type: FaultType;
  /** Names of the processes it hit (every worker for a database fault). */
  victims: string[];
  start: number;
  end: number;
  detail: string;
}

export interface FaultDeps {
  rng: Rng;
  fleet: Fleet;
  db: SoakDatabase;
  proxy: TcpProxy;
  leaseMs: number;
  stopTimeoutMs: number;
  outageMs: [number, number];
  /** The fault types to draw from (default: all). */
  types: readonly FaultType[];
  /** Starts a worker process in `slot`. */
  spawnWorker(slot: number): Proc;
  /** The proxy lane of a worker slot, and the producer's. */
  laneOf(proc: Proc): string;
  log(line: string): void;
}

export class FaultInjector {
  readonly faults: Fault[] = [];
  private deck: FaultType[] = [];
  private readonly seen = new Set<FaultType>();

  constructor(private readonly deps: FaultDeps) {}

  /** Every fault type has run at least once. */
  coveredAll(): boolean {
    return this.deps.types.every((type) => this.seen.has(type));
  }

  /** Runs the next fault of the deck to its end. */
  async runOne(): Promise<Fault> {
    if (this.deck.length === 0) this.deck = this.deps.rng.shuffle(this.deps.types);
    const type = this.deck.shift()!;
    this.seen.add(type);
    const fault: Fault = {
      n: this.faults.length + 1,
      type,
      victims: [],
      start: Date.now(),
      end: 0,
      detail: '',
    };
    this.faults.push(fault);
    const say = (text: string) => this.deps.log(`fault #${fault.n} ${type}: ${text}`);
    await this.run(fault, say);
    fault.end = Date.now();
    say(`ended (${((fault.end - fault.start) / 1000).toFixed(1)} s)`);
    return fault;
  }

  private async run(fault: Fault, say: (text: string) => void): Promise<void> {
    const { rng, fleet, db, proxy, leaseMs } = this.deps;
    const workers = fleet.live('worker');
    const victim = await this.pickVictim(workers);
    const allWorkers = () => workers.map((w) => w.name);
    switch (fault.type) {
      case 'kill-worker': {
        if (!victim) return say('no live worker');
        fault.victims = [victim.name];
        say(`SIGKILL ${victim.name} (pid ${victim.pid})`);
        await fleet.kill(victim);
        await sleep(rng.int(500, 2_000));
        const next = this.deps.spawnWorker(victim.slot);
        fault.detail = `killed ${victim.name}, started ${next.name}`;
        return say(`started ${next.name} (pid ${next.pid})`);
      }
      case 'pause-worker': {
        if (!victim) return say('no live worker');
        const ms = leaseMs + rng.int(1_000, 4_000);
        fault.victims = [victim.name];
        fault.detail = `SIGSTOP ${victim.name} for ${ms} ms`;
        say(
          `SIGSTOP ${victim.name} (pid ${victim.pid}) for ${(ms / 1000).toFixed(1)} s (lease ${leaseMs / 1000} s)`,
        );
        fleet.pause(victim);
        await sleep(ms);
        fleet.resume(victim);
        fault.end = Date.now();
        return say(`SIGCONT ${victim.name}`);
      }
      case 'terminate-backends':
        return this.terminateBackends(fault, say);
      case 'db-restart-fast':
      case 'db-restart-immediate': {
        const mode = fault.type === 'db-restart-fast' ? 'fast' : 'immediate';
        fault.victims = allWorkers();
        say(`${mode} shutdown of PostgreSQL`);
        await db.stop(mode);
        await db.startAgain();
        fault.detail = `${mode} shutdown, restarted`;
        return say('PostgreSQL accepts connections again');
      }
      case 'db-outage': {
        const ms = rng.int(...this.deps.outageMs);
        fault.victims = allWorkers();
        fault.detail = `down for ${ms} ms`;
        say(`fast shutdown of PostgreSQL, down for ${(ms / 1000).toFixed(1)} s`);
        await db.stop('fast');
        await sleep(ms);
        await db.startAgain();
        return say('PostgreSQL accepts connections again');
      }
      case 'partition': {
        const ms = leaseMs + rng.int(2_000, 5_000);
        const everyone = !victim || rng.chance(0.35);
        const procs = everyone ? fleet.live() : [victim];
        const lanes = everyone ? [...proxy.lanes.keys()] : [this.deps.laneOf(victim)];
        fault.victims = procs.map((p) => p.name);
        fault.detail = `${everyone ? 'every lane' : `lane of ${victim.name}`} silent for ${ms} ms`;
        say(`${fault.detail} (${fault.victims.join(', ')})`);
        for (const lane of lanes) proxy.lane(lane).partition();
        await sleep(ms);
        for (const lane of lanes) proxy.lane(lane).heal();
        return say('healed: held bytes delivered');
      }
      case 'graceful-restart': {
        if (!victim) return say('no live worker');
        const next = this.deps.spawnWorker(victim.slot);
        fault.victims = [victim.name];
        say(`started ${next.name}, SIGTERM ${victim.name} (stop timeout ${this.deps.stopTimeoutMs} ms)`);
        const sent = Date.now();
        await fleet.terminate(victim, this.deps.stopTimeoutMs + 20_000);
        const took = Date.now() - sent;
        fault.detail = victim.hung
          ? `${victim.name} did not exit ${took} ms after SIGTERM: SIGKILLed`
          : `${victim.name} exited ${took} ms after SIGTERM (${describeExit(victim)})`;
        return say(fault.detail);
      }
    }
  }

  /**
   * A worker that is running jobs right now (a fault on an idle worker proves little), else any.
   * Workers are matched to the `worker_id` of running jobs through the id each one records at start.
   */
  private async pickVictim(workers: Proc[]): Promise<Proc | null> {
    if (workers.length === 0) return null;
    const rows = await this.deps.db
      .query<{ worker_id: string }>(`SELECT DISTINCT worker_id FROM skiplock.jobs WHERE status = 'running'`)
      .catch(() => []);
    const busy = new Set(rows.map((r) => r.worker_id));
    const candidates = workers.filter((w) => {
      const id = workerIdOf(w);
      return id !== null && busy.has(id);
    });
    return this.deps.rng.pick(candidates.length > 0 ? candidates : workers);
  }

  /** Terminates worker/producer backends, `idle in transaction` ones first (waits up to 3 s for one). */
  private async terminateBackends(fault: Fault, say: (text: string) => void): Promise<void> {
    const { rng, db } = this.deps;
    type Backend = { pid: number; app: string; state: string | null };
    let backends: Backend[] = [];
    for (let tries = 0; tries < 30; tries++) {
      backends = await db
        .query<Backend>(
          `SELECT pid, application_name AS app, state FROM pg_stat_activity
            WHERE application_name LIKE 'soak-w%' OR application_name LIKE 'soak-p.%'`,
        )
        .catch(() => []);
      if (backends.some((b) => b.state === 'idle in transaction')) break;
      await sleep(100);
    }
    const inTx = backends.filter((b) => b.state === 'idle in transaction').slice(0, 3);
    const others = rng
      .shuffle(backends.filter((b) => b.state !== 'idle in transaction'))
      .slice(0, rng.int(1, 2));
    const chosen = [...inTx, ...others];
    fault.victims = [...new Set(chosen.map((b) => b.app.replace(/^soak-/, '')))];
    fault.detail = chosen.map((b) => `${b.app} (${b.state ?? '?'})`).join(', ') || 'no backend found';
    say(`pg_terminate_backend on ${chosen.length} of ${backends.length} backends: ${fault.detail}`);
    for (const b of chosen) {
      await db.query('SELECT pg_terminate_backend($1)', [b.pid]).catch(() => undefined);
    }
  }
}

/** The worker id a worker process recorded when it started, or null before that. */
function workerIdOf(proc: Proc): string | null {
  const started = readRecords<WorkerRecord>(proc.recordsFile).find(
    (r) => r.type === 'life' && r.what === 'started',
  );
  return started?.type === 'life' ? (started.detail ?? null) : null;
}
