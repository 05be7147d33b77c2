import { ValidationError } from '../errors.js';
import type { EnqueueOptions } from '../types.js';
import {
  describe,
  optionsObject,
  rejectUnknownKeys,
  requireDate,
  requireInt,
  requireJobId,
  requireMs,
  requireName,
  toJsonText,
} from './validate.js';

/** Defaults of SPEC §2. */
export const DEFAULT_QUEUE = 'default';
export const DEFAULT_PRIORITY = 100;
export const DEFAULT_MAX_ATTEMPTS = 3;
/** Largest `maxAttempts`; more is a loop, not a retry policy. */
export const MAX_MAX_ATTEMPTS = 1_000_000;

/** A job ready for INSERT: validated, defaults applied, payload serialised. */
export interface NewJob {
  task: string;
  payloadJson: string;
  queue: string;
  priority: number;
  dedupeKey: string | null;
  maxAttempts: number;
  /** Absolute start, or null. */
  runAt: Date | null;
  /** Start relative to the database's now(), or null (then: now). */
  delayMs: number | null;
  timeoutMs: number | null;
  /** The group key (§8), or null. */
  group: string | null;
  /** A dedupe mode beyond "one active job per key" (§8), or null. */
  dedupe: {
    /** 'pending': one queued and one running job per key (its own column and locks). */
    scope: 'active' | 'pending';
    windowMs: number | null;
    replace: boolean;
    maxWaitMs: number | null;
  } | null;
  /**
   * §9 the trace context of the enqueue's producer span, as JSON text of the propagator's
   * carrier (`{"traceparent":"00-…"}`), or null (not traced: the column stays NULL).
   */
  traceContext: string | null;
  /** §10 the existing jobs it depends on (canonical ids, no repeats), or null. */
  dependsOn: string[] | null;
  /** §10 `onDependencyFailure: 'run'`. */
  runOnDependencyFailure: boolean;
  /** §11 the sequence key (strict per-key FIFO), or null. */
  sequence: string | null;
}

/** The option names of an enqueue (SPEC §3, §8, §10, §11), in the order the SQL function's error lists them (migration 17). */
export const OPTION_KEYS: readonly string[] = [
  'queue',
  'priority',
  'dedupeKey',
  'maxAttempts',
  'runAt',
  'delayMs',
  'timeoutMs',
  'dedupe',
  'group',
  'dependsOn',
  'onDependencyFailure',
  'sequence',
];
const ENQUEUE_KEYS = [...OPTION_KEYS, 'client'];
const SPEC_KEYS = ['task', 'payload', ...OPTION_KEYS];

/**
 * Validates one job (SPEC §1.11). `prefix` names where it came from in error messages
 * (`''` for `enqueue`'s arguments, `specs[3].` for `enqueueMany`).
 */
