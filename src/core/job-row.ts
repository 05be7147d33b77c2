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

/**
 * A row of the plain claim, read as an array (src/store/fragments.ts `CLAIMED_COLUMNS`, then the
 * pick's position for grouped picks): what varies per job, the claim's own time once, and the
 * rare fields packed as one JSON array (null when all are empty).
 */
export type ClaimedColumns = [
  id: string,
  queue: string,
  task: string,
  priority: number,
  payload: unknown,
  attempts: number,
  maxAttempts: number,
  timeoutMs: number | null,
  claims: string,
  runAfterUs: string,
  createdAtUs: string,
  nowUs: string,
  traceContext: string | null,
  extra: string | null,
  pickOrder: string | number | null,
];

/** The packed rare fields of {@link ClaimedColumns}: dedupe key, group, flow, progress, result, last error, history. */
type Extra = [
  dedupeKey: string | null,
  group: string | null,
  flowId: string | null,
  flowRef: string | null,
  progress: unknown,
  result: unknown,
  lastError: string | null,
  attemptedBy: string[],
];

/** An epoch-microseconds column (int8, whatever the application's int8 parser makes of it) as a Date. */
function microsToDate(value: string | number | bigint): Date {
  return new Date(Math.floor(Number(value) / 1000));
}

/**
 * Orders the rows of one claim as the pick chose (SPEC §2: priority, run_after, id; with group
 * keys, the round-robin pick's own positions) and maps them to {@link ClaimedJob}s for
 * `workerId`, whose lease lasts `leaseMs` from the claim's time.
 */
export function claimedJobsInPickOrder(
  rows: ClaimedColumns[],
  workerId: string,
  leaseMs: number,
): ClaimedJob[] {
  if (rows.length > 1) rows.sort(rows[0]?.[14] == null ? byClaimOrder : byPickPosition);
  const jobs = new Array<ClaimedJob>(rows.length);
  for (let i = 0; i < rows.length; i++) jobs[i] = claimedJob(rows[i] as ClaimedColumns, workerId, leaseMs);
  return jobs;
}

function byPickPosition(a: ClaimedColumns, b: ClaimedColumns): number {
  return Number(a[14]) - Number(b[14]);
}

/** priority, run_after (µs), id (decimal strings without leading zeros: a shorter one is smaller). */
function byClaimOrder(a: ClaimedColumns, b: ClaimedColumns): number {
  return (
    a[3] - b[3] ||
    byMicros(a[9], b[9]) ||
    a[0].length - b[0].length ||
    (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)
  );
}

/**
 * Two epoch-microsecond columns in order: as decimal strings of the same sign, by length then
 * text (no number parsed per comparison); otherwise as numbers.
 */
function byMicros(x: string, y: string): number {
  if (typeof x === 'string' && typeof y === 'string' && x[0] !== '-' && y[0] !== '-')
    return x.length - y.length || (x < y ? -1 : x > y ? 1 : 0);
  return Number(x) - Number(y);
}

function claimedJob(row: ClaimedColumns, workerId: string, leaseMs: number): ClaimedJob {
  const attempts = Number(row[5]);
  const nowMs = Math.floor(Number(row[11]) / 1000);
  const extra = row[13] === null ? null : (JSON.parse(row[13]) as Extra);
  const job: ClaimedJob = {
    id: String(row[0]),
    queue: row[1],
    task: row[2],
    status: 'running',
    priority: Number(row[3]),
    payload: row[4],
    result: extra === null ? null : extra[5],
    dedupeKey: extra === null ? null : extra[0],
    group: extra === null ? null : extra[1],
    progress: extra === null ? null : extra[4],
    flowId: extra === null ? null : extra[2],
    flowRef: extra === null ? null : extra[3],
    attempts,
    maxAttempts: Number(row[6]),
    runAfter: microsToDate(row[9]),
    leaseUntil: new Date(nowMs + leaseMs),
    workerId,
    runStartedAt: new Date(nowMs),
    timeoutMs: row[7] === null ? null : Number(row[7]),
    lastError: extra === null ? null : extra[6],
    cancelRequestedAt: null,
    createdAt: microsToDate(row[10]),
    updatedAt: new Date(nowMs),
    attemptedBy: extra === null ? [workerId] : extra[7],
    attempt: attempts,
    token: String(row[8]),
  };
  if (row[12]) traceContexts.set(job, row[12]);
  return job;
}
