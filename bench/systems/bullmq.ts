/**
 * BullMQ 6 on Redis (ioredis), with its documented fast setting: the Worker's `concurrency`.
 * Everything else is default (completed jobs kept, as Skiplock keeps done rows). The calls the
 * Redis and the PostgreSQL backend (bullmq-pg.ts) share are in {@link BullMQBase}: the same
 * Queue / Worker / FlowProducer API, the backend chosen by a factory argument.
 */
import { peerVersion } from '../lib/paths.js';
import { withTimeout } from '../lib/util.js';
import type {
  BenchEnv,
  BenchPayload,
  Consumer,
  ConsumerOptions,
  FlowProducer,
  FlowShapes,
  Producer,
  SystemDriver,
  SystemName,
} from './types.js';
import { BENCH_SUFFIX, importPeer, TASK } from './types.js';

/** Key prefix of every key the benchmark writes (deleted before each repetition). */
export const BULL_PREFIX = `skiplock-bench${BENCH_SUFFIX}`;

interface BullQueue {
  add(name: string, data: unknown): Promise<unknown>;
  addBulk(jobs: { name: string; data: unknown }[]): Promise<unknown>;
  getJobCounts(...types: string[]): Promise<Record<string, number>>;
  waitUntilReady(): Promise<unknown>;
  setGlobalConcurrency(concurrency: number): Promise<number>;
  on(event: string, listener: (value: unknown) => void): unknown;
  close(): Promise<void>;
}
interface BullWorker {
  waitUntilReady(): Promise<unknown>;
  on(event: string, listener: (value: unknown) => void): unknown;
  close(): Promise<void>;
}
/** A node of a BullMQ flow: the parent runs after all its children completed. */
interface BullFlowJob {
  name: string;
  queueName: string;
  data: BenchPayload;
  prefix?: string;
  children?: BullFlowJob[];
}
interface BullFlowProducer {
  add(flow: BullFlowJob): Promise<unknown>;
  waitUntilReady(): Promise<unknown>;
  on(event: string, listener: (value: unknown) => void): unknown;
  close(): Promise<void>;
}
/** The backend factory argument of BullMQ's constructors (absent: Redis, the default). */
export type BullBackendFactory = unknown;
export interface BullMQ {
  FlowProducer: new (options: Record<string, unknown>, backend?: BullBackendFactory) => BullFlowProducer;
  Queue: new (name: string, options: Record<string, unknown>, backend?: BullBackendFactory) => BullQueue;
  Worker: new (
    name: string,
    processor: (job: { data: BenchPayload }) => Promise<void>,
    options: Record<string, unknown>,
    backend?: BullBackendFactory,
  ) => BullWorker;
  createPostgresBackend?: BullBackendFactory;
}
interface RedisClient {
  connect(): Promise<void>;
  ping(): Promise<string>;
  scan(cursor: string, ...args: (string | number)[]): Promise<[string, string[]]>;
  unlink(...keys: string[]): Promise<number>;
  info(section: string): Promise<string>;
  on(event: string, listener: (value: unknown) => void): unknown;
  disconnect(): void;
}
interface IORedis {
  Redis: new (options: Record<string, unknown>) => RedisClient;
}

/**
 * What BullMQ's drivers share: the Queue, Worker and FlowProducer calls, on the backend that
 * `backend()` returns and the connection options that `connection()` gives.
 */
export abstract class BullMQBase {
  /** W-batch: not run (see the report). */
  readonly noBatch =
    'batches (a processor that gets many jobs at once) are a BullMQ Pro feature (paid, not open source): not run';
  abstract readonly name: SystemName;
  readonly noGroups = 'groups and per-group limits are in BullMQ Pro only (not open source)';
  readonly noStrictFifo =
    'no per-key FIFO in open-source BullMQ: groups (one running job per group, in order) are BullMQ Pro only';
  protected mod: BullMQ | null = null;
  private counter: BullQueue | null = null;

  constructor(protected readonly env: BenchEnv) {}

