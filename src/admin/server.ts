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
import { apiAuth, isLoopback, loopbackHostOnly } from './auth.js';
import { dashboardRoutes } from './dashboard.js';
import { errorBody, toHttpError } from './errors.js';
import { History } from './history.js';
import { Metrics } from './metrics.js';

/** Options of {@link startAdminServer}. */
export interface AdminServerOptions {
  queue: Queue;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 4000; 0 picks a free port. */
  port?: number;
  /** Bearer token for /api and /metrics (default: `SKIPLOCK_ADMIN_TOKEN`). */
  token?: string | null;
  /** Workers running in this process: their outcomes feed /metrics. */
  workers?: Worker[];
  /** Depth sampling interval for the charts (default 10 s). */
  sampleIntervalMs?: number;
  logger?: Logger;
}

export interface AdminServer {
  url: string;
  port: number;
  host: string;
  /** Stops accepting, closes connections and the sampler. Leaves the queue open. */
  close(): Promise<void>;
}

/** Builds the Hono app (exported for tests that call `app.request()` directly). */
export function adminApp(options: AdminServerOptions & { host: string }) {
  const token = options.token === undefined ? process.env.SKIPLOCK_ADMIN_TOKEN || null : options.token;
  const history = new History(options.queue, options.sampleIntervalMs);
  const metrics = new Metrics(options.queue);
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
  app.route('/api', apiRoutes(options.queue, history));
  app.get('/metrics', async (c) =>
    c.body(await metrics.text(), 200, { 'Content-Type': metrics.contentType }),
  );
  app.route('/', dashboardRoutes({ authRequired: token !== null }));
  app.notFound((c) => c.json(errorBody('ERR_NOT_FOUND', `No route ${c.req.method} ${c.req.path}`), 404));
  return { app, history, metrics };
}

/** Starts the admin server; resolves once it listens. */
export async function startAdminServer(options: AdminServerOptions): Promise<AdminServer> {
  const host = options.host ?? '127.0.0.1';
  const { app, history } = adminApp({ ...options, host });
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
  history.start((error) =>
    options.logger?.warn?.({ err: error }, 'skiplock admin: sampling the queue failed'),
  );
  const { port } = server.address() as AddressInfo;
  const shown = host.includes(':') ? `[${host}]` : host === '0.0.0.0' ? '127.0.0.1' : host;
  return {
    url: `http://${shown}:${port}/`,
    port,
    host,
    close: () =>
      new Promise<void>((resolve) => {
        history.stop();
        server.close(() => resolve());
        (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}

export { isLoopback };
