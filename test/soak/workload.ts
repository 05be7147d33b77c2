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
 *
 * Some jobs are delayed, some carry a dedupe key from a small set (so some enqueues are dedupe
 * hits), a few get another priority.
 */
import type { JobSpec } from '../../src/index.js';
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
  }
}

/** One job spec, with its random options (delay, dedupe key, priority). */
export function nextSpec(rng: Rng, ref: string): JobSpec {
  const kind = rng.weighted(KINDS);
  const { payload, options } = payloadOf(rng, kind, ref);
  const spec: JobSpec = { task: TASK, payload, ...options };
  if (rng.chance(0.15)) spec.delayMs = rng.int(100, 3_000);
  if (rng.chance(0.1)) spec.dedupeKey = `dk-${rng.int(0, 24)}`;
  if (rng.chance(0.1)) spec.priority = rng.int(0, 200);
  return spec;
}
