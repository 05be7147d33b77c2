/**
 * Input validation (SPEC §1.11). Every public input passes through here before any SQL runs,
 * so bad input is a {@link ValidationError} naming the field, and nothing is written.
 */
import { ValidationError } from '../errors.js';
import { JOB_STATUSES, type JobStatus, type Lease } from '../types.js';
import { compareCodePoints } from './key-order.js';

const INT4_MAX = 2_147_483_647;
const INT4_MIN = -2_147_483_648;
/** Largest bigint id (PostgreSQL int8). */
const INT8_MAX = 9_223_372_036_854_775_807n;
/** Longest task, queue or dedupe key, in characters; longer ones are a mistake, not a name. */
export const MAX_NAME_LENGTH = 1000;

/** A non-empty string without NUL (PostgreSQL text cannot hold U+0000). */
export function requireName(value: unknown, field: string): string {
  if (typeof value !== 'string') {
    throw new ValidationError(field, `must be a non-empty string, got ${describe(value)}`);
  }
  if (value.length === 0) throw new ValidationError(field, 'must be a non-empty string, got ""');
  if (value.length > MAX_NAME_LENGTH) {
    throw new ValidationError(field, `must be at most ${MAX_NAME_LENGTH} characters, got ${value.length}`);
  }
  if (value.includes('\u0000')) {
    throw new ValidationError(field, 'must not contain the NUL character (U+0000)');
  }
  if (LONE_SURROGATE.test(value)) {
    // UTF-8 cannot hold it: it would be stored as U+FFFD and no longer match itself.
    throw new ValidationError(field, 'must be well-formed Unicode (it holds a lone surrogate)');
  }
  return value;
}

/** A UTF-16 surrogate without its partner. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** An integer in PostgreSQL's int4 range, within [min, max]. */
export function requireInt(value: unknown, field: string, min = INT4_MIN, max = INT4_MAX): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new ValidationError(field, `must be an integer, got ${describe(value)}`);
  }
  if (value < min || value > max) {
    throw new ValidationError(field, `must be between ${min} and ${max}, got ${value}`);
  }
  return value;
}

/** A finite, non-negative number of milliseconds (fractions are rounded). */
export function requireMs(value: unknown, field: string, max = 100 * 365 * 86_400_000): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw new ValidationError(field, `must be a finite number of milliseconds, got ${describe(value)}`);
  }
  if (value < 0) throw new ValidationError(field, `must not be negative, got ${value}`);
  if (value > max) throw new ValidationError(field, `must be at most ${max} ms, got ${value}`);
  return Math.round(value);
}

/** A valid `Date`. */
export function requireDate(value: unknown, field: string): Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    throw new ValidationError(field, `must be a valid Date, got ${describe(value)}`);
  }
  const year = value.getUTCFullYear();
  if (year < 1 || year > 9999) {
    throw new ValidationError(field, `must be between the years 1 and 9999, got ${value.toISOString()}`);
  }
  return value;
}

/**
 * JSON text for a `jsonb` column: the one serialiser of every payload, result and progress value
 * (SPEC §1.11). `undefined` becomes JSON `null`. Throws a {@link ValidationError} for values JSON
 * cannot represent faithfully: BigInt, cycles, functions, symbols, strings holding U+0000 (which
 * `jsonb` rejects), and the numbers JSON has no literal for — `NaN` and `±Infinity`, which
 * `JSON.stringify` would silently turn into `null` (an Invalid Date too) — anywhere in the value,
 * also as returned by a `toJSON`; the error's field is then the path to it, such as
 * `payload.items[2]`.
 *
 * @example
 * toJsonText({ total: 3 }, 'result');         // '{"total":3}'
 * toJsonText({ x: Number.NaN }, 'payload');   // throws ValidationError, field 'payload.x'
 */
