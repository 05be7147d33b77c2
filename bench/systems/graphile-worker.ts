/**
 * graphile-worker 0.18 with its documented fast settings (worker.graphile.org/docs/performance):
 * a local queue (jobs fetched and locked in batches by the pool) and batched completion
 * (`completeJobBatchDelay` / `failJobBatchDelay`), prepared statements (its default).
 */
import { adminPool, dropSchema, ident } from '../lib/db.js';
import { peerVersion } from '../lib/paths.js';
import type { BenchEnv, BenchPayload, Consumer, ConsumerOptions, Producer, SystemDriver } from './types.js';
import { BENCH_SUFFIX, importPeer, TASK } from './types.js';

export const GW_SCHEMA = `bench_graphile_worker${BENCH_SUFFIX}`;
/** Jobs fetched (and locked) per local-queue fetch. */
const LOCAL_QUEUE_SIZE = 2000;
/** Milliseconds a completion waits for others to share its UPDATE (0: those of the same tick). */
const COMPLETE_BATCH_DELAY_MS = 0;

type LogFunction = (level: string, message: string, meta?: unknown) => void;
interface WorkerUtils {
  addJob(identifier: string, payload: unknown): Promise<unknown>;
  addJobs(specs: { identifier: string; payload: unknown; queueName?: string }[]): Promise<unknown>;
  release(): Promise<void>;
}
interface Runner {
  stop(): Promise<void>;
  promise: Promise<void>;
}
interface GraphileWorker {
  Logger: new (factory: (scope: unknown) => LogFunction) => unknown;
  runMigrations(options: Record<string, unknown>): Promise<void>;
  makeWorkerUtils(options: Record<string, unknown>): Promise<WorkerUtils>;
  run(options: Record<string, unknown>): Promise<Runner>;
}

function poolSize(concurrency: number): number {
  return Math.min(concurrency + 2, 20);
}

export class GraphileWorkerDriver implements SystemDriver {
  readonly name = 'graphile-worker' as const;
  readonly deletesCompleted = 'always' as const;
  /**
   * W-batch: graphile-worker has no handler that takes many jobs; its "batch jobs" are one job
   * whose payload is an array of items (merged by job_key at enqueue), which its task function
   * gets whole: the producer builds such jobs (`enqueueBatchJobs`).
   */
  readonly batching = 'payload' as const;
  readonly noFlows =
    'no job dependencies: a job cannot wait for other jobs (a task can only add jobs as it runs)';
  readonly noConcurrencyLimit =
    'no global limit of N running jobs: a named job queue runs its jobs one at a time (N = 1 only)';
  private mod: GraphileWorker | null = null;

  /** W9: a named job queue per group (`queueName`): graphile-worker runs one job of it at a time. */
  async limitGroups(n: number): Promise<void> {
    if (n !== 1) throw new Error('not supported: a named job queue runs one job at a time (n = 1 only)');
  }

  /** W-seq: a named job queue per key (`queueName`): its jobs run one at a time, in order. */
  async strictFifo(): Promise<void> {}

  constructor(private readonly env: BenchEnv) {}

  async version(): Promise<string> {
    return peerVersion('graphile-worker');
  }

  settings(concurrency: number): string {
    return `run({ concurrency: ${concurrency}, maxPoolSize: ${poolSize(concurrency)}, preset: { worker: { localQueue: { size: ${LOCAL_QUEUE_SIZE} }, completeJobBatchDelay: ${COMPLETE_BATCH_DELAY_MS}, failJobBatchDelay: ${COMPLETE_BATCH_DELAY_MS} } } }), preparedStatements on (default), LISTEN wake-up (default); batch API addJobs, single addJob (WorkerUtils, default pool 10)`;
  }

  async unavailable(): Promise<string | null> {
    await this.load();
    return null;
  }

  async drop(): Promise<void> {
    await dropSchema(this.env.databaseUrl, GW_SCHEMA);
  }

