/**
 * Skiplock through its public API only (Queue, Worker), bundled from the repo's src/ at each run,
 * so that whatever its internals become, this driver measures them unchanged.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue, Worker } from '../../src/index.js';
import { dropSchema } from '../lib/db.js';
import { REPO_DIR } from '../lib/paths.js';
import type { BenchEnv, BenchPayload, Consumer, ConsumerOptions, Producer, SystemDriver } from './types.js';
import { TASK } from './types.js';

export const SKIPLOCK_SCHEMA = 'bench_skiplock';
/**
 * Jobs a worker claims ahead of its free slots, as docs/worker.md advises for backlogs of short
 * jobs (the default is `concurrency`); graphile-worker runs here with a local queue of 2,000.
 */
const PREFETCH = 1_000;

export class SkiplockDriver implements SystemDriver {
  readonly name = 'skiplock' as const;
  readonly deletesCompleted = 'option' as const;
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

  async remaining(): Promise<number> {
    this.counter ??= this.queue(2);
    const counts = await this.counter.counts();
    return counts.pending + counts.running;
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
            payload.g === undefined
              ? { task: TASK, payload }
              : { task: TASK, payload, group: `g${payload.g}` },
          ),
        );
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
        [TASK]: async (payload: BenchPayload) => {
          options.onJob(payload);
          if (options.handlerMs) await new Promise((resolve) => setTimeout(resolve, options.handlerMs));
        },
      },
    });
    worker.on('error', ({ error }) => options.onError(error));
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
