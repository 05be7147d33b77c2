/**
 * SPEC §12 outside the handler: `GET /api/jobs/:id` carries a job's steps (and what a suspended
 * job waits for), `POST /api/events/:name` emits under the token rules of §5, `skiplock emit NAME
 * [PAYLOAD]` emits and `skiplock get` prints the steps.
 *
 * Deliberate break seen failing (then restored): GET /api/jobs/:id answering without `steps`
 * (src/admin/api.ts): the first test failed (`job.steps` undefined).
 */
import { expect, test } from 'vitest';
import { adminApp } from '../../src/admin/server.js';
import { quoteIdent } from '../../src/db/identifier.js';
import type { JobContext } from '../../src/worker/options.js';
import { runCli } from '../cli/run-cli.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();

test('GET /api/jobs/:id carries the steps; POST /api/events/:name emits (token rules of §5)', async () => {
  const queue = db.queue();
  const worker = db.worker({
    queue,
    tasks: {
      'admin.steps': async (_p: unknown, ctx: JobContext) => {
        await ctx.step('fetch', () => ({ rows: 3 }));
        const got = await ctx.waitForEvent('approval', 'admin-approve', { timeoutMs: 60_000 });
        return got;
      },
    },
  });
  await worker.start();
  const { id } = await queue.enqueue('admin.steps', {});
  await expect.poll(async () => (await queue.get(id))?.status).toBe('waiting');

  const { app, history } = adminApp({ queue, host: '127.0.0.1', token: 'sekret' });
  history.stop();
  const auth = { authorization: 'Bearer sekret' };
  const read = await app.request(`/api/jobs/${id}`, { headers: auth });
  expect(read.status).toBe(200);
  const job = (await read.json()) as {
    steps: { name: string; kind: string; value: unknown; pending?: boolean; event?: string }[];
  };
  expect(job.steps).toMatchObject([
    { name: 'fetch', kind: 'step', value: { rows: 3 } },
    { name: 'approval', kind: 'event', pending: true, event: 'admin-approve', value: null },
  ]);

  const refused = await app.request('/api/events/admin-approve', { method: 'POST' });
  expect(refused.status).toBe(401);
  const bad = await app.request('/api/events/admin-approve', {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ payload: 1, extra: 2 }),
  });
  expect(bad.status).toBe(400);
  expect(
    await db.sql(`SELECT set_at FROM ${quoteIdent(TEST_SCHEMA)}.events WHERE name = 'admin-approve'`),
  ).toEqual([{ set_at: null }]);
  const emitted = await app.request('/api/events/admin-approve', {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ payload: { by: 'ada' } }),
  });
  expect(emitted.status).toBe(200);
  expect(await emitted.json()).toEqual({ name: 'admin-approve', set: true });
  const again = await app.request('/api/events/admin-approve', { method: 'POST', headers: auth });
  expect(await again.json()).toEqual({ name: 'admin-approve', set: false });
  const done = await queue.waitFor(id, { timeoutMs: 20_000 });
  expect(done.result).toEqual({ payload: { by: 'ada' } });
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
});

test('skiplock emit NAME [PAYLOAD] and skiplock get with steps', async () => {
  const queue = db.queue();
  const worker = db.worker({
    queue,
    tasks: {
      'cli.steps': async (_p: unknown, ctx: JobContext) => {
        await ctx.step('first', () => 'one');
        return ctx.waitForEvent('wait', 'cli-event');
      },
    },
  });
  await worker.start();
  const { id } = await queue.enqueue('cli.steps', {});
  await expect.poll(async () => (await queue.get(id))?.status).toBe('waiting');
  const env = { url: db.url };
  const get = await runCli(['get', id], env);
  expect(get.code).toBe(0);
  expect(get.stdout).toMatch(/first \[step\].*"one"/);
  expect(get.stdout).toMatch(/wait \[event\] waiting for "cli-event"/);
  const emit = await runCli(['emit', 'cli-event', '{"n":1}', '--json'], env);
  expect(emit.code).toBe(0);
  expect(JSON.parse(emit.stdout)).toEqual({ name: 'cli-event', set: true });
  const again = await runCli(['emit', 'cli-event'], env);
  expect(again.stdout).toMatch(/already set/);
  expect((await queue.waitFor(id, { timeoutMs: 20_000 })).result).toEqual({ payload: { n: 1 } });
  const json = await runCli(['get', id, '--json'], env);
  expect(JSON.parse(json.stdout).steps).toMatchObject([
    { name: 'first', kind: 'step', value: 'one' },
    { name: 'wait', kind: 'event', value: { payload: { n: 1 } } },
  ]);
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
});
