/**
 * Cron ticks for schedules (SPEC §8), computed by cron-parser: 5 fields (minute first) or 6
 * (second first), or an alias such as `@daily`, in an IANA time zone. Chosen over croner for its
 * DST behaviour, which is Vixie cron's: a fixed time inside a spring-forward gap runs once, right
 * after the gap (02:30 → 03:30); a fixed time inside a fall-back overlap runs once, at its first
 * occurrence; a schedule whose hour field is a wildcard keeps running every real hour through
 * both (croner 9 skipped the repeated hour of `0 * * * *`). test/schedule/cron.test.ts holds the
 * hand-computed instants of 2026's transitions.
 */
import { createRequire } from 'node:module';
import type { CronExpressionParser as Parser } from 'cron-parser';
import { ValidationError } from '../errors.js';

/**
 * cron-parser (and the date library under it: ~20 ms of CPU and 17 modules to load) is loaded
 * on the first cron computed, not when Skiplock is imported: a process with no schedule never
 * loads it.
 */
let parser: typeof Parser | null = null;
function cronParser(): typeof Parser {
  parser ??= (createRequire(import.meta.url)('cron-parser') as { CronExpressionParser: typeof Parser })
    .CronExpressionParser;
  return parser;
}

const ALIASES = ['@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly'];

export interface CronSpec {
  cron: string;
  tz: string;
}

/** Checks a cron expression and a time zone; throws a ValidationError naming the field. */
export function requireCron(cron: unknown, tz: unknown): CronSpec {
  if (typeof cron !== 'string' || cron.trim() === '') {
    throw new ValidationError('cron', 'must be a cron expression such as "0 9 * * 1-5" or "*/10 * * * * *"');
  }
  const expr = cron.trim().replace(/\s+/g, ' ');
  const fields = expr.split(' ').length;
  if (!(ALIASES.includes(expr) || fields === 5 || fields === 6)) {
    throw new ValidationError(
      'cron',
      `must have 5 fields (minute hour day-of-month month day-of-week), 6 (a seconds field first) or be one of ${ALIASES.join(', ')}; got ${JSON.stringify(cron)}`,
    );
  }
  const zone = typeof tz === 'string' ? canonicalZone(tz) : null;
  if (zone === null) {
    throw new ValidationError(
      'tz',
      `must be an IANA time zone such as "Europe/Berlin" or "UTC", got ${JSON.stringify(tz)}`,
    );
  }
  const spec = { cron: expr, tz: zone };
  try {
    nextTick(spec, new Date());
  } catch (error) {
    throw new ValidationError(
      'cron',
      `${JSON.stringify(cron)} is not a valid cron expression: ${(error as Error).message}`,
    );
  }
  return spec;
}

/** The zone's canonical IANA name ("europe/berlin" → "Europe/Berlin"), or null when unknown. */
function canonicalZone(tz: string): string | null {
  if (tz === '') return null;
  try {
    return new Intl.DateTimeFormat('en-US', { timeZone: tz }).resolvedOptions().timeZone;
  } catch {
    return null;
  }
}

/** The first tick strictly after `after`. */
export function nextTick(spec: CronSpec, after: Date): Date {
  return cronParser().parse(spec.cron, { tz: spec.tz, currentDate: after }).next().toDate();
}

/** Ticks walked forward from a schedule's next run before a long outage is handled by estimate. */
const WALK_LIMIT = 5_000;

/**
 * The ticks due in [`from`, `now`] — at most the latest `keep`, oldest first, and whether older
 * ones were left out — and the schedule's next run after them. `from` is the stored next run.
 *
 * Always walked forward: walking back (cron-parser's prev()) disagrees with the forward walk
 * at DST transitions (it returns both occurrences of a repeated local time and skips a time
 * inside a spring-forward gap), and the next run is the walk's first tick after `now` — not
 * the first tick after the clock's now, which inside a fall-back overlap would be the second
 * occurrence of a time that already ran. After a long outage (more than WALK_LIMIT ticks) the
 * walk starts a few intervals before `now` instead: only ticks that are skipped anyway are lost.
 */
export function dueTicks(
  spec: CronSpec,
  from: Date,
  now: Date,
  keep: number,
): { ticks: Date[]; older: boolean; next: Date } {
  const walked = walk(spec, new Date(from.getTime() - 1), now, keep, WALK_LIMIT);
  if (walked !== null) return walked;
  // A long outage: start where at least keep + 1 ticks remain before now, doubling the span.
  const first = nextTick(spec, now);
  const interval = Math.max(1_000, nextTick(spec, first).getTime() - first.getTime());
  for (let span = interval * (keep + 2); ; span *= 2) {
    const start = new Date(Math.max(from.getTime() - 1, now.getTime() - span));
    const result = walk(spec, start, now, keep, Number.POSITIVE_INFINITY);
    // Enough ticks in the window, or the window reached `from` (then the walk was exact).
    if (result !== null && (result.older || start.getTime() <= from.getTime() - 1)) return result;
  }
}

/** Forward from `start` (exclusive) to the first tick after `now`; null past `limit` ticks. */
function walk(
  spec: CronSpec,
  start: Date,
  now: Date,
  keep: number,
  limit: number,
): { ticks: Date[]; older: boolean; next: Date } | null {
  const iterator = cronParser().parse(spec.cron, { tz: spec.tz, currentDate: start });
  const ticks: Date[] = [];
  let older = false;
  for (let n = 0; n <= limit; n++) {
    const tick = iterator.next().toDate();
    if (tick > now) return { ticks, older, next: tick };
    ticks.push(tick);
    if (ticks.length > keep) {
      ticks.shift();
      older = true;
    }
  }
  return null;
}
