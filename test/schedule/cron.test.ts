/**
 * SPEC §8 ticks across DST, against instants computed by hand from the 2026 transitions:
 *   Europe/Berlin: CET (UTC+1) → CEST (UTC+2) on 29 March at 02:00 local (02:00–03:00 does not
 *   exist); CEST → CET on 25 October at 03:00 local (02:00–03:00 happens twice).
 *   America/New_York: EST (UTC−5) → EDT (UTC−4) on 8 March at 02:00 local; EDT → EST on
 *   1 November at 02:00 local (01:00–02:00 happens twice).
 * A fixed local time runs once per day through both (inside the gap: right after it; inside
 * the overlap: at its first occurrence); an hourly schedule runs every real hour.
 *
 * Break: compute the next run with cron-parser's prev()/a fresh next() from the clock's now
 * (see core/cron.ts, engine/scheduler.ts nextRunAfter), or use croner 9: the fall-back cases
 * fail (a second 02:30, or no 06:00Z).
 */
import { describe, expect, test } from 'vitest';
import { dueTicks, nextTick, requireCron } from '../../src/core/cron.js';
import { nextRunAfter } from '../../src/engine/scheduler.js';
import { ValidationError } from '../../src/errors.js';

const iso = (dates: Date[]) => dates.map((d) => d.toISOString());

/** The first `n` ticks after `from`, as the scheduler fires them: each next run after the last. */
function firings(spec: { cron: string; tz: string }, from: string, n: number): string[] {
  const out: Date[] = [];
  let next = nextTick(spec, new Date(from));
  for (let i = 0; i < n; i++) {
    out.push(next);
    // the scheduler fires `next` a little late, then advances from the walk
    next = dueTicks(spec, next, new Date(next.getTime() + 5), 1).next;
  }
  return iso(out);
}