export function toJsonText(value: unknown, field: string): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value === undefined ? null : value);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new ValidationError(field, `must be JSON-serialisable (${reason})`, { cause: error });
  }
  if (text === undefined) {
    throw new ValidationError(field, `must be JSON-serialisable, got ${describe(value)}`);
  }
  // NaN and ±Infinity come out as `null`, so text without one holds none: only text with a null
  // is walked again. No replacer: a replacer function that checked every number made the call
  // about 1.8× as costly on small payloads (it leaves V8's fast path), this 1.0× on text without
  // a null and about 1.1× with one (the micro-benchmark in the commit message of this check).
  if (text.includes('null')) rejectNonFinite(value, field);
  // An escaped NUL: `\u0000` preceded by an even number of backslashes (odd ones escape it).
  if (/(?:^|[^\\])(?:\\\\)*\\u0000/.test(text)) {
    throw new ValidationError(field, 'must not contain the NUL character (U+0000) in any string');
  }
  // JSON.stringify escapes exactly the lone surrogates as \udXXX, which jsonb rejects.
  if (/(?:^|[^\\])(?:\\\\)*\\ud[89a-f][0-9a-f]{2}/i.test(text)) {
    throw new ValidationError(field, 'must be well-formed Unicode (a string holds a lone surrogate)');
  }
  return text;
}

/**
 * Throws for the first `NaN` or `±Infinity` in `value` (or Invalid Date, whose `toJSON` gives
 * `null` for the same reason), visited as `JSON.stringify` visits it: own enumerable keys, array
 * indices, `toJSON(key)` first, Number objects unwrapped — so getters and `toJSON` run a second
 * time. Only called on a value that already serialised, so it has no cycle. The path is built
 * only when one is found.
 */
function rejectNonFinite(root: unknown, field: string): void {
  const trail: (string | number)[] = []; // the path, filled in while unwinding from a find
  const found = findNonFinite(root, '', trail);
  if (found === undefined) return;
  const path = field + trail.reverse().map(pathStep).join('');
  if (found instanceof Date) {
    throw new ValidationError(
      path,
      'must be a valid Date, got Invalid Date (JSON.stringify would store null)',
    );
  }
  throw new ValidationError(
    path,
    `must be a finite number, got ${String(found)}: JSON has no NaN or Infinity (JSON.stringify would store null); send null or a string instead`,
  );
}

/** The first non-finite number or Invalid Date under `value`, its keys pushed on `trail` innermost first. */
function findNonFinite(
  input: unknown,
  key: string | number,
  trail: (string | number)[],
): number | Date | undefined {
  let value = input;
  if (typeof value === 'number') return Number.isFinite(value) ? undefined : value;
  if (typeof value !== 'object' || value === null) {
    if (typeof value !== 'function' && typeof value !== 'bigint') return undefined;
  }
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') {
    if (value instanceof Date && toJSON === Date.prototype.toJSON) {
      return Number.isNaN(value.getTime()) ? value : undefined;
    }
    value = toJSON.call(value, String(key));
    if (typeof value !== 'object' || value === null) return findNonFinite(value, key, trail);
  }
  if (typeof value !== 'object' || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findNonFinite(value[i], i, trail);
      if (found !== undefined) {
        trail.push(i);
        return found;
      }
    }
    return undefined;
  }
  if (value instanceof Number) return findNonFinite(Number(value), key, trail);
  for (const name in value) {
    if (!Object.hasOwn(value, name)) continue;
    const found = findNonFinite((value as Record<string, unknown>)[name], name, trail);
    if (found !== undefined) {
      trail.push(name);
      return found;
    }
  }
  return undefined;
}

