/**
 * The limited queues (SPEC §8) as this process last read them — the queues with a limit and not
 * paused, which a worker claims from with the limited claim (queues.ts) — and the hint that room
 * freed up in one. Held by the engine, read by the worker's claim passes.
 */
import type { QueueRow } from '../store/queues.js';
import { CoalescedHint } from './coalesced-hint.js';
import type { EngineCore } from './engine-core.js';

/** The NOTIFY payload of a job of a limited queue that finished: room for another one. */
export const ROOM_HINT = 'queues:room';
/** How long a worker trusts its list of limited queues (a hint refreshes it at once). */
const LIMITED_TTL_MS = 1_000;

/** The queues with a limit and not paused, as a worker last read them (at most a second old). */
export class LimitedQueues {
  private rows: QueueRow[] = [];
  private readAt = Number.NEGATIVE_INFINITY;
  private reading: Promise<QueueRow[]> | null = null;
  /** Bumped by invalidate(): a read that began before it does not count as fresh. */
  private generation = 0;
  private readonly roomHint: CoalescedHint;
  /** Limited queues where a job finished on this worker since its last claim there. */
  private readonly freedHere = new Set<string>();

  constructor(private readonly engine: EngineCore) {
    this.roomHint = new CoalescedHint(engine, ROOM_HINT, 'room hint');
  }

  invalidate(): void {
    this.readAt = Number.NEGATIVE_INFINITY;
    this.generation++;
  }

  /** A job of `queue` finished on this worker: its next claim passes on room it cannot use. */
  freed(queue: string): void {
    this.freedHere.add(queue);
  }

  /** Whether a job of `queue` finished here since the last claim from it (and forgets it). */
  takeFreed(queue: string): boolean {
    return this.freedHere.delete(queue);
  }

  /** Whether `queue` had a limit when last read (a finished job there frees room for a claim). */
  has(queue: string): boolean {
    return this.rows.some((row) => row.name === queue);
  }

  async current(): Promise<QueueRow[]> {
    if (performance.now() - this.readAt < LIMITED_TTL_MS) return this.rows;
    const generation = this.generation;
    this.reading ??= this.engine.store.queues
      .restricted(this.engine.pool)
      .then((rows) => {
        this.rows = rows.filter((row) => !row.paused);
        if (generation === this.generation) this.readAt = performance.now();
        return this.rows;
      })
      .finally(() => {
        this.reading = null;
      });
    return this.reading;
  }

  /**
   * A job of a limited queue left `running`: tell every worker (one NOTIFY in flight at a time,
   * the rest coalesced), so that one waiting for room claims now rather than at its poll.
   */
  roomFreed(): void {
    this.roomHint.send();
  }
}