export function toNewJob(task: unknown, payload: unknown, options: EnqueueOptions, prefix = ''): NewJob {
  const at = (field: string) => `${prefix}${field}`;
  if (options.runAt !== undefined && options.delayMs !== undefined) {
    throw new ValidationError(at('runAt'), 'give either runAt or delayMs, not both');
  }
  const dependsOn = dependsOnArg(options.dependsOn, at('dependsOn'), (entry, field) =>
    requireJobId(entry, field),
  );
  if (dependsOn !== null && (options.dedupeKey != null || options.dedupe != null)) {
    throw new ValidationError(
      at('dependsOn'),
      'cannot be combined with dedupeKey or dedupe: a waiting job holds no key (enqueue the dependent without one)',
    );
  }
  const sequence = sequenceArg(options.sequence, at('sequence'));
  if (sequence !== null && (options.dedupeKey != null || options.dedupe != null)) {
    throw new ValidationError(
      at('sequence'),
      'cannot be combined with dedupeKey or dedupe: a job queued behind its sequence holds no key (enqueue it without one)',
    );
  }
  if (sequence !== null && dependsOn !== null) {
    throw new ValidationError(
      at('sequence'),
      'cannot be combined with dependsOn in this version: a sequence already orders its jobs (enqueue the job without dependsOn, or without sequence)',
    );
  }
  return {
    task: requireName(task, at('task')),
    payloadJson: toJsonText(payload, at('payload')),
    queue: options.queue === undefined ? DEFAULT_QUEUE : requireName(options.queue, at('queue')),
    priority:
      options.priority === undefined ? DEFAULT_PRIORITY : requireInt(options.priority, at('priority')),
    dedupeKey:
      options.dedupeKey === undefined || options.dedupeKey === null
        ? null
        : dedupeKeyArg(options.dedupeKey, at('dedupeKey')),
    maxAttempts:
      options.maxAttempts === undefined
        ? DEFAULT_MAX_ATTEMPTS
        : requireInt(options.maxAttempts, at('maxAttempts'), 1, MAX_MAX_ATTEMPTS),
    runAt: options.runAt === undefined ? null : requireDate(options.runAt, at('runAt')),
    delayMs: options.delayMs === undefined ? null : requireMs(options.delayMs, at('delayMs')),
    timeoutMs:
      options.timeoutMs === undefined || options.timeoutMs === null
        ? null
        : requireInt(options.timeoutMs, at('timeoutMs'), 1),
    group: groupArg(options, at),
    dedupe: dedupeMode(options, at),
    traceContext: null,
    dependsOn,
    runOnDependencyFailure: onDependencyFailureArg(options.onDependencyFailure, at('onDependencyFailure')),
    sequence,
  };
}

/** Longest sequence key, in UTF-8 bytes: it is indexed (one btree entry per queued job). */
export const MAX_SEQUENCE_BYTES = 200;

/** §11 `sequence`: a name of at most MAX_SEQUENCE_BYTES bytes, or null. */
export function sequenceArg(value: unknown, field: string): string | null {
  if (value === undefined || value === null) return null;
  const sequence = requireName(value, field);
  const bytes = Buffer.byteLength(sequence);
  if (bytes > MAX_SEQUENCE_BYTES) {
    throw new ValidationError(
      field,
      `must be at most ${MAX_SEQUENCE_BYTES} bytes in UTF-8, got ${bytes} bytes`,
    );
  }
  return sequence;
}

/** Most dependencies of one job. */
export const MAX_DEPENDENCIES = 10_000;

/**
 * §10 `dependsOn`: an array of entries checked by `entry`, repeats dropped; null when absent or
 * empty.
 */
export function dependsOnArg(
  value: unknown,
  field: string,
  entry: (value: unknown, field: string) => string,
): string[] | null {
  if (value === undefined || value === null) return null;
  if (!Array.isArray(value)) {
    throw new ValidationError(field, `must be an array of job ids, got ${describe(value)}`);
  }
  if (value.length > MAX_DEPENDENCIES) {
    throw new ValidationError(field, `must have at most ${MAX_DEPENDENCIES} entries, got ${value.length}`);
  }
  const out = [...new Set(value.map((item, i) => entry(item, `${field}[${i}]`)))];
  return out.length === 0 ? null : out;
}

/** §10 `onDependencyFailure`: 'cancel' (default) or 'run'; true for 'run'. */
export function onDependencyFailureArg(value: unknown, field: string): boolean {
  if (value === undefined || value === null || value === 'cancel') return false;
  if (value === 'run') return true;
  throw new ValidationError(field, `must be 'cancel' or 'run', got ${describe(value)}`);
}

/**
 * Longest dedupe key, in UTF-8 bytes: it is one B-tree index entry (the active jobs' unique
 * index, scope 'pending''s, the throttle windows' key), and an entry holds at most 2,704 bytes —
 * a name of 1,000 characters can be 3,000. Migration 18 checks the same bound in SQL.
 */
export const MAX_DEDUPE_KEY_BYTES = 2_400;