/** `.name` for a key that reads as an identifier, `["a b"]` for any other, `[2]` for an index. */
function pathStep(key: string | number): string {
  if (typeof key === 'number') return `[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/** A job id: the decimal string (or safe integer) of a positive int8. Returns the canonical string. */
export function requireJobId(value: unknown, field = 'id'): string {
  const text = typeof value === 'number' && Number.isSafeInteger(value) ? String(value) : value;
  if (typeof text !== 'string' || !/^[1-9][0-9]{0,18}$/.test(text) || BigInt(text) > INT8_MAX) {
    throw new ValidationError(
      field,
      `must be a job id (a positive integer as a string, like "42"), got ${describe(value)}`,
    );
  }
  return text;
}

/** A flow id (SPEC §10): a UUID as `enqueueFlow` returns it. Returns it in lower case. */
export function requireFlowId(value: unknown, field = 'flowId'): string {
  if (
    typeof value !== 'string' ||
    !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value)
  ) {
    throw new ValidationError(
      field,
      `must be a flow id (a UUID, as enqueueFlow returns it), got ${describe(value)}`,
    );
  }
  return value.toLowerCase();
}

/** A lease as returned by `claim` (SPEC §1.3). */
export function requireLease(value: unknown, field = 'lease'): Lease {
  if (typeof value !== 'object' || value === null) {
    throw new ValidationError(field, `must be the lease returned by claim(), got ${describe(value)}`);
  }
  const lease = value as Record<string, unknown>;
  return {
    id: requireJobId(lease.id, `${field}.id`),
    workerId: requireName(lease.workerId, `${field}.workerId`),
    attempt: requireInt(lease.attempt, `${field}.attempt`, 1),
    token: requireToken(lease.token, `${field}.token`),
  };
}

/** A claim token as `claim()` returns it (SPEC §1.3): opaque to callers, a positive int8 here. */
function requireToken(value: unknown, field: string): string {
  if (typeof value !== 'string' || !/^[1-9][0-9]{0,18}$/.test(value) || BigInt(value) > INT8_MAX) {
    throw new ValidationError(
      field,
      `must be the token of the lease returned by claim() (a lease without its token cannot prove ownership), got ${describe(value)}`,
    );
  }
  return value;
}

/** One of the five statuses. */
export function requireStatus(value: unknown, field: string): JobStatus {
  if (typeof value !== 'string' || !(JOB_STATUSES as readonly string[]).includes(value)) {
    throw new ValidationError(field, `must be one of ${JOB_STATUSES.join(', ')}; got ${describe(value)}`);
  }
  return value as JobStatus;
}

/** A list of names (tasks, queues); `undefined` means "no filter". Empty lists are refused. */
export function optionalNameList(value: unknown, field: string): string[] | null {
  if (value === undefined || value === null) return null;
  if (!Array.isArray(value) || value.length === 0) {
    throw new ValidationError(field, `must be a non-empty array of names, got ${describe(value)}`);
  }
  return value.map((item, i) => requireName(item, `${field}[${i}]`));
}

/**
 * Refuses keys the caller probably misspelt (`dedupe_key`, `runAfter`…). With several, it names
 * the smallest by code point, as the SQL functions (`min(key COLLATE "C")`) and the HTTP route
 * do: every producer names the same one (SPEC §13).
 */
export function rejectUnknownKeys(value: object, allowed: readonly string[], field: string): void {
  let unknown: string | undefined;
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key) && (unknown === undefined || compareCodePoints(key, unknown) < 0))
      unknown = key;
  }
  if (unknown !== undefined) {
    throw new ValidationError(
      field ? `${field}.${unknown}` : unknown,
      `is not a known option (known: ${allowed.join(', ')})`,
    );
  }
}

/** An options object, or `undefined` → `{}`. */
export function optionsObject<T extends object>(value: T | undefined, field: string): T {
  if (value === undefined || value === null) return {} as T;
  const proto = typeof value === 'object' ? Object.getPrototypeOf(value) : undefined;
  if (proto !== Object.prototype && proto !== null) {
    throw new ValidationError(field, `must be a plain object, got ${describe(value)}`);
  }
  return value;
}

/** A short description of a value for error messages. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (typeof value === 'bigint') return `${value}n (a BigInt)`;
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? 'Invalid Date' : value.toISOString();
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}
