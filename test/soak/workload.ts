/**
 * The jobs the producer enqueues. Each kind stresses one promise of SPEC §1/§3 under the faults:
 *
 * | kind            | handler                                                        | stresses                          |
 * |-----------------|----------------------------------------------------------------|-----------------------------------|
 * | tx              | works, then a ledger row inside ctx.transaction                | exactly-once completion           |
 * | tx-hold         | same, but stays `idle in transaction` 0.3–1.5 s before commit  | connection loss inside a transaction (defect 10) |
 * | effect          | works, then a non-transactional side effect (recorded)         | what a side effect can repeat     |
 * | flaky           | fails its first 1–2 attempts, then a ledger row                | retries, backoff                  |
 * | poison          | always throws                                                  | dead-lettering                    |
 * | overrun         | first attempt overruns its 700 ms deadline (honours the signal) | deadlines                        |
 * | stubborn-tx     | 1.5–6 s of work that ignores its signal, then a ledger row     | pauses, partitions, stop() (defects 2, 3) |
 * | stubborn-effect | same, ending in a side effect                                   | side effects after a pause        |
 * | runaway         | ignores its 700 ms deadline for ~7 s (past the 5 s abort grace) | runaway handling                 |
 * | plain           | works, returns                                                 | throughput                        |
 * | stepped         | a transactional step, a plain step, a 100–600 ms ctx.sleep, then as tx | durable steps (SPEC §12)   |
 *
 * Some jobs are delayed, some carry a dedupe key from a small set (so some enqueues are dedupe
 * hits), a few get another priority, and about a third go to the queues with limits (features.ts):
 * one with `concurrency`, one with `rateLimit`, one with `groupConcurrency` (those carry a group).
 *
 * Besides these single jobs the producer writes (below, and producer-process.ts):
 *
 * | what            | jobs                                                                  | stresses |
 * |-----------------|-----------------------------------------------------------------------|----------|
 * | fan flow        | 3–7 children, one fan-in over all of them (now and then a poison child) | unblocking exactly once, failure cascade |
 * | chain flow      | 3–6 hops, each depending on the one before                            | unblocking in order |
 * | cascade flow    | a root that dies for good, a chain and a fan-in below it, one `run` dependent; requeued by the producer | cascade, requeue bringing dependents back |
 * | spawner         | once started, enqueues a follow-up depending on its own running job (in a transaction held open, or its own) | dependents added to running jobs |
 * | follow          | the producer adds a dependent to a job it enqueued a moment ago (probably running) | the same, from outside |
 * | throttle / debounce / one-queued | dedupe modes on a few keys each                      | SPEC §8 dedupe modes |
 * | tick            | the per-second schedule's jobs                                        | one job per tick, catchUp |
 *
 * A job with dependencies reads `ctx.dependencies()` and records what it saw.
 */
import type { FlowNode, JobSpec, ScheduleOptions } from '../../src/index.js';
import { DEDUPE, LIMITED, SCHEDULE } from './features.js';
import type { SoakPayload } from './records.js';
import type { Rng } from './rng.js';

export const TASK = 'soak';

const KINDS = [
  ['tx', 28],
  ['tx-hold', 10],
  ['effect', 14],
  ['flaky', 10],
  ['poison', 4],
  ['overrun', 6],
  ['stubborn-tx', 9],
  ['stubborn-effect', 7],
  ['runaway', 2],
  ['plain', 10],
  ['stepped', 6],
] as const;

type Kind = (typeof KINDS)[number][0];

/** Work time of a handler: mostly short, sometimes long enough for a fault to hit it. */
function workMs(rng: Rng): number {
  return rng.chance(0.15) ? rng.int(1_500, 5_000) : rng.int(20, 300);
}

