/**
 * pg-boss 12 with its documented fast settings (pgboss.io/api/workers): batch fetch
 * (`batchSize`, two fetch loops per process with `localConcurrency: 2`), `perJobResults` so each
 * job's outcome is recorded on its own, `burstWhenBatchFull`, the shortest polling interval, and
 * LISTEN/NOTIFY wake-up (`useListenNotify` + the queue's `notify`).
 */
import { adminPool, dropSchema, ident } from '../lib/db.js';
import { peerVersion } from '../lib/paths.js';
import type {
  BenchEnv,
  BenchPayload,
  Consumer,
  ConsumerOptions,
  FlowProducer,
  FlowShapes,
  Producer,
  SystemDriver,
} from './types.js';
import { BENCH_SUFFIX, importPeer, TASK } from './types.js';

export const PGBOSS_SCHEMA = `bench_pgboss${BENCH_SUFFIX}`;
const LOCAL_CONCURRENCY = 2;
/**
 * Workflows: seconds between passes of pg-boss's background flow resolver, which unblocks the
 * dependents of completed jobs (its least allowed; the default is 5).
 */
const FLOW_INTERVAL_SECONDS = 1;
/** Workflows: hops of the chain run on pg-boss (each waits for a resolver pass). */
const CHAIN_LIMIT = 60;

interface PgBossJob {
  id: string;
  data: BenchPayload;
}
interface PgBoss {
  start(): Promise<unknown>;
  stop(options?: { graceful?: boolean; timeout?: number; close?: boolean }): Promise<void>;
  on(event: string, listener: (value: unknown) => void): unknown;
  createQueue(name: string, options?: Record<string, unknown>): Promise<void>;
  deleteQueue(name: string): Promise<void>;
  send(name: string, data: object): Promise<string | null>;
  insert(
    name: string,
    jobs: { data: object; group?: { id: string }; singletonKey?: string }[],
  ): Promise<unknown>;
  flow(jobs: { ref: string; name: string; data: object; dependsOn?: string[] }[]): Promise<unknown>;
  work(
    name: string,
    options: Record<string, unknown>,
    handler: (jobs: PgBossJob[]) => Promise<{ id: string; status: 'completed' }[]>,
  ): Promise<string>;
}
interface PgBossModule {
  PgBoss: new (options: Record<string, unknown>) => PgBoss;
}

function batchSize(concurrency: number): number {
  return Math.max(1, Math.ceil(concurrency / LOCAL_CONCURRENCY));
}

export class PgBossDriver implements SystemDriver {
  readonly name = 'pg-boss' as const;
  readonly deletesCompleted = 'no' as const;
  /** W-batch: work() with batchSize hands its handler many jobs (here with perJobResults, as Skiplock's per-job outcomes). */
  readonly batching = 'handler' as const;
  readonly noSqlEnqueue =
    'no SQL function that enqueues: send() writes its INSERT from the client (its SQL functions manage queues)';
  readonly flowShapes: FlowShapes = {
    root: true,
    chainLimit: {
      length: CHAIN_LIMIT,
      why: `each hop waits for a pass of pg-boss's background flow resolver (every ${FLOW_INTERVAL_SECONDS} s at its shortest), so 1,000 hops would take about 20 minutes`,
    },
    api: `boss.flow(jobs) (one call per flow), jobs { ref, name, data, dependsOn: [refs] }; dependents are unblocked by the background flow resolver, new PgBoss({ flowIntervalSeconds: ${FLOW_INTERVAL_SECONDS} }) (its least; default 5), not by the completion, and it sends no NOTIFY: the worker finds them by polling, so work() gets notifyPollingIntervalSeconds: 0.5 (its least; the default, 30, left a dependent waiting up to 30 s); otherwise the work() settings of W2`,
  };
  readonly noConcurrencyLimit =
    "no global limit of N running jobs (a queue's policy allows one active job, or none, per singleton key)";
  private mod: PgBossModule | null = null;

  /** W9: jobs carry `group: { id }`; the consumer's `work()` gets `groupConcurrency` (global, in the database). */
  async limitGroups(_n: number): Promise<void> {}

  /**
   * W-seq: the bench queue made again with `policy: 'key_strict_fifo'` (FIFO per singletonKey:
   * successors held back while a job of the key is active, retrying or failed); jobs carry
   * `singletonKey: 's<n>'`.
   */
  async strictFifo(): Promise<void> {
    const boss = await this.boss(() => {});
    try {
      await boss.deleteQueue(TASK);
      await boss.createQueue(TASK, { policy: 'key_strict_fifo', notify: true });
    } finally {
      await boss.stop({ graceful: false, timeout: 5_000 });
    }
  }

  constructor(private readonly env: BenchEnv) {}

  async version(): Promise<string> {
    return peerVersion('pg-boss');
  }

  settings(concurrency: number): string {
    return `new PgBoss({ useListenNotify: true }) (pool max 10, default), createQueue(name, { notify: true }), work(name, { batchSize: ${batchSize(concurrency)}, localConcurrency: ${LOCAL_CONCURRENCY}, perJobResults: true, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 }) — up to ${batchSize(concurrency) * LOCAL_CONCURRENCY} jobs at once; batch API insert(), single send()`;
  }

  async unavailable(): Promise<string | null> {
    await this.load();
    return null;
  }

