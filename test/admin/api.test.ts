/**
 * The admin HTTP API (SPEC §5) on real servers (startAdminServer on port 0) against a real
 * database: every route, the error envelope, bad input, the bearer token, the loopback rule and
 * cross-origin refusal, /metrics parsed as Prometheus text with the values of seeded data, and
 * the cost of /api/ops and /api/counts on a 200,000-row table (SPEC §7).
 *
 * Deliberate breaks seen failing (each in a private copy of the repository):
 * - apiAuth skipping the token check (`if (false && options.token !== null)`): "with a token, every
 *   /api call without it … is a 401" (200 instead of 401) and the app.request test (the guarded
 *   app let a POST through) failed;
 * - apiAuth with `const loopback = true`: both non-loopback tests failed (the POST requeued the
 *   job: 200 instead of 403);
 * - the requeue route answering 200 without calling queue.requeue: the requeue test (the job
 *   stayed dead) and the dedupe-conflict test (200 instead of 409) failed; answering 404 instead
 *   of 409 for a job that is not dead failed the conflict case;
 * - the list route accepting any query key: "bad input" failed (200 instead of 400 for ?state=);
 * - the skiplock_dead_last_hour gauge reading `o.dead` instead of `o.dead1h`: the metrics test
 *   failed (6 instead of 3).
 * - store/flows.ts `neighbours` selecting the ids as text: the dependents of the flow's root came
 *   back as 10, 11, 12, 2, … instead of ascending; api.ts answering a flow with no job with 200:
 *   the 404 check failed; liveByQueue without its waiting branch: the counts-by-queue, queues and
 *   metrics checks of the flows tests failed; history.ts sampling no waiting: the depth check did.
 * - api.ts answering `queue.dependenciesOf(id)` (every id, no count) for GET /api/jobs/:id: the
 *   fan-out test got 10,001 dependents and no `dependentsCount`; store/neighbours.ts ordering by
 *   the ids as text: both GET /api/jobs/:id tests and the dependencySummary test failed (10, 100,
 *   1000… first); its counts without the `+ 1` row: `dependentsCountExact` came back true for
 *   10,001 dependents.
 * The plan test ("read no finished rows") fails against the liveByQueue statement as written
 * (a sequential scan of all 200,065 rows behind /api/counts and /metrics) and passes once it is
 * rewritten as one partial-index read per live status (pending UNION ALL running).
 */
import * as http from 'node:http';
import * as os from 'node:os';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { isLoopbackHost } from '../../src/admin/auth.js';
import { type AdminServer, adminApp, isLoopback, startAdminServer } from '../../src/admin/server.js';
import { quoteIdent } from '../../src/db/identifier.js';
import { Queue } from '../../src/queue.js';
import { EXACT_COUNT_LIMIT, LIST_WINDOW } from '../../src/store/job-store.js';
import { buildStatements } from '../../src/store/statements.js';
import type { Job } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { jobsTable, TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const servers: AdminServer[] = [];

afterAll(async () => {
  await Promise.all(servers.map((server) => server.close()));
});

async function serve(options: Parameters<typeof startAdminServer>[0]): Promise<AdminServer> {
  const server = await startAdminServer({ port: 0, token: null, sampleIntervalMs: 100, ...options });
  servers.push(server);
  return server;
}

interface Reply {
  status: number;
  headers: Headers;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies are checked field by field.
  body: any;
}

async function call(
  base: string,
  path: string,
  init: { method?: string; headers?: Record<string, string> } = {},
): Promise<Reply> {
  const response = await fetch(new URL(path, base), { method: init.method ?? 'GET', headers: init.headers });
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON (HTML, JS, metrics text)
  }
  return { status: response.status, headers: response.headers, text, body };
}

/** Asserts the one error envelope `{ error: { code, message, field? } }` and nothing else. */
function expectError(reply: Reply, status: number, expected: { code?: string; field?: string | null } = {}) {
  expect(reply.status, reply.text.slice(0, 300)).toBe(status);
  expect(reply.headers.get('content-type')).toMatch(/^application\/json/);
  expect(Object.keys(reply.body)).toEqual(['error']);
  const error = reply.body.error as Record<string, unknown>;
  for (const key of Object.keys(error)) expect(['code', 'message', 'field']).toContain(key);
  expect(error.code).toMatch(/^ERR_[A-Z_]+$/);
  expect(typeof error.message).toBe('string');
  expect((error.message as string).length).toBeGreaterThan(0);
  if (expected.code !== undefined) expect(error.code).toBe(expected.code);
  if (expected.field === null) expect(error).not.toHaveProperty('field');
  else if (expected.field !== undefined) expect(error.field).toBe(expected.field);
}

/** JSON as the API sends it (dates as ISO strings). */
function asJson<T>(value: T): unknown {
  return JSON.parse(JSON.stringify(value));
}

/** A dead job through the real path: enqueue, claim, fail its only attempt. Use a task of its own. */
async function makeDead(queue: Queue, task: string, payload: unknown, message: string, queueName = 'hooks') {
  const { id } = await queue.enqueue(task, payload, { queue: queueName, maxAttempts: 1 });
  const [job] = await queue.claim('api-test-worker', { tasks: [task] });
  if (job?.id !== id)
    throw new Error(`claimed ${job?.id} instead of ${id}: give the dead job a task of its own`);
  expect(await queue.fail(job, new Error(message))).toBe('dead');
  return id;
}

/** A done job through the real path: enqueue, claim, complete. */
async function makeDone(
  queue: Queue,
  task: string,
  payload: unknown,
  result: unknown,
  queueName = 'reports',
) {
  const { id } = await queue.enqueue(task, payload, { queue: queueName });
  const [job] = await queue.claim('api-test-worker', { tasks: [task] });
  if (job?.id !== id) throw new Error(`claimed ${job?.id} instead of ${id}`);
  expect(await queue.complete(job, result)).toBe(true);
  return id;
}

// ------------------------------------------------------------------ Prometheus text parser

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
interface Exposition {
  help: Map<string, string>;
  type: Map<string, string>;
  samples: Sample[];
}

const METRIC_NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"\s*(,|$)/y;

/** Parses the Prometheus text exposition format (0.0.4); throws on any line it cannot read. */
function parseExposition(text: string): Exposition {
  const help = new Map<string, string>();
  const type = new Map<string, string>();
  const samples: Sample[] = [];
  const lines = text.split('\n');
  lines.forEach((line, index) => {
    const where = `line ${index + 1}: ${JSON.stringify(line)}`;
    if (line.trim() === '') return;
    let match = new RegExp(`^# HELP (${METRIC_NAME}) (.*)$`).exec(line);
    if (match) {
      if (help.has(match[1] as string)) throw new Error(`second HELP, ${where}`);
      help.set(match[1] as string, match[2] as string);
      return;
    }
    match = new RegExp(`^# TYPE (${METRIC_NAME}) (counter|gauge|histogram|summary|untyped)$`).exec(line);
    if (match) {
      if (type.has(match[1] as string)) throw new Error(`second TYPE, ${where}`);
      type.set(match[1] as string, match[2] as string);
      return;
    }
    if (line.startsWith('#')) return; // other comments are allowed
    match = new RegExp(`^(${METRIC_NAME})(?:\\{(.*)\\})? (\\S+)(?: (-?\\d+))?$`).exec(line);
    if (!match) throw new Error(`not a sample, ${where}`);
    const labels: Record<string, string> = {};
    const body = match[2] ?? '';
    LABEL.lastIndex = 0;
    while (LABEL.lastIndex < body.length) {
      const start = LABEL.lastIndex;
      const label = LABEL.exec(body);
      if (!label || LABEL.lastIndex === start) throw new Error(`bad labels, ${where}`);
      labels[label[1] as string] = (label[2] as string).replace(/\\(.)/g, (_, c: string) =>
        c === 'n' ? '\n' : c,
      );
    }
    const raw = match[3] as string;
    const value = raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : raw === 'NaN' ? NaN : Number(raw);
    if (!/^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]Inf|NaN)$/.test(raw)) {
      throw new Error(`bad value, ${where}`);
    }
    samples.push({ name: match[1] as string, labels, value });
  });
  // Every sample belongs to a family with HELP and TYPE, declared before it.
  for (const sample of samples) {
    const family = [sample.name, sample.name.replace(/_(bucket|sum|count)$/, '')].find((n) => type.has(n));
    if (!family) throw new Error(`sample ${sample.name} has no TYPE`);
    if (!help.has(family)) throw new Error(`metric ${family} has no HELP`);
    if (family !== sample.name && !['histogram', 'summary'].includes(type.get(family) as string)) {
      throw new Error(`sample ${sample.name} of a ${type.get(family)} named ${family}`);
    }
  }
  for (const name of type.keys()) if (!help.has(name)) throw new Error(`metric ${name} has no HELP`);
  for (const name of help.keys()) if (!type.has(name)) throw new Error(`metric ${name} has no TYPE`);
  return { help, type, samples };
}

function sampleValue(exposition: Exposition, name: string, labels: Record<string, string> = {}) {
  const found = exposition.samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  if (found.length !== 1) {
    throw new Error(`expected one sample ${name}${JSON.stringify(labels)}, found ${found.length}`);
  }
  return (found[0] as Sample).value;
}

describe('the Prometheus parser of this file', () => {
  test('reads what it should and rejects what it should not', () => {
    const good = parseExposition(
      [
        '# HELP a_total A counter',
        '# TYPE a_total counter',
        'a_total{x="1",y="q\\"uote"} 3',
        '# HELP h A histogram',
        '# TYPE h histogram',
        'h_bucket{le="+Inf"} 2',
        'h_sum 0.5',
        'h_count 2',
        '',
      ].join('\n'),
    );
    expect(sampleValue(good, 'a_total', { y: 'q"uote' })).toBe(3);
    expect(sampleValue(good, 'h_bucket', { le: '+Inf' })).toBe(2);
    expect(() => parseExposition('# TYPE a gauge\na 1\n')).toThrow(/no HELP/);
    expect(() => parseExposition('# HELP a x\n# TYPE a gauge\na{b=1} 1\n')).toThrow(/bad labels/);
    expect(() => parseExposition('# HELP a x\n# TYPE a gauge\na one\n')).toThrow(/bad value/);
    expect(() => parseExposition('b 1\n')).toThrow(/no TYPE/);
  });
});

// ------------------------------------------------------------------ routes

