/**
 * Skiplock through its public API only (Queue, Worker), bundled from the repo's src/ at each run,
 * so that whatever its internals become, this driver measures them unchanged.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue, Worker } from '../../src/index.js';
import { dropSchema, ident } from '../lib/db.js';
import { REPO_DIR } from '../lib/paths.js';
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
import { BENCH_SUFFIX, TASK } from './types.js';

export const SKIPLOCK_SCHEMA = `bench_skiplock${BENCH_SUFFIX}`;
/**
 * Jobs a worker claims ahead of its free slots, as docs/worker.md advises for backlogs of short
 * jobs (the default is `concurrency`); graphile-worker runs here with a local queue of 2,000.
 */
const PREFETCH = 1_000;

export class SkiplockDriver implements SystemDriver {
  readonly name = 'skiplock' as const;
  readonly deletesCompleted = 'option' as const;
  readonly batching = 'handler' as const;
  readonly flowShapes: FlowShapes = {
    root: true,
    api: 'queue.enqueueFlow(nodes) (one transaction), nodes { ref, task, payload, dependsOn: [refs] }; the Worker settings of W2',
  };
  private counter: Queue | null = null;

  constructor(
    private readonly env: BenchEnv,
    readonly schema = SKIPLOCK_SCHEMA,
  ) {}

  async version(): Promise<string> {
    const pkg = JSON.parse(readFileSync(join(REPO_DIR, 'package.json'), 'utf8')) as { version: string };
    return `${pkg.version} (src/ of this checkout)`;
  }

  settings(concurrency: number): string {
    return `Worker { concurrency: ${concurrency}, prefetch: ${PREFETCH} } with defaults otherwise (LISTEN/NOTIFY wake-up; W2d: retention { completed: 'delete' }); Queue with its default pool (10); batch API enqueueMany, single enqueue()`;
  }

  async unavailable(): Promise<string | null> {
    return null;
  }

  async drop(): Promise<void> {
    await this.closeCounter();
    await dropSchema(this.env.databaseUrl, this.schema);
  }

  async reset(): Promise<void> {
    await this.drop();
    const queue = this.queue();
    try {
      await queue.migrate();
    } finally {
      await queue.close();
    }
  }

  /** W8: `configureQueue('default', { concurrency })`, across every worker process. */
  async limitConcurrency(n: number): Promise<void> {
    const queue = this.queue(1);
    try {
      await queue.configureQueue('default', { concurrency: n });
    } finally {
      await queue.close();
    }
  }

  /** W9: `configureQueue('default', { groupConcurrency })`; jobs carry `group: 'g<n>'`. */
  async limitGroups(n: number): Promise<void> {
    const queue = this.queue(1);
    try {
      await queue.configureQueue('default', { groupConcurrency: n });
    } finally {
      await queue.close();
    }
  }

  /** W-seq: nothing to configure — each job carries `sequence: 's<n>'` (SPEC §11). */
  async strictFifo(): Promise<void> {}

  /** W4-sql: SPEC §13's `<schema>.enqueue(task, payload)` (migration 17). */
  sqlEnqueue(): string {
    return `SELECT id, created FROM ${ident(this.schema)}.enqueue($1, $2::jsonb)`;
  }

  async remaining(): Promise<number> {
    this.counter ??= this.queue(2);
    const counts = await this.counter.counts();
    return counts.waiting + counts.pending + counts.running; // W-seq: jobs behind their key's head wait
  }

  async producer(): Promise<Producer> {
    const queue = this.queue();
    return {
      enqueueOne: async (payload: BenchPayload) => {
        await queue.enqueue(TASK, payload);
      },
      enqueueBatch: async (payloads: readonly BenchPayload[]) => {
        await queue.enqueueMany(
          payloads.map((payload) =>
            payload.g !== undefined
              ? { task: TASK, payload, group: `g${payload.g}` }
              : payload.s !== undefined
                ? { task: TASK, payload, sequence: `s${payload.s}` }
                : { task: TASK, payload },
          ),
        );
      },
      close: () => queue.close(),
    };
  }

  /** Workflows: `queue.enqueueFlow(nodes)`, one call (one transaction) per flow. */
  async flowProducer(): Promise<FlowProducer> {
    const queue = this.queue();
    // a connection open, as the peers' producers have after their start (a primary-key read:
    // W-flow-scan counts every scan of the jobs table)
    await queue.get('1');
    const node = (i: number, dependsOn?: string[]) => ({
      ref: `n${i}`,
      task: TASK,
      payload: { i, t: 0 },
      ...(dependsOn ? { dependsOn } : {}),
    });
    return {
      fanOut: async (children: number) => {
        const nodes = [node(0)];
        for (let i = 1; i <= children; i++) nodes.push(node(i, ['n0']));
        nodes.push(
          node(
            children + 1,
            Array.from({ length: children }, (_, k) => `n${k + 1}`),
          ),
        );
        await queue.enqueueFlow(nodes);
      },
      chain: async (length: number) => {
        await queue.enqueueFlow(Array.from({ length }, (_, i) => node(i, i > 0 ? [`n${i - 1}`] : undefined)));
      },
      small: async (base: number) => {
        await queue.enqueueFlow([node(base), node(base + 1), node(base + 2, [`n${base}`, `n${base + 1}`])]);
      },
      close: () => queue.close(),
    };
  }

  async consumer(options: ConsumerOptions): Promise<Consumer> {
    const worker = new Worker({
      connectionString: this.env.databaseUrl,
      schema: this.schema,
      concurrency: options.concurrency,
      prefetch: PREFETCH,
      ...(options.deleteCompleted ? { retention: { completed: 'delete' as const } } : {}),
      tasks: {
        [TASK]: options.batchSize
          ? {
              // W-batch (SPEC §11): one call per batch; returning nothing completes them all
              batch: { maxSize: options.batchSize },
              handler: async (items: { payload: unknown }[]) => {
                for (const item of items) options.onJob(item.payload as BenchPayload);
              },
            }
          : async (payload: BenchPayload) => {
              options.onJob(payload);
              if (options.handlerMs) await new Promise((resolve) => setTimeout(resolve, options.handlerMs));
              options.onJobEnd?.(payload);
            },
      },
    });
    worker.on('error', ({ error }) => options.onError(error));
    const { onAck } = options;
    if (onAck) worker.on('job:done', ({ job }) => onAck(job.payload as BenchPayload));
    await worker.start();
    return { stop: () => worker.stop({ timeoutMs: 10_000 }) };
  }

  /** A Queue on the benchmark schema (for W6, which uses claim/complete/ops directly). */
  queue(poolSize?: number): Queue {
    return new Queue({
      connectionString: this.env.databaseUrl,
      schema: this.schema,
      ...(poolSize === undefined ? {} : { poolSize }),
    });
  }

  async close(): Promise<void> {
    await this.closeCounter();
  }

  private async closeCounter(): Promise<void> {
    const counter = this.counter;
    this.counter = null;
    await counter?.close();
  }
}