describe('cron ticks across the 2026 DST transitions (hand-computed instants)', () => {
  const berlin = { cron: '30 2 * * *', tz: 'Europe/Berlin' };
  const newYork = { cron: '0 * * * *', tz: 'America/New_York' };

  test('30 2 * * * in Europe/Berlin, spring forward: the missing 02:30 runs once, at 03:30 CEST', () => {
    expect(firings(berlin, '2026-03-27T00:00:00Z', 4)).toEqual([
      '2026-03-27T01:30:00.000Z', // 02:30 CET
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      '2026-03-29T01:30:00.000Z', // 02:30 does not exist: 03:30 CEST
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
  });

  test('30 2 * * * in Europe/Berlin, fall back: the repeated 02:30 runs once, at its first occurrence', () => {
    expect(firings(berlin, '2026-10-23T00:00:00Z', 4)).toEqual([
      '2026-10-23T00:30:00.000Z', // 02:30 CEST
      '2026-10-24T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T00:30:00.000Z', // 02:30 CEST; not again at 02:30 CET (01:30Z)
      '2026-10-26T01:30:00.000Z', // 02:30 CET
    ]);
  });

  test('a worker late inside the overlap does not fire the second 02:30', () => {
    // Due at 00:30Z (first 02:30), fired at 01:00Z (between the two): the next run is the next day.
    const { ticks, next } = dueTicks(
      berlin,
      new Date('2026-10-25T00:30:00Z'),
      new Date('2026-10-25T01:00:00Z'),
      5,
    );
    expect(iso(ticks)).toEqual(['2026-10-25T00:30:00.000Z']);
    expect(next.toISOString()).toBe('2026-10-26T01:30:00.000Z');
  });

  test('a resume (or a new cron) inside the overlap walks on from the last tick fired', () => {
    // Fired at 00:30Z (the first 02:30), paused, resumed at 01:10Z: the next run is the next
    // day — "the first tick after now" alone would be 01:30Z, the second 02:30 of the same day.
    const now = new Date('2026-10-25T01:10:00Z');
    const lastRun = Date.parse('2026-10-25T00:30:00Z');
    expect(nextRunAfter(berlin, now, lastRun).toISOString()).toBe('2026-10-26T01:30:00.000Z');
    expect(nextTick(berlin, now).toISOString()).toBe('2026-10-25T01:30:00.000Z');
    expect(nextRunAfter(berlin, now, null).toISOString()).toBe('2026-10-25T01:30:00.000Z'); // never ran
  });

  test('0 * * * * in America/New_York runs every real hour through both transitions', () => {
    expect(firings(newYork, '2026-03-08T04:30:00Z', 4)).toEqual([
      '2026-03-08T05:00:00.000Z', // 00:00 EST
      '2026-03-08T06:00:00.000Z', // 01:00 EST
      '2026-03-08T07:00:00.000Z', // 03:00 EDT (02:00 does not exist)
      '2026-03-08T08:00:00.000Z', // 04:00 EDT
    ]);
    expect(firings(newYork, '2026-11-01T03:30:00Z', 5)).toEqual([
      '2026-11-01T04:00:00.000Z', // 00:00 EDT
      '2026-11-01T05:00:00.000Z', // 01:00 EDT
      '2026-11-01T06:00:00.000Z', // 01:00 EST (the hour repeats; it is another real hour)
      '2026-11-01T07:00:00.000Z', // 02:00 EST
      '2026-11-01T08:00:00.000Z', // 03:00 EST
    ]);
  });

  test('catching up walks forward, so the ticks due over a transition are the ones that fire', () => {
    const due = dueTicks(berlin, new Date('2026-10-24T00:30:00Z'), new Date('2026-10-26T02:00:00Z'), 10);
    expect(iso(due.ticks)).toEqual([
      '2026-10-24T00:30:00.000Z',
      '2026-10-25T00:30:00.000Z',
      '2026-10-26T01:30:00.000Z',
    ]);
    expect(due.older).toBe(false);
    expect(due.next.toISOString()).toBe('2026-10-27T01:30:00.000Z');
  });

  test('a long outage of a per-second schedule: the latest ticks, quickly', () => {
    const started = performance.now();
    const due = dueTicks(
      { cron: '* * * * * *', tz: 'UTC' },
      new Date('2026-01-01T00:00:00Z'),
      new Date('2026-01-08T00:00:00.500Z'),
      3,
    );
    expect(iso(due.ticks)).toEqual([
      '2026-01-07T23:59:58.000Z',
      '2026-01-07T23:59:59.000Z',
      '2026-01-08T00:00:00.000Z',
    ]);
    expect(due.older).toBe(true);
    expect(due.next.toISOString()).toBe('2026-01-08T00:00:01.000Z');
    expect(performance.now() - started).toBeLessThan(5_000); // a week is 604,800 ticks: not walked one by one
  });

  test('6 fields: seconds first', () => {
    expect(firings({ cron: '*/15 * * * * *', tz: 'UTC' }, '2026-05-01T10:00:07Z', 3)).toEqual([
      '2026-05-01T10:00:15.000Z',
      '2026-05-01T10:00:30.000Z',
      '2026-05-01T10:00:45.000Z',
    ]);
  });
});

describe('cron validation (SPEC §1.11)', () => {
  test.each([
    ['61 * * * *', 'UTC', 'cron'],
    ['* * *', 'UTC', 'cron'],
    ['* * * * * * *', 'UTC', 'cron'],
    ['', 'UTC', 'cron'],
    ['hello world', 'UTC', 'cron'],
    ['0 0 30 2 *', 'UTC', 'cron'],
    ['* * * * *', 'Mars/Base', 'tz'],
    ['* * * * *', '', 'tz'],
  ])('%j in %j is refused, naming %s', (cron, tz, field) => {
    expect(() => requireCron(cron, tz)).toThrow(ValidationError);
    try {
      requireCron(cron, tz);
    } catch (error) {
      expect((error as ValidationError).field).toBe(field);
    }
  });

  test('aliases and extra spaces are accepted', () => {
    expect(requireCron('@daily', 'Europe/Berlin')).toEqual({ cron: '@daily', tz: 'Europe/Berlin' });
    expect(requireCron('  0   9 * * 1-5 ', 'UTC').cron).toBe('0 9 * * 1-5');
    expect(requireCron('* * * * *', 'europe/berlin').tz).toBe('Europe/Berlin'); // the canonical name
  });
});