describe('routes (no token, bound to 127.0.0.1)', () => {
  let queue: Queue;
  let server: AdminServer;
  const ids = {
    pending: [] as string[],
    media: [] as string[],
    done: [] as string[],
    dead: [] as string[],
    running: '',
    cancelled: '',
  };

  beforeAll(async () => {
    queue = db.queue();
    for (let i = 0; i < 4; i++)
      ids.done.push(await makeDone(queue, 'report.build', { n: i }, { pages: i + 1 }));
    for (let i = 0; i < 3; i++)
      ids.dead.push(
        await makeDead(queue, 'webhook.deliver', { url: `https://hooks.example/${i}` }, 'HTTP 503'),
      );
    ids.cancelled = (await queue.enqueue('sms.send', { to: '+100' })).id;
    expect(await queue.cancel(ids.cancelled)).toBe(true);
    const { id: running } = await queue.enqueue('video.encode', { file: 'a.mp4' }, { queue: 'media' });
    const [claimed] = await queue.claim('api-test-worker', { tasks: ['video.encode'] });
    expect(claimed?.id).toBe(running);
    ids.running = running;
    for (let i = 0; i < 3; i++)
      ids.pending.push((await queue.enqueue('email.send', { to: `user${i}@example.com` })).id);
    for (let i = 0; i < 2; i++)
      ids.media.push((await queue.enqueue('image.resize', { width: 100 * (i + 1) }, { queue: 'media' })).id);
    server = await serve({ queue });
  });

  test('port 0 picks a free port, and the URL says where', () => {
    expect(server.port).toBeGreaterThan(0);
    expect(server.host).toBe('127.0.0.1');
    expect(server.url).toBe(`http://127.0.0.1:${server.port}/`);
  });

  test('GET /api/ops is the queue snapshot', async () => {
    const reply = await call(server.url, '/api/ops');
    expect(reply.status).toBe(200);
    expect(reply.headers.get('content-type')).toMatch(/^application\/json/);
    expect(reply.body).toMatchObject({
      pending: 5,
      running: 1,
      done: 4,
      dead: 3,
      cancelled: 1,
      dead1h: 3,
      stuckRunning: 0,
      deadline1h: 0,
      estimated: [],
    });
    expect(reply.body.oldestPendingSec).toBeGreaterThanOrEqual(0);
    expect(reply.body.oldestPendingSec).toBeLessThan(60);
    const { oldestPendingSec: _a, ...direct } = await queue.ops();
    const { oldestPendingSec: _b, ...served } = reply.body;
    expect(served).toEqual({ ...direct, replica: null }); // no read replica (issue 26: `replica`)
  });

  test('GET /api/counts: by status, and live jobs by queue', async () => {
    const reply = await call(server.url, '/api/counts');
    expect(reply.status).toBe(200);
    expect(reply.body).toEqual({
      waiting: 0,
      pending: 5,
      running: 1,
      done: 4,
      dead: 3,
      cancelled: 1,
      queues: {
        default: { waiting: 0, pending: 3, running: 0 },
        media: { waiting: 0, pending: 2, running: 1 },
      },
    });
  });

  test('GET /api/jobs: newest first, filters, limit', async () => {
    const all = await call(server.url, '/api/jobs');
    expect(all.status).toBe(200);
    const expected = await queue.list();
    expect(all.body).toEqual({ jobs: asJson(expected), next: null });
    expect(all.body.jobs).toHaveLength(14);
    const idsSeen = all.body.jobs.map((j: { id: string }) => BigInt(j.id));
    expect(idsSeen).toEqual([...idsSeen].sort((a, b) => (a < b ? 1 : a > b ? -1 : 0)));

    const dead = await call(server.url, '/api/jobs?status=dead');
    expect(dead.body.jobs.map((j: Job) => j.id).sort()).toEqual([...ids.dead].sort());
    for (const job of dead.body.jobs) {
      expect(job).toMatchObject({ status: 'dead', task: 'webhook.deliver', attempts: 1, maxAttempts: 1 });
      expect(job.lastError).toMatch(/^Error: HTTP 503/);
    }
    const byTask = await call(server.url, '/api/jobs?task=email.send');
    expect(byTask.body.jobs.map((j: Job) => j.id)).toEqual([...ids.pending].reverse());
    const byQueue = await call(server.url, '/api/jobs?queue=media');
    expect(byQueue.body.jobs.map((j: Job) => j.id).sort()).toEqual([...ids.media, ids.running].sort());
    const both = await call(server.url, '/api/jobs?queue=media&status=pending&task=image.resize');
    expect(both.body.jobs.map((j: Job) => j.id)).toEqual([...ids.media].reverse());
    const none = await call(server.url, '/api/jobs?task=no.such.task');
    expect(none.body).toEqual({ jobs: [], next: null });
    // An empty filter value means "any".
    const empty = await call(server.url, '/api/jobs?status=&task=&queue=');
    expect(empty.body.jobs).toHaveLength(14);

    const limited = await call(server.url, '/api/jobs?limit=1');
    expect(limited.body.jobs).toHaveLength(1);
    expect(limited.body.next).toBe(expected[0]?.id);
    const max = await call(server.url, '/api/jobs?limit=1000');
    expect(max.body.jobs).toHaveLength(14);
  });

  test('GET /api/jobs: keyset paging with after and next covers every job once', async () => {
    const expected = (await queue.list({ limit: 1000 })).map((j) => j.id);
    for (const limit of [1, 3, 5, 7, 14]) {
      const seen: string[] = [];
      let after: string | null = null;
      for (let page = 0; page < 20; page++) {
        const reply: Reply = await call(
          server.url,
          `/api/jobs?limit=${limit}${after === null ? '' : `&after=${after}`}`,
        );
        expect(reply.status).toBe(200);
        expect(reply.body.jobs.length).toBeLessThanOrEqual(limit);
        seen.push(...reply.body.jobs.map((j: Job) => j.id));
        if (reply.body.next === null) break;
        expect(reply.body.next).toBe(reply.body.jobs.at(-1).id);
        after = reply.body.next;
      }
      expect(seen, `limit ${limit}`).toEqual(expected);
    }
    // Paging with a filter keeps the filter.
    const first = await call(server.url, '/api/jobs?status=dead&limit=2');
    expect(first.body.jobs).toHaveLength(2);
    const second = await call(server.url, `/api/jobs?status=dead&limit=2&after=${first.body.next}`);
    expect(second.body).toEqual({ jobs: [expect.objectContaining({ status: 'dead' })], next: null });
    // After the oldest job: nothing, and no next.
    const past = await call(server.url, `/api/jobs?after=${expected.at(-1)}`);
    expect(past.body).toEqual({ jobs: [], next: null });
  });

  test('GET /api/jobs/:id: the job, 404 when unknown, 400 when malformed', async () => {
    const deadId = ids.dead[0] as string;
    const reply = await call(server.url, `/api/jobs/${deadId}`);
    expect(reply.status).toBe(200);
    // SPEC §10 with the ids of its dependencies and dependents and their counts (none here; see
    // the flows tests)
    expect(reply.body).toEqual({
      ...(asJson(await queue.get(deadId)) as object),
      dependsOn: [],
      dependsOnCount: 0,
      dependsOnCountExact: true,
      dependents: [],
      dependentsCount: 0,
      dependentsCountExact: true,
      steps: [], // SPEC §12 its durable steps (none here; see test/steps/admin.test.ts)
    });
    expect(reply.body).toMatchObject({
      id: deadId,
      status: 'dead',
      queue: 'hooks',
      payload: { url: 'https://hooks.example/0' },
    });
    const done = await call(server.url, `/api/jobs/${ids.done[2]}`);
    expect(done.body).toMatchObject({ status: 'done', result: { pages: 3 }, payload: { n: 2 } });

    expectError(await call(server.url, '/api/jobs/999999999'), 404, { code: 'ERR_NOT_FOUND', field: null });
    for (const bad of ['abc', '0', '-1', '1.5', '01', '99999999999999999999', '%20']) {
      expectError(await call(server.url, `/api/jobs/${bad}`), 400, { code: 'ERR_VALIDATION', field: 'id' });
    }
  });

  test('GET /api/history: depth samples and finished jobs per minute', async () => {
    let history: Reply | undefined;
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; ) {
      history = await call(server.url, '/api/history');
      if (history.body.depth.length >= 2) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(history?.status).toBe(200);
    const body = history?.body as {
      depth: { t: number; waiting: number; pending: number; running: number }[];
      throughput: { t: number; done: number; dead: number; cancelled: number }[];
    };
    expect(body.depth.length).toBeGreaterThanOrEqual(2);
    for (const sample of body.depth) {
      expect(sample).toEqual({ t: expect.any(Number), waiting: 0, pending: 5, running: 1 });
      expect(Math.abs(Date.now() - sample.t)).toBeLessThan(60_000);
    }
    const sum = (key: 'done' | 'dead' | 'cancelled') => body.throughput.reduce((n, b) => n + b[key], 0);
    expect({ done: sum('done'), dead: sum('dead'), cancelled: sum('cancelled') }).toEqual({
      done: 4,
      dead: 3,
      cancelled: 1,
    });
    for (const bucket of body.throughput) expect(bucket.t % 60_000).toBe(0);
  });

  test('GET / serves the dashboard page and its assets, with a strict CSP', async () => {
    const page = await call(server.url, '/');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.text).toContain('<script src="/assets/app.js" defer></script>');
    expect(page.text).toContain('data-auth-required="false"');
    expect(page.text).toContain('data-testid="count-dead"');
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');

    const app = await call(server.url, '/assets/app.js');
    expect(app.status).toBe(200);
    expect(app.headers.get('content-type')).toMatch(/^text\/javascript/);
    expect(app.text).toContain('data-testid');
    const css = await call(server.url, '/assets/style.css');
    expect(css.headers.get('content-type')).toMatch(/^text\/css/);
    const icon = await call(server.url, '/assets/favicon.svg');
    expect(icon.headers.get('content-type')).toBe('image/svg+xml');
    expectError(await call(server.url, '/assets/nope.js'), 404, { code: 'ERR_NOT_FOUND' });
    expectError(await call(server.url, '/assets/..%2Fpackage.json'), 404, { code: 'ERR_NOT_FOUND' });
  });

  test('bad input: 400 naming the field, before the database is touched', async () => {
    const cases: [string, string][] = [
      ['/api/jobs?status=bogus', 'status'],
      ['/api/jobs?status=DEAD', 'status'],
      ['/api/jobs?limit=0', 'limit'],
      ['/api/jobs?limit=abc', 'limit'],
      ['/api/jobs?limit=1001', 'limit'],
      ['/api/jobs?limit=-1', 'limit'],
      ['/api/jobs?limit=1.5', 'limit'],
      ['/api/jobs?limit=', 'limit'],
      ['/api/jobs?after=abc', 'after'],
      ['/api/jobs?after=0', 'after'],
      ['/api/jobs?after=-5', 'after'],
      ['/api/jobs?task=%00', 'task'],
    ];
    for (const [path, field] of cases) {
      const reply = await call(server.url, path);
      expectError(reply, 400, { code: 'ERR_VALIDATION', field });
      expect(reply.body.error.message, path).toContain(field);
    }
    const unknown = await call(server.url, '/api/jobs?state=dead');
    expectError(unknown, 400, { code: 'ERR_VALIDATION', field: 'state' });
    expect(unknown.body.error.message).toContain('state');
    const typo = await call(server.url, '/api/jobs?status=dead&limt=5');
    expectError(typo, 400, { field: 'limt' });
  });

  test('unknown routes and methods: 404 in the JSON envelope', async () => {
    for (const [method, path] of [
      ['GET', '/api/nope'],
      ['GET', '/api'],
      ['GET', '/api/jobs/1/requeue'],
      ['PUT', '/api/jobs'],
      ['DELETE', `/api/jobs/${ids.pending[0]}`],
      ['GET', '/nope'],
      ['POST', '/metrics'],
    ] as const) {
      const reply = await call(server.url, path, { method });
      expectError(reply, 404, { code: 'ERR_NOT_FOUND', field: null });
      expect(reply.body.error.message, `${method} ${path}`).toContain(path);
    }
    expect((await queue.get(ids.pending[0] as string))?.status).toBe('pending');
  });

  test('POST /api/jobs/:id/requeue: dead → 200 and pending; otherwise 409, 404 or 400', async () => {
    const dead = ids.dead[1] as string;
    const ok = await call(server.url, `/api/jobs/${dead}/requeue`, { method: 'POST' });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body).toEqual({ id: dead, requeued: true });
    expect(await queue.get(dead)).toMatchObject({ status: 'pending', attempts: 0 });

    const again = await call(server.url, `/api/jobs/${dead}/requeue`, { method: 'POST' });
    expectError(again, 409, { code: 'ERR_CONFLICT', field: null });
    expect(again.body.error.message).toContain('pending');
    expectError(await call(server.url, `/api/jobs/${ids.done[0]}/requeue`, { method: 'POST' }), 409, {
      code: 'ERR_CONFLICT',
    });
    expectError(await call(server.url, `/api/jobs/${ids.running}/requeue`, { method: 'POST' }), 409);
    expectError(await call(server.url, '/api/jobs/987654321/requeue', { method: 'POST' }), 404, {
      code: 'ERR_NOT_FOUND',
    });
    expectError(await call(server.url, '/api/jobs/abc/requeue', { method: 'POST' }), 400, {
      code: 'ERR_VALIDATION',
      field: 'id',
    });
    expect((await queue.get(ids.done[0] as string))?.status).toBe('done');
  });

  test('POST /api/jobs/:id/requeue: a dead job whose dedupe key is taken again is a 409', async () => {
    const { id } = await queue.enqueue('user.sync', { user: 7 }, { dedupeKey: 'user:7', maxAttempts: 1 });
    const [job] = await queue.claim('api-test-worker', { tasks: ['user.sync'] });
    expect(job?.id).toBe(id);
    expect(await queue.fail(job!, new Error('x'))).toBe('dead');
    const { id: holder } = await queue.enqueue('user.sync', { user: 7 }, { dedupeKey: 'user:7' });
    const reply = await call(server.url, `/api/jobs/${id}/requeue`, { method: 'POST' });
    expectError(reply, 409, { code: 'ERR_DEDUPE_CONFLICT' });
    expect((await queue.get(id))?.status).toBe('dead');
    expect(await queue.cancel(holder)).toBe(true);
  });

  test('POST /api/jobs/:id/cancel: pending → 200 and cancelled; running → requested; finished → 409', async () => {
    const pending = ids.pending[2] as string;
    const ok = await call(server.url, `/api/jobs/${pending}/cancel`, { method: 'POST' });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body).toEqual({ id: pending, cancelled: true, wasRunning: false });
    expect((await queue.get(pending))?.status).toBe('cancelled');

    expectError(await call(server.url, `/api/jobs/${pending}/cancel`, { method: 'POST' }), 409, {
      code: 'ERR_CONFLICT',
    });
    const done = await call(server.url, `/api/jobs/${ids.done[1]}/cancel`, { method: 'POST' });
    expectError(done, 409, { code: 'ERR_CONFLICT', field: null });
    expect(done.body.error.message).toContain('done');
    expectError(await call(server.url, `/api/jobs/${ids.dead[2]}/cancel`, { method: 'POST' }), 409);
    expectError(await call(server.url, '/api/jobs/987654321/cancel', { method: 'POST' }), 404, {
      code: 'ERR_NOT_FOUND',
    });
    expectError(await call(server.url, '/api/jobs/1e3/cancel', { method: 'POST' }), 400, { field: 'id' });

    const running = await call(server.url, `/api/jobs/${ids.running}/cancel`, { method: 'POST' });
    expect(running.body).toEqual({ id: ids.running, cancelled: true, wasRunning: true });
    const job = await queue.get(ids.running);
    expect(job?.status).toBe('running'); // its worker aborts it and writes `cancelled`
    expect(job?.cancelRequestedAt).not.toBeNull();
    expect((await queue.get(ids.done[1] as string))?.status).toBe('done');
  });

  test('GET /api/schedules lists them; POST pause/resume: 200, 404 when unknown, 400 when malformed', async () => {
    // SPEC §8: the dashboard's schedule list and its pause button.
    expect((await call(server.url, '/api/schedules')).body).toEqual({ schedules: [], next: null });
    await queue.schedule('nightly report', { cron: '0 3 * * *', tz: 'Europe/Berlin', task: 'report.build' });
    const list = await call(server.url, '/api/schedules');
    expect(list.status).toBe(200);
    expect(list.body.schedules).toEqual(asJson(await queue.schedules()));
    expect(list.body.schedules[0]).toMatchObject({
      name: 'nightly report',
      paused: false,
      tz: 'Europe/Berlin',
    });

    const paused = await call(server.url, '/api/schedules/nightly%20report/pause', { method: 'POST' });
    expect(paused.body).toEqual({ name: 'nightly report', paused: true });
    expect((await queue.schedules())[0]?.paused).toBe(true);
    const resumed = await call(server.url, '/api/schedules/nightly%20report/resume', { method: 'POST' });
    expect(resumed.body).toEqual({ name: 'nightly report', paused: false });
    expect((await queue.schedules())[0]?.paused).toBe(false);

    expectError(await call(server.url, '/api/schedules/nope/pause', { method: 'POST' }), 404, {
      code: 'ERR_NOT_FOUND',
    });
    expectError(
      await call(server.url, `/api/schedules/${'x'.repeat(1001)}/resume`, { method: 'POST' }),
      400,
      {
        field: 'name',
      },
    );
    await queue.unschedule('nightly report');
  });

  test('GET /api/queues: settings and live counts; POST pause/resume; 400 when malformed', async () => {
    // SPEC §8: the dashboard's queue table and its pause button.
    const before = await call(server.url, '/api/queues');
    expect(before.status).toBe(200);
    expect(before.body.queues).toEqual(asJson(await queue.queues()));
    expect(before.body.queues.find((q: { name: string }) => q.name === 'media')).toMatchObject({
      paused: false,
      concurrency: null,
      running: 1,
    });
    const paused = await call(server.url, '/api/queues/media/pause', { method: 'POST' });
    expect(paused.body).toEqual({ name: 'media', paused: true });
    expect((await queue.queues()).find((q) => q.name === 'media')?.paused).toBe(true);
    const resumed = await call(server.url, '/api/queues/media/resume', { method: 'POST' });
    expect(resumed.body).toEqual({ name: 'media', paused: false });
    expect((await queue.queues()).find((q) => q.name === 'media')?.paused).toBe(false);
    expectError(await call(server.url, `/api/queues/${'q'.repeat(1001)}/pause`, { method: 'POST' }), 400, {
      field: 'name',
    });
  });

  test('reads from another origin are allowed, mutations are not (CSRF)', async () => {
    const ops = await call(server.url, '/api/ops', { headers: { Origin: 'http://evil.example' } });
    expect(ops.status).toBe(200);
    expect(ops.headers.get('access-control-allow-origin')).toBeNull();

    const dead = await makeDead(queue, 'csrf.target', { n: 1 }, 'boom');
    const pending = (await queue.enqueue('csrf.target', { n: 2 })).id;
    for (const headers of [
      { Origin: 'http://evil.example' } as Record<string, string>,
      { Origin: 'null' },
      { Origin: `http://127.0.0.1:${server.port + 1}` },
      { 'Sec-Fetch-Site': 'cross-site' },
    ]) {
      for (const [id, action] of [
        [dead, 'requeue'],
        [pending, 'cancel'],
      ]) {
        const reply = await call(server.url, `/api/jobs/${id}/${action}`, { method: 'POST', headers });
        expectError(reply, 403, { code: 'ERR_FORBIDDEN' });
      }
    }
    expect((await queue.get(dead))?.status).toBe('dead');
    expect((await queue.get(pending))?.status).toBe('pending');

    // The dashboard's own requests: same origin.
    const same = { Origin: `http://127.0.0.1:${server.port}`, 'Sec-Fetch-Site': 'same-origin' };
    expect(
      (await call(server.url, `/api/jobs/${dead}/requeue`, { method: 'POST', headers: same })).status,
    ).toBe(200);
    expect(
      (await call(server.url, `/api/jobs/${pending}/cancel`, { method: 'POST', headers: same })).status,
    ).toBe(200);
  });
});

