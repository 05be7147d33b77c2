/**
 * `skiplock dashboard`: the admin API, /metrics and the web dashboard in one small HTTP server
 * (Hono on Node's http). Bound to 127.0.0.1 unless told otherwise; bound to loopback it answers
 * only requests addressed to a loopback name (see auth.ts).
 */
import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import { ValidationError } from '../errors.js';
import type { Queue } from '../queue.js';
import type { Logger } from '../types.js';
import type { Worker } from '../worker/worker.js';
import { apiRoutes } from './api.js';
import { apiAuth, isLoopback, isWildcard, loopbackHostOnly } from './auth.js';
import { dashboardRoutes } from './dashboard.js';
import { errorBody, toHttpError } from './errors.js';
import { History } from './history.js';
import { Metrics } from './metrics.js';
import { ReadRoute, type ReplicaState } from './read-route.js';

/** Options of {@link startAdminServer}. */
export interface AdminServerOptions {
  queue: Queue;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 4000; 0 picks a free port. */
  port?: number;
  /** Bearer token for /api and /metrics (default: `SKIPLOCK_ADMIN_TOKEN`). */
  token?: string | null;
  /**
   * When `queue` has a read replica: a Queue on the same primary without one. The server then
   * reads the primary while the replica is unreachable (also at start-up, until it first
   * answers) and reports the replica in `/api/ops` (`replica`) and on the page (issue 26).
   */
  primary?: Queue;
  /** Told when the read replica goes down or comes back (with `primary`). */
  onReplicaChange?: (state: ReplicaState) => void;
  /** Workers running in this process: their outcomes feed /metrics. */
  workers?: Worker[];
  /** Depth sampling interval for the charts (default 10 s). */
  sampleIntervalMs?: number;
  /** Largest body of `POST /api/jobs`, in bytes (default 1 MiB); a larger one is a 413. */
  enqueueBodyLimit?: number;
  logger?: Logger;
}

export interface AdminServer {
  /** A URL to open it at: the bound address, or loopback when bound to every address. */
  url: string;
  port: number;
  /** The address it is bound to, as given (`0.0.0.0` and `::` are every address). */
  host: string;
  /** The read replica's status (null without `primary`). */
  replica(): ReplicaState | null;
  /** Stops accepting, closes connections and the sampler. Leaves the queue open. */
  close(): Promise<void>;
}

/** Builds the Hono app (exported for tests that call `app.request()` directly). */
export function adminApp(options: AdminServerOptions & { host: string }) {
  const token = options.token === undefined ? process.env.SKIPLOCK_ADMIN_TOKEN || null : options.token;
  const route = options.primary
    ? new ReadRoute(options.queue, options.primary, { onChange: options.onReplicaChange })
    : null;
  const history = new History(route ?? options.queue, options.sampleIntervalMs);
  const metrics = new Metrics(route ?? options.queue);
  for (const worker of options.workers ?? []) metrics.observe(worker);

  const app = new Hono();
  app.onError((error, c) => {
    const { status, body } = toHttpError(error);
    if (status >= 500)
      options.logger?.error?.({ err: error, path: c.req.path }, 'skiplock admin: request failed');
    return c.json(body, status);
  });
  app.use('*', loopbackHostOnly(options.host)); // first: DNS rebinding reaches no route
  const auth = apiAuth({ token, host: options.host });
  app.use('/api/*', auth);
  app.use('/metrics', auth);
  app.route('/api', apiRoutes(options.queue, history, route, options.enqueueBodyLimit));
  app.get('/metrics', async (c) =>
    c.body(await metrics.text(), 200, { 'Content-Type': metrics.contentType }),
  );
  app.route('/', dashboardRoutes({ authRequired: token !== null }));
  app.notFound((c) => c.json(errorBody('ERR_NOT_FOUND', `No route ${c.req.method} ${c.req.path}`), 404));
  return { app, history, metrics, route };
}

/** Starts the admin server; resolves once it listens. */
export async function startAdminServer(options: AdminServerOptions): Promise<AdminServer> {
  const host = options.host ?? '127.0.0.1';
  const { app, history, route } = adminApp({ ...options, host });
  const server = createAdaptorServer({ fetch: app.fetch, hostname: host });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) =>
      reject(
        error.code === 'EADDRINUSE'
          ? new ValidationError('port', `${options.port ?? 4000} on ${host} is in use: pass another --port`, {
              cause: error,
            })
          : error,
      ),
    );
    server.listen(options.port ?? 4000, host, () => resolve());
  });
  void route?.start(); // serves meanwhile: reads go to the primary until the replica answers
  history.start((error) =>
    options.logger?.warn?.({ err: error }, 'skiplock admin: sampling the queue failed'),
  );
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${urlHost(host)}:${port}/`,
    port,
    host,
    replica: () => route?.state ?? null,
    close: () =>
      new Promise<void>((resolve) => {
        route?.stop();
        history.stop();
        server.close(() => resolve());
        (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}

/** The host of a URL to open a server bound to `host`: loopback for a wildcard bind. */
function urlHost(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1';
  if (isWildcard(host)) return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

export { isLoopback };
