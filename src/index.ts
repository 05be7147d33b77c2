/**
 * Skiplock: a durable job queue on PostgreSQL (SKIP LOCKED claims, leases, retries, dedupe,
 * LISTEN/NOTIFY wake-up).
 *
 * @packageDocumentation
 */
export { computeBackoff, DEFAULT_BACKOFF_BASE_MS, DEFAULT_BACKOFF_CAP_MS } from './core/backoff.js';
export type { Executor } from './db/executor.js';
export { notifyChannel } from './db/identifier.js';
export {
  ConflictError,
  DatabaseError,
  DedupeConflictError,
  EmbeddedPostgresError,
  JobCancelledError,
  JobDeadlineExceeded,
  JobSuspended,
  LeaseLostError,
  MigrationError,
  NotFoundError,
  NotMigratedError,
  PermanentError,
  type PostgresErrorFields,
  QueueClosedError,
  SkiplockError,
  type SkiplockErrorCode,
  ValidationError,
  WaitTimeoutError,
  WorkerStoppingError,
} from './errors.js';
export { LATEST_VERSION, type MigrateResult } from './migrations/migrate.js';
export { Queue, type QueueOptions } from './queue.js';
export { type BatchTaskConfig, defineTask, type TaskConfig } from './task/task.js';
export type {
  BatchContext,
  BatchHandler,
  BatchItem,
  BatchOptions,
  BatchTask,
  Handler,
  InferInput,
  InferOutput,
  JobContext,
  SchemaIssue,
  SchemaResult,
  StandardSchemaV1,
  Task,
  TaskJobSpec,
  TaskSettings,
} from './task-types.js';
export {
  type BackoffJitter,
  type BackoffOptions,
  type CancelOutcome,
  type CatchUp,
  type ClaimedJob,
  type ClaimOptions,
  type DedupeOptions,
  type DependencyState,
  type EmitEventOptions,
  type EnqueueCallOptions,
  type EnqueueOptions,
  type EnqueueResult,
  type FlowGraph,
  type FlowNode,
  type FlowResult,
  JOB_STATUSES,
  type Job,
  type JobDependencies,
  type JobDependencySummary,
  type JobPage,
  type JobSpec,
  type JobStatus,
  type JobStep,
  type JsonValue,
  type Lease,
  type ListOptions,
  type LiveStatus,
  type Logger,
  type OpsSnapshot,
  type PriorityAging,
  type PruneOptions,
  type Queryable,
  type QueueConfig,
  type QueueConfigOptions,
  type QueueInfo,
  type RequeueOptions,
  type RequeueOutcome,
  type Schedule,
  type ScheduleOptions,
  type SequenceInfo,
  type SequencesOptions,
} from './types.js';
export type { WorkerEventName, WorkerEvents } from './worker/events.js';
export type { BatchTaskDefinition, TaskDefinition, TaskMap, WorkerOptions } from './worker/options.js';
export { Worker, type WorkerStats } from './worker/worker.js';
