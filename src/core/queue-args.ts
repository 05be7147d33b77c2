/**
 * Argument parsing for Queue's methods that take an options object: each function checks every
 * key and value and returns what the engine needs, or throws a ValidationError (nothing written).
 */
import { ValidationError } from '../errors.js';
import type {
  ClaimOptions,
  Lease,
  ListOptions,
  PruneOptions,
  QueueConfigOptions,
  SequencesOptions,
} from '../types.js';
import {
  optionalNameList,
  optionsObject,
  rejectUnknownKeys,
  requireInt,
  requireJobId,
  requireLease,
  requireMs,
  requireName,
  requireStatus,
  toJsonText,
} from './validate.js';

/** A change of configuration (store/queues.ts writes it): `undefined` leaves a setting as it is, `null` clears a limit. */
export interface QueueChange {
  paused?: boolean;
  concurrency?: number | null;
  rateLimit?: { limit: number; periodMs: number } | null;
  groupConcurrency?: number | null;
  groupRateLimit?: { limit: number; periodMs: number } | null;
  /** §11 priority aging, defaults applied; null turns it off. */
  priorityAging?: { everyMs: number; step: number; floor: number } | null;
}

/** Most jobs one claim may take. */
export const MAX_CLAIM_LIMIT = 10_000;
const FINISHED = ['done', 'dead', 'cancelled'] as const;

/** Ids per side `dependencySummary` returns unless told (GET /api/jobs/:id, the dashboard). */
export const DEPENDENCY_SUMMARY_LIMIT = 100;
/** Most ids per side one `dependencySummary` may return. */
export const MAX_DEPENDENCY_SUMMARY_LIMIT = 10_000;

/** `queue.dependencySummary(id, options)`: the ids per side (100 unless given). */
export function dependencySummaryLimit(options: { limit?: number } | undefined): number {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['limit'], 'options');
  return opts.limit === undefined
    ? DEPENDENCY_SUMMARY_LIMIT
    : requireInt(opts.limit, 'limit', 1, MAX_DEPENDENCY_SUMMARY_LIMIT);
}

/** `queue.claim(workerId, options)`: limit 1 and the queue's leaseMs unless given. */
export function claimArgs(workerId: unknown, options: ClaimOptions | undefined, defaultLeaseMs: number) {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['limit', 'leaseMs', 'queues', 'tasks'], 'options');
  return {
    workerId: requireName(workerId, 'workerId'),
    limit: opts.limit === undefined ? 1 : requireInt(opts.limit, 'limit', 1, MAX_CLAIM_LIMIT),
    leaseMs: opts.leaseMs === undefined ? defaultLeaseMs : requireInt(opts.leaseMs, 'leaseMs', 1),
    tasks: optionalNameList(opts.tasks, 'tasks'),
    queues: optionalNameList(opts.queues, 'queues'),
  };
}

/** `queue.renewLease(lease, leaseMs)`: the new lease length, the queue's `leaseMs` unless given. */
export function renewLeaseMs(leaseMs: unknown, defaultLeaseMs: number): number {
  return leaseMs === undefined ? defaultLeaseMs : requireInt(leaseMs, 'leaseMs', 1);
}

/** `queue.flowGraph(flowId, options)`: the most jobs to return, or null for every one. */
export function flowGraphLimit(options: { limit?: number } | undefined): number | null {
  return options?.limit === undefined ? null : requireInt(options.limit, 'options.limit', 1, 1_000_000);
}

/** An options object whose only key may be `client` (a transaction to join). */
export function clientOption<C>(options: { client?: C } | undefined): C | undefined {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['client'], 'options');
  return opts.client;
}

/** `completeMany(items)`: each lease checked and each result serialised, in input order. */
export function completeItems(items: unknown): { lease: Lease; resultJson: string }[] {
  if (!Array.isArray(items)) throw new ValidationError('items', 'must be an array of { lease, result }');
  return items.map((item: { lease?: unknown; result?: unknown } | undefined, i) => ({
    lease: requireLease(item?.lease, `items[${i}].lease`),
    resultJson: toJsonText(item?.result, `items[${i}].result`),
  }));
}