/** `dedupeKey`: a name of at most MAX_DEDUPE_KEY_BYTES bytes. */
function dedupeKeyArg(value: unknown, field: string): string {
  const key = requireName(value, field);
  // a key of at most MAX/3 UTF-16 units cannot be longer (3 bytes a unit at most): no count
  if (key.length > MAX_DEDUPE_KEY_BYTES / 3) {
    const bytes = Buffer.byteLength(key);
    if (bytes > MAX_DEDUPE_KEY_BYTES) {
      throw new ValidationError(
        field,
        `must be at most ${MAX_DEDUPE_KEY_BYTES} bytes in UTF-8 (it is one index entry), got ${bytes} bytes`,
      );
    }
  }
  return key;
}

/** Longest group key, in UTF-8 bytes: it sits in the grouped claim index next to the queue name. */
export const MAX_GROUP_BYTES = 200;
/** A queue name and group key together must fit one btree index entry (2,704 bytes) with room. */
const MAX_QUEUE_AND_GROUP_BYTES = 2_400;

/** `group` (§8): a name of at most MAX_GROUP_BYTES bytes, or null. */
function groupArg(options: EnqueueOptions, at: (field: string) => string): string | null {
  if (options.group === undefined || options.group === null) return null;
  const group = requireName(options.group, at('group'));
  const bytes = Buffer.byteLength(group);
  if (bytes > MAX_GROUP_BYTES) {
    throw new ValidationError(
      at('group'),
      `must be at most ${MAX_GROUP_BYTES} bytes in UTF-8, got ${bytes} bytes`,
    );
  }
  const queueBytes = Buffer.byteLength(options.queue ?? DEFAULT_QUEUE);
  if (queueBytes + bytes > MAX_QUEUE_AND_GROUP_BYTES) {
    throw new ValidationError(
      at('queue'),
      `with a group, the queue name must be at most ${MAX_QUEUE_AND_GROUP_BYTES - bytes} bytes in UTF-8 (it is indexed with the group), got ${queueBytes}`,
    );
  }
  return group;
}

/** A duration of at least 1 ms (up to requireMs's hundred years). */
function positiveMs(value: unknown, field: string): number {
  const ms = requireMs(value, field);
  if (ms < 1) throw new ValidationError(field, `must be at least 1 ms, got ${JSON.stringify(value)}`);
  return ms;
}

/** `dedupe: { scope, windowMs, replace, maxWaitMs }` (§8), checked; null for the plain mode. */
function dedupeMode(options: EnqueueOptions, at: (field: string) => string): NewJob['dedupe'] {
  if (options.dedupe === undefined || options.dedupe === null) return null;
  const mode = optionsObject(options.dedupe, at('dedupe'));
  rejectUnknownKeys(mode, ['scope', 'windowMs', 'replace', 'maxWaitMs'], at('dedupe'));
  if (options.dedupeKey === undefined || options.dedupeKey === null) {
    throw new ValidationError(at('dedupe'), 'needs a dedupeKey: it says how that key dedupes');
  }
  if (mode.scope !== undefined && mode.scope !== 'active' && mode.scope !== 'pending') {
    throw new ValidationError(
      at('dedupe.scope'),
      `must be 'active' or 'pending', got ${JSON.stringify(mode.scope)}`,
    );
  }
  const scope = mode.scope ?? 'active';
  if (mode.replace !== undefined && typeof mode.replace !== 'boolean') {
    throw new ValidationError(
      at('dedupe.replace'),
      `must be true or false, got ${JSON.stringify(mode.replace)}`,
    );
  }
  const windowMs = mode.windowMs === undefined ? null : positiveMs(mode.windowMs, at('dedupe.windowMs'));
  const maxWaitMs = mode.maxWaitMs === undefined ? null : positiveMs(mode.maxWaitMs, at('dedupe.maxWaitMs'));
  const replace = mode.replace === true;
  if (replace && windowMs !== null) {
    throw new ValidationError(
      at('dedupe.windowMs'),
      'cannot be combined with replace: throttle or debounce, not both',
    );
  }
  if (maxWaitMs !== null && !replace) {
    throw new ValidationError(at('dedupe.maxWaitMs'), 'only applies with replace: true (debounce)');
  }
  if (scope === 'pending' && (windowMs !== null || replace)) {
    throw new ValidationError(
      at('dedupe.scope'),
      `'pending' cannot be combined with ${windowMs !== null ? 'windowMs' : 'replace'}: leave scope out ('active') to throttle or debounce`,
    );
  }
  if (scope === 'active' && windowMs === null && !replace) return null; // the plain mode
  return { scope, windowMs, replace, maxWaitMs };
}

