/**
 * `skiplock dashboard` as an operator starts it (issue 26), the real command in a child process
 * against a real database:
 * - the start-up line names the address it is bound to and the rule it applies: a wildcard bind
 *   without a token refuses every change, also from loopback (403 ERR_FORBIDDEN);
 * - with its read replica down — a closed port, a silent one (a listener that never answers) —
 *   it starts anyway, says so on stderr, serves every read from the primary, requeues and
 *   cancels, and `/api/ops` reports the replica (`replica.status`); when the replica answers
 *   again it reads there again and says so.
 *
 * Deliberate breaks seen failing: the old start line (`on http://127.0.0.1:P/ (no token:
 * loopback only for changes)` for a 0.0.0.0 bind) failed the exact-text test; dashboard.ts
 * checking `queue.ops()` (replica included) before serving, as before, exited 1 at once on the
 * closed port ("dashboard exited (1)") and after 10 s on the silent one; ReadRoute.read()
 * rethrowing instead of reading the primary failed /api/jobs with 503.
 */
import type { ChildProcess } from 'node:child_process';
import net from 'node:net';
import { afterAll, describe, expect, test } from 'vitest';
import type { ReplicaState } from '../../src/admin/read-route.js';
import type { OpsSnapshot } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { freePort } from '../support/ports.js';
import { killChildren } from '../support/spawn.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { spawnCli } from './run-cli.js';

const db = useTestDatabase();
const children: ChildProcess[] = [];
afterAll(() => killChildren(children));

interface Dashboard {
  url: string;
  port: number;
  /** The line printed on stdout once it listens. */
  line: string;
  stderr(): string;
  /** Resolves once stderr has a line matching `pattern`. */
  stderrLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
}

async function startDashboard(
  args: string[],
  env: Record<string, string | undefined> = {},
): Promise<Dashboard> {
  const child = spawnCli(['dashboard', '--port', '0', ...args], {
    url: db.url,
    env: { SKIPLOCK_ADMIN_TOKEN: undefined, DATABASE_READ_URL: undefined, ...env },
  });
  children.push(child);
  let out = '';
  let err = '';
  const waiters = new Set<() => void>();
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    err += chunk;
    for (const wake of waiters) wake();
  });
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      const match = /^skiplock dashboard on [^\n]*\n/.exec(out);
      if (match) resolve(match[0].slice(0, -1));
    });
    child.once('exit', (code) => reject(new Error(`dashboard exited (${code}): ${out}${err}`)));
  });
  const url = /^skiplock dashboard on (http:\/\/\S+\/) /.exec(line)?.[1] as string;
  return {
    url,
    port: Number(new URL(url).port),
    line,
    stderr: () => err,
    stderrLine: (pattern, timeoutMs = 30_000) =>
      new Promise<string>((resolve, reject) => {
        const check = () => {
          const found = err.split('\n').find((l) => pattern.test(l));
          if (found === undefined) return;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(found);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no stderr line matching ${pattern} in ${timeoutMs} ms: ${err}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      }),
  };
}

type Ops = OpsSnapshot & { replica: ReplicaState | null };
const getJson = async <T>(url: string) => {
  const response = await fetch(url);
  return { status: response.status, body: (await response.json()) as T };
};
const post = (url: string) => fetch(url, { method: 'POST' });

describe('the start-up line: the bound address and the rule it applies', () => {
  test('loopback, every address without a token, with a token', { timeout: 60_000 }, async () => {
    const { id } = await db.queue().enqueue('dash.rule', null);
    const [loopback, wildcard, token] = await Promise.all([
      startDashboard([]),
      startDashboard(['--host', '0.0.0.0']),
      startDashboard(['--host', '0.0.0.0'], { SKIPLOCK_ADMIN_TOKEN: 's3cret' }),
    ]);
    const at = (d: Dashboard) => `http://127.0.0.1:${d.port}/`;
    expect(loopback.line).toBe(
      `skiplock dashboard on ${at(loopback)} (listening on 127.0.0.1; no token: anyone on this machine may read and change jobs); metrics at ${at(loopback)}metrics`,
    );
    expect(wildcard.line).toBe(
      `skiplock dashboard on ${at(wildcard)} (listening on 0.0.0.0: every address; no token: read-only, every change (requeue, cancel, pause) is refused with 403; set SKIPLOCK_ADMIN_TOKEN to allow them); metrics at ${at(wildcard)}metrics`,
    );
    expect(token.line).toBe(
      `skiplock dashboard on ${at(token)} (listening on 0.0.0.0: every address; bearer token required for /api and /metrics); metrics at ${at(token)}metrics`,
    );
    // The rule the line states: refused from loopback too.
    const refused = await post(`${wildcard.url}api/jobs/${id}/cancel`);
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('ERR_FORBIDDEN');
    expect((await post(`${loopback.url}api/jobs/${id}/cancel`)).status).toBe(200);
    for (const d of [loopback, wildcard, token]) expect(d.stderr()).toBe('');
  });
});

