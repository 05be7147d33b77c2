/**
 * Queue limits (SPEC §8), judged on the database's view: a job counts as running from the claim
 * that made it running to the change that ended it (an outcome, a release, the reaper after its
 * lease expired) — the count the limited claim itself reads. A handler that goes on after its
 * lease ended (a paused or partitioned process, a runaway past its grace) no longer counts for
 * the database, and may overlap the next claim by design; the handlers' own stamps are shown
 * beside it, for information.
 *
 * - concurrency: at no instant more than `concurrency` jobs of the queue running;
 * - groupConcurrency: at no instant more than `groupConcurrency` jobs of one group running;
 * - rateLimit: for each claim, the claims of the queue whose instant (run_started_at, the very
 *   instant the limited claim logs and counts with) lies in (t − periodMs, t] are at most `limit`.
 */
import { LIMITED } from './features.js';
import { excesses, type History, isoUs, peak } from './history.js';
import type { RunInfo } from './runs.js';
import type { Finding, JobRow } from './verify.js';

export interface LimitVerdict {
  concurrency: Finding[];
  groups: Finding[];
  rate: Finding[];
  /** Per limited queue: jobs, most running at once by the database, and by the handlers' stamps. */
  info: { queue: string; limit: string; jobs: number; dbPeak: number; handlerPeak: number }[];
}

export function limitChecks(jobs: JobRow[], history: History, byJob: Map<string, RunInfo[]>): LimitVerdict {
  const running = (queue: string) =>
    jobs
      .filter((j) => j.queue === queue)
      .flatMap((j) =>
        history
          .intervals(j.id)
          .filter((iv) => iv.status === 'running')
          .map((iv) => ({ ...iv, key: j.group_key ?? '' })),
      );
  const handlerRuns = (queue: string) =>
    jobs
      .filter((j) => j.queue === queue)
      .flatMap((j) => (byJob.get(j.id) ?? []).map((r) => ({ fromUs: r.start * 1000, toUs: r.end * 1000 })));

  const { concurrency, rate, groups } = LIMITED;
  const conc = running(concurrency.queue).map((iv) => ({ ...iv, key: concurrency.queue }));
  const concurrencyFindings = excesses(conc, concurrency.concurrency).map((e) => ({
    check: 'queue concurrency exceeded',
    job: e.job,
    text: `claimed at ${isoUs(e.atUs)} while ${e.holders.length} jobs of ${e.key} were running (${e.holders.join(', ')}); limit ${concurrency.concurrency}`,
  }));
  const grouped = running(groups.queue).filter((iv) => iv.key !== '');
  const groupFindings = excesses(grouped, groups.groupConcurrency).map((e) => ({
    check: 'group concurrency exceeded',
    job: e.job,
    text: `claimed at ${isoUs(e.atUs)} while group ${e.key} had ${e.holders.join(', ')} running; limit ${groups.groupConcurrency}`,
  }));

  const groupPeak = Math.max(0, ...groups.groups.map((g) => peak(grouped.filter((iv) => iv.key === g))));
  return {
    concurrency: concurrencyFindings,
    groups: groupFindings,
    rate: rateFindings(jobs, history),
    info: [
      {
        queue: concurrency.queue,
        limit: `concurrency ${concurrency.concurrency}`,
        jobs: jobs.filter((j) => j.queue === concurrency.queue).length,
        dbPeak: peak(conc),
        handlerPeak: peak(handlerRuns(concurrency.queue)),
      },
      {
        queue: rate.queue,
        limit: `${rate.limit} starts / ${rate.periodMs} ms`,
        jobs: jobs.filter((j) => j.queue === rate.queue).length,
        dbPeak: peakStarts(jobs, history),
        handlerPeak: peakHandlerStarts(jobs, byJob),
      },
      {
        queue: groups.queue,
        limit: `groupConcurrency ${groups.groupConcurrency}`,
        jobs: jobs.filter((j) => j.queue === groups.queue).length,
        dbPeak: groupPeak,
        handlerPeak: Math.max(
          0,
          ...groups.groups.map((g) =>
            peak(
              jobs
                .filter((j) => j.queue === groups.queue && j.group_key === g)
                .flatMap((j) =>
                  (byJob.get(j.id) ?? []).map((r) => ({ fromUs: r.start * 1000, toUs: r.end * 1000 })),
                ),
            ),
          ),
        ),
      },
    ],
  };
}

/** The claim instants of the rate-limited queue, ascending (µs). */
function starts(jobs: JobRow[], history: History): { job: string; us: number }[] {
  return jobs
    .filter((j) => j.queue === LIMITED.rate.queue)
    .flatMap((j) => history.claims(j.id).map((c) => ({ job: j.id, us: c.startedUs ?? c.atUs })))
    .sort((a, b) => a.us - b.us);
}

function rateFindings(jobs: JobRow[], history: History): Finding[] {
  const { queue, limit, periodMs } = LIMITED.rate;
  const list = starts(jobs, history);
  const findings: Finding[] = [];
  let first = 0;
  list.forEach((s, i) => {
    // the window (t − period, t]: a start exactly one period earlier has left it
    while (list[first]!.us <= s.us - periodMs * 1000) first++;
    // every start at this very instant belongs to the window (one claim statement, one instant)
    let last = i;
    while (list[last + 1]?.us === s.us) last++;
    const inWindow = last - first + 1;
    if (i === last && inWindow > limit) {
      findings.push({
        check: 'rate limit exceeded',
        job: s.job,
        text: `${inWindow} claims of ${queue} in the ${periodMs} ms up to ${isoUs(s.us)}; limit ${limit}`,
      });
    }
  });
  return findings;
}

/** The most claims of the rate-limited queue in one window. */
function peakStarts(jobs: JobRow[], history: History): number {
  const us = starts(jobs, history).map((s) => s.us);
  return slidingPeak(us, LIMITED.rate.periodMs * 1000);
}

/** The most handler starts of the rate-limited queue in one window (they bunch behind busy slots). */
function peakHandlerStarts(jobs: JobRow[], byJob: Map<string, RunInfo[]>): number {
  const us = jobs
    .filter((j) => j.queue === LIMITED.rate.queue)
    .flatMap((j) => (byJob.get(j.id) ?? []).map((r) => r.start * 1000))
    .sort((a, b) => a - b);
  return slidingPeak(us, LIMITED.rate.periodMs * 1000);
}

function slidingPeak(sorted: number[], windowUs: number): number {
  let first = 0;
  let most = 0;
  sorted.forEach((t, i) => {
    while (sorted[first]! <= t - windowUs) first++;
    most = Math.max(most, i - first + 1);
  });
  return most;
}
