import { ValidationError } from '../errors.js';
import type { BackoffJitter } from '../types.js';

/** Default first retry delay: 5 s (the seed's `base`). */
export const DEFAULT_BACKOFF_BASE_MS = 5_000;
/** Default longest retry delay: 10 min (the seed's `cap`). */
export const DEFAULT_BACKOFF_CAP_MS = 600_000;

/**
 * Milliseconds to wait before the next try, after `attempts` tries have failed:
 * `min(capMs, baseMs · 2^(attempts-1))` (SPEC §1.8), optionally jittered.
 *
 * - `jitter: 'none'` (default) returns that exact value.
 * - `'full'` returns a uniform value in `[0, d]` (spreads a thundering herd the most).
 * - `'equal'` returns a uniform value in `[d/2, d]` (keeps at least half the delay).
 *
 * @example
 * computeBackoff(1)              // 5000
 * computeBackoff(3)              // 20000
 * computeBackoff(20)             // 600000 (capped)
 * computeBackoff(3, 1000, 60000, 'full') // somewhere in 0…4000
 */
export function computeBackoff(
  attempts: number,
  baseMs: number = DEFAULT_BACKOFF_BASE_MS,
  capMs: number = DEFAULT_BACKOFF_CAP_MS,
  jitter: BackoffJitter = 'none',
  random: () => number = Math.random,
): number {
  if (!Number.isFinite(attempts)) throw new ValidationError('attempts', 'must be a finite number');
  if (!Number.isFinite(baseMs) || baseMs < 0) {
    throw new ValidationError('baseMs', 'must be a finite number ≥ 0');
  }
  if (!Number.isFinite(capMs) || capMs < 0) {
    throw new ValidationError('capMs', 'must be a finite number ≥ 0');
  }
  // 2^exponent overflows to Infinity past ~1024; min() with the cap keeps the result finite.
  const exponent = Math.max(0, Math.floor(attempts) - 1);
  const delay = Math.min(capMs, baseMs * 2 ** Math.min(exponent, 1023));
  switch (jitter) {
    case 'none':
      return Math.round(delay);
    case 'full':
      return Math.round(random() * delay);
    case 'equal':
      return Math.round(delay / 2 + random() * (delay / 2));
    default:
      throw new ValidationError('jitter', `must be 'none', 'full' or 'equal', got ${String(jitter)}`);
  }
}