// ------------------------------------------------------------------ auth

describe('auth', () => {
  let queue: Queue;
  let server: AdminServer;
  const TOKEN = 's3cret';
  let made = 0;
  /** A dead job of a task of its own (makeDead claims by task). */
  const deadJob = (n: number) => makeDead(queue, `auth.dead.${++made}`, { n }, 'boom', 'auth');

  beforeAll(async () => {
    queue = db.queue();
    server = await serve({ queue, token: TOKEN });
  });

  /** Every /api route, with a target that answers 200 when authorised. */
  async function routes(): Promise<[string, string][]> {
    const deadId = await deadJob(1);
    const pending = (await queue.enqueue('auth.target', { n: 2 }, { queue: 'auth' })).id;
    await queue.schedule('auth-nightly', { cron: '0 3 * * *', task: 'auth.nightly' });
    return [
      ['GET', '/api/ops'],
      ['GET', '/api/counts'],
      ['GET', '/api/jobs?status=dead&limit=5'],
      ['GET', `/api/jobs/${deadId}`],
      ['GET', '/api/history'],
      ['POST', `/api/jobs/${deadId}/requeue`],
      ['POST', `/api/jobs/${pending}/cancel`],
      ['GET', '/api/schedules'],
      ['GET', '/api/queues'],
      ['POST', '/api/queues/auth/pause'],
      ['POST', '/api/queues/auth/resume'],
      ['POST', '/api/schedules/auth-nightly/pause'],
      ['POST', '/api/schedules/auth-nightly/resume'],
    ];
  }

  test('with a token, every /api call without it or with a wrong one is a 401', async () => {
    const list = await routes();
    const wrong: Record<string, string>[] = [
      {},
      { Authorization: '' },
      { Authorization: 'Bearer' },
      { Authorization: 'Bearer ' },
      { Authorization: 'Bearer s3cre' },
      { Authorization: 'Bearer s3cret2' },
      { Authorization: 'Bearer S3CRET' },
      { Authorization: 's3cret' },
      { Authorization: `Basic ${Buffer.from(`admin:${TOKEN}`).toString('base64')}` },
      { Authorization: 'Token s3cret' },
    ];
    for (const [method, path] of list) {
      for (const headers of wrong) {
        const reply = await call(server.url, path, { method, headers });
        expectError(reply, 401, { code: 'ERR_UNAUTHORIZED', field: null });
        expect(reply.headers.get('www-authenticate'), `${method} ${path}`).toBe('Bearer realm="skiplock"');
      }
    }
    // Refused before validation or routing: nothing leaks without the token.
    expectError(await call(server.url, '/api/jobs/abc'), 401);
    expectError(await call(server.url, '/api/jobs?bogus=1'), 401);
    expectError(await call(server.url, '/api/nope'), 401);
    const [dead, pending] = [list[3]?.[1].split('/')[3], list[6]?.[1].split('/')[3]] as [string, string];
    expect((await queue.get(dead))?.status).toBe('dead');
    expect((await queue.get(pending))?.status).toBe('pending');
  });

  test('with the right token every /api route answers 200', async () => {
    for (const header of [`Bearer ${TOKEN}`, `bearer ${TOKEN}`]) {
      for (const [method, path] of await routes()) {
        const reply = await call(server.url, path, { method, headers: { Authorization: header } });
        expect(reply.status, `${method} ${path}: ${reply.text}`).toBe(200);
      }
    }
    // The token does not excuse a cross-origin mutation.
    const dead = await deadJob(3);
    const evil = await call(server.url, `/api/jobs/${dead}/requeue`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${TOKEN}`, Origin: 'http://evil.example' },
    });
    expectError(evil, 403, { code: 'ERR_FORBIDDEN' });
    expect((await queue.get(dead))?.status).toBe('dead');
  });

  test('the page tells the dashboard that a token is needed; the page and assets need none', async () => {
    const page = await call(server.url, '/');
    expect(page.status).toBe(200);
    expect(page.text).toContain('data-auth-required="true"');
    expect((await call(server.url, '/assets/app.js')).status).toBe(200);
  });

  test('with a token, /metrics needs it too (a Prometheus scrape sends it as a bearer token)', async () => {
    // Caught: /metrics answered 200 without the token (it was registered outside /api).
    const wrong: Record<string, string>[] = [{}, { Authorization: 'Bearer wrong' }, { Authorization: TOKEN }];
    for (const headers of wrong) {
      const reply = await call(server.url, '/metrics', { headers });
      expectError(reply, 401, { code: 'ERR_UNAUTHORIZED', field: null });
      expect(reply.headers.get('www-authenticate')).toBe('Bearer realm="skiplock"');
      expect(reply.text).not.toContain('skiplock_jobs');
    }
    const scrape = await call(server.url, '/metrics', { headers: { Authorization: `Bearer ${TOKEN}` } });
    expect(scrape.status).toBe(200);
    expect(parseExposition(scrape.text).help.has('skiplock_jobs')).toBe(true);
    // Without a token, /metrics stays open (loopback bind, or a network you trust).
    const open = await serve({ queue });
    expect((await call(open.url, '/metrics')).status).toBe(200);
  });

  test('without a token, a loopback server accepts mutating calls', async () => {
    const open = await serve({ queue });
    const dead = await deadJob(4);
    const pending = (await queue.enqueue('auth.target', { n: 5 }, { queue: 'auth' })).id;
    expect((await call(open.url, `/api/jobs/${dead}/requeue`, { method: 'POST' })).status).toBe(200);
    expect((await call(open.url, `/api/jobs/${pending}/cancel`, { method: 'POST' })).status).toBe(200);
    expect((await queue.get(dead))?.status).toBe('pending');
    expect((await queue.get(pending))?.status).toBe('cancelled');
  });

  test('isLoopback knows loopback addresses', () => {
    for (const host of [
      '127.0.0.1',
      '127.1.2.3',
      '::1',
      '[::1]',
      'localhost',
      'LOCALHOST',
      '::ffff:127.0.0.1',
    ])
      expect(isLoopback(host), host).toBe(true);
    for (const host of [
      '0.0.0.0',
      '::',
      '192.0.2.2',
      '10.0.0.1',
      'example.com',
      '128.0.0.1',
      '127.0.0.1.nip.io',
    ])
      expect(isLoopback(host), host).toBe(false);
  });

  test('a server bound to all interfaces without a token refuses mutating calls (app.request)', async () => {
    const dead = await deadJob(6);
    for (const host of ['0.0.0.0', '::']) {
      const { app, history } = adminApp({ queue, host, token: null });
      history.stop();
      const read = await app.request(`/api/jobs/${dead}`);
      expect(read.status).toBe(200);
      for (const action of ['requeue', 'cancel']) {
        const response = await app.request(`/api/jobs/${dead}/${action}`, { method: 'POST' });
        expect(response.status, `${host} ${action}`).toBe(403);
        const body = await response.json();
        expect(body).toEqual({
          error: { code: 'ERR_FORBIDDEN', message: expect.stringContaining('SKIPLOCK_ADMIN_TOKEN') },
        });
      }
      // With a token, the token is what counts.
      const { app: guarded } = adminApp({ queue, host, token: TOKEN });
      const refused = await guarded.request(`/api/jobs/${dead}/requeue`, { method: 'POST' });
      expect(refused.status).toBe(401);
    }
    expect((await queue.get(dead))?.status).toBe('dead');
    // Loopback hosts given as names or IPv6 accept.
    const { app } = adminApp({ queue, host: '::1', token: null });
    expect((await app.request(`/api/jobs/${dead}/requeue`, { method: 'POST' })).status).toBe(200);
  });

  test('a real server on a non-loopback address without a token refuses mutating calls with 403', async (context) => {
    const address = Object.values(os.networkInterfaces())
      .flat()
      .find((info) => info && info.family === 'IPv4' && !info.internal)?.address;
    if (!address) {
      context.skip('this machine has no non-loopback IPv4 address to bind to');
      return;
    }
    const open = await serve({ queue, host: address });
    expect(open.url).toBe(`http://${address}:${open.port}/`);
    const dead = await deadJob(7);
    const pending = (await queue.enqueue('auth.target', { n: 8 }, { queue: 'auth' })).id;
    expect((await call(open.url, '/api/ops')).status).toBe(200);
    expect((await call(open.url, `/api/jobs/${dead}`)).body.status).toBe('dead');
    for (const [id, action] of [
      [dead, 'requeue'],
      [pending, 'cancel'],
    ]) {
      const reply = await call(open.url, `/api/jobs/${id}/${action}`, { method: 'POST' });
      expectError(reply, 403, { code: 'ERR_FORBIDDEN', field: null });
      expect(reply.body.error.message).toContain('SKIPLOCK_ADMIN_TOKEN');
    }
    expect((await queue.get(dead))?.status).toBe('dead');
    expect((await queue.get(pending))?.status).toBe('pending');

    // With a token on the same address, the token unlocks them.
    const guarded = await serve({ queue, host: address, token: TOKEN });
    const auth = { Authorization: `Bearer ${TOKEN}` };
    expect(
      (await call(guarded.url, `/api/jobs/${dead}/requeue`, { method: 'POST', headers: auth })).status,
    ).toBe(200);
    expect(
      (await call(guarded.url, `/api/jobs/${pending}/cancel`, { method: 'POST', headers: auth })).status,
    ).toBe(200);
  });
});

// ------------------------------------------------------------------ DNS rebinding

/**
 * One request through node:http with the Host header (and request target) we choose: Node's
 * fetch ignores a Host header (TECH-NOTES). Always connects to 127.0.0.1:`port`.
 */
function rawCall(
  port: number,
  path: string,
  init: { host: string; method?: string; headers?: Record<string, string> },
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: init.method ?? 'GET',
        headers: { ...init.headers, Host: init.host },
        setHost: false,
        agent: false,
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          text += chunk;
        });
        response.on('end', () => {
          let body: unknown = text;
          try {
            body = JSON.parse(text);
          } catch {
            // not JSON
          }
          const headers = new Headers();
          for (const [name, value] of Object.entries(response.headers)) {
            if (typeof value === 'string') headers.set(name, value);
          }
          resolve({ status: response.statusCode ?? 0, headers, text, body });
        });
      },
    );
    request.once('error', reject);
    request.end();
  });
}

