/**
 * BullMQ 6.7 on PostgreSQL (its official backend, `createPostgresBackend`): the same Queue,
 * Worker and FlowProducer API as on Redis, jobs in tables of one schema, claims with SKIP
 * LOCKED, LISTEN/NOTIFY wake-up. Settings as its guide (docs.bullmq.io/guide/postgresql,
 * "Performance" and "Tuning tips") advises, where they apply to a benchmark:
 *   - the pool: node-postgres's default `max` (10) per Queue / Worker, plus the Worker's own
 *     LISTEN connection. The guide says to size the pool for the concurrency; 20 showed no clear
 *     gain over 10 at concurrency 100 in alternating runs here (the drain is bound by the
 *     database's CPU, ~1.4 ms per job, on 2 cores shared with the worker), and W7 runs 8
 *     processes, each with its pool and LISTEN connection, against max_connections = 100;
 *   - `synchronous_commit` is the server's (on), as for every system here: the guide names
 *     turning it off as a durability trade-off, not a default;
 *   - `removeOnComplete: true` only in W2d (the guide's retention advice); W2 keeps completed
 *     jobs, as Skiplock keeps done rows;
 *   - migrations explicitly, once per reset (`migrate: true` on one Queue), never on a worker.
 */
import { dropSchema } from '../lib/db.js';
import { peerVersion } from '../lib/paths.js';
import { type BullBackendFactory, BullMQBase } from './bullmq.js';
import type { ConsumerOptions, FlowShapes, SystemDriver } from './types.js';
import { BENCH_SUFFIX } from './types.js';

export const BULLMQ_PG_SCHEMA = `bench_bullmq${BENCH_SUFFIX}`;

export class BullMQPgDriver extends BullMQBase implements SystemDriver {
  readonly name = 'bullmq-pg' as const;
  readonly deletesCompleted = 'option' as const;
  readonly noSqlEnqueue =
    'its add_job SQL function is internal to its TypeScript client (which makes the job id, options and timestamps), not a producer API';
  readonly flowShapes: FlowShapes = {
    root: false,
    api: 'new FlowProducer(opts, createPostgresBackend).add(tree), the same trees as on Redis (a parent runs after all its children; a job has at most one parent, so the fan-in has no root above it)',
  };

  async version(): Promise<string> {
    return `${peerVersion('bullmq')} (createPostgresBackend, pg ${peerVersion('pg')})`;
  }

  settings(concurrency: number): string {
    return `new Worker(name, processor, { connection: { connectionString, schema: '${BULLMQ_PG_SCHEMA}' }, concurrency: ${concurrency} }, createPostgresBackend): pool max 10 (node-postgres default) + its LISTEN connection, durable commits (the server's), W2d: removeOnComplete: true; schema migrated once per reset (new Queue(…, { connection: { …, migrate: true } })); batch API addBulk, single add (one Queue)`;
  }

  async unavailable(): Promise<string | null> {
    const mod = await this.load();
    if (!mod.createPostgresBackend)
      return `bullmq ${peerVersion('bullmq')} has no createPostgresBackend (6.7 or later has)`;
    return null;
  }

  async drop(): Promise<void> {
    await this.closeCounter();
    await dropSchema(this.env.databaseUrl, BULLMQ_PG_SCHEMA);
  }

  async reset(): Promise<void> {
    await this.drop();
    const queue = await this.queue({ ...this.connection(), migrate: true });
    try {
      await queue.waitUntilReady();
    } finally {
      await queue.close();
    }
  }

  protected connection(): Record<string, unknown> {
    return { connectionString: this.env.databaseUrl, schema: BULLMQ_PG_SCHEMA };
  }

  protected common(): Record<string, unknown> {
    return {};
  }

  protected async backend(): Promise<BullBackendFactory> {
    return (await this.load()).createPostgresBackend;
  }

  protected override workerOptions(options: ConsumerOptions): Record<string, unknown> {
    return options.deleteCompleted ? { removeOnComplete: true } : {};
  }
}
