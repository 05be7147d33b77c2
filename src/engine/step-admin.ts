/**
 * §12 what the Queue does with steps and events outside a run: a job's steps as the API shows
 * them, and emitting an event (in the caller's transaction or on its own).
 */
import { toJsonText } from '../core/validate.js';
import { ValidationError } from '../errors.js';
import type { StepRow } from '../store/job-store.js';
import type { JobStep, RequeueOptions } from '../types.js';
import type { EngineCore as Engine } from './engine-core.js';

/** Longest step or event name, in UTF-8 bytes (names are index keys). */
export const MAX_NAME_BYTES = 1000;

/** A job's steps, in the order they completed. */
export async function listSteps(engine: Engine, id: string): Promise<JobStep[]> {
  const rows = await engine.store.steps.list(engine.pool, id);
  return rows.map(toJobStep);
}

/** A stored step as the API shows it. */
export function toJobStep(row: StepRow): JobStep {
  const step: JobStep = {
    name: row.name,
    kind: row.kind,
    value: row.value === null ? null : JSON.parse(row.value),
    completedAt: new Date(row.completed_at),
  };
  if (!row.resolved) step.pending = true;
  if (row.event !== null) step.event = row.event;
  if (row.kind !== 'step') step.wakeAt = row.wake_at === null ? null : new Date(row.wake_at);
  return step;
}

/**
 * A step or event name, checked: a non-empty string of at most MAX_NAME_BYTES UTF-8 bytes (what
 * PostgreSQL indexes: a longer key fails the statement, and every checkpoint batched with it),
 * without NUL.
 */
export function checkStepName(name: unknown, field: string): asserts name is string {
  if (typeof name !== 'string' || name.length === 0 || Buffer.byteLength(name, 'utf8') > MAX_NAME_BYTES)
    throw new ValidationError(field, `must be a non-empty string of at most ${MAX_NAME_BYTES} bytes (UTF-8)`);
  if (name.includes('\u0000')) throw new ValidationError(field, 'must not contain the NUL character');
}

/** The event's name and payload (JSON text), checked (§1.11): a ValidationError writes nothing. */
export function emitEventArgs(eventName: unknown, payload: unknown): { name: string; payloadJson: string } {
  checkStepName(eventName, 'eventName');
  return { name: eventName, payloadJson: toJsonText(payload, 'payload') };
}

/** Sets the event once (true: this call set it), on the caller's transaction client or the pool. */
export function emitEvent(
  engine: Engine,
  name: string,
  payloadJson: string,
  client: unknown,
): Promise<boolean> {
  engine.assertOpen();
  return engine.store.steps.emit(engine.writer(client), name, payloadJson);
}

/** requeue's `resetSteps` option, checked. */
export function resetStepsArg(options: RequeueOptions | undefined): boolean {
  const reset = options?.resetSteps;
  if (reset !== undefined && typeof reset !== 'boolean')
    throw new ValidationError('resetSteps', 'must be a boolean');
  return reset === true;
}
