import type { ClaimedJob, Job, JobStatus } from '../types.js';

/**
 * A row of the jobs table as the statements return it (int8 as string, timestamps as epoch ms,
 * jsonb parsed). Mapping tolerates an application that changed pg's global type parsers.
 */
export interface JobRow {
  id: string;
  queue: string;
  task: string;
  status: JobStatus;
  priority: number;
  payload: unknown;
  result: unknown;
  dedupe_key: string | null;
  attempts: number;
  max_attempts: number;
  run_after: number | Date;
  lease_until: number | Date | null;
  worker_id: string | null;
  run_started_at: number | Date | null;
  timeout_ms: number | null;
  last_error: string | null;
  cancel_requested_at: number | Date | null;
  created_at: number | Date;
  updated_at: number | Date;
  attempted_by: string[] | null;
  /** Claims so far, as text: the claim token of the latest claim. */
  claims: string;
  group_key: string | null;
  /** §10 the flow and the job's ref in it (absent from rows of statements that do not select them). */
  flow_id?: string | null;
  flow_ref?: string | null;
  /** §9 JSON progress (absent from rows of statements that do not select it). */
  progress?: unknown;
  /** §9 claims only: the stored trace context as JSON text, or null. */
  trace_context?: string | null;
}

/**
 * §9 the stored trace context (JSON text of the propagator's carrier) of claimed jobs that have
 * one, kept beside the public {@link ClaimedJob} shape (not a field of it): only a worker that
 * traces reads it.
 */
const traceContexts = new WeakMap<ClaimedJob, string>();

/** The trace context stored with a claimed job at enqueue (JSON text), or null. */
export function traceContextOf(job: ClaimedJob): string | null {
  return traceContexts.get(job) ?? null;
}

/** Maps a row to the public {@link Job} shape. */
export function toJob(row: JobRow): Job {
  return {
    id: String(row.id),
    queue: row.queue,
    task: row.task,
    status: row.status,
    priority: Number(row.priority),
    payload: row.payload,
    result: row.result,
    dedupeKey: row.dedupe_key,
    group: row.group_key ?? null,
    progress: row.progress ?? null,
    flowId: row.flow_id ?? null,
    flowRef: row.flow_ref ?? null,
    attempts: Number(row.attempts),
    maxAttempts: Number(row.max_attempts),
    runAfter: toDate(row.run_after),
    leaseUntil: row.status === 'running' ? toDateOrNull(row.lease_until) : null,
    // SPEC §2: only while running. (Rows finished before migration 3 may still carry one.)
    workerId: row.status === 'running' ? row.worker_id : null,
    runStartedAt: toDateOrNull(row.run_started_at),
    timeoutMs: row.timeout_ms === null ? null : Number(row.timeout_ms),
    lastError: row.last_error,
    cancelRequestedAt: toDateOrNull(row.cancel_requested_at),
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
    attemptedBy:
      row.attempted_by && row.attempted_by.length > 0
        ? row.attempted_by
        : row.worker_id
          ? [row.worker_id]
          : [],
  };
}

/** Maps a freshly claimed row to a {@link ClaimedJob}: the job plus its lease, in one object. */
export function toClaimedJob(row: JobRow): ClaimedJob {
  const attempts = Number(row.attempts);
  const job: ClaimedJob = {
    id: String(row.id),
    queue: row.queue,
    task: row.task,
    status: row.status,
    priority: Number(row.priority),
    payload: row.payload,
    result: row.result,
    dedupeKey: row.dedupe_key,
    group: row.group_key ?? null,
    progress: row.progress ?? null,
    flowId: row.flow_id ?? null,
    flowRef: row.flow_ref ?? null,
    attempts,
    maxAttempts: Number(row.max_attempts),
    runAfter: toDate(row.run_after),
    leaseUntil: toDateOrNull(row.lease_until),
    workerId: row.worker_id ?? '',
    runStartedAt: toDateOrNull(row.run_started_at),
    timeoutMs: row.timeout_ms === null ? null : Number(row.timeout_ms),
    lastError: row.last_error,
    cancelRequestedAt: toDateOrNull(row.cancel_requested_at),
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
    attemptedBy:
      row.attempted_by && row.attempted_by.length > 0
        ? row.attempted_by
        : row.worker_id
          ? [row.worker_id]
          : [],
    attempt: attempts,
    token: String(row.claims),
  };
  if (row.trace_context) traceContexts.set(job, row.trace_context);
  return job;
}

function toDate(value: Date | string | number): Date {
  if (typeof value === 'number' || value instanceof Date) return new Date(value);
  return new Date(/^-?\d+(\.\d+)?$/.test(value) ? Number(value) : value); // a changed float8 parser
}

function toDateOrNull(value: Date | string | number | null): Date | null {
  return value === null ? null : toDate(value);
}
