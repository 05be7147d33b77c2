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

/**
 * Resolves once `worker` has handled a notification whose payload is `payload` (a cancel, a
 * hint). No event says so, so this wraps the worker's private handler until that one comes.
 * Call it *before* the action that sends the notification.
 */
export function heardNotification(worker: Worker, payload: string): Promise<void> {
  const target = worker as unknown as { notified(payload: string): void };
  const original = target.notified;
  return new Promise((resolve) => {
    target.notified = (received: string) => {
      original.call(worker, received);
      if (received !== payload) return;
      delete (target as { notified?: unknown }).notified; // the prototype's handler again
      resolve();
    };
  });
}

/**
 * Holds the worker's next LISTEN reconnection until the returned function is called, so a test
 * can act while the listener is certainly down (the first reconnect comes 75–125 ms after the
 * loss, which a loaded machine's round trips can outlast). Wraps a private method.
 */
export function holdListenerReconnect(worker: Worker): () => void {
  type Connecting = { connect(): Promise<void> };
  const listener = (worker as unknown as { listener: Connecting | null }).listener;
  if (listener === null) throw new Error('the worker has no LISTEN connection');
  const connect = listener.connect;
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  listener.connect = async () => {
    await released;
    delete (listener as { connect?: unknown }).connect; // the prototype's method again
    return connect.call(listener);
  };
  return release;
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
