import pg from 'pg';
import { notifyChannel, quoteIdent } from '../../src/db/identifier.js';
import { TEST_SCHEMA } from './schema.js';

/** A LISTEN connection on a schema's channel that records every notification payload. */
export interface Listener {
  readonly payloads: string[];
  /** Resolves with the next payload that satisfies `match` (already received ones count). */
  next(match?: (payload: string) => boolean, timeoutMs?: number): Promise<string>;
  /** Sends a marker NOTIFY on the same channel from another session. */
  mark(pool: pg.Pool, marker: string): Promise<void>;
  /** Sends a marker and discards everything up to it: later `next()` calls see only new traffic. */
  sync(pool: pg.Pool): Promise<void>;
  close(): Promise<void>;
}

export async function listen(url: string, schema: string = TEST_SCHEMA): Promise<Listener> {
  const channel = notifyChannel(schema);
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  await client.query(`LISTEN ${quoteIdent(channel)}`);
  const payloads: string[] = [];
  const waiters: (() => void)[] = [];
  client.on('notification', (message) => {
    if (message.channel !== channel) return;
    payloads.push(message.payload ?? '');
    for (const wake of waiters.splice(0)) wake();
  });
  let seen = 0;
  const listener: Listener = {
    payloads,
    async next(match = () => true, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        while (seen < payloads.length) {
          const payload = payloads[seen++] as string;
          if (match(payload)) return payload;
        }
        const remaining = deadline - Date.now();
        if (remaining <= 0) throw new Error(`no notification on ${channel} within ${timeoutMs} ms`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, remaining);
          waiters.push(() => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
    },
    async mark(pool, marker) {
      await pool.query('SELECT pg_notify($1, $2)', [channel, marker]);
    },
    async sync(pool) {
      const marker = `sync-${Math.random().toString(36).slice(2)}`;
      await listener.mark(pool, marker);
      await listener.next((payload) => payload === marker);
    },
    async close() {
      await client.end();
    },
  };
  return listener;
}
