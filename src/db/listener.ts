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
  /**
   * How often the connection proves it is alive with a `SELECT 1` (default 10 000 ms). A LISTEN
   * connection is silent by nature: over a partitioned network it would wait forever for
   * notifications that can no longer come. A check unanswered within `healthTimeoutMs`
   * (default 5 000 ms) drops the connection and reconnects.
   */
  healthIntervalMs?: number;
  healthTimeoutMs?: number;
}

/** How long ending a client may wait for its socket to close before it is destroyed. */
const END_TIMEOUT_MS = 1_000;

/**
 * Ends a pg Client without ever hanging: over a silent network its socket never closes, so
 * after `timeoutMs` the socket is destroyed.
 */
export async function endClient(client: pg.Client, timeoutMs = END_TIMEOUT_MS): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    client.end().catch(() => undefined),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    }),
  ]);
  clearTimeout(timer);
  (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
}

export class NotificationListener {
  private readonly options: ListenerOptions;
  private client: pg.Client | null = null;
  private stopped = true;
  private timer: NodeJS.Timeout | null = null;
  private failures = 0;
  private everConnected = false;
  private connecting: Promise<void> | null = null;
  private health: NodeJS.Timeout | null = null;
  /** The client of a connect attempt in progress (stop() cuts it short). */
  private pending: pg.Client | null = null;

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
    if (this.health) clearInterval(this.health);
    this.timer = this.health = null;
    (
      this.pending as unknown as { connection?: { stream?: { destroy(): void } } } | null
    )?.connection?.stream?.destroy();
    await this.connecting?.catch(() => undefined);
    const client = this.client;
    this.client = null;
    if (client) await endClient(client);
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
      connectionTimeoutMillis: this.options.clientConfig.connectionTimeoutMillis ?? 10_000,
      // Every statement on it (LISTEN, the health check) is bounded: a silent network never
      // leaves a connect attempt, start() or stop() waiting forever.
      query_timeout: this.options.healthTimeoutMs ?? 5_000,
    });
    this.pending = client;
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
      await endClient(client);
      this.scheduleReconnect(error instanceof Error ? error : new Error(String(error)));
      return;
    } finally {
      this.pending = null;
    }
    if (this.stopped) {
      await endClient(client);
      return;
    }
    this.client = client;
    this.failures = 0;
    this.health ??= setInterval(() => void this.checkHealth(), this.options.healthIntervalMs ?? 10_000);
    const reconnected = this.everConnected;
    this.everConnected = true;
    this.options.onConnected(reconnected);
  }

  private lost(client: pg.Client, error: Error): void {
    if (this.client !== client) return; // an old or never-adopted client
    this.client = null;
    client.removeAllListeners('end');
    void endClient(client);
    this.scheduleReconnect(error);
  }

  /** One `SELECT 1` on the LISTEN connection; no answer in time means the connection is dead. */
  private async checkHealth(): Promise<void> {
    const client = this.client;
    if (!client || this.connecting || this.stopped) return;
    const timeoutMs = this.options.healthTimeoutMs ?? 5_000;
    let timer: NodeJS.Timeout | undefined;
    const ok = await Promise.race([
      client.query('SELECT 1').then(
        () => true,
        () => false,
      ),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (!ok)
      this.lost(
        client,
        new Error(`the LISTEN connection did not answer a health check within ${timeoutMs} ms`),
      );
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