  async drop(): Promise<void> {
    await dropSchema(this.env.databaseUrl, PGBOSS_SCHEMA);
  }

  async reset(): Promise<void> {
    await this.drop();
    const boss = await this.boss(() => {});
    try {
      await boss.createQueue(TASK, { notify: true });
    } finally {
      await boss.stop({ graceful: false, timeout: 5_000 });
    }
  }

  async remaining(): Promise<number> {
    const { rows } = await adminPool(this.env.databaseUrl).query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${ident(PGBOSS_SCHEMA)}.job WHERE name = $1 AND state < 'completed'`,
      [TASK],
    );
    return rows[0]?.n ?? 0;
  }

  async producer(): Promise<Producer> {
    const boss = await this.boss(() => {});
    return {
      enqueueOne: async (payload: BenchPayload) => {
        await boss.send(TASK, payload);
      },
      enqueueBatch: async (payloads: readonly BenchPayload[]) => {
        await boss.insert(
          TASK,
          payloads.map((data) =>
            data.g !== undefined
              ? { data, group: { id: `g${data.g}` } }
              : data.s !== undefined
                ? { data, singletonKey: `s${data.s}` }
                : { data },
          ),
        );
      },
      close: () => boss.stop({ graceful: true, timeout: 10_000 }),
    };
  }

  /** Workflows: `boss.flow(jobs)`, one call per flow. */
  async flowProducer(): Promise<FlowProducer> {
    const boss = await this.boss(() => {}, true);
    const job = (i: number, dependsOn?: string[]) => ({
      ref: `n${i}`,
      name: TASK,
      data: { i, t: 0 },
      ...(dependsOn ? { dependsOn } : {}),
    });
    return {
      fanOut: async (children: number) => {
        const jobs = [job(0)];
        for (let i = 1; i <= children; i++) jobs.push(job(i, ['n0']));
        jobs.push(
          job(
            children + 1,
            Array.from({ length: children }, (_, k) => `n${k + 1}`),
          ),
        );
        await boss.flow(jobs);
      },
      chain: async (length: number) => {
        await boss.flow(Array.from({ length }, (_, i) => job(i, i > 0 ? [`n${i - 1}`] : undefined)));
      },
      small: async (base: number) => {
        await boss.flow([job(base), job(base + 1), job(base + 2, [`n${base}`, `n${base + 1}`])]);
      },
      close: () => boss.stop({ graceful: true, timeout: 10_000 }),
    };
  }

  /**
   * Workflows: when each job of the bench queue completed, by payload `i`, as pg-boss stored it
   * (`completed_on`, the database's clock: this machine's), in wall-clock ms.
   */
  async completedAt(): Promise<Map<number, number>> {
    const { rows } = await adminPool(this.env.databaseUrl).query<{ i: number; at: number }>(
      `SELECT (data->>'i')::int AS i, extract(epoch FROM completed_on) * 1000 AS at
         FROM ${ident(PGBOSS_SCHEMA)}.job WHERE name = $1 AND state = 'completed'`,
      [TASK],
    );
    return new Map(rows.map((row) => [Number(row.i), Number(row.at)]));
  }

  async consumer(options: ConsumerOptions): Promise<Consumer> {
    const boss = await this.boss(options.onError, options.flows);
    try {
      await boss.work(
        TASK,
        {
          batchSize: options.batchSize ?? batchSize(options.concurrency),
          localConcurrency: options.batchSize
            ? Math.max(1, Math.ceil(options.concurrency / options.batchSize))
            : LOCAL_CONCURRENCY,
          perJobResults: true,
          burstWhenBatchFull: true,
          pollingIntervalSeconds: 0.5,
          // Workflows: the flow resolver sends no NOTIFY, so an unblocked job waits for a poll,
          // every 30 s by default while NOTIFY is on: here at its shortest
          ...(options.flows ? { notifyPollingIntervalSeconds: 0.5 } : {}),
          ...(options.groupConcurrency ? { groupConcurrency: options.groupConcurrency } : {}),
        },
        async (jobs) => {
          for (const job of jobs) options.onJob(job.data);
          // W9: the batch's jobs run side by side, each for handlerMs.
          if (options.handlerMs) await new Promise((resolve) => setTimeout(resolve, options.handlerMs));
          if (options.onJobEnd) for (const job of jobs) options.onJobEnd(job.data);
          return jobs.map((job) => ({ id: job.id, status: 'completed' as const }));
        },
      );
    } catch (error) {
      await boss.stop({ graceful: false, timeout: 5_000 }).catch(() => {});
      throw error;
    }
    return { stop: () => boss.stop({ graceful: true, timeout: 10_000 }) };
  }

  async close(): Promise<void> {}

  private async load(): Promise<PgBossModule> {
    this.mod ??= await importPeer<PgBossModule>('pg-boss');
    return this.mod;
  }

  private async boss(onError: (error: unknown) => void, flows = false): Promise<PgBoss> {
    const { PgBoss } = await this.load();
    const boss = new PgBoss({
      connectionString: this.env.databaseUrl,
      schema: PGBOSS_SCHEMA,
      useListenNotify: true,
      ...(flows ? { flowIntervalSeconds: FLOW_INTERVAL_SECONDS } : {}),
    });
    boss.on('error', onError);
    boss.on('warning', () => {});
    await boss.start();
    return boss;
  }
}
