/**
 * `queue.waitFor` (SPEC §9), from the producer's records: it must resolve with the job as it
 * finished, and never miss a finish.
 *
 * - resolved wrong: with a status that is not final; with `done` for a job that did not end done,
 *   or with another run's result than the job's; with dead or cancelled for a job that never had
 *   that status.
 * - rejected: with any error but the producer's own abort at shutdown (a NotFoundError for a job
 *   that was deleted is allowed).
 * - never resolved: abandoned at shutdown (the producer gives the waits 15 s after its SIGTERM,
 *   which comes after the drain) although the job had finished at least MISS_GRACE_MS before.
 *   waitFor re-reads the row at least every 5 s, so a finish that old was missed.
 */
import { FINAL, type History } from './history.js';
import type { ProducerRecord } from './records.js';
import type { Finding, JobRow } from './verify.js';

const MISS_GRACE_MS = 10_000;

export interface WaitVerdict {
  calls: number;
  resolved: number;
  abandoned: number;
  wrong: Finding[];
}

export function waitChecks(
  producer: ProducerRecord[],
  jobsById: Map<string, JobRow>,
  history: History,
): WaitVerdict {
  const verdict: WaitVerdict = { calls: 0, resolved: 0, abandoned: 0, wrong: [] };
  const wrong = (job: string, text: string) => verdict.wrong.push({ check: 'waitFor wrong', job, text });
  for (const r of producer) {
    if (r.type === 'wait') verdict.calls++;
    if (r.type !== 'waited') continue;
    const job = jobsById.get(r.id);
    if (r.status !== undefined) {
      verdict.resolved++;
      if (!FINAL.has(r.status)) wrong(r.id, `resolved with status ${r.status}, which is not final`);
      else if (r.status === 'done' && job?.status !== 'done') {
        wrong(r.id, `resolved done, but the job ended ${job?.status ?? 'missing'}`);
      } else if (r.status === 'done' && (r.resultRun ?? null) !== job?.result_run) {
        wrong(
          r.id,
          `resolved done with the result of ${r.resultRun}, but the job's result is ${job?.result_run}`,
        );
      } else if (r.status !== 'done' && !history.held(r.id, r.status)) {
        wrong(r.id, `resolved ${r.status}, a status the job never had`);
      }
      continue;
    }
    if (!r.abandoned) {
      if (r.error?.startsWith('NotFoundError') && history.of(r.id).some((t) => t.to === null)) continue;
      wrong(r.id, `rejected: ${r.error}`);
      continue;
    }
    verdict.abandoned++;
    const finishedUs = history.firstEntered(r.id, FINAL);
    if (finishedUs !== null && finishedUs / 1000 < r.t - MISS_GRACE_MS) {
      wrong(
        r.id,
        `never resolved: abandoned at shutdown ${((r.t - finishedUs / 1000) / 1000).toFixed(1)} s after the job ended ${jobsById.get(r.id)?.status ?? '?'}`,
      );
    }
  }
  return verdict;
}
