/**
 * §11 "a queue with no sequenced job pays nothing": when a listening worker's claim may leave out
 * the sequence pass (one statement, one round trip, before each claim).
 *
 * Keys are noted only when sequenced jobs arrive (or a pass leaves a key it could not lock), and
 * every such note is announced with the SEQUENCE_HINT notification in its transaction (migration
 * 22). A worker runs the pass on each claim until one finds no key noted; then it leaves the pass
 * out until a SEQUENCE_HINT arrives, its LISTEN (re)connects (notifications may have been missed
 * while it was down), or `freshMs` have passed (the fallback: a lost notification costs at most
 * that, as the fallback poll bounds a lost enqueue hint). A hint received while a pass is in
 * flight keeps the gate open: that pass's snapshot may predate the note. A worker without LISTEN
 * has no gate (every claim runs the pass), nor has `queue.claim`.
 */
import { performance } from 'node:perf_hooks';

/** The NOTIFY payload of a noted sequence key (migration 22). */
export const SEQUENCE_HINT = 'sequence';
/**
 * A pass found noted keys whose lock another transaction holds (migration 24): they stay noted,
 * and a listening worker passes again after {@link SEQUENCE_BUSY_RETRY_MS}, not at once (a lock
 * held open would otherwise keep every listening worker passing and hinting the others).
 */
export const SEQUENCE_BUSY_HINT = 'sequence-busy';
/** How long a listening worker waits before passing over keys a pass found locked. */
export const SEQUENCE_BUSY_RETRY_MS = 100;

/** What a pass was sent under: handed back to {@link SequenceGate.clean}. */
export interface PassTicket {
  readonly generation: number;
  readonly at: number;
}

export class SequenceGate {
  /** Bumped by every hint and reconnection. */
  private generation = 0;
  /** The generation a pass last found clean (none yet: -1), and when that pass was sent. */
  private cleanGeneration = -1;
  private cleanAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly freshMs: number) {}

  /** A key may have been noted: a SEQUENCE_HINT, or LISTEN (re)connected. */
  dirty(): void {
    this.generation++;
  }

  /** Null: the pass may be left out; else run it and hand the ticket to clean() if it found nothing. */
  ticket(): PassTicket | null {
    const now = performance.now();
    if (this.generation === this.cleanGeneration && now - this.cleanAt < this.freshMs) return null;
    return { generation: this.generation, at: now };
  }

  /** The pass sent with `ticket` found no noted key. */
  clean(ticket: PassTicket): void {
    if (ticket.at < this.cleanAt) return; // an older pass answering late
    this.cleanGeneration = ticket.generation;
    this.cleanAt = ticket.at;
  }
}
