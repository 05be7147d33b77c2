/**
 * A timestamp on every statement and notification that passes through node-postgres in this
 * process, for W3's breakdown: the systems' code is not touched, the driver they all load from
 * bench/node_modules (Skiplock's bundle, graphile-worker, pg-boss and BullMQ's PostgreSQL backend
 * share one `pg`) is wrapped for the length of the trace and restored after it.
 *
 * Recorded: when `client.query()` was called (the statement is issued: it may still wait for the
 * connection) and when its result (or error) came back, with its prepared-statement name or
 * text and the rows; when a client emitted 'notification', with its channel and the client's
 * application_name. The cost is two `performance.now()` calls and an array push per statement.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';

export interface TracedQuery {
  /** performance.now() when `query()` was called, and when its callback or promise settled. */
  at: number;
  end: number;
  /** The prepared statement's name, else the text with its whitespace collapsed. */
  key: string;
  /** The text (whitespace collapsed, first 400 characters). */
  text: string;
  /** The client's application_name. */
  client: string;
  rows: unknown[] | null;
}

export interface TracedNotification {
  at: number;
  channel: string;
  payload: string;
  client: string;
}

type QueryFn = (this: pg.Client, config: unknown, values?: unknown, callback?: unknown) => unknown;
type EmitFn = (this: pg.Client, event: string | symbol, ...args: unknown[]) => boolean;
type Callback = (error: unknown, result?: { rows?: unknown[] }) => void;

function collapse(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

function describe(config: unknown): { key: string; text: string } {
  if (typeof config === 'string') {
    const text = collapse(config).slice(0, 400);
    return { key: text, text };
  }
  const { name, text } = (config ?? {}) as { name?: unknown; text?: unknown };
  const body = typeof text === 'string' ? collapse(text).slice(0, 400) : '';
  return { key: typeof name === 'string' ? name : body, text: body };
}

function appName(client: pg.Client): string {
  const params = (client as unknown as { connectionParameters?: { application_name?: string } })
    .connectionParameters;
  return params?.application_name ?? '';
}

export class DriverTrace {
  readonly queries: TracedQuery[] = [];
  readonly notifications: TracedNotification[] = [];
  private restore: (() => void) | null = null;

  /** Wraps `pg.Client.prototype.query` and `emit` until {@link DriverTrace.stop}. */
  static start(): DriverTrace {
    const trace = new DriverTrace();
    const proto = pg.Client.prototype as unknown as { query: QueryFn; emit: EmitFn };
    const hadOwnEmit = Object.hasOwn(proto, 'emit');
    const query = proto.query;
    const emit = proto.emit;
    proto.query = function (this: pg.Client, config: unknown, values?: unknown, callback?: unknown) {
      // a Submittable (cursor, stream) or a callback on the config: not ours to time
      if (config && typeof config === 'object' && ('submit' in config || 'callback' in config)) {
        return query.call(this, config, values, callback);
      }
      const { key, text } = describe(config);
      const entry: TracedQuery = {
        at: performance.now(),
        end: Number.NaN,
        key,
        text,
        client: appName(this),
        rows: null,
      };
      trace.queries.push(entry);
      const settle = (result?: { rows?: unknown[] }) => {
        entry.end = performance.now();
        entry.rows = result?.rows ?? null;
      };
      if (typeof values === 'function') {
        const cb = values as Callback;
        return query.call(this, config, (error: unknown, result?: { rows?: unknown[] }) => {
          settle(result);
          cb(error, result);
        });
      }
      if (typeof callback === 'function') {
        const cb = callback as Callback;
        return query.call(this, config, values, (error: unknown, result?: { rows?: unknown[] }) => {
          settle(result);
          cb(error, result);
        });
      }
      const promise = query.call(this, config, values) as Promise<{ rows?: unknown[] }>;
      promise.then(settle, () => settle());
      return promise;
    };
    proto.emit = function (this: pg.Client, event: string | symbol, ...args: unknown[]) {
      if (event === 'notification') {
        const message = args[0] as { channel?: string; payload?: string } | undefined;
        trace.notifications.push({
          at: performance.now(),
          channel: message?.channel ?? '',
          payload: message?.payload ?? '',
          client: appName(this),
        });
      }
      return emit.call(this, event, ...args);
    };
    trace.restore = () => {
      proto.query = query;
      if (hadOwnEmit) proto.emit = emit;
      else delete (proto as { emit?: EmitFn }).emit;
    };
    return trace;
  }

  stop(): void {
    this.restore?.();
    this.restore = null;
  }
}

/** The payload `i` a result row carries (payload or data, as an object or JSON text), or null. */
export function payloadIndex(row: unknown): number | null {
  if (!row || typeof row !== 'object') return null;
  // a row read as an array (pg's rowMode 'array': Skiplock's claim) carries the payload as one of its values
  const candidates = Array.isArray(row)
    ? row
    : ['payload', 'data'].map((field) => (row as Record<string, unknown>)[field]);
  for (const candidate of candidates) {
    let value = candidate;
    if (typeof value === 'string' && value.startsWith('{')) {
      try {
        value = JSON.parse(value);
      } catch {
        continue;
      }
    }
    const i = (value as { i?: unknown } | null)?.i;
    if (typeof i === 'number') return i;
  }
  return null;
}
