/**
 * pg-boss 12 with its documented fast settings (pgboss.io/api/workers): batch fetch
 * (`batchSize`, two fetch loops per process with `localConcurrency: 2`), `perJobResults` so each
 * job's outcome is recorded on its own, `burstWhenBatchFull`, the shortest polling interval, and
 * LISTEN/NOTIFY wake-up (`useListenNotify` + the queue's `notify`).
 */
import { adminPool, dropSchema, ident } from '../lib/db.js';
import { peerVersion } from '../lib/paths.js';
import type { BenchEnv, BenchPayload, Consumer, ConsumerOptions, Producer, SystemDriver } from './types.js';
import { importPeer, TASK } from './types.js';

export const PGBOSS_SCHEMA = 'bench_pgboss';
const LOCAL_CONCURRENCY = 2;

interface PgBossJob {
  id: string;
  data: BenchPayload;
}
interface PgBoss {
  start(): Promise<unknown>;
  stop(options?: { graceful?: boolean; timeout?: number; close?: boolean }): Promise<void>;
  on(event: string, listener: (value: unknown) => void): unknown;
  createQueue(name: string, options?: Record<string, unknown>): Promise<void>;
  send(name: string, data: object): Promise<string | null>;
  insert(name: string, jobs: { data: object; group?: { id: string } }[]): Promise<unknown>;
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
  readonly noConcurrencyLimit =
    "no global limit of N running jobs (a queue's policy allows one active job, or none, per singleton key)";
  private mod: PgBossModule | null = null;

  /** W9: jobs carry `group: { id }`; the consumer's `work()` gets `groupConcurrency` (global, in the database). */
  async limitGroups(_n: number): Promise<void> {}

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
          payloads.map((data) => (data.g === undefined ? { data } : { data, group: { id: `g${data.g}` } })),
        );
      },
      close: () => boss.stop({ graceful: true, timeout: 10_000 }),
    };
  }

  async consumer(options: ConsumerOptions): Promise<Consumer> {
    const boss = await this.boss(options.onError);
    try {
      await boss.work(
        TASK,
        {
          batchSize: batchSize(options.concurrency),
          localConcurrency: LOCAL_CONCURRENCY,
          perJobResults: true,
          burstWhenBatchFull: true,
          pollingIntervalSeconds: 0.5,
          ...(options.groupConcurrency ? { groupConcurrency: options.groupConcurrency } : {}),
        },
        async (jobs) => {
          for (const job of jobs) options.onJob(job.data);
          // W9: the batch's jobs run side by side, each for handlerMs.
          if (options.handlerMs) await new Promise((resolve) => setTimeout(resolve, options.handlerMs));
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

  private async boss(onError: (error: unknown) => void): Promise<PgBoss> {
    const { PgBoss } = await this.load();
    const boss = new PgBoss({
      connectionString: this.env.databaseUrl,
      schema: PGBOSS_SCHEMA,
      useListenNotify: true,
    });
    boss.on('error', onError);
    boss.on('warning', () => {});
    await boss.start();
    return boss;
  }
}