  /** The `connection` option of a Queue, Worker or FlowProducer (`worker`: the Worker's). */
  protected abstract connection(worker?: boolean): Record<string, unknown>;
  /** Options every Queue, Worker and FlowProducer gets beside `connection` (Redis: the key prefix). */
  protected abstract common(): Record<string, unknown>;
  /** The backend factory (undefined: Redis). */
  protected abstract backend(): Promise<BullBackendFactory>;
  /** Options of the Worker beside `connection`, `concurrency` and the common ones. */
  protected workerOptions(_options: ConsumerOptions): Record<string, unknown> {
    return {};
  }

  /** A Queue on the bench queue, its errors dropped (they surface in the calls). */
  protected async queue(connection = this.connection()): Promise<BullQueue> {
    const { Queue } = await this.load();
    const queue = new Queue(TASK, { connection, ...this.common() }, await this.backend());
    queue.on('error', () => {});
    return queue;
  }

  /** W8: `queue.setGlobalConcurrency(n)` (BullMQ's open-source global concurrency). */
  async limitConcurrency(n: number): Promise<void> {
    const queue = await this.queue();
    try {
      await queue.setGlobalConcurrency(n);
    } finally {
      await queue.close();
    }
  }

  async remaining(): Promise<number> {
    this.counter ??= await this.queue();
    const counts = await this.counter.getJobCounts(
      'wait',
      'active',
      'delayed',
      'prioritized',
      'paused',
      'waiting-children',
    );
    return Object.values(counts).reduce((sum, n) => sum + n, 0);
  }

  async producer(): Promise<Producer> {
    const queue = await this.queue();
    await withTimeout(queue.waitUntilReady(), 10_000, 'BullMQ queue connection');
    return {
      enqueueOne: async (payload: BenchPayload) => {
        await queue.add('noop', payload);
      },
      enqueueBatch: async (payloads: readonly BenchPayload[]) => {
        await queue.addBulk(payloads.map((data) => ({ name: 'noop', data })));
      },
      close: () => queue.close(),
    };
  }

  /** Workflows: `FlowProducer.add(tree)`, one call per flow; a parent waits for its children. */
  async flowProducer(): Promise<FlowProducer> {
    const { FlowProducer } = await this.load();
    const flows = new FlowProducer({ connection: this.connection(), ...this.common() }, await this.backend());
    flows.on('error', () => {});
    await withTimeout(flows.waitUntilReady(), 10_000, 'BullMQ flow producer connection');
    const job = (i: number, children?: BullFlowJob[]): BullFlowJob => ({
      name: 'noop',
      queueName: TASK,
      data: { i, t: 0 },
      ...this.common(),
      ...(children ? { children } : {}),
    });
    return {
      // no root: a job cannot be the child of 10,000 parents
      fanOut: async (children: number) => {
        await flows.add(
          job(
            children + 1,
            Array.from({ length: children }, (_, k) => job(k + 1)),
          ),
        );
      },
      chain: async (length: number) => {
        let tree = job(0);
        for (let i = 1; i < length; i++) tree = job(i, [tree]);
        await flows.add(tree);
      },
      small: async (base: number) => {
        await flows.add(job(base + 2, [job(base), job(base + 1)]));
      },
      close: () => flows.close(),
    };
  }

  async consumer(options: ConsumerOptions): Promise<Consumer> {
    const { Worker } = await this.load();
    const worker = new Worker(
      TASK,
      async (job) => {
        options.onJob(job.data);
        if (options.handlerMs) await new Promise((resolve) => setTimeout(resolve, options.handlerMs));
        options.onJobEnd?.(job.data);
      },
      {
        connection: this.connection(true),
        ...this.common(),
        concurrency: options.concurrency,
        ...this.workerOptions(options),
      },
      await this.backend(),
    );
    worker.on('error', options.onError);
    const { onAck } = options;
    if (onAck) worker.on('completed', (job) => onAck((job as { data: BenchPayload }).data));
    try {
      await withTimeout(worker.waitUntilReady(), 10_000, 'BullMQ worker connection');
    } catch (error) {
      await worker.close().catch(() => {});
      throw error;
    }
    return { stop: () => worker.close() };
  }