/** A Queue whose method calls are recorded (to prove a refused request read nothing). */
function recorded(queue: Queue): { queue: Queue; calls: string[] } {
  const calls: string[] = [];
  const proxy = new Proxy(queue, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        calls.push(String(property));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { queue: proxy, calls };
}

describe('DNS rebinding: a loopback-bound server answers only loopback Host names', () => {
  // Caught on the code before the fix: every "refused" request below was answered (200 with the
  // jobs, the page and the metrics; the POST cancelled the job), since nothing looked at Host.
  let queue: Queue;
  let server: AdminServer;
  let calls: string[];
  let pending: string;

  beforeAll(async () => {
    queue = db.queue();
    pending = (await queue.enqueue('rebind.target', { secret: 'payload' }, { queue: 'rebind' })).id;
    const spy = recorded(queue);
    calls = spy.calls;
    server = await serve({ queue: spy.queue, sampleIntervalMs: 3_600_000 });
    // The sampler's first read, before any test counts calls.
    for (const deadline = Date.now() + 10_000; !calls.includes('counts') && Date.now() < deadline; )
      await new Promise((resolve) => setTimeout(resolve, 10));
  });

  test('Host: evil.example is refused on every route with 403, and nothing is read', async () => {
    calls.length = 0;
    const port = server.port;
    for (const host of [
      `evil.example:${port}`,
      'evil.example',
      `EVIL.example:${port}`,
      `localhost.:${port}`, // a DNS name, resolved by the attacker's resolver
      `127.0.0.1.nip.io:${port}`,
      `localhost.evil.example:${port}`,
      `[::2]:${port}`,
      `0.0.0.0:${port}`,
      `127.0.0.256:${port}`,
    ]) {
      for (const [method, path] of [
        ['GET', '/api/jobs'],
        ['GET', `/api/jobs/${pending}`],
        ['GET', '/api/counts'],
        ['GET', '/'],
        ['GET', '/assets/app.js'],
        ['GET', '/metrics'],
        ['GET', '/no/such/route'],
        ['POST', `/api/jobs/${pending}/cancel`],
      ] as const) {
        const reply = await rawCall(port, path, { host, method });
        expectError(reply, 403, { code: 'ERR_FORBIDDEN', field: null });
        expect(reply.body.error.message, `${host} ${method} ${path}`).toContain('loopback');
        expect(reply.text).not.toContain('payload');
      }
    }
    // An absolute-form request target names the host too: it must be loopback as well.
    const absolute = await rawCall(port, `http://evil.example:${port}/api/jobs`, {
      host: `localhost:${port}`,
    });
    expectError(absolute, 403, { code: 'ERR_FORBIDDEN' });
    expect(calls).toEqual([]);
    expect((await queue.get(pending))?.status).toBe('pending');
  });

  test('loopback names work, with or without the port, in any case', async () => {
    const port = server.port;
    for (const host of [
      `localhost:${port}`,
      `127.0.0.1:${port}`,
      `[::1]:${port}`,
      `LOCALHOST:${port}`,
      `127.0.0.2:${port}`,
      'localhost',
      '127.0.0.1',
      '[::1]',
    ]) {
      const list = await rawCall(port, '/api/jobs?queue=rebind', { host });
      expect(list.status, `${host}: ${list.text}`).toBe(200);
      expect(list.body.jobs.map((j: Job) => j.id)).toEqual([pending]);
      expect((await rawCall(port, '/', { host })).status, host).toBe(200);
      expect((await rawCall(port, '/metrics', { host })).status, host).toBe(200);
    }
    const cancel = await rawCall(port, `/api/jobs/${pending}/cancel`, {
      host: `localhost:${port}`,
      method: 'POST',
    });
    expect(cancel.status, cancel.text).toBe(200);
    expect(cancel.body).toEqual({ id: pending, cancelled: true, wasRunning: false });
  });

  test('the token does not open a loopback server to other Host names', async () => {
    const guarded = await serve({ queue, token: 's3cret' });
    const auth = { Authorization: 'Bearer s3cret' };
    const refused = await rawCall(guarded.port, '/api/ops', { host: 'evil.example', headers: auth });
    expectError(refused, 403, { code: 'ERR_FORBIDDEN' });
    const fine = await rawCall(guarded.port, '/api/ops', {
      host: `localhost:${guarded.port}`,
      headers: auth,
    });
    expect(fine.status).toBe(200);
  });

  test('a server bound to another address does not check Host (it relies on the token)', async () => {
    for (const host of ['0.0.0.0', '::']) {
      const { app, history } = adminApp({ queue, host, token: 's3cret' });
      history.stop();
      const headers = { Host: 'dashboard.example.com', Authorization: 'Bearer s3cret' };
      expect((await app.request('/api/ops', { headers })).status, host).toBe(200);
      expect((await app.request('/metrics', { headers })).status, host).toBe(200);
      const { Authorization: _, ...anonymous } = headers;
      expect((await app.request('/api/ops', { headers: anonymous })).status, host).toBe(401);
    }
    // Bound to loopback, the same request is refused before the token is looked at.
    const { app, history } = adminApp({ queue, host: '127.0.0.1', token: 's3cret' });
    history.stop();
    const response = await app.request('/api/ops', {
      headers: { Host: 'dashboard.example.com', Authorization: 'Bearer s3cret' },
    });
    expect(response.status).toBe(403);
  });

  test('isLoopbackHost reads Host header values', () => {
    for (const value of ['localhost', 'localhost:1', '127.0.0.1:4000', '[::1]', '[::1]:80', '127.9.9.9'])
      expect(isLoopbackHost(value), value).toBe(true);
    for (const value of [
      undefined,
      '',
      '::1', // IPv6 without brackets is not a Host value
      '[::1',
      'localhost:',
      'localhost:abc',
      'localhost:4000:4000',
      'evil.example',
      'localhost.',
      'localhostx',
      '127.0.0.1.evil.example',
      '127.0.0.999',
      '[::1]evil',
    ])
      expect(isLoopbackHost(value), String(value)).toBe(false);
  });
});

// ------------------------------------------------------------------ names from the database

describe('names from the database are data: queues __proto__, constructor, toString', () => {
  // Caught on the code before the fix: /api/counts assigned the `pending` count of queue
  // `__proto__` to Object.prototype (`({}).pending` became 1 in the server process), and its
  // answer lost that queue.
  const schema = `${TEST_SCHEMA}_names`;
  const NAMES = ['__proto__', 'constructor', 'toString', 'hasOwnProperty'];
  let queue: Queue;
  let server: AdminServer;

  beforeAll(async () => {
    queue = db.queue({ schema });
    await queue.migrate();
    for (const [i, name] of NAMES.entries()) {
      for (let n = 0; n <= i; n++) await queue.enqueue(name, { n }, { queue: name });
    }
    await queue.enqueue('plain', {}, { queue: 'default' });
    server = await serve({ queue });
  });

  /**
   * What a request leaked onto Object.prototype, removed at once: left there, `pending` and
   * `running` on every object make vitest report the test as skipped instead of failed.
   */
  function takeLeaks(): Record<string, unknown> {
    const prototype = Object.prototype as Record<string, unknown>;
    const leaks = Object.fromEntries(
      ['waiting', 'pending', 'running'].filter((key) => key in prototype).map((key) => [key, prototype[key]]),
    );
    for (const key of Object.keys(leaks)) delete prototype[key];
    return leaks;
  }

  test('/api/counts lists them as queues and pollutes nothing; later requests still work', async () => {
    const counts = await call(server.url, '/api/counts');
    expect(takeLeaks()).toEqual({});
    expect(counts.status, counts.text).toBe(200);
    expect(Object.getPrototypeOf(counts.body.queues)).toBe(Object.prototype); // JSON.parse: own keys
    expect(Object.keys(counts.body.queues).sort()).toEqual([...NAMES, 'default'].sort());
    NAMES.forEach((name, i) => {
      expect(Object.getOwnPropertyDescriptor(counts.body.queues, name)?.value, name).toEqual({
        waiting: 0,
        pending: i + 1,
        running: 0,
      });
    });
    expect(counts.text).toContain('"__proto__":{"waiting":0,"pending":1,"running":0}');

    expect((await call(server.url, '/api/ops')).body).toMatchObject({ pending: 11 });
    for (const name of NAMES) {
      const byQueue = await call(server.url, `/api/jobs?queue=${encodeURIComponent(name)}`);
      expect(byQueue.status, byQueue.text).toBe(200);
      expect(byQueue.body.jobs.every((j: Job) => j.queue === name && j.task === name)).toBe(true);
      const byTask = await call(server.url, `/api/jobs?task=${encodeURIComponent(name)}&status=pending`);
      expect(byTask.body.jobs).toHaveLength(NAMES.indexOf(name) + 1);
    }
    expect((await call(server.url, '/api/jobs')).body.jobs).toHaveLength(11);
    const metrics = parseExposition((await call(server.url, '/metrics')).text);
    expect(sampleValue(metrics, 'skiplock_jobs', { status: 'pending', queue: '__proto__' })).toBe(1);
    expect(sampleValue(metrics, 'skiplock_jobs', { status: 'pending', queue: 'hasOwnProperty' })).toBe(4);
    const again = await call(server.url, '/api/counts');
    expect(takeLeaks()).toEqual({});
    expect(again.body.queues.default).toEqual({ waiting: 0, pending: 1, running: 0 });
    expect(({} as Record<string, unknown>).pending).toBeUndefined();
  });

  test('query parameters named like prototype members are unknown filters, not ignored', async () => {
    for (const key of ['__proto__', 'constructor', 'toString']) {
      const reply = await call(server.url, `/api/jobs?${key}=1`);
      expectError(reply, 400, { code: 'ERR_VALIDATION', field: key });
    }
  });
});

// ------------------------------------------------------------------ flows (SPEC §10)

describe("flows: GET /api/flows/:id, a job's dependencies, and waiting in every count", () => {
  const schema = `${TEST_SCHEMA}_flows`;
  let queue: Queue;
  let server: AdminServer;
  let flowId: string;
  let refs: Record<string, string>;
  let plainId: string;
  let laterId: string;
  const PARTS = 11;

  beforeAll(async () => {
    queue = db.queue({ schema });
    await queue.migrate();
    // A plain job the flow's `ext` node depends on by id (an edge out of the flow).
    plainId = (await queue.enqueue('flow.plain', {}, { queue: 'flows' })).id;
    ({ flowId, jobs: refs } = await queue.enqueueFlow([
      { ref: 'root', task: 'flow.fetch', payload: { url: 'https://example.com/<b>' }, queue: 'flows' },
      // Enough parts that their ids cross a digit boundary: ordered as text, 10 came before 9.
      ...Array.from({ length: PARTS }, (_, i) => ({
        ref: `part-${i}`,
        task: 'flow.part',
        payload: { i },
        queue: 'flows',
        dependsOn: ['root'],
      })),
      { ref: 'merge', task: 'flow.merge', queue: 'flows', dependsOn: ['part-0', 'part-1'] },
      { ref: 'ext', task: 'flow.ext', queue: 'flows', dependsOn: [plainId] },
    ]));
    // A job added later that depends on the root by id: it joins the flow, without a ref.
    laterId = (await queue.enqueue('flow.later', {}, { queue: 'flows', dependsOn: [refs.root as string] }))
      .id;
    server = await serve({ queue });
  });

  const byNumber = (ids: string[]) => [...ids].sort((a, b) => Number(a) - Number(b));
  const parts = () => Array.from({ length: PARTS }, (_, i) => refs[`part-${i}`] as string);

  test('GET /api/flows/:id is the flow graph: its jobs oldest first and every edge', async () => {
    const reply = await call(server.url, `/api/flows/${flowId}`);
    expect(reply.status, reply.text).toBe(200);
    expect(reply.headers.get('content-type')).toMatch(/^application\/json/);
    expect(reply.body).toEqual(asJson(await queue.flowGraph(flowId)));
    expect(Object.keys(reply.body)).toEqual(['flowId', 'jobs', 'edges', 'truncated']);
    expect(reply.body.truncated).toBe(false);
    expect(reply.body.flowId).toBe(flowId);
    const shown = (reply.body.jobs as Job[]).map((j) => [j.flowRef, j.status, j.flowId]);
    // ids are drawn in topological order: the nodes without a dependency in the flow first
    expect(shown).toEqual([
      ['root', 'pending', flowId],
      ['ext', 'waiting', flowId],
      ...Array.from({ length: PARTS }, (_, i) => [`part-${i}`, 'waiting', flowId]),
      ['merge', 'waiting', flowId],
      [null, 'waiting', flowId],
    ]);
    expect(reply.body.jobs[0].payload).toEqual({ url: 'https://example.com/<b>' });
    const edges = reply.body.edges as { job: string; dependsOn: string }[];
    expect(edges).toHaveLength(PARTS + 2 + 1 + 1);
    expect(edges).toEqual(
      expect.arrayContaining([
        { job: refs['part-3'], dependsOn: refs.root },
        { job: refs.merge, dependsOn: refs['part-0'] },
        { job: refs.merge, dependsOn: refs['part-1'] },
        { job: refs.ext, dependsOn: plainId }, // a dependency outside the flow
        { job: laterId, dependsOn: refs.root },
      ]),
    );
    // Any case of the UUID finds it; the answer spells it as enqueueFlow did.
    const upper = await call(server.url, `/api/flows/${flowId.toUpperCase()}`);
    expect(upper.status).toBe(200);
    expect(upper.body.flowId).toBe(flowId);
  });

  test('GET /api/flows/:id: 404 for a flow with no job, 400 naming the field for a malformed id', async () => {
    expectError(await call(server.url, `/api/flows/${crypto.randomUUID()}`), 404, {
      code: 'ERR_NOT_FOUND',
      field: null,
    });
    for (const bad of [
      'abc',
      '42',
      flowId.replaceAll('-', ''),
      `${flowId}0`,
      `${flowId.slice(0, -1)}g`,
      '%20',
    ]) {
      expectError(await call(server.url, `/api/flows/${bad}`), 400, { code: 'ERR_VALIDATION', field: 'id' });
    }
  });

  test("GET /api/jobs/:id carries the ids of the job's dependencies and dependents, ascending", async () => {
    const root = await call(server.url, `/api/jobs/${refs.root}`);
    expect(root.status).toBe(200);
    expect(root.body).toMatchObject({ id: refs.root, flowId, flowRef: 'root', status: 'pending' });
    expect(root.body.dependsOn).toEqual([]);
    expect(root.body.dependents).toEqual(byNumber([...parts(), laterId]));
    expect(root.body.dependents).toHaveLength(PARTS + 1);
    expect(root.body).toMatchObject({
      dependsOnCount: 0,
      dependsOnCountExact: true,
      dependentsCount: PARTS + 1,
      dependentsCountExact: true,
    });

    const merge = await call(server.url, `/api/jobs/${refs.merge}`);
    expect(merge.body).toMatchObject({ flowRef: 'merge', status: 'waiting' });
    expect(merge.body.dependsOn).toEqual(byNumber([refs['part-0'] as string, refs['part-1'] as string]));
    expect(merge.body.dependents).toEqual([]);

    const plain = await call(server.url, `/api/jobs/${plainId}`);
    expect(plain.body).toMatchObject({ flowId: null, flowRef: null, dependsOn: [], dependents: [refs.ext] });
    expect(await queue.dependenciesOf(refs['part-0'] as string)).toEqual({
      dependsOn: [refs.root],
      dependents: [refs.merge],
    });
    expect(await queue.dependenciesOf('999999999')).toEqual({ dependsOn: [], dependents: [] });
  });

  test('waiting jobs are counted by /api/ops, /api/counts (by queue), /api/queues, /api/history and /metrics', async () => {
    const waiting = PARTS + 3; // the parts, merge, ext and the later job
    expect((await call(server.url, '/api/ops')).body).toMatchObject({ waiting, pending: 2, running: 0 });
    const counts = await call(server.url, '/api/counts');
    expect(counts.body).toMatchObject({ waiting, pending: 2 });
    expect(counts.body.queues).toEqual({ flows: { waiting, pending: 2, running: 0 } });
    const queues = await call(server.url, '/api/queues');
    expect(queues.body.queues).toEqual([
      expect.objectContaining({ name: 'flows', waiting, pending: 2, running: 0 }),
    ]);
    const list = await call(server.url, '/api/jobs?status=waiting&limit=100');
    expect(list.status, list.text).toBe(200);
    expect((list.body.jobs as Job[]).map((j) => j.id)).toEqual(
      byNumber([...parts(), refs.merge as string, refs.ext as string, laterId]).reverse(),
    );
    await expect
      .poll(async () => (await call(server.url, '/api/history')).body.depth.at(-1), { timeout: 10_000 })
      .toMatchObject({ waiting, pending: 2, running: 0 });

    const metrics = parseExposition((await call(server.url, '/metrics')).text);
    expect(metrics.help.get('skiplock_jobs')).toMatch(/waiting, pending and running also by queue/);
    expect(sampleValue(metrics, 'skiplock_jobs', { status: 'waiting', queue: 'flows' })).toBe(waiting);
    expect(sampleValue(metrics, 'skiplock_jobs', { status: 'pending', queue: 'flows' })).toBe(2);
  });
});

describe('GET /api/jobs/:id is bounded however many dependents a job has (SPEC §5)', () => {
  const schema = `${TEST_SCHEMA}_fanout`;
  const LEAVES = 10_001; // one more than the count goes: it stops at 10,000
  const SINK_DEPS = 150; // more dependencies than the 100 ids shown, fewer than the count's bound
  let queue: Queue;
  let server: AdminServer;
  let refs: Record<string, string>;
  const leaf = (i: number) => refs[`leaf-${i}`] as string;

  beforeAll(async () => {
    queue = db.queue({ schema });
    await queue.migrate();
    ({ jobs: refs } = await queue.enqueueFlow([
      { ref: 'hub', task: 'fan.hub', payload: {} },
      ...Array.from({ length: LEAVES }, (_, i) => ({
        ref: `leaf-${i}`,
        task: 'fan.leaf',
        payload: { i },
        dependsOn: ['hub'],
      })),
      {
        ref: 'sink',
        task: 'fan.sink',
        payload: {},
        dependsOn: Array.from({ length: SINK_DEPS }, (_, i) => `leaf-${i}`),
      },
    ]));
    server = await serve({ queue });
  });

  test('the first 100 ids on each side, ascending, and how many there are', async () => {
    const hub = await call(server.url, `/api/jobs/${refs.hub}`);
    expect(hub.status, hub.text.slice(0, 300)).toBe(200);
    // ids are drawn in topological order, ascending with the refs' order here
    expect(hub.body.dependents).toEqual(Array.from({ length: 100 }, (_, i) => leaf(i)));
    expect(hub.body).toMatchObject({
      id: refs.hub,
      dependsOn: [],
      dependsOnCount: 0,
      dependsOnCountExact: true,
      dependentsCount: 10_000,
      dependentsCountExact: false, // 10,001 dependents: more than the count looks at
    });
    // Every id of 10,001 dependents would be ~120 kB; bounded, the reply stays small.
    expect(hub.text.length).toBeLessThan(5_000);

    const sink = await call(server.url, `/api/jobs/${refs.sink}`);
    expect(sink.body.dependsOn).toEqual(Array.from({ length: 100 }, (_, i) => leaf(i)));
    expect(sink.body).toMatchObject({
      dependsOnCount: SINK_DEPS,
      dependsOnCountExact: true,
      dependents: [],
      dependentsCount: 0,
      dependentsCountExact: true,
    });

    const one = await call(server.url, `/api/jobs/${leaf(0)}`);
    expect(one.body).toMatchObject({
      dependsOn: [refs.hub],
      dependsOnCount: 1,
      dependents: [refs.sink],
      dependentsCount: 1,
    });
  });

  test('queue.dependencySummary: limit, exact counts, an unknown id, bad options', async () => {
    const sink = await queue.dependencySummary(refs.sink as string, { limit: 3 });
    expect(sink).toEqual({
      dependsOn: [leaf(0), leaf(1), leaf(2)],
      dependsOnCount: SINK_DEPS,
      dependsOnCountExact: true,
      dependents: [],
      dependentsCount: 0,
      dependentsCountExact: true,
    });
    const all = await queue.dependencySummary(refs.sink as string, { limit: 10_000 });
    expect(all.dependsOn).toEqual((await queue.dependenciesOf(refs.sink as string)).dependsOn);
    expect(await queue.dependencySummary('999999999')).toEqual({
      dependsOn: [],
      dependsOnCount: 0,
      dependsOnCountExact: true,
      dependents: [],
      dependentsCount: 0,
      dependentsCountExact: true,
    });
    for (const [options, field] of [
      [{ limit: 0 }, 'limit'],
      [{ limit: 10_001 }, 'limit'],
      [{ limit: 1.5 }, 'limit'],
      [{ max: 5 }, 'options.max'],
    ] as const) {
      await expect(queue.dependencySummary(refs.hub as string, options as never)).rejects.toMatchObject({
        code: 'ERR_VALIDATION',
        field,
      });
    }
    await expect(queue.dependencySummary('abc')).rejects.toMatchObject({ field: 'id' });
  });
});

// ------------------------------------------------------------------ metrics

describe('GET /metrics', () => {
  const schema = `${TEST_SCHEMA}_metrics`;
  const jobs = jobsTable(schema);

  /** `count` rows in `status`; `columns` are SQL expressions that override the defaults. */
  async function seed(status: string, count: number, columns: Record<string, string> = {}) {
    const all: Record<string, string> = { task: "'seeded'", queue: "'default'", status: '$1', ...columns };
    await db.sql(
      `INSERT INTO ${jobs} (${Object.keys(all).join(', ')})
       SELECT ${Object.values(all).join(', ')} FROM generate_series(1, $2)`,
      [status, count],
    );
  }

  test('every line parses; gauges carry the values of the seeded data; worker outcomes appear', async () => {
    const queue = db.queue({ schema });
    await queue.migrate();
    await seed('done', 7);
    await seed('dead', 2); // in the last hour
    await seed('dead', 3, { updated_at: "now() - interval '2 hours'" });
    await seed('dead', 1, {
      last_error: "'JobDeadlineExceeded: the job ran longer than its timeout of 50 ms'",
    });
    await seed('pending', 1, {
      last_error: "'JobDeadlineExceeded: the job ran longer than its timeout of 50 ms'",
    });
    await seed('cancelled', 4);
    await seed('pending', 2, { run_after: "now() - interval '90 seconds'" });
    await seed('pending', 3, { queue: "'media'" });
    await seed('pending', 2, { queue: "'media'", run_after: "now() + interval '1 hour'" });
    await seed('running', 2, {
      queue: "'media'",
      worker_id: "'w1'",
      lease_until: "now() + interval '1 minute'",
      run_started_at: 'now()',
    });
    await seed('running', 1, {
      worker_id: "'w2'",
      lease_until: "now() - interval '1 second'", // expired lease
      run_started_at: "now() - interval '3 minutes'",
    });
    await seed('running', 1, {
      queue: "'media'",
      worker_id: "'w3'",
      lease_until: "now() + interval '1 minute'",
      run_started_at: "now() - interval '20 minutes'", // past the 10 min stuck threshold
    });

    const worker = db.worker({
      queue,
      queues: ['work'],
      tasks: {
        'metrics.ok': async () => ({ ok: true }),
        'metrics.fail': async () => {
          throw new Error('always fails');
        },
      },
      concurrency: 4,
      // Long enough that a retried job is not run again during the test.
      backoff: { baseMs: 600_000, capMs: 600_000 },
    });
    const server = await serve({ queue, workers: [worker] });

    const reply = await call(server.url, '/metrics');
    expect(reply.status).toBe(200);
    expect(reply.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    const metrics = parseExposition(reply.text);
    for (const name of [
      'skiplock_jobs',
      'skiplock_oldest_pending_seconds',
      'skiplock_dead_last_hour',
      'skiplock_stuck_running',
      'skiplock_deadline_exceeded_last_hour',
      'skiplock_worker_jobs_total',
      'skiplock_worker_job_duration_seconds',
    ]) {
      expect(metrics.help.get(name), name).toBeTruthy();
    }
    expect(metrics.type.get('skiplock_jobs')).toBe('gauge');
    expect(metrics.type.get('skiplock_worker_jobs_total')).toBe('counter');
    expect(metrics.type.get('skiplock_worker_job_duration_seconds')).toBe('histogram');

    const jobsGauge = metrics.samples
      .filter((s) => s.name === 'skiplock_jobs')
      .map((s) => `${s.labels.status}/${s.labels.queue}=${s.value}`)
      .sort();
    expect(jobsGauge).toEqual(
      [
        'pending/default=3',
        'pending/media=5',
        'running/default=1',
        'running/media=3',
        'done/=7',
        'dead/=6',
        'cancelled/=4',
      ].sort(),
    );
    const oldest = sampleValue(metrics, 'skiplock_oldest_pending_seconds');
    expect(oldest).toBeGreaterThanOrEqual(89);
    expect(oldest).toBeLessThan(150);
    expect(sampleValue(metrics, 'skiplock_dead_last_hour')).toBe(3);
    expect(sampleValue(metrics, 'skiplock_stuck_running')).toBe(2);
    expect(sampleValue(metrics, 'skiplock_deadline_exceeded_last_hour')).toBe(2);
    // No worker outcome yet: the counter families exist without samples.
    expect(metrics.samples.filter((s) => s.name.startsWith('skiplock_worker_jobs_total'))).toEqual([]);

    // The worker runs jobs: outcome counters and duration histograms appear.
    const outcomes: string[] = [];
    worker.on('job:done', ({ job }) => outcomes.push(`${job.task}:done`));
    worker.on('job:retry', ({ job }) => outcomes.push(`${job.task}:retry`));
    worker.on('job:dead', ({ job }) => outcomes.push(`${job.task}:dead`));
    await queue.enqueueMany([
      ...Array.from({ length: 5 }, (_, i) => ({ task: 'metrics.ok', payload: i, queue: 'work' })),
      { task: 'metrics.fail', payload: 'dies', queue: 'work', maxAttempts: 1 },
      { task: 'metrics.fail', payload: 'retries', queue: 'work', maxAttempts: 3 },
    ]);
    await worker.start();
    for (const deadline = Date.now() + 20_000; outcomes.length < 7; ) {
      if (Date.now() > deadline) throw new Error(`worker outcomes so far: ${outcomes.join(', ')}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(outcomes.sort()).toEqual(
      ['metrics.fail:dead', 'metrics.fail:retry', ...Array(5).fill('metrics.ok:done')].sort(),
    );
    const after = parseExposition((await call(server.url, '/metrics')).text);
    expect(sampleValue(after, 'skiplock_worker_jobs_total', { task: 'metrics.ok', outcome: 'done' })).toBe(5);
    expect(sampleValue(after, 'skiplock_worker_jobs_total', { task: 'metrics.fail', outcome: 'retry' })).toBe(
      1,
    );
    expect(sampleValue(after, 'skiplock_worker_jobs_total', { task: 'metrics.fail', outcome: 'dead' })).toBe(
      1,
    );
    expect(
      sampleValue(after, 'skiplock_worker_job_duration_seconds_count', {
        task: 'metrics.fail',
        outcome: 'dead',
      }),
    ).toBe(1);
    const okLabels = { task: 'metrics.ok', outcome: 'done' };
    const buckets = after.samples.filter(
      (s) =>
        s.name === 'skiplock_worker_job_duration_seconds_bucket' &&
        s.labels.task === 'metrics.ok' &&
        s.labels.outcome === 'done',
    );
    expect(buckets.length).toBeGreaterThan(5);
    const inf = buckets.find((b) => b.labels.le === '+Inf');
    expect(inf?.value).toBe(5);
    const values = buckets.map((b) => b.value);
    expect(values).toEqual([...values].sort((a, b) => a - b)); // cumulative
    expect(sampleValue(after, 'skiplock_worker_job_duration_seconds_count', okLabels)).toBe(5);
    const sum = sampleValue(after, 'skiplock_worker_job_duration_seconds_sum', okLabels);
    expect(sum).toBeGreaterThanOrEqual(0);
    expect(sum).toBeLessThan(10);
    await worker.stop();
  });
});

// ------------------------------------------------------------------ cost on a large table

/** Rows read by the scan nodes of an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) plan, and its buffers. */
function planCost(plan: unknown): { rowsRead: number; buffers: number; scans: string[] } {
  let rowsRead = 0;
  const scans: string[] = [];
  const visit = (node: Record<string, unknown>) => {
    const type = String(node['Node Type']);
    if (type.includes('Scan') && !/CTE|Subquery|Function|Result/.test(type)) {
      const loops = Number(node['Actual Loops'] ?? 1);
      const read = (Number(node['Actual Rows'] ?? 0) + Number(node['Rows Removed by Filter'] ?? 0)) * loops;
      rowsRead += Math.round(read);
      if (loops > 0)
        scans.push(
          `${type}${node['Index Name'] ? ` using ${node['Index Name']}` : ''} on ${node['Relation Name']}`,
        );
    }
    for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) visit(child);
  };
  const root = (plan as { Plan: Record<string, unknown> }[])[0]?.Plan as Record<string, unknown>;
  visit(root);
  const buffers = Number(root['Shared Hit Blocks'] ?? 0) + Number(root['Shared Read Blocks'] ?? 0);
  return { rowsRead, buffers, scans };
}

describe('on a large table', () => {
  const schema = `${TEST_SCHEMA}_large`;
  const jobs = jobsTable(schema);
  let queue: Queue;

  beforeAll(async () => {
    queue = db.queue({ schema });
    await queue.migrate();
    // Old dead jobs first (the lowest ids: a status filter must not walk the whole table to them),
    // then three days of finished jobs (a few thousand in the last hour), then live ones.
    await db.sql(
      `INSERT INTO ${jobs} (task, status, last_error, attempts, updated_at)
       SELECT 'report.generate', 'dead', 'Error: upstream 503', 3, now() - i * interval '1 minute'
       FROM generate_series(1, 40) AS i`,
    );
    await db.sql(
      `INSERT INTO ${jobs} (task, queue, status, payload, result, attempts, created_at, updated_at)
       SELECT 'email.send', CASE WHEN i % 3 = 0 THEN 'media' ELSE 'default' END, 'done',
              jsonb_build_object('to', 'user' || i || '@example.com'), '{"ok":true}', 1,
              now() - i * interval '1.3 seconds' - interval '1 second', now() - i * interval '1.3 seconds'
       FROM generate_series(1, 200000) AS i`,
    );
    for (let i = 0; i < 25; i++)
      await queue.enqueue('email.send', { i }, { queue: i % 2 ? 'media' : 'default' });
    await db.sql(`ANALYZE ${jobs}`);
  });

  test('/api/ops and /api/counts answer in well under a second on 200,000 done rows', async () => {
    const server = await serve({ queue });
    const timings: Record<string, number[]> = {};
    async function timed(path: string): Promise<Reply> {
      const start = performance.now();
      const reply = await call(server.url, path);
      timings[path] = [...(timings[path] ?? []), performance.now() - start];
      expect(reply.status, reply.text).toBe(200);
      return reply;
    }
    let ops: Reply | undefined;
    let counts: Reply | undefined;
    let dead: Reply | undefined;
    for (let round = 0; round < 5; round++) {
      ops = await timed('/api/ops');
      counts = await timed('/api/counts');
      dead = await timed('/api/jobs?status=dead&limit=50');
      await timed('/api/history');
      await timed('/metrics');
    }
    console.log(
      'large table timings (ms):',
      Object.fromEntries(Object.entries(timings).map(([k, v]) => [k, v.map((t) => Math.round(t))])),
    );
    for (const [path, list] of Object.entries(timings)) {
      for (const ms of list) expect(ms, path).toBeLessThan(1_000);
      const sorted = [...list].sort((a, b) => a - b);
      expect(sorted[Math.floor(sorted.length / 2)], `median of ${path}`).toBeLessThan(500);
    }
    expect(ops?.body.estimated).toContain('done');
    expect(ops?.body).toMatchObject({ pending: 25, running: 0, dead: 40, cancelled: 0, dead1h: 40 });
    expect(ops?.body.done).toBeGreaterThan(180_000);
    expect(ops?.body.done).toBeLessThan(220_000);
    expect(counts?.body).toMatchObject({
      pending: 25,
      dead: 40,
      queues: { default: { pending: 13, running: 0 }, media: { pending: 12, running: 0 } },
    });
    expect(Math.abs((counts?.body.done ?? 0) - (ops?.body.done ?? 0))).toBeLessThan(1_000);
    expect(dead?.body.jobs).toHaveLength(40);
  });

  test('the statements behind /api/ops, /api/counts and /metrics read no finished rows (SPEC §7)', async () => {
    const sql = buildStatements(quoteIdent(schema));
    // Budgets: counts() reads each finished status exactly up to EXACT_COUNT_LIMIT rows through
    // partial indexes (a bounded read), then estimates; the rest read live or recent rows only.
    // None may grow with the 200,000 finished rows.
    const statements: [string, string, unknown[], number][] = [
      ['counts', sql.counts, [schema], EXACT_COUNT_LIMIT + 1_000],
      ['opsExtras', sql.opsExtras, [600_000], 1_000],
      ['liveByQueue', sql.liveByQueue, [], 1_000],
      ['list status=dead', sql.list, ['dead', null, null, null, 50], 1_000],
      ['list status=pending', sql.list, ['pending', null, null, null, 50], 1_000],
    ];
    const report: string[] = [];
    const costs: [string, { rowsRead: number; buffers: number }, number][] = [];
    for (const [name, text, values, budget] of statements) {
      const [row] = await db.sql<{ 'QUERY PLAN': unknown }>(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`,
        values,
      );
      const cost = planCost(row?.['QUERY PLAN']);
      report.push(`${name}: ${cost.rowsRead} rows, ${cost.buffers} buffers (${cost.scans.join('; ')})`);
      costs.push([report.at(-1) as string, cost, budget]);
    }
    console.log(`plans on 200,040 finished rows:\n  ${report.join('\n  ')}`);
    for (const [line, cost, budget] of costs) {
      expect(cost.rowsRead, line).toBeLessThan(budget);
      expect(cost.buffers, line).toBeLessThan(500);
    }
  });

  /** Every statement each request sends through the Queue's pool, EXPLAIN-ed with its values. */
  test('no admin request reads the whole table: every statement of every route, EXPLAIN ANALYZE-d', async () => {
    // Caught on the code before the fix: GET /api/jobs?status=done&task=no.such.task (and the
    // task-only and queue-only variants) walked all 200,000 done rows (`list` with a filter that
    // never matches, ORDER BY id DESC LIMIT 50).
    const pool = new RecordingPool({ connectionString: db.url, max: 2 });
    const recorded = new Queue({ pool, schema });
    const server = await serve({ queue: recorded, sampleIntervalMs: 3_600_000 });
    try {
      // The sampler's first read has been sent and has finished (a statement of it still running
      // would be counted against the first route below; /api/history would fill its cache).
      await expect.poll(() => pool.statements.length > 0 && pool.idleCount === pool.totalCount).toBe(true);
      const [middle] = await db.sql<{ id: string }>(`SELECT (min(id) + max(id)) / 2 AS id FROM ${jobs}`);
      // Budgets in rows read by scan nodes. A window is LIST_WINDOW rows (twice when the page is
      // not full: once filtered, once for its lower edge); /api/history reads the last hour's
      // finished jobs (here ~2,800: it grows with throughput, not with the table).
      const window = 2 * LIST_WINDOW + 1_000;
      const routes: [string, number][] = [
        ['/api/ops', EXACT_COUNT_LIMIT + 1_000],
        ['/api/counts', EXACT_COUNT_LIMIT + 1_000],
        ['/metrics', EXACT_COUNT_LIMIT + 1_000],
        ['/api/history', 5_000],
        ['/api/jobs', 1_000],
        ['/api/jobs?status=done&task=no.such.task', window],
        ['/api/jobs?task=no.such.task', window],
        ['/api/jobs?queue=no.such.queue&limit=1000', window],
        [`/api/jobs?status=done&task=no.such.task&after=${middle?.id}`, window],
        ['/api/jobs?status=dead&limit=50', 1_000],
        ['/api/jobs?status=cancelled&task=x', 1_000],
        ['/api/jobs?status=pending&task=no.such.task', 1_000],
        ['/api/jobs/100', 100],
      ];
      const report: string[] = [];
      for (const [path, budget] of routes) {
        pool.statements.length = 0;
        const reply = await call(server.url, path);
        expect(reply.status, `${path}: ${reply.text}`).toBe(200);
        let rows = 0;
        for (const { text, values } of pool.statements) {
          const [row] = await db.sql<{ 'QUERY PLAN': unknown }>(
            `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`,
            values,
          );
          rows += planCost(row?.['QUERY PLAN']).rowsRead;
        }
        report.push(`${path}: ${rows} rows in ${pool.statements.length} statement(s)`);
        expect(pool.statements.length, path).toBeGreaterThan(0);
        expect(rows, report.at(-1)).toBeLessThan(budget);
      }
      console.log(`rows read per admin request on 200,065 rows:\n  ${report.join('\n  ')}`);
    } finally {
      await server.close();
      await recorded.close();
      await pool.end();
    }
  });

  test('listPage stays bounded in generic plans too (named prepared statements)', async () => {
    // A generic plan cannot use `$4 IS NULL OR id < $4` as an index bound: a cursor deep in the
    // table would then be reached by reading every newer row. The statement uses coalesce.
    const text = buildStatements(quoteIdent(schema)).listPage;
    const [middle] = await db.sql<{ id: string }>(`SELECT (min(id) + max(id)) / 2 AS id FROM ${jobs}`);
    const client = await db.pool.connect();
    try {
      await client.query(`PREPARE list_page_check(text, text, text, bigint, int, int) AS ${text}`);
      const report: string[] = [];
      for (const mode of ['force_generic_plan', 'force_custom_plan']) {
        await client.query(`SET plan_cache_mode = ${mode}`);
        for (const args of [
          ['done', 'no.such.task', null, middle?.id, 50],
          [null, null, 'no.such.queue', null, 1000],
          ['dead', null, null, null, 50],
          [null, null, null, middle?.id, 25],
        ]) {
          const literals = [...args, LIST_WINDOW].map((v) =>
            v === null || v === undefined ? 'NULL' : client.escapeLiteral(String(v)),
          );
          const { rows } = await client.query(
            `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE list_page_check(${literals.join(', ')})`,
          );
          const cost = planCost(rows[0]['QUERY PLAN']);
          report.push(`${mode} ${JSON.stringify(args)}: ${cost.rowsRead} rows, ${cost.buffers} buffers`);
          expect(cost.rowsRead, report.at(-1)).toBeLessThan(2 * LIST_WINDOW + 1_000);
          expect(JSON.stringify(rows[0]['QUERY PLAN']), report.at(-1)).not.toContain('"Seq Scan"');
        }
      }
      console.log(`listPage plans:\n  ${report.join('\n  ')}`);
    } finally {
      await client.query('RESET plan_cache_mode');
      await client.query('DEALLOCATE list_page_check');
      client.release();
    }
  });

  test('following next through the API walks the whole table in windows and finds every match once', async () => {
    const needles = await db.sql<{ id: string }>(
      `UPDATE ${jobs} SET task = 'needle' WHERE id IN (
         (SELECT id FROM ${jobs} WHERE status = 'done' ORDER BY id OFFSET 30000 LIMIT 1)
         UNION ALL (SELECT id FROM ${jobs} WHERE status = 'done' ORDER BY id DESC OFFSET 25000 LIMIT 1))
       RETURNING id::text AS id`,
    );
    try {
      const server = await serve({ queue });
      const found: string[] = [];
      const [{ total } = { total: 0 }] = await db.sql<{ total: number }>(
        `SELECT count(*)::int AS total FROM ${jobs}`,
      );
      let after: string | null = null;
      let requests = 0;
      do {
        const reply: Reply = await call(
          server.url,
          `/api/jobs?status=done&task=needle&limit=5${after === null ? '' : `&after=${after}`}`,
        );
        expect(reply.status, reply.text).toBe(200);
        found.push(...reply.body.jobs.map((j: Job) => j.id));
        if (reply.body.next !== null) {
          // Where it stopped: below the cursor, and at most one window further down.
          expect(BigInt(reply.body.next)).toBeLessThan(after === null ? 2n ** 63n : BigInt(after));
          if (reply.body.jobs.length < 5) expect(reply.body.jobs.length).toBeLessThanOrEqual(2);
        }
        after = reply.body.next;
        requests++;
      } while (after !== null && requests < 100);
      expect(after).toBeNull();
      expect(found).toEqual(needles.map((n) => n.id).sort((a, b) => Number(b) - Number(a)));
      expect(requests).toBeLessThanOrEqual(Math.ceil(total / LIST_WINDOW) + 1);
      expect(requests).toBeGreaterThanOrEqual(Math.floor(total / LIST_WINDOW));
      // A rare status is read through its own index: the 40 old dead jobs in one complete page.
      const dead = await call(server.url, '/api/jobs?status=dead&limit=50');
      expect(dead.body.jobs).toHaveLength(40);
      expect(dead.body.next).toBeNull();
    } finally {
      await db.sql(`UPDATE ${jobs} SET task = 'email.send' WHERE task = 'needle'`);
    }
  });
});

/** A pg.Pool that records the text and values of every statement sent through `query`. */
class RecordingPool extends pg.Pool {
  readonly statements: { text: string; values: unknown[] }[] = [];

  // biome-ignore lint/suspicious/noExplicitAny: pg's overloaded query signature.
  override query(...args: any[]): any {
    const [first, second] = args;
    if (typeof first === 'string') this.statements.push({ text: first, values: second ?? [] });
    else if (first && typeof first.text === 'string')
      this.statements.push({ text: first.text, values: first.values ?? [] });
    // biome-ignore lint/suspicious/noExplicitAny: pg's overloaded query signature.
    return (super.query as any)(...args);
  }
}