/** `fail(lease, error, options)`: the explicit retry delay, or null for the queue's backoff. */
export function retryInMsArg(options: { retryInMs?: number } | undefined): number | null {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['retryInMs'], 'options');
  return opts.retryInMs === undefined ? null : requireMs(opts.retryInMs, 'retryInMs');
}

/** `list`/`listPage` options: the filter and the page size (default 50, at most 1,000). */
export function listArgs(options: ListOptions | undefined) {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['status', 'task', 'queue', 'limit', 'after'], 'options');
  return {
    filter: {
      status: opts.status === undefined ? null : requireStatus(opts.status, 'status'),
      task: opts.task === undefined ? null : requireName(opts.task, 'task'),
      queue: opts.queue === undefined ? null : requireName(opts.queue, 'queue'),
      after: opts.after === undefined ? null : requireJobId(opts.after, 'after'),
    },
    limit: opts.limit === undefined ? 50 : requireInt(opts.limit, 'limit', 1, 1000),
  };
}

/** `prune(options)`: olderThanMs is required; statuses default to every finished one. */
export function pruneArgs(options: PruneOptions) {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['olderThanMs', 'statuses'], 'options');
  if (opts.olderThanMs === undefined) throw new ValidationError('olderThanMs', 'is required');
  const olderThanMs = requireMs(opts.olderThanMs, 'olderThanMs');
  const statuses =
    opts.statuses === undefined ? [...FINISHED] : (optionalNameList(opts.statuses, 'statuses') ?? []);
  statuses.forEach((status, i) => {
    if (!(FINISHED as readonly string[]).includes(status)) {
      throw new ValidationError(
        `statuses[${i}]`,
        `must be a finished status (done, dead, cancelled), got "${status}"`,
      );
    }
  });
  return { statuses, olderThanMs };
}

/** `throughput(options)`: per minute over the last hour unless given; buckets of at least 1 s. */
export function throughputArgs(options: { bucketMs?: number; windowMs?: number } | undefined) {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['bucketMs', 'windowMs'], 'options');
  return {
    bucketMs: opts.bucketMs === undefined ? 60_000 : requireInt(opts.bucketMs, 'bucketMs', 1_000),
    windowMs: opts.windowMs === undefined ? 3_600_000 : requireInt(opts.windowMs, 'windowMs', 1_000),
  };
}

/** `requeueDead(options)`: the task to limit it to, or null for all. */
export function taskFilterArg(options: { task?: string } | undefined): string | null {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['task'], 'options');
  return opts.task === undefined ? null : requireName(opts.task, 'task');
}

/** `schedules({ after, limit })`: from the start and unbounded unless given. */
export function schedulePageArgs(options: { after?: string; limit?: number } | undefined) {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['after', 'limit'], 'options');
  return {
    after: opts.after === undefined ? '' : requireName(opts.after, 'after'),
    limit: opts.limit === undefined ? null : requireInt(opts.limit, 'limit', 1, 10_000),
  };
}

/** Longest rate-limit period: a day. */
export const MAX_PERIOD_MS = 86_400_000;
/** Largest concurrency or rate limit. */
export const MAX_LIMIT = 1_000_000;

