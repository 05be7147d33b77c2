/** Small helpers shared by the runner and the worker child processes. */
import { performance } from 'node:perf_hooks';

/** Wall-clock milliseconds with sub-millisecond resolution, comparable across processes of one machine. */
export function wallNow(): number {
  return performance.timeOrigin + performance.now();
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** An error that says which step ran out of time. */
export class TimeoutError extends Error {
  constructor(what: string, ms: number) {
    super(`${what} timed out after ${Math.round(ms / 1000)} s`);
    this.name = 'TimeoutError';
  }
}

/** Rejects with a TimeoutError when `promise` has not settled within `ms`. The timer never keeps the process alive. */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(what, ms)), ms);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Runs `fn`, swallowing (but returning) its error: for cleanup steps that must not mask the real failure. */
export async function quietly(fn: () => Promise<unknown>, ms: number, what: string): Promise<Error | null> {
  try {
    await withTimeout(Promise.resolve().then(fn), ms, what);
    return null;
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}

/** Polls `check` every `intervalMs` until it returns true; rejects after `timeoutMs`. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
  intervalMs = 10,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (performance.now() > deadline) throw new TimeoutError(what, timeoutMs);
    await sleep(intervalMs);
  }
}

/** The q-quantile (0..1) of `values` by linear interpolation; NaN for an empty list. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = sorted[lo] as number;
  const b = sorted[hi] as number;
  return a + (b - a) * (pos - lo);
}

export function median(values: readonly number[]): number {
  return quantile(values, 0.5);
}

/** One line of an error, for table cells. */
export function reason(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  const line = text.split('\n')[0] ?? '';
  return line.length > 120 ? `${line.slice(0, 117)}...` : line;
}

/** Runs `count` calls of `fn(i)` with at most `inFlight` running at once. */
export async function runConcurrently(
  count: number,
  inFlight: number,
  fn: (i: number) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < count) {
      const i = next++;
      await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(inFlight, count) }, lane));
}

/** Formats a number for tables: 3 significant digits below 100, thousands separators above. */
export function fmt(value: number): string {
  if (!Number.isFinite(value)) return 'n/a';
  const abs = Math.abs(value);
  if (abs >= 100) return Math.round(value).toLocaleString('en-US');
  if (abs >= 10) return value.toFixed(1);
  if (abs >= 1) return value.toFixed(2);
  return value.toPrecision(2);
}
