/**
 * Queues (SPEC §8): pause and global limits. The plain claim leaves out every paused or limited
 * queue (in the statement, so a pause holds for every claim that begins after it committed);
 * a limited queue is claimed by the limited claim, one claimer per queue at a time under an
 * advisory lock, each claim taking a new snapshot after the lock so that it sees every claim
 * before it: its concurrency and rate limit are never exceeded, however many workers race.
 */

import type { QueueChange } from '../core/queue-args.js';
import { type Executor, inTransaction } from '../db/executor.js';
import type { QueueRow } from '../store/queues.js';
import type { ClaimedJob, QueueConfig, QueueInfo } from '../types.js';
import type { Engine } from './engine.js';
import type { SequenceGate } from './sequence-gate.js';

/** The NOTIFY payload that makes running workers re-read the queues' settings and claim. */
export const QUEUE_HINT = 'queues';
/** A limited queue whose claim lock another worker holds: look again after this long. */
const LOCK_BUSY_RETRY_MS = 50;
/** A limited claim that failed: look again after this long. */
const ERROR_RETRY_MS = 1_000;

export function toQueueConfig(row: QueueRow): QueueConfig {
  return {
    name: row.name,
    paused: row.paused,
    concurrency: row.concurrency,
    rateLimit:
      row.rate_limit === null || row.rate_period_ms === null
        ? null
        : { limit: row.rate_limit, periodMs: row.rate_period_ms },
    groupConcurrency: row.group_concurrency,
    groupRateLimit:
      row.group_rate_limit === null || row.group_rate_period_ms === null
        ? null
        : { limit: row.group_rate_limit, periodMs: row.group_rate_period_ms },
    priorityAging:
      row.aging_every_ms === null || row.aging_step === null || row.aging_floor === null
        ? null
        : { everyMs: row.aging_every_ms, step: row.aging_step, floor: row.aging_floor },
  };
}

export async function configureQueue(
  engine: Engine,
  name: string,
  change: QueueChange,
): Promise<QueueConfig> {
  const row = await engine.store.queues.configure(engine.pool, name, change);
  if (row.rate_limit === null || row.group_rate_limit === null)
    await engine.store.queues.tidy(engine.pool, name);
  engine.limits.invalidate();
  // A resumed queue or a changed limit: running workers re-read the settings and claim.
  await engine.hint(QUEUE_HINT, 'queue');
  return toQueueConfig(row);
}