  async reset(): Promise<void> {
    const gw = await this.load();
    await this.drop();
    await gw.runMigrations({
      connectionString: this.env.databaseUrl,
      schema: GW_SCHEMA,
      logger: this.logger(),
    });
  }

  /** W4-sql: its SQL function `add_job(identifier, payload)` (what its own addJob calls). */
  sqlEnqueue(): string {
    return `SELECT id FROM ${ident(GW_SCHEMA)}.add_job($1, $2::json)`;
  }

  async remaining(): Promise<number> {
    const { rows } = await adminPool(this.env.databaseUrl).query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${ident(GW_SCHEMA)}._private_jobs`,
    );
    return rows[0]?.n ?? 0;
  }

  async producer(): Promise<Producer> {
    const gw = await this.load();
    const utils = await gw.makeWorkerUtils({
      connectionString: this.env.databaseUrl,
      schema: GW_SCHEMA,
      logger: this.logger(),
    });
    return {
      enqueueOne: async (payload: BenchPayload) => {
        await utils.addJob(TASK, payload);
      },
      enqueueBatch: async (payloads: readonly BenchPayload[]) => {
        await utils.addJobs(
          payloads.map((payload) =>
            payload.g !== undefined
              ? { identifier: TASK, payload, queueName: `g${payload.g}` }
              : payload.s !== undefined
                ? { identifier: TASK, payload, queueName: `s${payload.s}` }
                : { identifier: TASK, payload },
          ),
        );
      },
      close: () => utils.release(),
    };
  }

  /** W-batch: its "batch jobs": one job per `size` items, the payload an array of them (addJobs). */
  async enqueueBatchJobs(payloads: readonly BenchPayload[], size: number): Promise<void> {
    const gw = await this.load();
    const utils = await gw.makeWorkerUtils({
      connectionString: this.env.databaseUrl,
      schema: GW_SCHEMA,
      logger: this.logger(),
    });
    try {
      const specs: { identifier: string; payload: unknown }[] = [];
      for (let from = 0; from < payloads.length; from += size)
        specs.push({ identifier: TASK, payload: payloads.slice(from, from + size) });
      for (let from = 0; from < specs.length; from += 100) await utils.addJobs(specs.slice(from, from + 100));
    } finally {
      await utils.release();
    }
  }

  async consumer(options: ConsumerOptions): Promise<Consumer> {
    const gw = await this.load();
    const runner = await gw.run({
      connectionString: this.env.databaseUrl,
      schema: GW_SCHEMA,
      concurrency: options.concurrency,
      maxPoolSize: poolSize(options.concurrency),
      noHandleSignals: true,
      logger: this.logger(options.onError),
      taskList: {
        [TASK]: async (payload: BenchPayload | BenchPayload[]) => {
          // W-batch: a batch job's payload is its items
          if (Array.isArray(payload)) {
            for (const item of payload) options.onJob(item);
            return;
          }
          options.onJob(payload);
          if (options.handlerMs) await new Promise((resolve) => setTimeout(resolve, options.handlerMs));
        },
      },
      preset: {
        worker: {
          localQueue: { size: LOCAL_QUEUE_SIZE },
          completeJobBatchDelay: COMPLETE_BATCH_DELAY_MS,
          failJobBatchDelay: COMPLETE_BATCH_DELAY_MS,
        },
      },
    });
    runner.promise.catch((error: unknown) => options.onError(error));
    return { stop: () => runner.stop() };
  }

  async close(): Promise<void> {}

  private async load(): Promise<GraphileWorker> {
    this.mod ??= await importPeer<GraphileWorker>('graphile-worker');
    return this.mod;
  }

  /** A logger that drops everything but errors (which go to `onError`). */
  private logger(onError?: (error: unknown) => void): unknown {
    const gw = this.mod as GraphileWorker;
    return new gw.Logger(() => (level, message) => {
      if (level === 'error') onError?.(new Error(`graphile-worker: ${message}`));
    });
  }
}