function payloadOf(rng: Rng, kind: Kind, ref: string): { payload: SoakPayload; options: Partial<JobSpec> } {
  const base: SoakPayload = {
    ref,
    kind,
    firstMs: 0,
    ms: 0,
    respectSignal: true,
    finish: 'tx',
    holdMs: 0,
    failAttempts: 0,
  };
  const short = rng.int(20, 300);
  switch (kind) {
    case 'tx': {
      const ms = workMs(rng);
      return { payload: { ...base, firstMs: ms, ms }, options: { maxAttempts: 8 } };
    }
    case 'tx-hold':
      return {
        payload: { ...base, firstMs: short, ms: short, holdMs: rng.int(300, 1_500) },
        options: { maxAttempts: 8 },
      };
    case 'effect': {
      const ms = workMs(rng);
      return { payload: { ...base, firstMs: ms, ms, finish: 'effect' }, options: { maxAttempts: 8 } };
    }
    case 'flaky':
      return {
        payload: { ...base, firstMs: short, ms: short, failAttempts: rng.int(1, 2) },
        options: { maxAttempts: 8 },
      };
    case 'poison':
      return {
        payload: { ...base, firstMs: short, ms: short, failAttempts: 1_000, finish: 'return' },
        options: { maxAttempts: 3 },
      };
    case 'overrun':
      return {
        payload: { ...base, firstMs: rng.int(1_500, 3_000), ms: short },
        options: { maxAttempts: 8, timeoutMs: 700 },
      };
    case 'stubborn-tx': {
      const ms = rng.int(1_500, 6_000);
      return {
        payload: { ...base, firstMs: ms, ms, respectSignal: false, holdMs: rng.int(0, 500) },
        options: { maxAttempts: 8 },
      };
    }
    case 'stubborn-effect': {
      const ms = rng.int(1_500, 6_000);
      return {
        payload: { ...base, firstMs: ms, ms, respectSignal: false, finish: 'effect' },
        options: { maxAttempts: 8 },
      };
    }
    case 'runaway':
      return {
        payload: { ...base, firstMs: rng.int(6_500, 7_500), ms: short, respectSignal: false },
        options: { maxAttempts: 8, timeoutMs: 700 },
      };
    case 'plain':
      return {
        payload: { ...base, firstMs: short, ms: short, finish: 'return' },
        options: { maxAttempts: 8 },
      };
    case 'stepped':
      return {
        payload: { ...base, firstMs: short, ms: short, steps: { sleepMs: rng.int(100, 600) } },
        options: { maxAttempts: 8 },
      };
  }
}

/** One job spec, with its random options (queue, delay, dedupe key, priority). */
export function nextSpec(rng: Rng, ref: string): JobSpec {
  const kind = rng.weighted(KINDS);
  const { payload, options } = payloadOf(rng, kind, ref);
  const spec: JobSpec = { task: TASK, payload, ...options, ...queueOf(rng) };
  if (rng.chance(0.15)) spec.delayMs = rng.int(100, 3_000);
  if (rng.chance(0.1)) spec.dedupeKey = `dk-${rng.int(0, 24)}`;
  if (rng.chance(0.1)) spec.priority = rng.int(0, 200);
  return spec;
}

const QUEUES = [
  ['default', 66],
  [LIMITED.concurrency.queue, 10],
  [LIMITED.rate.queue, 9],
  [LIMITED.groups.queue, 15],
] as const;

/** A queue for a job (and a group in the grouped queue). */
function queueOf(rng: Rng): Pick<JobSpec, 'queue' | 'group'> {
  const queue = rng.weighted(QUEUES);
  if (queue === 'default') return {};
  if (queue === LIMITED.groups.queue) return { queue, group: rng.pick(LIMITED.groups.groups) };
  return { queue };
}

/** Kinds that end well, for the nodes of a flow that should run to the end. */
const NODE_KINDS = [
  ['tx', 40],
  ['tx-hold', 10],
  ['effect', 15],
  ['plain', 15],
  ['flaky', 10],
  ['stubborn-tx', 10],
] as const;

function node(rng: Rng, ref: string, soakRef: string, kind: Kind, dependsOn: string[] = []): FlowNode {
  const { payload, options } = payloadOf(rng, kind, soakRef);
  return {
    ref,
    task: TASK,
    payload: dependsOn.length > 0 ? { ...payload, deps: true } : payload,
    ...options,
    ...queueOf(rng),
    ...(dependsOn.length > 0 ? { dependsOn } : {}),
  };
}

export type FlowShape = 'fan' | 'chain' | 'cascade';

/** The nodes of one flow; `soakRef()` gives each a unique payload ref. */
export function flowNodes(rng: Rng, shape: FlowShape, soakRef: () => string): FlowNode[] {
  const kind = () => rng.weighted(NODE_KINDS);
  switch (shape) {
    case 'fan': {
      const children = Array.from({ length: rng.int(3, 7) }, (_, i) => `c${i}`);
      const poison = rng.chance(0.15) ? rng.pick(children) : null;
      return [
        ...children.map((ref) => node(rng, ref, soakRef(), ref === poison ? 'poison' : kind())),
        node(rng, 'fanin', soakRef(), 'tx', children),
      ];
    }
    case 'chain': {
      const hops = Array.from({ length: rng.int(3, 6) }, (_, i) => `h${i}`);
      return hops.map((ref, i) => node(rng, ref, soakRef(), kind(), i === 0 ? [] : [hops[i - 1]!]));
    }
    case 'cascade': {
      const root = node(rng, 'root', soakRef(), 'plain');
      root.payload = { ...(root.payload as SoakPayload), kind: 'gate', gate: true, finish: 'tx' };
      return [
        root,
        node(rng, 'a', soakRef(), kind(), ['root']),
        node(rng, 'b', soakRef(), kind(), ['a']),
        { ...node(rng, 'c', soakRef(), 'plain', ['root']), onDependencyFailure: 'run' },
        node(rng, 'f', soakRef(), 'tx', ['a', 'c']),
      ];
    }
  }
}

