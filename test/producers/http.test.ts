/**
 * SPEC §13/§5 — `POST /api/jobs` on the admin server, on a real server (port 0) against a real
 * database: 201 `{ id, created: true }` with the job committed, 200 on a dedupe hit (and
 * `replaced` for a debounce), bad input a 400 naming the field in the error envelope, the change
 * rules of the other POST routes (the token when one is set; refused on a non-loopback bind
 * without one; the Host check against DNS rebinding; no cross-origin writes), only JSON (415
 * otherwise), and a body limit: 413 in the envelope, whether the body says its length or is
 * chunked, with nothing written. What the route stores and answers for each option is the
 * conformance suite's (conformance.test.ts, path 'http').
 *
 * Deliberate breaks seen failing (each undone after):
 * - the route without its bodyLimit: the 413 test failed (201: the oversized job was written);
 * - the content-type check removed: the 415 test failed (a text/plain body was enqueued);
 * - `c.json(result, 201)` whatever `created` said: the dedupe-hit test failed (201 instead of 200).
 */
import * as http from 'node:http';
import * as os from 'node:os';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type AdminServer, startAdminServer } from '../../src/admin/server.js';
import type { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const servers: AdminServer[] = [];
let queue: Queue;
let open: AdminServer;

async function serve(options: Partial<Parameters<typeof startAdminServer>[0]> = {}): Promise<AdminServer> {
  const server = await startAdminServer({
    queue,
    port: 0,
    token: null,
    sampleIntervalMs: 3_600_000,
    ...options,
  });
  servers.push(server);
  return server;
}

beforeAll(async () => {
  queue = db.queue();
  open = await serve();
});
afterAll(async () => {
  await Promise.all(servers.map((server) => server.close()));
});

interface Reply {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies are checked field by field.
  body: any;
}

async function post(base: string, body: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const response = await fetch(new URL('/api/jobs', base), {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function countOf(task: string): Promise<number> {
  const [row] = await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE task = $1`, [
    task,
  ]);
  return row?.n ?? -1;
}

describe('POST /api/jobs', () => {
  test('201 with the job committed; 200 on a dedupe hit; replaced for a debounce', async () => {
    const created = await post(open.url, {
      task: 'http.send',
      payload: { to: 'ada' },
      dedupeKey: 'http-1',
      priority: 7,
    });
    expect(created).toEqual({ status: 201, body: { id: expect.any(String), created: true } });
    expect(await queue.get(created.body.id)).toMatchObject({
      task: 'http.send',
      payload: { to: 'ada' },
      priority: 7,
      status: 'pending',
    });
    expect(await post(open.url, { task: 'http.send', payload: {}, dedupeKey: 'http-1' })).toEqual({
      status: 200,
      body: { id: created.body.id, created: false },
    });
    const first = await post(open.url, {
      task: 'http.debounce',
      payload: 1,
      dedupeKey: 'http-2',
      dedupe: { replace: true },
    });
    expect(
      await post(open.url, {
        task: 'http.debounce',
        payload: 2,
        dedupeKey: 'http-2',
        dedupe: { replace: true },
      }),
    ).toEqual({
      status: 200,
      body: { id: first.body.id, created: false, replaced: true },
    });
    expect((await queue.get(first.body.id))?.payload).toBe(2);
  });

  test('payload left out is JSON null; runAt is an ISO 8601 string with its offset', async () => {
    const reply = await post(open.url, { task: 'http.nopayload', runAt: '2031-01-02T05:04:05.678+02:00' });
    expect(reply.status).toBe(201);
    const job = await queue.get(reply.body.id);
    expect(job?.payload).toBeNull();
    expect(job?.runAfter.toISOString()).toBe('2031-01-02T03:04:05.678Z');
  });

  test('bad input is a 400 naming the field, in the error envelope, with nothing written', async () => {
    const cases: [unknown, string][] = [
      [{ task: '', payload: 1 }, 'task'],
      [{ task: 'http.bad', priority: 1.5 }, 'priority'],
      [{ task: 'http.bad', prio: 1 }, 'options.prio'],
      [{ task: 'http.bad', runAt: '2031-01-01 09:00' }, 'runAt'],
      [{ task: 'http.bad', runAt: '2031-02-29T09:00:00Z' }, 'runAt'],
      [{ task: 'http.bad', sequence: '' }, 'sequence'],
      [{ task: 'http.bad', sequence: 'a', dedupeKey: 'k' }, 'sequence'],
      [{ task: 'http.bad', client: {} }, 'options.client'],
      [{ task: 'http.bad', dependsOn: ['999999999'] }, 'dependsOn'],
      [[{ task: 'http.bad' }], 'body'],
      ['"http.bad"', 'body'],
      ['{"task": "http.bad",', 'body'],
    ];
    for (const [body, field] of cases) {
      const reply = await post(open.url, body);
      expect(reply, JSON.stringify(body)).toEqual({
        status: 400,
        body: {
          error: {
            code: 'ERR_VALIDATION',
            message: expect.stringMatching(new RegExp(`^${field.replace(/[.[\]]/g, '\\$&')}: `)),
            field,
          },
        },
      });
    }
    expect(await countOf('http.bad')).toBe(0);
  });

  test('only JSON: another content type is a 415', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/jsonp']) {
      const response = await fetch(new URL('/api/jobs', open.url), {
        method: 'POST',
        headers: { 'content-type': type },
        body: JSON.stringify({ task: 'http.type' }),
      });
      expect(response.status, type).toBe(415);
      expect(await response.json()).toEqual({
        error: { code: 'ERR_UNSUPPORTED_MEDIA_TYPE', message: expect.stringMatching(/application\/json/) },
      });
    }
    expect(
      (await post(open.url, { task: 'http.type' }, { 'content-type': 'application/json; charset=utf-8' }))
        .status,
    ).toBe(201);
    expect(await countOf('http.type')).toBe(1);
  });

  test('a body over the limit is a 413 in the envelope, nothing written — with a length or chunked', async () => {
    const small = await serve({ enqueueBodyLimit: 1_000 });
    const big = { task: 'http.big', payload: 'x'.repeat(2_000) };
    expect(await post(small.url, big)).toEqual({
      status: 413,
      body: { error: { code: 'ERR_TOO_LARGE', message: expect.stringMatching(/larger than 1000 bytes/) } },
    });
    // chunked: no Content-Length, so the limit is counted as the body streams in
    const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const url = new URL('/api/jobs', small.url);
      const request = http.request(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          headers: { 'content-type': 'application/json' },
        },
        (response) => {
          let text = '';
          response.setEncoding('utf8').on('data', (chunk: string) => {
            text += chunk;
          });
          response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
        },
      );
      request.on('error', reject);
      const json = JSON.stringify(big);
      request.write(json.slice(0, 500));
      request.end(json.slice(500));
    });
    expect(chunked.status).toBe(413);
    expect(JSON.parse(chunked.body)).toMatchObject({ error: { code: 'ERR_TOO_LARGE' } });
    expect(await countOf('http.big')).toBe(0);
    // the default limit (1 MiB) takes a payload of 100 kB
    expect((await post(open.url, { task: 'http.big', payload: 'y'.repeat(100_000) })).status).toBe(201);
  });
});

describe('POST /api/jobs: the change rules of SPEC §5', () => {
  test('with a token: 401 without it, 201 with it', async () => {
    const guarded = await serve({ token: 'sekret' });
    expect(await post(guarded.url, { task: 'http.token' })).toMatchObject({
      status: 401,
      body: { error: { code: 'ERR_UNAUTHORIZED' } },
    });
    expect((await post(guarded.url, { task: 'http.token' }, { authorization: 'Bearer wrong' })).status).toBe(
      401,
    );
    expect((await post(guarded.url, { task: 'http.token' }, { authorization: 'Bearer sekret' })).status).toBe(
      201,
    );
    expect(await countOf('http.token')).toBe(1);
  });

  test('a loopback-bound server refuses another Host (DNS rebinding) and cross-origin writes', async () => {
    const url = new URL('/api/jobs', open.url);
    const status = (headers: Record<string, string>) =>
      new Promise<number>((resolve, reject) => {
        const request = http.request(
          {
            host: url.hostname,
            port: url.port,
            path: url.pathname,
            method: 'POST',
            headers: { 'content-type': 'application/json', ...headers },
          },
          (response) => {
            response.resume();
            resolve(response.statusCode ?? 0);
          },
        );
        request.on('error', reject);
        request.end(JSON.stringify({ task: 'http.rebind' }));
      });
    expect(await status({ host: 'attacker.example:80' })).toBe(403);
    expect(await status({ host: `127.0.0.1:${url.port}`, origin: 'https://attacker.example' })).toBe(403);
    expect(await status({ host: `127.0.0.1:${url.port}`, 'sec-fetch-site': 'cross-site' })).toBe(403);
    expect(await countOf('http.rebind')).toBe(0);
    expect(await status({ host: `localhost:${url.port}` })).toBe(201);
  });

  test('bound to a non-loopback address without a token: refused (403), nothing written', async (context) => {
    const address = Object.values(os.networkInterfaces())
      .flat()
      .find((info) => info && info.family === 'IPv4' && !info.internal)?.address;
    if (!address) {
      context.skip('this machine has no non-loopback IPv4 address to bind to');
      return;
    }
    const exposed = await serve({ host: address });
    expect(await post(exposed.url, { task: 'http.exposed' })).toMatchObject({
      status: 403,
      body: { error: { code: 'ERR_FORBIDDEN' } },
    });
    expect(await countOf('http.exposed')).toBe(0);
    const withToken = await serve({ host: address, token: 't' });
    expect((await post(withToken.url, { task: 'http.exposed' }, { authorization: 'Bearer t' })).status).toBe(
      201,
    );
  });
});