  async close(): Promise<void> {
    await this.closeCounter();
  }

  protected async closeCounter(): Promise<void> {
    const counter = this.counter;
    this.counter = null;
    await counter?.close();
  }

  protected async load(): Promise<BullMQ> {
    this.mod ??= await importPeer<BullMQ>('bullmq');
    return this.mod;
  }
}

export class BullMQDriver extends BullMQBase implements SystemDriver {
  readonly name = 'bullmq' as const;
  readonly deletesCompleted = 'no' as const;
  readonly noSqlEnqueue = 'not on PostgreSQL';
  readonly flowShapes: FlowShapes = {
    root: false,
    api: 'new FlowProducer().add(tree) (one call per flow; a parent runs after all its children): the fan-in is a parent with 10,000 children and no root above them (a job has at most one parent); a chain nests each job as the only child of the next',
  };

  async version(): Promise<string> {
    return `${peerVersion('bullmq')} (ioredis ${peerVersion('ioredis')})`;
  }

  settings(concurrency: number): string {
    return `new Worker(name, processor, { concurrency: ${concurrency} }), defaults otherwise; batch API addBulk, single add (one Queue, one ioredis connection)`;
  }

  async unavailable(): Promise<string | null> {
    const { host, port } = this.env.redis;
    try {
      await this.withRedis(async (redis) => {
        await redis.ping();
      });
    } catch (error) {
      return `Redis at ${host}:${port} does not answer (${error instanceof Error ? error.message : String(error)})`;
    }
    await this.load();
    return null;
  }

  /** The Redis server's version, or null when it does not answer. */
  async redisVersion(): Promise<string | null> {
    try {
      return await this.withRedis(
        async (redis) => /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? '?',
      );
    } catch {
      return null;
    }
  }

  /** CPU seconds the Redis server has used so far (INFO cpu: used_cpu_user + used_cpu_sys), or null. */
  async redisCpuSeconds(): Promise<number | null> {
    try {
      return await this.withRedis(async (redis) => {
        const info = await redis.info('cpu');
        const user = Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]);
        const sys = Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1]);
        return Number.isFinite(user + sys) ? user + sys : null;
      });
    } catch {
      return null;
    }
  }

  async drop(): Promise<void> {
    await this.reset();
  }

  async reset(): Promise<void> {
    await this.closeCounter();
    await this.withRedis(async (redis) => {
      let cursor = '0';
      for (let round = 0; round < 100_000; round++) {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${BULL_PREFIX}:*`, 'COUNT', 1000);
        if (keys.length > 0) await redis.unlink(...keys);
        cursor = next;
        if (cursor === '0') return;
      }
      throw new Error('Redis SCAN did not finish');
    });
  }

  protected connection(worker = false): Record<string, unknown> {
    const { host, port } = this.env.redis;
    return worker ? { host, port, maxRetriesPerRequest: null } : { host, port };
  }

  protected common(): Record<string, unknown> {
    return { prefix: BULL_PREFIX };
  }

  protected async backend(): Promise<BullBackendFactory> {
    return undefined;
  }

  /** A short-lived ioredis client that fails fast instead of retrying forever. */
  private async withRedis<T>(fn: (redis: RedisClient) => Promise<T>): Promise<T> {
    const { Redis } = await importPeer<IORedis>('ioredis');
    const redis = new Redis({
      ...this.connection(),
      lazyConnect: true,
      connectTimeout: 2_000,
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
      retryStrategy: () => null,
    });
    redis.on('error', () => {});
    try {
      await withTimeout(redis.connect(), 3_000, 'Redis connect');
      return await withTimeout(fn(redis), 60_000, 'Redis command');
    } finally {
      redis.disconnect();
    }
  }
}