/** A job that, once started, adds a dependent to itself (tasks.ts). */
export function spawnerSpec(rng: Rng, ref: string): JobSpec {
  const { payload, options } = payloadOf(rng, 'tx', ref);
  return {
    task: TASK,
    payload: {
      ...payload,
      kind: 'spawner',
      firstMs: rng.int(0, 200),
      ms: rng.int(0, 200),
      spawn: rng.chance(0.5) ? 'client' : 'own',
      holdMs: rng.int(100, 600),
      // Both ways of completing: ctx.transaction (which locks the job's row at its lease check,
      // before its completing statement) and a plain return, completed by the worker's own
      // statement, batched or not — the one that missed a new edge before migration 15.
      finish: rng.chance(0.6) ? 'return' : 'tx',
    },
    ...options,
  };
}

/** A follow-up: a short job with dependencies (a spawner's, or the producer's). */
export function followPayload(rng: Rng, ref: string): SoakPayload {
  const { payload } = payloadOf(rng, 'tx', ref);
  const ms = rng.int(20, 200);
  return { ...payload, kind: 'follow', firstMs: ms, ms, holdMs: 0, deps: true };
}

/** A job the producer will add a dependent to shortly: long enough to be running by then. */
export function parentSpec(rng: Rng, ref: string): JobSpec {
  const { payload, options } = payloadOf(rng, 'tx', ref);
  const ms = rng.int(500, 2_500);
  const finish = rng.chance(0.6) ? 'return' : 'tx';
  return { task: TASK, payload: { ...payload, kind: 'parent', firstMs: ms, ms, finish }, ...options };
}

/** Throttle: one job per key per window, finished or not. */
export function throttleSpec(rng: Rng, ref: string): JobSpec {
  const { payload, options } = payloadOf(rng, 'tx', ref);
  const { prefix, keys, windowMs } = DEDUPE.throttle;
  return {
    task: TASK,
    payload: { ...payload, kind: 'throttle' },
    ...options,
    dedupeKey: `${prefix}${rng.int(0, keys - 1)}`,
    dedupe: { windowMs },
  };
}

/** Debounce: the latest call's payload wins while the job waits (call number `seq`). */
export function debounceSpec(rng: Rng, ref: string, key: string, seq: number): JobSpec {
  const { payload, options } = payloadOf(rng, 'tx', ref);
  const { delayMs, maxWaitMs } = DEDUPE.debounce;
  return {
    task: TASK,
    payload: { ...payload, kind: 'debounce', seq },
    ...options,
    dedupeKey: key,
    delayMs: rng.int(...delayMs),
    dedupe: { replace: true, maxWaitMs },
  };
}

/** One queued and one running per key: work long enough for a second one to queue behind it. */
export function oneQueuedSpec(
  rng: Rng,
  ref: string,
  key = `${DEDUPE.pending.prefix}${rng.int(0, DEDUPE.pending.keys - 1)}`,
): JobSpec {
  const { payload, options } = payloadOf(rng, 'tx', ref);
  const ms = rng.int(200, 2_000);
  return {
    task: TASK,
    payload: { ...payload, kind: 'one-queued', firstMs: ms, ms },
    ...options,
    dedupeKey: key,
    dedupe: { scope: 'pending' },
  };
}

/** The schedule's payload: a short ledger job (its ref is the schedule's, the tick is in its dedupe key). */
export function tickPayload(): SoakPayload {
  return {
    ref: 'tick',
    kind: 'tick',
    firstMs: 30,
    ms: 30,
    respectSignal: true,
    finish: 'tx',
    holdMs: 0,
    failAttempts: 0,
  };
}

/** The per-second schedule, as the setup writes it and the producer upserts it again (a deploy). */
export function scheduleOptions(): ScheduleOptions {
  return {
    cron: SCHEDULE.cron,
    task: TASK,
    payload: tickPayload(),
    overlap: SCHEDULE.overlap,
    catchUp: SCHEDULE.catchUp,
    maxAttempts: 8,
  };
}
