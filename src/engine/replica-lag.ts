/**
 * §7 `ops().replicaLagMs`: how far behind the primary the read replica is, measured so that an
 * idle primary cannot inflate it. The primary's WAL position is read first; then the replica
 * is asked whether it has replayed that far. If it has, the lag is 0. If not, it is asked again
 * (after 1, 2, 4 … ms, at most 100 ms apart) until it has — the lag is then the time from
 * reading the primary's position to seeing it replayed, an upper bound of how old the
 * replica's view was — or until {@link CATCH_UP_WAIT_MS} have passed: the lag is then the age
 * of the last transaction it replayed (an upper bound that also counts any idle time before
 * that transaction, so only a replica stuck for a second or more is reported that way).
 *
 * The age alone, what was reported before, read about 20 s for a replica one transaction
 * behind after 20 s without writes (the replica had simply not replayed a commit made a
 * millisecond earlier).
 */
import { setTimeout as sleep } from 'node:timers/promises';

/** Longest extra wait of ops() for a replica behind the primary; also where the CLI and the dashboard turn its lag red. */
export const CATCH_UP_WAIT_MS = 1_000;
/** Longest pause between two looks at a replica that is behind. */
const MAX_PAUSE_MS = 100;

/** One look at the replica: caught up with the primary's position, and the age of its last replayed transaction. */
export interface ReplayLook {
  caughtUp: boolean;
  ageMs: number | null;
}

/**
 * The lag in ms from the first look (taken by the caller) and `look` to ask again; `startedAt`
 * is `performance.now()` before the primary's position was read.
 */
export async function catchUpLag(
  first: ReplayLook,
  look: () => Promise<ReplayLook>,
  startedAt: number,
  now: () => number = () => performance.now(),
): Promise<number | null> {
  if (first.caughtUp) return 0;
  let seen = first;
  for (let pause = 1; ; pause = Math.min(2 * pause, MAX_PAUSE_MS)) {
    const waited = now() - startedAt;
    if (waited >= CATCH_UP_WAIT_MS) {
      return seen.ageMs === null ? null : Math.max(seen.ageMs, Math.ceil(waited));
    }
    await sleep(Math.min(pause, CATCH_UP_WAIT_MS - waited));
    seen = await look();
    if (seen.caughtUp) return Math.max(1, Math.ceil(now() - startedAt));
  }
}
