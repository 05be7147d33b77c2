/**
 * A NOTIFY hint sent after changes that committed, coalesced: at most one in flight; requests
 * that meet one in flight make exactly one more follow it. A failure is logged, never thrown
 * (the change holds; workers see it by their next poll).
 */
import type { EngineCore } from './engine-core.js';

export class CoalescedHint {
  private sending: Promise<void> | null = null;
  private again = false;

  constructor(
    private readonly engine: EngineCore,
    private readonly payload: string,
    /** For the log line: "sending the <what> failed". */
    private readonly what: string,
  ) {}

  /** A hint in flight (null when none): the enqueuer sends its NOTIFY inline only when none is. */
  get inFlight(): Promise<void> | null {
    return this.sending;
  }

  send(): void {
    if (this.sending !== null) {
      this.again = true;
      return;
    }
    const { store, pool, settings, schema } = this.engine;
    if (this.engine.isClosed) return;
    this.sending = store.observe
      .notify(pool, this.payload)
      .catch((error: unknown) => {
        settings.logger?.warn?.({ err: error, schema }, `skiplock: sending the ${this.what} failed`);
      })
      .finally(() => {
        this.sending = null;
        if (this.again) {
          this.again = false;
          this.send();
        }
      });
  }
}