/** Validates `enqueue(task, payload, options)`'s options object. */
export function enqueueOptions(options: unknown): EnqueueOptions & { client?: unknown } {
  const opts = optionsObject(options as object | undefined, 'options') as EnqueueOptions & {
    client?: unknown;
  };
  rejectUnknownKeys(opts, ENQUEUE_KEYS, 'options');
  return opts;
}

/** Most jobs in one batch call that has dependsOn (as in a flow: its rows go in one statement). */
export const MAX_DEPENDENT_CALL_JOBS = 100_000;
/** Most dependsOn entries in one batch call, all jobs together (its edges go in one statement). */
export const MAX_DEPENDENT_CALL_EDGES = 1_000_000;

/**
 * §10 the size of a batch call with dependencies, checked before any element is (a call too
 * large is refused at once, whatever it holds): at most MAX_DEPENDENT_CALL_JOBS jobs and
 * MAX_DEPENDENT_CALL_EDGES dependsOn entries in all (repeats counted). The SQL `enqueue_many`
 * (migration 18) counts the same way.
 */
export function dependentCallSize(specs: readonly unknown[], field: string): void {
  let edges = 0;
  for (const spec of specs) {
    const deps =
      typeof spec === 'object' && spec !== null ? (spec as { dependsOn?: unknown }).dependsOn : undefined;
    if (Array.isArray(deps)) edges += deps.length;
  }
  if (edges === 0) return;
  if (specs.length > MAX_DEPENDENT_CALL_JOBS) {
    throw new ValidationError(
      field,
      `must hold at most ${MAX_DEPENDENT_CALL_JOBS} jobs in a call with dependsOn, got ${specs.length}: split the call`,
    );
  }
  if (edges > MAX_DEPENDENT_CALL_EDGES) {
    throw new ValidationError(
      field,
      `must hold at most ${MAX_DEPENDENT_CALL_EDGES} dependsOn entries in all in one call, got ${edges}: split the call`,
    );
  }
}

/** Validates every entry of `enqueueMany(specs)`; one bad entry rejects the whole batch. */
export function toNewJobs(specs: unknown): NewJob[] {
  if (!Array.isArray(specs)) {
    throw new ValidationError('specs', 'must be an array of { task, payload, ...options }');
  }
  dependentCallSize(specs, 'specs');
  const jobs = specs.map((spec: unknown, i) => {
    const prefix = `specs[${i}].`;
    if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) {
      throw new ValidationError(`specs[${i}]`, 'must be an object { task, payload, ...options }');
    }
    rejectUnknownKeys(spec, SPEC_KEYS, `specs[${i}]`);
    const { task, payload, ...options } = spec as Record<string, unknown>;
    return toNewJob(task, payload, options as EnqueueOptions, prefix);
  });
  // §10 jobs with dependencies go in with their edges, in a statement that has no dedupe
  if (jobs.some((job) => job.dependsOn !== null)) {
    const keyed = jobs.findIndex((job) => job.dedupeKey !== null);
    if (keyed >= 0) {
      throw new ValidationError(
        `specs[${keyed}].dedupeKey`,
        'cannot be in one enqueueMany call with jobs that have dependsOn: enqueue them in two calls',
      );
    }
  }
  return jobs;
}