/** Every configured queue and every queue with live jobs, by name, with live counts. */
export async function listQueues(engine: Engine): Promise<QueueInfo[]> {
  const [rows, live] = await engine.read((db) =>
    Promise.all([engine.store.queues.list(db), engine.store.observe.liveByQueue(db)]),
  );
  const byName = new Map<string, QueueInfo>();
  const entry = (name: string): QueueInfo => {
    let info = byName.get(name);
    if (!info) {
      info = {
        ...toQueueConfig({
          name,
          paused: false,
          concurrency: null,
          rate_limit: null,
          rate_period_ms: null,
          group_concurrency: null,
          group_rate_limit: null,
          group_rate_period_ms: null,
          aging_every_ms: null,
          aging_step: null,
          aging_floor: null,
        }),
        waiting: 0,
        pending: 0,
        running: 0,
      };
      byName.set(name, info);
    }
    return info;
  };
  for (const row of rows) Object.assign(entry(row.name), toQueueConfig(row));
  for (const { queue, status, count } of live) entry(queue)[status] = count;
  return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export interface WorkerClaim {
  workerId: string;
  /** Jobs the claim may take in all (slots and prefetch). */
  limit: number;
  /** Jobs of limited queues it may take: slots without a handler, at least one (they go first). */
  idle: number;
  leaseMs: number;
  tasks: string[] | null;
  queues: string[] | null;
  /** A limited queue's claim failed: reported, and the other queues' jobs are still taken. */
  onError(error: unknown, during: string): void;
  /** §11 when the claims may leave out the sequence pass (a listening worker's); absent: never. */
  sequences?: SequenceGate;
}

/**
 * A worker's claim pass: each limited queue it serves first, for the slots idle now (their limits
 * cap them, and a limited queue must not wait behind an unlimited backlog), then the plain claim
 * for the rest. Jobs once claimed are the worker's whatever happens next: a failed claim after
 * one that took jobs is reported, never thrown (those jobs would be lost until their leases
 * expired). `waitMs`: when to look again — a full rate window reopens, another worker held a
 * queue's claim lock, or a limited claim failed. `leftWork`: a limited queue was left out for
 * want of an idle slot or by an error: the worker should claim again when a slot frees.
 * `statements`: how many of `jobs`, in order, each claim statement took (§11 a batch never mixes
 * two statements' jobs: each is in its own claim order).
 */
export async function claimWithLimits(
  engine: Engine,
  claim: WorkerClaim,
): Promise<{ jobs: ClaimedJob[]; waitMs: number | null; leftWork: boolean; statements: number[] }> {
  const jobs: ClaimedJob[] = [];
  const statements: number[] = [];
  let waitMs: number | null = null;
  let unserved = false;
  const later = (ms: number) => {
    waitMs = waitMs === null ? ms : Math.min(waitMs, ms);
  };
  let limited: QueueRow[] = [];
  try {
    limited = (await engine.limits.current()).filter(
      (queue) => claim.queues === null || claim.queues.includes(queue.name),
    );
  } catch (error) {
    claim.onError(error, 'reading the limited queues');
    unserved = true;
    later(ERROR_RETRY_MS);
  }
  let idle = Math.min(claim.idle, claim.limit);
  for (const queue of limited) {
    if (idle <= 0) {
      unserved = true;
      break;
    }
    try {
      const asked = idle;
      const got = await claimLimited(engine, claim, queue, asked);
      jobs.push(...got.jobs);
      if (got.jobs.length > 0) statements.push(got.jobs.length);
      idle -= got.jobs.length;
      if (got.waitMs !== null) later(got.waitMs);
      // Room freed by a job that finished here, which this worker could not use (none of its
      // tasks waiting there): another worker may. Only room freed here is passed on — a hint
      // for any room would wake every worker, whose claims would hint again, without end. With
      // a group limit the room is its group's, which the queue-wide count cannot see: passed on.
      const groupLimited = queue.group_concurrency !== null || queue.group_rate_limit !== null;
      if (
        engine.limits.takeFreed(queue.name) &&
        got.jobs.length < asked &&
        (got.roomLeft > 0 || groupLimited)
      ) {
        engine.limits.roomFreed();
      }
    } catch (error) {
      claim.onError(error, `claiming jobs of the limited queue ${JSON.stringify(queue.name)}`);
      unserved = true;
      later(ERROR_RETRY_MS);
    }
  }
  const rest = claim.limit - jobs.length;
  if (rest > 0) {
    try {
      const got = await engine.claim(
        claim.workerId,
        rest,
        claim.leaseMs,
        claim.tasks,
        claim.queues,
        claim.sequences,
      );
      jobs.push(...got);
      if (got.length > 0) statements.push(got.length);
    } catch (error) {
      if (jobs.length === 0) throw error; // nothing claimed: the claim loop retries with backoff
      claim.onError(error, 'claiming jobs');
      later(ERROR_RETRY_MS);
    }
  }
  return { jobs, waitMs, leftWork: unserved, statements };
}

/**
 * A job of `queue` left `running` on a worker: when the queue is limited there is room for
 * another one. A running worker claims again at once (true) and passes on room it cannot use
 * (claimWithLimits); a stopping one claims nothing, so it hints the others now.
 */
export function roomFreedBy(engine: Engine, queue: string, workerRunning: boolean): boolean {
  if (!engine.limits.has(queue)) return false;
  if (!workerRunning) {
    engine.limits.roomFreed();
    return false;
  }
  engine.limits.freed(queue);
  return true;
}

/**
 * Whether groupConcurrency is the queue's only limit, or it has none and ages (§11): then its
 * claim takes no queue lock — each group is locked on its own inside the claim statement, so
 * workers claim different groups of the queue at the same time (and SKIP LOCKED keeps claimers
 * of an aging queue apart).
 */
function onlyGroupConcurrency(queue: QueueRow): boolean {
  return (
    (queue.group_concurrency !== null || queue.aging_every_ms !== null) &&
    queue.concurrency === null &&
    queue.rate_limit === null &&
    queue.group_rate_limit === null
  );
}

/**
 * One limited claim: try the queue's lock (another worker holding it: look again shortly) and
 * claim what its limits allow. When it took less than it asked for: the room left (there may be
 * none), and when a full rate window reopens. A queue limited only per group: one statement,
 * its groups locked one by one (no queue lock, no transaction of its own).
 */
export async function claimLimited(
  engine: Engine,
  claim: WorkerClaim,
  queue: QueueRow,
  limit: number,
): Promise<{ jobs: ClaimedJob[]; waitMs: number | null; roomLeft: number }> {
  engine.assertOpen();
  const { store } = engine;
  const claimOn = async (db: Executor, withoutQueueLock: boolean) => {
    // §11 as the plain claim: the pass first, a statement of its own, whatever room is left
    await engine.sequencePass(db, claim.sequences);
    const got = await store.queues.claimLimited(
      db,
      claim.workerId,
      queue.name,
      limit,
      claim.tasks,
      claim.leaseMs,
      engine.lastGroups.get(queue.name) ?? null,
      withoutQueueLock,
    );
    engine.served(got.jobs);
    return got;
  };
  if (onlyGroupConcurrency(queue)) {
    const { jobs, lockBusy } = await claimOn(engine.pool, true);
    // A group skipped because another claimer held its lock may still have room: look again.
    return { jobs, waitMs: lockBusy && jobs.length < limit ? LOCK_BUSY_RETRY_MS : null, roomLeft: 0 };
  }
  return inTransaction(engine.pool, async (tx) => {
    if (!(await store.queues.tryLock(tx, queue.name))) {
      return { jobs: [], waitMs: LOCK_BUSY_RETRY_MS, roomLeft: 0 };
    }
    const { jobs, roomLeft, lockBusy } = await claimOn(tx, false);
    if (jobs.length === limit) return { jobs, waitMs: null, roomLeft: roomLeft ?? 0 };
    // A group locked by a claimer without the queue lock (its settings read just before they
    // changed): look again shortly.
    if (lockBusy) return { jobs, waitMs: LOCK_BUSY_RETRY_MS, roomLeft: roomLeft ?? 0 };
    // Took less than asked: the room its rows reported, or (no row) a look; a rate-limited queue
    // without room says when its window reopens.
    if (roomLeft !== null && (roomLeft > 0 || queue.rate_limit === null) && queue.group_rate_limit === null)
      return { jobs, waitMs: null, roomLeft };
    const { room, waitMs } = await store.queues.room(tx, queue.name);
    return { jobs, waitMs, roomLeft: room };
  });
}
