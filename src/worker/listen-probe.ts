/**
 * The LISTEN self-check: after its LISTEN connection is (re)established, a worker sends itself a
 * notification; if it does not arrive in time, LISTEN is not working — behind a
 * transaction-pooling proxy such as PgBouncer it never does — and the worker says so once per
 * connection, instead of silently waiting for the fallback poll.
 */

/** How long the self-check waits for its own notification. */
const PROBE_TIMEOUT_MS = 5_000;

const UNREACHABLE =
  'The LISTEN connection did not receive a notification this worker sent itself: behind a transaction-pooling proxy (PgBouncer), LISTEN does not work; use `listen: false` (see docs/pgbouncer.md). Until then, jobs start on the fallback poll.';

export interface ListenProbeDeps {
  workerId: string;
  /** Sends `payload` on the worker's channel. */
  send(payload: string): Promise<void>;
  /** The notification never came back. */
  onUnreachable(message: string): void;
  onError(error: unknown, during: string): void;
}

export class ListenProbe {
  private pending: { token: string; timer: NodeJS.Timeout } | null = null;
  private sent = 0;

  constructor(private readonly deps: ListenProbeDeps) {}

  /** Sends a probe, unless one is still waiting for its answer. */
  send(timeoutMs = PROBE_TIMEOUT_MS): void {
    if (this.pending) return;
    const token = `probe:${this.deps.workerId}:${++this.sent}`;
    const timer = setTimeout(() => {
      this.pending = null;
      this.deps.onUnreachable(UNREACHABLE);
    }, timeoutMs);
    this.pending = { token, timer };
    this.deps
      .send(token)
      .catch((error: unknown) => this.deps.onError(error, 'sending the LISTEN self-check'));
  }

  /** A notification arrived: true when it is a probe's (ours or another worker's), to be ignored otherwise. */
  heard(payload: string): boolean {
    if (!payload.startsWith('probe:')) return false;
    if (this.pending?.token === payload) this.stop();
    return true;
  }

  stop(): void {
    if (this.pending) clearTimeout(this.pending.timer);
    this.pending = null;
  }
}
