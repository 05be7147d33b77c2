/**
 * W3's breakdown: where the time from an enqueue call to its handler's start goes, per job, from
 * timestamps taken in the benchmark process (W3 runs its worker there) — the driver trace of
 * lib/trace.ts, the enqueue promise, the handler — without touching the systems' code.
 *
 *   call → enqueue statement issued → its result back (INSERT and its commit) → enqueue() resolved
 *                               └──→ notification at the worker's LISTEN connection
 *                                    → claim statement issued → its result back → handler start
 *
 * The statement and the notification of job i are found by what each system sends: its enqueue
 * statement (the first issued after the call), its notification channel (the first after that
 * statement was issued) and its claim statement (the one whose rows carry job i's payload).
 */
import type { SystemName } from '../systems/types.js';
import { type DriverTrace, payloadIndex, type TracedQuery } from './trace.js';
import { quantile } from './util.js';

interface Matchers {
  /** The enqueue statement (single enqueue). */
  enqueue: RegExp;
  /** The statement that claims jobs (its rows carry their payloads). */
  claim: RegExp;
  /** The wake-up notification's channel. */
  channel: RegExp;
  /** What the claim is, in words (for the report). */
  what: string;
}

/** Per PostgreSQL system: the statements and the channel of its wake-up path. */
export const W3_MATCHERS: Partial<Record<SystemName, Matchers>> = {
  skiplock: {
    enqueue: /_insert(One|Many)$/,
    claim: /_(claim|queueClaimLimited)$/,
    channel: /^skiplock:/,
    what: 'the claim statement (pick + UPDATE, one statement)',
  },
  'graphile-worker': {
    enqueue: /add_job/,
    claim: /get_job/,
    channel: /^jobs:insert$/,
    what: 'get_job (its local queue fetch)',
  },
  'pg-boss': {
    enqueue: /^WITH ins AS \( INSERT INTO/,
    claim: /^WITH next AS \( SELECT j\.id FROM/,
    channel: /^pgboss_/,
    what: 'the fetch (WITH next AS (SELECT … FOR UPDATE SKIP LOCKED) UPDATE …)',
  },
  'bullmq-pg': {
    enqueue: /add_job\(/,
    claim: /move_to_active|move_to_completed_fetch/,
    channel: /^bullmq_jobs$/,
    what: 'move_to_active',
  },
};

/** The segments, in the order of the path; each is a difference of two timestamps of one job. */
export const W3_SEGMENTS = [
  ['callToIssued', 'enqueue call → its statement issued (the library before the driver)'],
  [
    'issuedToReturned',
    'enqueue statement issued → its result back (INSERT + NOTIFY + commit, one round trip)',
  ],
  ['returnedToResolved', 'enqueue statement back → enqueue() resolved'],
  ['issuedToNotified', "enqueue statement issued → the notification at the worker's LISTEN connection"],
  ['notifiedToClaim', 'notification → claim statement issued (the worker waking up)'],
  ['claimRoundTrip', 'claim statement issued → its rows back (the claim and its commit)'],
  ['claimToHandler', 'claim rows back → handler start'],
  ['total', 'enqueue call → handler start (W3)'],
] as const;

export type W3Segment = (typeof W3_SEGMENTS)[number][0];

/**
 * p50 and p99 of every segment over the jobs whose every timestamp was found, as metrics
 * `<segment>P50` / `<segment>P99`, and `partsMatched`: how many jobs that was.
 */
export function w3Breakdown(
  system: SystemName,
  trace: DriverTrace,
  called: Float64Array,
  resolved: Float64Array,
  started: Float64Array,
): Record<string, number> {
  const m = W3_MATCHERS[system];
  if (!m) return {};
  const enqueues = trace.queries.filter((q) => m.enqueue.test(q.key) || m.enqueue.test(q.text));
  const notes = trace.notifications.filter((n) => m.channel.test(n.channel));
  const claimOf = new Map<number, TracedQuery>();
  for (const q of trace.queries) {
    if (!(m.claim.test(q.key) || m.claim.test(q.text)) || !q.rows) continue;
    for (const row of q.rows) {
      const i = payloadIndex(row);
      if (i !== null && !claimOf.has(i)) claimOf.set(i, q);
    }
  }
  const segments: Record<W3Segment, number[]> = {
    callToIssued: [],
    issuedToReturned: [],
    returnedToResolved: [],
    issuedToNotified: [],
    notifiedToClaim: [],
    claimRoundTrip: [],
    claimToHandler: [],
    total: [],
  };
  let matched = 0;
  let e = 0;
  let n = 0;
  for (let i = 0; i < called.length; i++) {
    const call = called[i] as number;
    const next = i + 1 < called.length ? (called[i + 1] as number) : Number.POSITIVE_INFINITY;
    while (e < enqueues.length && (enqueues[e] as TracedQuery).at < call) e++;
    const enqueue = enqueues[e];
    if (!enqueue || enqueue.at >= next) continue;
    while (n < notes.length && (notes[n] as { at: number }).at < enqueue.at) n++;
    const note = notes[n];
    const claim = claimOf.get(i);
    const start = started[i] as number;
    if (!note || !claim || !(start > 0)) continue;
    matched++;
    segments.callToIssued.push(enqueue.at - call);
    segments.issuedToReturned.push(enqueue.end - enqueue.at);
    segments.returnedToResolved.push((resolved[i] as number) - enqueue.end);
    segments.issuedToNotified.push(note.at - enqueue.at);
    segments.notifiedToClaim.push(claim.at - note.at);
    segments.claimRoundTrip.push(claim.end - claim.at);
    segments.claimToHandler.push(start - claim.end);
    segments.total.push(start - call);
  }
  const out: Record<string, number> = { partsMatched: matched };
  for (const [key] of W3_SEGMENTS) {
    out[`${key}P50`] = quantile(segments[key], 0.5);
    out[`${key}P99`] = quantile(segments[key], 0.99);
  }
  return out;
}

/** One line per distinct statement or channel of the trace (BENCH_TRACE_DUMP), to write matchers. */
export function traceSummary(trace: DriverTrace): string {
  const counts = new Map<string, number>();
  for (const q of trace.queries) {
    const key = `query [${q.client}] ${q.key === q.text ? '' : `${q.key}: `}${q.text.slice(0, 160)}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  for (const note of trace.notifications) {
    const key = `notification [${note.client}] ${note.channel} ${note.payload.slice(0, 60)}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts.entries()].map(([key, count]) => `${String(count).padStart(6)} ${key}`).join('\n');
}
