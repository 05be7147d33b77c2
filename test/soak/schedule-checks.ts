/**
 * The per-second schedule (SPEC §8): each tick enqueues exactly one job, and none is lost beyond
 * what `catchUp` allows. Judged over every tick from the schedule's first (set up before the
 * workers started) to its `next_run_at` when it was paused at the drain: every tick before that
 * has been fired — with a job, or skipped.
 *
 * A tick's job carries the dedupe key `skiplock:schedule:<name>:<tick>`; the jobs of one firing
 * share their `created_at` (the firing transaction's `now()`).
 *
 * - doubled: a tick with more than one job.
 * - lost: a tick without a job, unless `catchUp` skipped it. With `catchUp: N` (and `overlap`), a
 *   firing that finds more than N ticks due runs the N latest and skips the older ones. So a
 *   tick without a job is skipped as allowed exactly when the next tick that has a job was fired
 *   in a firing of N ticks (all later than it): the firing that skipped it. A tick missing
 *   anywhere else — before a firing of fewer ticks, or with no later job — is lost.
 */
import { SCHEDULE, tickKey } from './features.js';
import type { Finding, JobRow } from './verify.js';

export interface ScheduleWindow {
  /** The first tick (ms), from the setup's `schedule()`. */
  firstTickMs: number;
  /** `next_run_at` (ms) after the schedule was paused: every earlier tick has been fired. */
  nextRunAtMs: number;
}

export interface ScheduleVerdict {
  ticks: number;
  withJob: number;
  skippedByCatchUp: number;
  /** Firings that ran `catchUp` ticks at once (after an outage). */
  catchUpFirings: number;
  doubled: Finding[];
  lost: Finding[];
}

const PREFIX = tickKey(0).slice(0, -new Date(0).toISOString().length);

export function scheduleChecks(jobs: JobRow[], window: ScheduleWindow | null): ScheduleVerdict {
  const verdict: ScheduleVerdict = {
    ticks: 0,
    withJob: 0,
    skippedByCatchUp: 0,
    catchUpFirings: 0,
    doubled: [],
    lost: [],
  };
  if (!window) return verdict;
  const byTick = new Map<number, JobRow[]>();
  const firings = new Map<number, number>();
  for (const j of jobs) {
    if (!j.dedupe_key?.startsWith(PREFIX)) continue;
    const tick = Date.parse(j.dedupe_key.slice(PREFIX.length));
    byTick.set(tick, [...(byTick.get(tick) ?? []), j]);
    firings.set(j.created_us, (firings.get(j.created_us) ?? 0) + 1);
  }
  verdict.catchUpFirings = [...firings.values()].filter((n) => n >= SCHEDULE.catchUp).length;
  const ticks: number[] = [];
  for (let t = window.firstTickMs; t < window.nextRunAtMs; t += SCHEDULE.tickMs) ticks.push(t);
  verdict.ticks = ticks.length;
  ticks.forEach((tick, i) => {
    const found = byTick.get(tick) ?? [];
    if (found.length > 1) {
      verdict.doubled.push({
        check: 'schedule tick doubled',
        job: found[0]!.id,
        text: `tick ${iso(tick)} has ${found.length} jobs: ${found.map((j) => j.id).join(', ')}`,
      });
    }
    if (found.length > 0) {
      verdict.withJob++;
      return;
    }
    const next = ticks.slice(i + 1).find((t) => (byTick.get(t)?.length ?? 0) > 0);
    const firing = next === undefined ? null : byTick.get(next)![0]!.created_us;
    const size = firing === null ? 0 : (firings.get(firing) ?? 0);
    if (firing !== null && size === SCHEDULE.catchUp) {
      verdict.skippedByCatchUp++;
      return;
    }
    verdict.lost.push({
      check: 'schedule tick lost',
      text:
        next === undefined
          ? `tick ${iso(tick)} has no job, and no later tick before the schedule's next run (${iso(window.nextRunAtMs)}) has one`
          : `tick ${iso(tick)} has no job; the next tick with one (${iso(next)}) was fired with ${size} tick(s), not the ${SCHEDULE.catchUp} of a catch-up that skips older ones`,
    });
  });
  return verdict;
}

function iso(ms: number): string {
  return new Date(ms).toISOString().slice(11, 19);
}