describe('a read replica that is down', () => {
  const DOWN_LINE =
    /^skiplock dashboard: the read replica is unreachable, reading the primary until it answers \(asked every 5 s\): Read replica \(readConnectionString\): /;

  /** Requeue and cancel through the API, a job page and a job from the primary. */
  async function servesThePrimary(d: Dashboard, task: string) {
    const queue = db.queue();
    const { id: pending } = await queue.enqueue(task, { n: 1 });
    const [dead] = await db.sql<{ id: string }>(
      `INSERT INTO ${db.jobs} (task, status, attempts, max_attempts, last_error)
       VALUES ($1, 'dead', 3, 3, 'Error: seeded') RETURNING id::text AS id`,
      [task],
    );
    const requeued = await post(`${d.url}api/jobs/${dead?.id}/requeue`);
    expect(requeued.status).toBe(200);
    expect(await requeued.json()).toEqual({ id: dead?.id, requeued: true });
    const cancelled = await post(`${d.url}api/jobs/${pending}/cancel`);
    expect(cancelled.status).toBe(200);
    expect(await cancelled.json()).toEqual({ id: pending, cancelled: true, wasRunning: false });
    const page = await getJson<{ jobs: { id: string; status: string }[] }>(`${d.url}api/jobs?task=${task}`);
    expect(page.status).toBe(200);
    expect(page.body.jobs.map((j) => [j.id, j.status])).toEqual([
      [dead?.id, 'pending'],
      [pending, 'cancelled'],
    ]);
    const job = await getJson<{ status: string }>(`${d.url}api/jobs/${pending}`);
    expect(job).toMatchObject({ status: 200, body: { status: 'cancelled' } });
    const ops = await getJson<Ops>(`${d.url}api/ops`);
    expect(ops.status).toBe(200);
    expect(ops.body.replicaLagMs).toBeNull(); // the primary's figures
    expect(ops.body.cancelled).toBeGreaterThanOrEqual(1);
    return ops.body;
  }

  test('a closed port: it starts, says so, serves the primary, and /api/ops reports it down', {
    timeout: 60_000,
  }, async () => {
    const closed = `postgres://nobody@127.0.0.1:${await freePort()}/nothing`;
    const d = await startDashboard(['--read-database-url', closed]);
    expect(d.line).toMatch(
      /^skiplock dashboard on http:\/\/127\.0\.0\.1:\d+\/ \(listening on 127\.0\.0\.1; /,
    );
    expect(await d.stderrLine(DOWN_LINE)).toMatch(/ECONNREFUSED/);
    const ops = await servesThePrimary(d, 'dash.closed');
    expect(ops.replica).toMatchObject({ status: 'down', error: expect.stringMatching(/ECONNREFUSED/) });
    expect(Number.isNaN(Date.parse(ops.replica?.since ?? ''))).toBe(false);
  });

  test('a silent port: it starts at once and serves the primary while the replica is checked', {
    timeout: 60_000,
  }, async () => {
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((socket) => {
      sockets.add(socket); // accepted, never answered
      socket.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const port = (silent.address() as net.AddressInfo).port;
      const started = performance.now();
      const d = await startDashboard(['--read-database-url', `postgres://nobody@127.0.0.1:${port}/nothing`]);
      expect(performance.now() - started).toBeLessThan(9_000); // not after the 10 s connect timeout
      const early = await servesThePrimary(d, 'dash.silent');
      expect(early.replica?.status).toBe('checking');
      // The connection attempt times out (connectTimeoutMs, 10 s): then it is down.
      expect(await d.stderrLine(DOWN_LINE, 40_000)).toMatch(/timeout/i);
      const ops = await getJson<Ops>(`${d.url}api/ops`);
      expect(ops.body.replica).toMatchObject({ status: 'down', error: expect.stringMatching(/timeout/i) });
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  test('a replica that comes back: read again, and said on stderr', { timeout: 60_000 }, async () => {
    // The "replica" is this database itself through a proxy on a port closed at first.
    const port = await freePort();
    const replicaUrl = new URL(db.url);
    replicaUrl.port = String(port);
    replicaUrl.hostname = '127.0.0.1';
    const d = await startDashboard(['--read-database-url', replicaUrl.toString()]);
    await d.stderrLine(DOWN_LINE);
    let proxy: TcpProxy | undefined;
    try {
      proxy = await startTcpProxy(Number(new URL(db.url).port || 5432), new URL(db.url).hostname, port);
      expect(await d.stderrLine(/answers again/, 30_000)).toBe(
        'skiplock dashboard: the read replica answers again: reading it',
      );
      const ops = await getJson<Ops>(`${d.url}api/ops`);
      expect(ops.body.replica).toMatchObject({ status: 'up', error: null });
      expect(ops.body.replicaLagMs).toBe(0); // not in recovery: lag 0
    } finally {
      await proxy?.close();
    }
  });
});