/** `configureQueue(name, options)`: what to change (`undefined` keeps a setting, `null` clears it). */
export function queueConfigArgs(options: QueueConfigOptions | undefined): QueueChange {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(
    opts,
    ['paused', 'concurrency', 'rateLimit', 'groupConcurrency', 'groupRateLimit', 'priorityAging'],
    'options',
  );
  const change: QueueChange = {};
  if (opts.paused !== undefined) {
    if (typeof opts.paused !== 'boolean')
      throw new ValidationError('paused', `must be true or false, got ${JSON.stringify(opts.paused)}`);
    change.paused = opts.paused;
  }
  if (opts.concurrency !== undefined) {
    change.concurrency =
      opts.concurrency === null ? null : requireInt(opts.concurrency, 'concurrency', 1, MAX_LIMIT);
  }
  if (opts.rateLimit !== undefined) change.rateLimit = rateArg(opts.rateLimit, 'rateLimit');
  if (opts.groupConcurrency !== undefined) {
    change.groupConcurrency =
      opts.groupConcurrency === null
        ? null
        : requireInt(opts.groupConcurrency, 'groupConcurrency', 1, MAX_LIMIT);
  }
  if (opts.groupRateLimit !== undefined)
    change.groupRateLimit = rateArg(opts.groupRateLimit, 'groupRateLimit');
  if (opts.priorityAging !== undefined) change.priorityAging = agingArg(opts.priorityAging);
  return change;
}

/** §11 `priorityAging: { everyMs, step?: 1, floor?: 0 }` or null (off). */
function agingArg(value: unknown): { everyMs: number; step: number; floor: number } | null {
  if (value === null) return null;
  const field = 'priorityAging';
  const aging = optionsObject(value as { everyMs?: unknown; step?: unknown; floor?: unknown }, field);
  rejectUnknownKeys(aging, ['everyMs', 'step', 'floor'], field);
  return {
    everyMs: requireInt(aging.everyMs, `${field}.everyMs`, 1, MAX_PERIOD_MS),
    step: aging.step === undefined ? 1 : requireInt(aging.step, `${field}.step`, 1),
    floor: aging.floor === undefined ? 0 : requireInt(aging.floor, `${field}.floor`),
  };
}

/** `{ limit, periodMs }` or null (cleared). */
function rateArg(value: unknown, field: string): { limit: number; periodMs: number } | null {
  if (value === null) return null;
  const rate = optionsObject(value as { limit?: unknown; periodMs?: unknown }, field);
  rejectUnknownKeys(rate, ['limit', 'periodMs'], field);
  return {
    limit: requireInt(rate.limit, `${field}.limit`, 1, MAX_LIMIT),
    periodMs: requireInt(rate.periodMs, `${field}.periodMs`, 1, MAX_PERIOD_MS),
  };
}

/** §9 `waitFor(job, options)`: the job's id (an id or a job object) and the wait's bounds. */
export function waitForArgs(
  job: unknown,
  options: { timeoutMs?: number; signal?: AbortSignal } | undefined,
): { id: string; timeoutMs: number | null; signal: AbortSignal | undefined } {
  const idValue = typeof job === 'object' && job !== null && 'id' in job ? (job as { id: unknown }).id : job;
  const id = requireJobId(idValue as string);
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['timeoutMs', 'signal'], 'options');
  const timeoutMs = opts.timeoutMs === undefined ? null : requireMs(opts.timeoutMs, 'timeoutMs');
  if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
    throw new ValidationError('signal', 'must be an AbortSignal (for example AbortSignal.timeout(5_000))');
  }
  return { id, timeoutMs, signal: opts.signal };
}

/** §11 default and largest page of `sequences()`. */
export const SEQUENCES_DEFAULT_LIMIT = 100;
export const SEQUENCES_MAX_LIMIT = 1_000;

/** §11 `sequences({ blocked, limit, after })`. */
export function sequencesArgs(options: SequencesOptions | undefined): {
  blocked: boolean;
  limit: number;
  after: string;
} {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, ['blocked', 'limit', 'after'], 'options');
  if (opts.blocked !== undefined && typeof opts.blocked !== 'boolean') {
    throw new ValidationError('blocked', `must be true or false, got ${JSON.stringify(opts.blocked)}`);
  }
  return {
    blocked: opts.blocked === true,
    limit:
      opts.limit === undefined
        ? SEQUENCES_DEFAULT_LIMIT
        : requireInt(opts.limit, 'limit', 1, SEQUENCES_MAX_LIMIT),
    after: opts.after === undefined ? '' : requireName(opts.after, 'after'),
  };
}
