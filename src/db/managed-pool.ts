/**
 * The pool Skiplock runs its statements on: a pg pool (its own, or one the user passed in)
 * with the bookkeeping that lets `close()` finish whatever happens to the server or the network.
 *
 * pg-pool alone falls short in three ways, each seen here:
 *  - a `connect()` or `query()` still waiting for a client when `end()` is called is never
 *    served (it hangs forever), so close() first lets what is in flight finish;
 *  - `end()` waits for every checked-out client, so a session held forever (a runaway handler
 *    inside ctx.transaction) would hang close(): sessions still held after `sessionGraceMs`
 *    are destroyed;
 *  - a client ended over a silent network never sees its socket close (its FIN is never
 *    answered), which keeps the process alive: sockets still open a moment after `end()` are
 *    destroyed.
 * Sessions lent by {@link ManagedPool.connect} keep an 'error' listener for as long as they are
 * held (see withSession), so a connection that dies between statements never crashes the process.
 * At most the pool size minus two are lent at once: transactions (ctx.transaction) that hold
 * their connections for long can never take the last ones, so the worker's heartbeat, claims and
 * outcome writes always find a connection.
 */
import type pg from 'pg';
import { QueueClosedError } from '../errors.js';
import type { PoolExecutor, SessionExecutor } from './executor.js';

/** How long close() lets checked-out sessions finish before destroying them. */
const DEFAULT_SESSION_GRACE_MS = 5_000;
/** How long a client being ended may take to close its socket before it is destroyed. */
const SOCKET_CLOSE_MS = 1_000;

type QueryArgs = [text: string | { name?: string; text: string; values?: unknown[] }, values?: unknown[]];

export class ManagedPool implements PoolExecutor {
  readonly pool: pg.Pool;
  private readonly owned: boolean;
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly sessions = new Set<SessionExecutor>();
  private readonly clients = new Set<pg.Client>();
  private closing: Promise<void> | null = null;
  /** Most sessions lent at once (the pool's size minus a reserve for single statements). */
  private readonly sessionLimit: number;
  /** Sessions lent, or being connected for a lender. */
  private lent = 0;
  private readonly sessionWaiters: { resolve: () => void; reject: (error: Error) => void }[] = [];

  /** `owned`: Skiplock created the pool and ends it on close; otherwise it is left open. */
  constructor(pool: pg.Pool, owned: boolean) {
    this.pool = pool;
    this.owned = owned;
    const max = (pool as unknown as { options?: { max?: number } }).options?.max ?? 10;
    this.sessionLimit = max - Math.min(2, max - 1);
    if (owned) {
      pool.on('connect', (client) => this.clients.add(client));
      pool.on('remove', (client) => this.clients.delete(client));
    }
  }

  // biome-ignore lint/suspicious/noExplicitAny: rows are typed by each store statement.
  query(...args: QueryArgs): Promise<{ rows: any[] }> {
    this.assertOpen();
    return this.track((this.pool.query as (...a: QueryArgs) => Promise<{ rows: unknown[] }>)(...args));
  }

  /** Lends a session; it counts as held until released. */
  async connect(): Promise<SessionExecutor> {
    this.assertOpen();
    if (this.lent >= this.sessionLimit) {
      // Wait for a session to come back: its slot is handed over (lent stays the same).
      await new Promise<void>((resolve, reject) => this.sessionWaiters.push({ resolve, reject }));
    } else {
      this.lent++;
    }
    let client: pg.PoolClient & SessionExecutor;
    try {
      client = (await this.track(this.pool.connect())) as pg.PoolClient & SessionExecutor;
    } catch (error) {
      this.returned();
      throw error;
    }
    const release = client.release.bind(client);
    this.sessions.add(client);
    let released = false;
    client.release = (error?: Error | boolean) => {
      if (released) return;
      released = true;
      this.sessions.delete(client);
      release(error);
      this.returned();
    };
    return client;
  }

  /** A session came back: the next lender waiting, if any, may go. */
  private returned(): void {
    const next = this.sessionWaiters.shift();
    if (next) next.resolve();
    else this.lent--;
  }

  /**
   * Waits for statements and connects in flight, gives held sessions `sessionGraceMs` to be
   * released (then destroys them), and ends the pool if it is Skiplock's own. Idempotent.
   */
  close(sessionGraceMs = DEFAULT_SESSION_GRACE_MS): Promise<void> {
    this.closing ??= this.shutdown(sessionGraceMs);
    return this.closing;
  }

  private async shutdown(sessionGraceMs: number): Promise<void> {
    for (const waiter of this.sessionWaiters.splice(0)) waiter.reject(new QueueClosedError());
    // Every statement has its own timeout (query_timeout, connectionTimeoutMillis): bounded.
    await Promise.all([...this.inFlight].map((p) => p.catch(() => undefined)));
    await this.sessionsReleased(sessionGraceMs);
    for (const session of this.sessions) {
      session.release(new Error('skiplock: the Queue was closed while this session was still held'));
    }
    if (!this.owned) return;
    await this.pool.end();
    await this.socketsClosed();
  }

  private async sessionsReleased(ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    while (this.sessions.size > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /** Destroys the sockets of ended clients that a silent peer never let close. */
  private async socketsClosed(): Promise<void> {
    const deadline = Date.now() + SOCKET_CLOSE_MS;
    while (this.clients.size > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    for (const client of this.clients) {
      (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
    }
    this.clients.clear();
  }

  private track<T>(promise: Promise<T>): Promise<T> {
    this.inFlight.add(promise);
    const forget = () => {
      this.inFlight.delete(promise);
    };
    promise.then(forget, forget);
    return promise;
  }

  private assertOpen(): void {
    if (this.closing !== null) throw new QueueClosedError();
  }
}
