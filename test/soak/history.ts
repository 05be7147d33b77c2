/**
 * The database's view of the run, rebuilt from the status changes its triggers recorded
 * (database.ts HISTORY_SQL): each job's statuses as intervals of database time, and a sweep that
 * finds the instants where more jobs of one key (a queue, a group, a dedupe key) held a status
 * than a limit allows.
 */

/** One status change of a job (`from` null: inserted; `to` null: deleted). Times in µs. */
export interface Transition {
  job: string;
  from: string | null;
  to: string | null;
  atUs: number;
  /** The job's run_started_at after the change (the claim's instant, for a claim). */
  startedUs: number | null;
}

/** A job held `status` from `fromUs` to `toUs` (Infinity: still at the end). */
export interface Interval {
  job: string;
  status: string;
  fromUs: number;
  toUs: number;
}

export const FINAL = new Set(['done', 'dead', 'cancelled']);

/** Each job's status changes, in order. */
export class History {
  readonly byJob = new Map<string, Transition[]>();

  constructor(transitions: readonly Transition[]) {
    for (const t of transitions) {
      const list = this.byJob.get(t.job);
      if (list) list.push(t);
      else this.byJob.set(t.job, [t]);
    }
    for (const list of this.byJob.values()) list.sort((a, b) => a.atUs - b.atUs);
  }

  of(job: string): Transition[] {
    return this.byJob.get(job) ?? [];
  }

  /** The job's intervals in each status. */
  intervals(job: string): Interval[] {
    const out: Interval[] = [];
    const list = this.of(job);
    list.forEach((t, i) => {
      if (t.to === null) return;
      out.push({ job, status: t.to, fromUs: t.atUs, toUs: list[i + 1]?.atUs ?? Number.POSITIVE_INFINITY });
    });
    return out;
  }

  /** When the job was inserted (µs), or null. */
  insertedUs(job: string): number | null {
    return this.of(job).find((t) => t.from === null)?.atUs ?? null;
  }

  /** The first time the job entered one of `statuses` (µs), or null. */
  firstEntered(job: string, statuses: ReadonlySet<string>): number | null {
    return this.of(job).find((t) => t.to !== null && statuses.has(t.to))?.atUs ?? null;
  }

  /** The claims of the job: its changes to running. */
  claims(job: string): Transition[] {
    return this.of(job).filter((t) => t.to === 'running');
  }

  /** Whether the job ever held `status`. */
  held(job: string, status: string): boolean {
    return this.of(job).some((t) => t.to === status);
  }
}

/** An instant where more than `limit` jobs of one key held the status at once. */
export interface Excess {
  key: string;
  atUs: number;
  /** The job whose start made it one too many, and the ones it joined. */
  job: string;
  holders: string[];
}

/**
 * Sweeps intervals grouped by key: each start that puts more than `limit` intervals of its key
 * at once is an excess. An interval that ends at the very instant another starts does not count
 * as overlapping it.
 */
export function excesses(intervals: readonly (Interval & { key: string })[], limit: number): Excess[] {
  const byKey = new Map<string, (Interval & { key: string })[]>();
  for (const iv of intervals) {
    const list = byKey.get(iv.key);
    if (list) list.push(iv);
    else byKey.set(iv.key, [iv]);
  }
  const found: Excess[] = [];
  for (const [key, list] of byKey) {
    const events = list.flatMap((iv) => [
      { t: iv.fromUs, start: true, iv },
      { t: iv.toUs, start: false, iv },
    ]);
    events.sort((a, b) => a.t - b.t || Number(a.start) - Number(b.start));
    const active = new Set<Interval>();
    for (const e of events) {
      if (!e.start) {
        active.delete(e.iv);
        continue;
      }
      active.add(e.iv);
      if (active.size > limit) {
        const holders = [...active].filter((iv) => iv !== e.iv).map((iv) => iv.job);
        found.push({ key, atUs: e.t, job: e.iv.job, holders });
      }
    }
  }
  return found;
}

/** The most intervals of one key at once. */
export function peak(intervals: readonly { fromUs: number; toUs: number }[]): number {
  const events = intervals.flatMap((iv) => [
    [iv.fromUs, 1],
    [iv.toUs, -1],
  ]);
  events.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let now = 0;
  let most = 0;
  for (const [, step] of events) {
    now += step!;
    most = Math.max(most, now);
  }
  return most;
}

export function isoUs(us: number): string {
  return new Date(us / 1000).toISOString().slice(11, 23);
}
