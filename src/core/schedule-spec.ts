/**
 * Validation of `queue.schedule(name, options)` (SPEC §8, §1.11: a ValidationError naming the
 * field, nothing written), and the mapping of a stored schedule row to the public `Schedule`.
 */
import { ValidationError } from '../errors.js';
import type { CatchUp, Schedule, ScheduleOptions } from '../types.js';
import { requireCron } from './cron.js';
import { DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, MAX_MAX_ATTEMPTS } from './job-spec.js';
import { optionsObject, rejectUnknownKeys, requireInt, requireName, toJsonText } from './validate.js';

/** A schedule row as the statements of store/schedule.ts return it (timestamps as epoch ms). */
export interface ScheduleRow {
  name: string;
  cron: string;
  tz: string;
  task: string;
  payload: unknown;
  queue: string;
  priority: number;
  max_attempts: number;
  timeout_ms: number | null;
  overlap: boolean;
  catch_up: string;
  paused: boolean;
  next_run_at: number;
  last_run_at: number | null;
  last_job_id: string | null;
  created_at: number;
  updated_at: number;
}

/** A schedule's definition, validated (toScheduleSpec). */
export interface ScheduleFields {
  name: string;
  cron: string;
  tz: string;
  task: string;
  payloadJson: string;
  queue: string;
  priority: number;
  maxAttempts: number;
  timeoutMs: number | null;
  overlap: boolean;
  catchUp: string;
}

const KEYS = [
  'cron',
  'tz',
  'task',
  'payload',
  'queue',
  'priority',
  'maxAttempts',
  'timeoutMs',
  'overlap',
  'catchUp',
];
/**
 * Longest schedule name, in UTF-8 bytes: it is the table's key and part of each tick's dedupe
 * key, and an index entry holds at most about 2,700 bytes.
 */
export const MAX_SCHEDULE_NAME_BYTES = 200;
/** Most missed ticks one firing enqueues (`catchUp: N`). */
export const MAX_CATCH_UP = 1_000;

/** A validated schedule, ready for the upsert (its next run is computed from database time). */
export type ScheduleSpec = ScheduleFields;

export function toScheduleSpec(name: unknown, options: ScheduleOptions): ScheduleSpec {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, KEYS, 'options');
  const { cron, tz } = requireCron(opts.cron, opts.tz === undefined ? 'UTC' : opts.tz);
  if (opts.overlap !== undefined && typeof opts.overlap !== 'boolean') {
    throw new ValidationError('overlap', `must be true or false, got ${JSON.stringify(opts.overlap)}`);
  }
  const catchUp = catchUpText(opts.catchUp);
  if (/^\d+$/.test(catchUp) && catchUp !== '1' && opts.overlap !== true) {
    throw new ValidationError(
      'catchUp',
      `${catchUp} missed ticks can run only with overlap: true (without it, one tick's job at a time); use 'latest' or set overlap: true`,
    );
  }
  return {
    name: requireScheduleName(name),
    cron,
    tz,
    task: requireName(opts.task, 'task'),
    payloadJson: toJsonText(opts.payload === undefined ? null : opts.payload, 'payload'),
    queue: opts.queue === undefined ? DEFAULT_QUEUE : requireName(opts.queue, 'queue'),
    priority: opts.priority === undefined ? DEFAULT_PRIORITY : requireInt(opts.priority, 'priority'),
    maxAttempts:
      opts.maxAttempts === undefined
        ? DEFAULT_MAX_ATTEMPTS
        : requireInt(opts.maxAttempts, 'maxAttempts', 1, MAX_MAX_ATTEMPTS),
    timeoutMs:
      opts.timeoutMs === undefined || opts.timeoutMs === null
        ? null
        : requireInt(opts.timeoutMs, 'timeoutMs', 1),
    overlap: opts.overlap ?? false,
    catchUp,
  };
}

/** A schedule's name: a name (validate.ts) of at most MAX_SCHEDULE_NAME_BYTES bytes. */
export function requireScheduleName(value: unknown): string {
  const name = requireName(value, 'name');
  const bytes = Buffer.byteLength(name, 'utf8');
  if (bytes > MAX_SCHEDULE_NAME_BYTES) {
    throw new ValidationError(
      'name',
      `must be at most ${MAX_SCHEDULE_NAME_BYTES} bytes in UTF-8, got ${bytes}`,
    );
  }
  return name;
}

function catchUpText(value: unknown): string {
  if (value === undefined || value === 'latest') return 'latest';
  if (value === 'none') return 'none';
  if (typeof value === 'number') return String(requireInt(value, 'catchUp', 1, MAX_CATCH_UP));
  throw new ValidationError(
    'catchUp',
    `must be 'latest', 'none' or a number of ticks from 1 to ${MAX_CATCH_UP}, got ${JSON.stringify(value)}`,
  );
}

export function parseCatchUp(text: string): CatchUp {
  return text === 'latest' || text === 'none' ? text : Number(text);
}

export function toSchedule(row: ScheduleRow): Schedule {
  return {
    name: row.name,
    cron: row.cron,
    tz: row.tz,
    task: row.task,
    payload: row.payload,
    queue: row.queue,
    priority: row.priority,
    maxAttempts: row.max_attempts,
    timeoutMs: row.timeout_ms,
    overlap: row.overlap,
    catchUp: parseCatchUp(row.catch_up),
    paused: row.paused,
    nextRunAt: new Date(row.next_run_at),
    lastRunAt: row.last_run_at === null ? null : new Date(row.last_run_at),
    lastJobId: row.last_job_id,
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
  };
}
