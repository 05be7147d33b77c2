/**
 * The settings of the features the soak exercises besides plain jobs — shared by the setup
 * (database.ts), the producer (workload.ts), the handlers (tasks.ts) and the verifier, so the
 * checks judge against the very limits the run configured.
 */

/** A per-second cron set up once (and upserted again by the producer now and then, as a deploy would). */
export const SCHEDULE = {
  name: 'soak-tick',
  cron: '* * * * * *',
  tickMs: 1_000,
  /**
   * `overlap: true` so that every tick gets its own job whatever the previous one is doing, and
   * a number for `catchUp`: after a database outage (10–20 s) the firing runs the 5 latest missed
   * ticks and skips the older ones — the verifier checks exactly that (schedule-checks.ts).
   */
  overlap: true,
  catchUp: 5,
} as const;

/** The dedupe key the scheduler gives a tick's job (src/engine/scheduler.ts `tickKey`). */
export function tickKey(tickMs: number): string {
  return `skiplock:schedule:${SCHEDULE.name}:${new Date(tickMs).toISOString()}`;
}

/** Queues with limits (configured once at setup); every other job goes to 'default'. */
export const LIMITED = {
  concurrency: { queue: 'soak-conc', concurrency: 2 },
  rate: { queue: 'soak-rate', limit: 4, periodMs: 1_000 },
  groups: { queue: 'soak-groups', groupConcurrency: 1, groups: ['g0', 'g1', 'g2', 'g3'] },
} as const;

/** Dedupe modes (SPEC §8), each on its own small set of keys. */
export const DEDUPE = {
  throttle: { prefix: 'thr-', keys: 3, windowMs: 3_000 },
  debounce: { prefix: 'deb-', keys: 3, delayMs: [600, 1_500] as const, maxWaitMs: 4_000 },
  pending: { prefix: 'one-', keys: 3 },
} as const;

/** The producer's prune: done jobs older than this, every PRUNE_EVERY_MS. */
export const PRUNE = { olderThanMs: 5_000, everyMs: 10_000 } as const;
