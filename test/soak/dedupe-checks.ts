/**
 * Dedupe (SPEC §1.7, §8), judged on the database's view (status changes stamped by its triggers)
 * and, for debounce, on what the producer was told:
 *
 * - active: two jobs of one `dedupeKey` pending or running at the same instant (every key: the
 *   plain ones, the throttled and debounced ones, the schedule's per-tick keys).
 * - one-queued (`scope: 'pending'`): two jobs of one key pending at once, or two running at once.
 * - throttle (`windowMs`): two jobs of one key inserted less than `windowMs` apart. Exact: the
 *   window is checked with clock_timestamp() after its row lock, before the insert, and set with
 *   clock_timestamp() after the insert; the insert's own stamp lies in between.
 * - debounce (`replace`): a run whose payload (its call number `seq`) is not the last one the
 *   producer was told was written into that job (`created` or `replaced: true`). A replacement
 *   never touches a job that has started, so every run of it must carry that last payload; a
 *   later number is allowed only from a call that failed in the producer (its write may have
 *   committed anyway).
 */
import { DEDUPE } from './features.js';
import { excesses, type History, isoUs } from './history.js';
import type { ProducerRecord } from './records.js';
import type { RunInfo } from './runs.js';
import type { Finding, JobRow } from './verify.js';

export interface DedupeVerdict {
  active: Finding[];
  pending: Finding[];
  throttle: Finding[];
  debounce: Finding[];
  /** Calls and hits per mode (for the report). */
  calls: Record<'throttle' | 'debounce' | 'pending', { calls: number; hits: number; replaced: number }>;
}

export function dedupeChecks(
  jobs: JobRow[],
  history: History,
  byJob: Map<string, RunInfo[]>,
  producer: ProducerRecord[],
): DedupeVerdict {
  const live = new Set(['pending', 'running']);
  const active = jobs
    .filter((j) => j.dedupe_key !== null)
    .flatMap((j) =>
      history
        .intervals(j.id)
        .filter((iv) => live.has(iv.status))
        .map((iv) => ({ ...iv, key: j.dedupe_key! })),
    );
  // A retry's running → pending leaves the job active: merge its adjacent intervals.
  const activeFindings = excesses(mergeAdjacent(active), 1).map((e) => ({
    check: 'dedupe violated: two active',
    job: e.job,
    text: `became active at ${isoUs(e.atUs)} while ${e.holders.join(', ')} held key ${e.key}`,
  }));

  const pendingScoped = jobs.filter((j) => j.pending_key !== null);
  const pendingFindings: Finding[] = [];
  for (const status of ['pending', 'running']) {
    const intervals = pendingScoped.flatMap((j) =>
      history
        .intervals(j.id)
        .filter((iv) => iv.status === status)
        .map((iv) => ({ ...iv, key: j.pending_key! })),
    );
    for (const e of excesses(intervals, 1)) {
      pendingFindings.push({
        check: 'dedupe violated: one-queued',
        job: e.job,
        text: `${status} at ${isoUs(e.atUs)} while ${e.holders.join(', ')} was ${status} for key ${e.key} (scope 'pending')`,
      });
    }
  }

  return {
    active: activeFindings,
    pending: pendingFindings,
    throttle: throttleFindings(jobs, history),
    debounce: debounceFindings(jobs, byJob, producer),
    calls: tallyCalls(producer),
  };
}

function mergeAdjacent<T extends { job: string; fromUs: number; toUs: number }>(intervals: T[]): T[] {
  const out: T[] = [];
  const sorted = [...intervals].sort((a, b) => a.job.localeCompare(b.job) || a.fromUs - b.fromUs);
  for (const iv of sorted) {
    const last = out.at(-1);
    if (last && last.job === iv.job && last.toUs === iv.fromUs) last.toUs = iv.toUs;
    else out.push({ ...iv });
  }
  return out;
}

function throttleFindings(jobs: JobRow[], history: History): Finding[] {
  const { prefix, windowMs } = DEDUPE.throttle;
  const byKey = new Map<string, { job: string; us: number }[]>();
  for (const j of jobs) {
    if (!j.dedupe_key?.startsWith(prefix)) continue;
    const us = history.insertedUs(j.id);
    if (us === null) continue;
    byKey.set(j.dedupe_key, [...(byKey.get(j.dedupe_key) ?? []), { job: j.id, us }]);
  }
  const findings: Finding[] = [];
  for (const [key, list] of byKey) {
    list.sort((a, b) => a.us - b.us);
    list.forEach((b, i) => {
      const a = list[i - 1];
      if (a && b.us - a.us <= windowMs * 1000) {
        findings.push({
          check: 'dedupe violated: throttle',
          job: b.job,
          text: `inserted ${((b.us - a.us) / 1000).toFixed(1)} ms after job ${a.job} of key ${key} (window ${windowMs} ms)`,
        });
      }
    });
  }
  return findings;
}

function debounceFindings(
  jobs: JobRow[],
  byJob: Map<string, RunInfo[]>,
  producer: ProducerRecord[],
): Finding[] {
  const acknowledged = new Map<string, number[]>();
  const failed = new Map<string, Set<number>>();
  for (const r of producer) {
    if (r.type !== 'enqueue' || r.dedupe?.mode !== 'debounce' || r.dedupe.seq === undefined) continue;
    const { key, seq } = r.dedupe;
    const result = r.results?.[0];
    if (r.error || !result) {
      const set = failed.get(key) ?? new Set<number>();
      set.add(seq);
      failed.set(key, set);
    } else if (result.created || result.replaced) {
      acknowledged.set(result.id, [...(acknowledged.get(result.id) ?? []), seq]);
    }
  }
  const findings: Finding[] = [];
  for (const j of jobs) {
    if (j.kind !== 'debounce' || j.dedupe_key === null) continue;
    const acked = acknowledged.get(j.id) ?? [];
    const last = acked.length > 0 ? Math.max(...acked) : null;
    for (const run of byJob.get(j.id) ?? []) {
      if (run.seq === null) continue;
      const fromFailedCall = failed.get(j.dedupe_key)?.has(run.seq) ?? false;
      const known = acked.includes(run.seq) || fromFailedCall;
      if ((last !== null && run.seq < last) || !known) {
        findings.push({
          check: 'dedupe violated: debounce',
          job: j.id,
          text: `${run.id} ran with call ${run.seq}, but the last call written into the job was ${last ?? 'none acknowledged'}${known ? '' : ' (and no call with that number was made for it)'}`,
        });
      }
    }
  }
  return findings;
}

function tallyCalls(producer: ProducerRecord[]): DedupeVerdict['calls'] {
  const calls: DedupeVerdict['calls'] = {
    throttle: { calls: 0, hits: 0, replaced: 0 },
    debounce: { calls: 0, hits: 0, replaced: 0 },
    pending: { calls: 0, hits: 0, replaced: 0 },
  };
  for (const r of producer) {
    if (r.type !== 'enqueue' || !r.dedupe) continue;
    const { mode } = r.dedupe;
    calls[mode].calls++;
    const result = r.results?.[0];
    if (result && !result.created) calls[mode].hits++;
    if (result?.replaced) calls[mode].replaced++;
  }
  return calls;
}
