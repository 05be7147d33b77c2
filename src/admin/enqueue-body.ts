/**
 * The body of `POST /api/jobs` (SPEC §13): `{ task, payload, ...options }` as JSON, mapped onto
 * `queue.enqueue(task, payload, options)`. What JSON cannot say the library's way is translated
 * here, as the SQL function (migration 17) takes it: `runAt` is an ISO 8601 string with its
 * offset. Everything else (`sequence` too, SPEC §11) is the library's to check, with its own
 * errors.
 */
import { OPTION_KEYS } from '../core/job-spec.js';
import { smallestByCodePoint } from '../core/key-order.js';
import { describe } from '../core/validate.js';
import { ValidationError } from '../errors.js';
import type { EnqueueOptions } from '../types.js';

/** What the route hands to `queue.enqueue`. */
export interface EnqueueRequest {
  task: unknown;
  payload: unknown;
  options: EnqueueOptions;
  /**
   * A `runAt` that is no ISO 8601 timestamp with its offset: `options.runAt` is then an
   * Invalid Date, so the library reports it where it checks `runAt` — after the checks that come
   * first in every producer (runAt with delayMs, dependsOn, task…) — and {@link enqueueError}
   * puts this error, in the SQL function's words, in its place.
   */
  runAtError: ValidationError | null;
}

/**
 * The ISO 8601 form `runAt` takes over HTTP, as the SQL function's (migration 17): date, time to
 * the minute at least, and the offset — Z or ±hh[:mm]; hours 00–23, no leap second.
 */
const ISO_TIMESTAMP =
  /^([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9])(\.[0-9]{1,9})?)?(?:[Zz]|([+-])(0[0-9]|1[0-5])(?::?([0-5][0-9]))?)$/;

/**
 * Checks a parsed JSON body and maps it to `enqueue`'s arguments (nothing is written yet), in
 * the SQL function's order (SPEC §13: every producer names the same field): the body, then an
 * unknown key — the smallest by code point when there are several, as the SQL function's
 * `min(key COLLATE "C")` —, then `sequence`; the rest is the library's, in its order.
 */
export function enqueueRequest(body: unknown): EnqueueRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ValidationError(
      'body',
      `must be a JSON object { task, payload, ...options }, got ${describe(body)}`,
    );
  }
  const { task, payload, ...options } = body as Record<string, unknown>;
  const unknown = smallestByCodePoint(Object.keys(options).filter((key) => !OPTION_KEYS.includes(key)));
  if (unknown === 'client') {
    throw new ValidationError(
      'options.client',
      'is not a known option of POST /api/jobs (the job goes in a transaction of its own: enqueue from SQL or Python to join yours)',
    );
  }
  if (unknown !== undefined) {
    throw new ValidationError(
      `options.${unknown}`,
      `is not a known option (known: ${OPTION_KEYS.join(', ')})`,
    );
  }
  let runAtError: ValidationError | null = null;
  if (Object.hasOwn(options, 'runAt')) {
    try {
      options.runAt = runAt(options.runAt, 'runAt');
    } catch (error) {
      if (!(error instanceof ValidationError)) throw error;
      runAtError = error;
      options.runAt = new Date(Number.NaN);
    }
  }
  return { task, payload, options: options as EnqueueOptions, runAtError };
}

/**
 * The error to answer for a failed `queue.enqueue` of `request`: the library's, except its
 * report of the Invalid Date standing for a bad `runAt` string, which becomes that string's own
 * error (the SQL function's message).
 */
export function enqueueError(request: EnqueueRequest, error: unknown): unknown {
  if (
    request.runAtError !== null &&
    error instanceof ValidationError &&
    error.field === 'runAt' &&
    error.message.startsWith('runAt: must be a valid Date')
  ) {
    return request.runAtError;
  }
  return error;
}

/** An ISO 8601 timestamp with its offset as a Date (a date that does not exist is refused, not rolled over). */
export function runAt(value: unknown, field: string): Date {
  const match = typeof value === 'string' ? ISO_TIMESTAMP.exec(value) : null;
  if (match === null) {
    throw new ValidationError(
      field,
      `must be an ISO 8601 timestamp with its time zone offset, like "2026-12-03T09:00:00Z", got ${describe(value)}`,
    );
  }
  const [year, month, day, hour, minute, second] = match
    .slice(1, 7)
    .map((part) => Number(part ?? 0)) as number[];
  const ms = Math.floor(Number(`0${match[7] ?? ''}`) * 1000);
  const date = new Date(0);
  date.setUTCFullYear(year as number, (month as number) - 1, day);
  date.setUTCHours(hour as number, minute, second, ms);
  if (
    date.getUTCFullYear() !== year ||
    date.getUTCMonth() !== (month as number) - 1 ||
    date.getUTCDate() !== day
  ) {
    throw new ValidationError(field, `is not a valid date and time, got ${describe(value)}`);
  }
  const sign = match[8] === '-' ? -1 : 1;
  const offsetMinutes = match[8] === undefined ? 0 : sign * (Number(match[9]) * 60 + Number(match[10] ?? 0));
  return new Date(date.getTime() - offsetMinutes * 60_000);
}
