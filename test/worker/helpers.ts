/**
 * Event-driven helpers for the Worker tests: waiting for an event (with a timeout), gates that
 * hold a handler until the test lets it go, and a worker that is stopped when its test ends.
 */
import { performance } from 'node:perf_hooks';
import { onTestFinished } from 'vitest';
import type { WorkerEvents } from '../../src/worker/events.js';
import type { WorkerOptions } from '../../src/worker/options.js';
import type { Worker } from '../../src/worker/worker.js';
import type { TestDatabase } from '../support/database.js';

/**
 * Resolves with the payload of the next `event` that satisfies `match`. Call it *before* the
 * action that should cause the event. Rejects after `timeoutMs`.
 */
export function nextEvent<E extends keyof WorkerEvents>(
  worker: Worker,
  event: E,
  match: (payload: WorkerEvents[E]) => boolean = () => true,
  timeoutMs = 5_000,
): Promise<WorkerEvents[E]> {
  const promise = new Promise<WorkerEvents[E]>((resolve, reject) => {
    const listener = (payload: WorkerEvents[E]) => {
      if (!match(payload)) return;
      clearTimeout(timer);
      worker.off(event, listener);
      resolve(payload);
    };
    const timer = setTimeout(() => {
      worker.off(event, listener);
      reject(new Error(`no '${event}' event within ${timeoutMs} ms`));
    }, timeoutMs);
    worker.on(event, listener);
  });
  // A test that fails before awaiting it must not add an "unhandled rejection" to its report.
  promise.catch(() => undefined);
  return promise;
}

/** Records every event a worker emits from now on, in order: name, job id (if any), payload. */
export function recordEvents(worker: Worker): { name: string; jobId?: string; payload: unknown }[] {
  const log: { name: string; jobId?: string; payload: unknown }[] = [];
  const names: (keyof WorkerEvents)[] = [
    'job:start',
    'job:done',
    'job:retry',
    'job:dead',
    'job:cancelled',
    'job:released',
    'job:runaway',
    'lease:lost',
    'reaped',
    'listen:connected',
    'warning',
    'error',
  ];
  for (const name of names) {
    worker.on(name, (payload: unknown) => {
      const jobId = (payload as { job?: { id: string } }).job?.id;
      log.push(jobId === undefined ? { name, payload } : { name, jobId, payload });
    });
  }
  return log;
}

/** A promise the test resolves by hand (a handler waits on it). */
export interface Gate<T = void> {
  readonly promise: Promise<T>;
  open(value: T): void;
}

export function gate<T = void>(): Gate<T> {
  let open!: (value: T) => void;
  const promise = new Promise<T>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/** Resolves with the signal's reason once it is aborted. */
export function aborted(signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason);
  return new Promise((resolve) => {
    signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
  });
}

/** Rejects if `promise` has not settled within `timeoutMs`. */
export function within<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: not within ${timeoutMs} ms`)), timeoutMs);
    }),
  ]);
}

/** Milliseconds since `t0` (performance.now()). */
export function since(t0: number): number {
  return performance.now() - t0;
}

/**
 * Creates and starts a worker that is stopped (timeout 1 s) when the current test ends, pass or
 * fail, so that one test's worker never claims another test's jobs. Tests that are about stop()
 * still call it themselves; stop() is idempotent.
 */
export async function startWorker(
  db: TestDatabase,
  options: Omit<WorkerOptions, 'connectionString'>,
  beforeStart?: (worker: Worker) => void,
): Promise<Worker> {
  const worker = db.worker(options);
  onTestFinished(() => worker.stop({ timeoutMs: 1_000 }));
  beforeStart?.(worker);
  await worker.start();
  return worker;
}

/** p-th percentile (nearest rank) of `values`. */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}
