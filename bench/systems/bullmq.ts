/**
 * BullMQ 6 on Redis (ioredis), with its documented fast setting: the Worker's `concurrency`.
 * Everything else is default (completed jobs kept, as Skiplock keeps done rows).
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
interface BullMQ {
  FlowProducer: new (options: Record<string, unknown>) => BullFlowProducer;
  Queue: new (name: string, options: Record<string, unknown>) => BullQueue;
  Worker: new (
    name: string,
    processor: (job: { data: BenchPayload }) => Promise<void>,
    options: Record<string, unknown>,
  ) => BullWorker;
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

export class BullMQDriver implements SystemDriver {
  readonly name = 'bullmq' as const;
  readonly noGroups = 'groups and per-group limits are in BullMQ Pro only (not open source)';
  readonly deletesCompleted = 'no' as const;
  readonly flowShapes: FlowShapes = {
    root: false,
    api: 'new FlowProducer().add(tree) (one call per flow; a parent runs after all its children): the fan-in is a parent with 10,000 children and no root above them (a job has at most one parent); a chain nests each job as the only child of the next',
  };
  private mod: BullMQ | null = null;
  private counter: BullQueue | null = null;

  constructor(private readonly env: BenchEnv) {}

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

  /** W8: `queue.setGlobalConcurrency(n)` (BullMQ's open-source global concurrency, Redis-side). */
  async limitConcurrency(n: number): Promise<void> {
    const { Queue } = await this.load();
    const queue = new Queue(TASK, { connection: this.connection(), prefix: BULL_PREFIX });
    queue.on('error', () => {});
    try {
      await queue.setGlobalConcurrency(n);
    } finally {
      await queue.close();
    }
  }

  async remaining(): Promise<number> {
    if (!this.counter) {
      const { Queue } = await this.load();
      this.counter = new Queue(TASK, { connection: this.connection(), prefix: BULL_PREFIX });
      this.counter.on('error', () => {});
    }
    const counts = await this.counter.getJobCounts('wait', 'active', 'delayed', 'prioritized', 'paused');
    return Object.values(counts).reduce((sum, n) => sum + n, 0);
  }

  async producer(): Promise<Producer> {
    const { Queue } = await this.load();
    const queue = new Queue(TASK, { connection: this.connection(), prefix: BULL_PREFIX });
    queue.on('error', () => {});
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
    const flows = new FlowProducer({ connection: this.connection(), prefix: BULL_PREFIX });
    flows.on('error', () => {});
    await withTimeout(flows.waitUntilReady(), 10_000, 'BullMQ flow producer connection');
    const job = (i: number, children?: BullFlowJob[]): BullFlowJob => ({
      name: 'noop',
      queueName: TASK,
      data: { i, t: 0 },
      prefix: BULL_PREFIX,
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
        connection: { ...this.connection(), maxRetriesPerRequest: null },
        prefix: BULL_PREFIX,
        concurrency: options.concurrency,
      },
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

  private async closeCounter(): Promise<void> {
    const counter = this.counter;
    this.counter = null;
    await counter?.close();
  }

  private connection(): { host: string; port: number } {
    return { host: this.env.redis.host, port: this.env.redis.port };
  }

  private async load(): Promise<BullMQ> {
    this.mod ??= await importPeer<BullMQ>('bullmq');
    return this.mod;
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
