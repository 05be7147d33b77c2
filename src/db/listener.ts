/**
 * A LISTEN connection that survives the server going away (SPEC §1.9, §3).
 *
 * pg's Client never reconnects: after its backend dies it emits `error` and `end`, and every
 * later notification is lost. This wrapper owns one dedicated Client at a time:
 *
 *   stopped ──start()──▶ connecting ──LISTEN ok──▶ listening
 *                           ▲                          │ error / end
 *                           └──── wait (backoff) ◀─────┘
 *   any state ──stop()──▶ stopped
 *
 * Each successful (re)connection calls `onConnected`, so the owner can run an immediate claim
 * pass for whatever was enqueued while nobody was listening: notifications are hints, never
 * the only path to a job.
 */
import pg from 'pg';
import { quoteIdent } from './identifier.js';

/** Options of {@link NotificationListener}. */
export interface ListenerOptions {
  /** Settings of the dedicated connection (same database as the queue's pool). */
  clientConfig: pg.ClientConfig;
  channel: string;
  onNotification: (payload: string) => void;
  /** After every successful LISTEN (the first one and every reconnection). */
  onConnected: (reconnected: boolean) => void;
  /** A connection failed or dropped; the listener retries on its own. */
  onError: (error: Error, retryInMs: number) => void;
  /** First reconnect delay (default 100 ms), doubling up to `maxBackoffMs` (default 10 s). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

export class NotificationListener {
  private readonly options: ListenerOptions;
  private client: pg.Client | null = null;
  private stopped = true;
  private timer: NodeJS.Timeout | null = null;
  private failures = 0;
  private everConnected = false;
  private connecting: Promise<void> | null = null;

  constructor(options: ListenerOptions) {
    this.options = options;
  }

  /** Whether a LISTEN is in place right now. */
  get listening(): boolean {
    return this.client !== null && this.connecting === null;
  }

  /** Connects and LISTENs; resolves after the first attempt (successful or not). */
  async start(): Promise<void> {
    this.stopped = false;
    await this.connect();
  }

  /** Closes the connection and cancels any pending reconnect. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.connecting?.catch(() => undefined);
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }

  private connect(): Promise<void> {
    this.connecting ??= this.attempt().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  private async attempt(): Promise<void> {
    const client = new pg.Client({
      ...this.options.clientConfig,
      application_name: 'skiplock-listener',
      keepAlive: true,
      connectionTimeoutMillis: 10_000,
    });
    // Registered before connect: an error at any moment must not crash the process.
    client.on('error', (error: Error) => this.lost(client, error));
    client.on('end', () => this.lost(client, new Error('the LISTEN connection ended')));
    client.on('notification', (message) => {
      if (message.channel === this.options.channel) this.options.onNotification(message.payload ?? '');
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${quoteIdent(this.options.channel)}`);
    } catch (error) {
      client.removeAllListeners('end');
      await client.end().catch(() => undefined);
      this.scheduleReconnect(error instanceof Error ? error : new Error(String(error)));
      return;
    }
    if (this.stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.failures = 0;
    const reconnected = this.everConnected;
    this.everConnected = true;
    this.options.onConnected(reconnected);
  }

  private lost(client: pg.Client, error: Error): void {
    if (this.client !== client) return; // an old or never-adopted client
    this.client = null;
    client.removeAllListeners('end');
    client.end().catch(() => undefined);
    this.scheduleReconnect(error);
  }

  private scheduleReconnect(error: Error): void {
    if (this.stopped || this.timer) return;
    const min = this.options.minBackoffMs ?? 100;
    const max = this.options.maxBackoffMs ?? 10_000;
    const delay = Math.min(max, min * 2 ** this.failures) * (0.75 + Math.random() * 0.5);
    this.failures++;
    this.options.onError(error, Math.round(delay));
    this.timer = setTimeout(() => {
      this.timer = null;
      if (!this.stopped) void this.connect();
    }, delay);
  }
}
