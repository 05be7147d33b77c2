/**
 * SPEC §12 durable steps: a completed step answers its stored value on every later run without
 * running `fn` again; the value is what JSON gives back (§1.11), exactly; a step whose `fn`
 * throws, or whose value JSON cannot hold, stores nothing; a transactional step's writes and its
 * checkpoint commit together; names are unique within a run; a stale attempt can neither write
 * a step nor overwrite one (the claim-token fence in the statement itself); steps go with the
 * job (prune, retention 'delete') and `requeue(id, { resetSteps: true })` clears them.
 *
 * Deliberate breaks seen failing (then restored):
 * - the checkpoint statement (src/store/steps.ts `stepWrite`) without `j.claims = l.token` in its
 *   lock: "a stale attempt's write is fenced by the claim token" failed (expected true to be
 *   false: the lease given back by release() and claimed again with the same worker id and
 *   attempt number wrote a step).
 * - src/worker/steps.ts ignoring the loaded steps (fn always run): "replays stored values"
 *   failed — the job ended dead: the second run's checkpoint of "a" met the stored row (ON
 *   CONFLICT DO NOTHING), was answered as not written, and every retry failed with LeaseLostError.
 */
import { expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { ValidationError } from '../../src/errors.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);

async function stepRows(id: string) {
  return db.sql<{ name: string; kind: string; value: unknown }>(
    `SELECT name, kind, value FROM ${S}.job_steps WHERE job_id = $1 ORDER BY name`,
    [id],
  );
}

test('replays stored values: a retried job runs each completed step once, and gets its value back exactly', async () => {
  const queue = db.queue();
  const calls: Record<string, number> = {};
  const seen: unknown[] = [];
  const count = (name: string) => {
    calls[name] = (calls[name] ?? 0) + 1;
  };
  const worker = db.worker({
    queue,
    tasks: {
      'steps.replay': async (_p: unknown, ctx: JobContext) => {
        const a = await ctx.step('a', async () => {
          count('a');
          return { at: new Date(Date.UTC(2026, 0, 2)), n: 1, gone: undefined };
        });
        seen.push(a);
        const b = await ctx.step('b', () => {
          count('b');
          return 'b-value';
        });
        if (ctx.job.attempt === 1) throw new Error('first attempt fails after two steps');
        const c = await ctx.step('c', async () => {
          count('c');
          return [1, 2, 3];
        });
        return { a, b, c };
      },
    },
    backoff: { baseMs: 10, capMs: 10 },
    concurrency: 1,
  });
  await worker.start();
  const { id } = await queue.enqueue('steps.replay', {});
  const job = await queue.waitFor(id, { timeoutMs: 20_000 });
  expect(job.status).toBe('done');
  expect(job.attempts).toBe(2);
  expect(calls).toEqual({ a: 1, b: 1, c: 1 });
  // the value as JSON gives it back (a Date becomes its string, undefined members go) — the
  // first run and the replay see the same
  const stored = { at: '2026-01-02T00:00:00.000Z', n: 1 };
  expect(seen).toEqual([stored, stored]);
  expect(job.result).toEqual({ a: stored, b: 'b-value', c: [1, 2, 3] });
  const steps = await queue.steps(id);
  expect(steps.map((s) => [s.name, s.kind, s.value])).toEqual([
    ['a', 'step', stored],
    ['b', 'step', 'b-value'],
    ['c', 'step', [1, 2, 3]],
  ]);
  for (const step of steps) expect(step.completedAt).toBeInstanceOf(Date);
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
});

test('a step whose fn throws, or whose value JSON cannot hold, stores nothing; a repeated name is a ValidationError', async () => {
  const queue = db.queue();
  const errors: unknown[] = [];
  const worker = db.worker({
    queue,
    tasks: {
      'steps.bad': async (_p: unknown, ctx: JobContext) => {
        await ctx.step('ok', () => 1);
        for (const run of [
          () => ctx.step('throws', () => Promise.reject(new Error('boom'))),
          () => ctx.step('nan', () => Number.NaN),
          () => ctx.step('bigint', () => 1n),
          () => ctx.step('ok', () => 2),
          () => ctx.step('', () => 3),
        ]) {
          try {
            await run();
            errors.push('resolved');
          } catch (error) {
            errors.push(error);
          }
        }
        return 'finished';
      },
    },
  });
  await worker.start();
  const { id } = await queue.enqueue('steps.bad', {});
  expect((await queue.waitFor(id, { timeoutMs: 20_000 })).status).toBe('done');
  expect((errors[0] as Error).message).toBe('boom');
  for (const error of errors.slice(1)) expect(error).toBeInstanceOf(ValidationError);
  expect((errors[1] as ValidationError).message).toMatch(/step "nan"/);
  expect((errors[3] as ValidationError).message).toMatch(/already used by this run/);
  expect(await stepRows(id)).toEqual([{ name: 'ok', kind: 'step', value: 1 }]);
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
});

test('a transactional step commits its writes with its checkpoint, exactly once; a failing one rolls both back', async () => {
  const queue = db.queue();
  await db.sql('CREATE TABLE public.tx_ledger (job_id bigint, step text, attempt int)');
  const worker = db.worker({
    queue,
    tasks: {
      'steps.tx': async (_p: unknown, ctx: JobContext) => {
        await ctx.step(
          'write',
          async (client) => {
            await client.query('INSERT INTO public.tx_ledger VALUES ($1, $2, $3)', [
              ctx.job.id,
              'write',
              ctx.job.attempt,
            ]);
            return 'written';
          },
          { transaction: true },
        );
        if (ctx.job.attempt === 1) {
          // a transactional step that fails after its insert: nothing of it stays
          await ctx
            .step(
              'fails',
              async (client) => {
                await client.query('INSERT INTO public.tx_ledger VALUES ($1, $2, $3)', [
                  ctx.job.id,
                  'fails',
                  1,
                ]);
                throw new Error('after the insert');
              },
              { transaction: true },
            )
            .catch(() => undefined);
          throw new Error('retry me');
        }
        return 'ok';
      },
    },
    backoff: { baseMs: 10, capMs: 10 },
  });
  await worker.start();
  const { id } = await queue.enqueue('steps.tx', {});
  expect((await queue.waitFor(id, { timeoutMs: 20_000 })).status).toBe('done');
  expect(await db.sql('SELECT step, attempt FROM public.tx_ledger WHERE job_id = $1', [id])).toEqual([
    { step: 'write', attempt: 1 },
  ]);
  expect(await stepRows(id)).toEqual([{ name: 'write', kind: 'step', value: 'written' }]);
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
});

test("a stale attempt's write is fenced by the claim token: it neither writes a step nor overwrites one", async () => {
  const queue = db.queue();
  const engine = engineOf(queue);
  const { id } = await queue.enqueue('steps.stale', {});
  const [stale] = await queue.claim('old-worker', { leaseMs: 60_000 });
  expect(stale?.id).toBe(id);
  // true when written (NOT_WRITTEN is 0: the lease does not own the job)
  const write = async (lease: typeof stale, name: string, value: string) =>
    (await engine.steps.write({ lease: lease!, name, valueJson: JSON.stringify(value), leaseMs: 60_000 })) !==
    0;
  expect(await write(stale, 'early', 'from the first attempt')).toBe(true);
  // the lease expires (a paused process), the reaper takes the job back, another worker claims it
  await db.expireLease(id);
  expect(await queue.reap()).toEqual([id]);
  const [fresh] = await queue.claim('new-worker', { leaseMs: 60_000 });
  expect(fresh?.id).toBe(id);
  expect(await write(fresh, 'late', 'from the new attempt')).toBe(true);
  // the first attempt resumes: neither a new step nor an overwrite lands
  expect(await write(stale, 'late', 'stale overwrite')).toBe(false);
  expect(await write(stale, 'stale-only', 'stale new step')).toBe(false);
  // even with the same worker id and attempt number (release gives the attempt back): the token differs
  await queue.release(fresh!);
  const [third] = await queue.claim('new-worker', { leaseMs: 60_000 });
  expect(third?.attempt).toBe(fresh?.attempt);
  expect(await write(fresh, 'after-release', 'x')).toBe(false);
  expect(await stepRows(id)).toEqual([
    { name: 'early', kind: 'step', value: 'from the first attempt' },
    { name: 'late', kind: 'step', value: 'from the new attempt' },
  ]);
});

test('through a worker: a handler whose lease was taken while it was paused gets LeaseLostError from ctx.step, and writes nothing', async () => {
  const queue = db.queue();
  let resume!: () => void;
  const paused = new Promise<void>((resolve) => {
    resume = resolve;
  });
  let started!: () => void;
  const running = new Promise<void>((resolve) => {
    started = resolve;
  });
  let outcome: unknown = null;
  const worker = db.worker({
    queue,
    // a long lease: the heartbeat does not notice the theft before the handler writes
    leaseMs: 120_000,
    // its one slot busy with the paused handler: the reaped job is the thief's to claim
    concurrency: 1,
    prefetch: 0,
    tasks: {
      'steps.paused': async (_p: unknown, ctx: JobContext) => {
        await ctx.step('before', () => 'first');
        started();
        await paused;
        try {
          await ctx.step('after', () => 'stale');
          outcome = 'written';
        } catch (error) {
          outcome = error;
        }
        throw outcome;
      },
    },
  });
  await worker.start();
  const { id } = await queue.enqueue('steps.paused', {});
  await running;
  await db.expireLease(id);
  expect(await queue.reap()).toEqual([id]);
  const [thief] = await queue.claim('thief', { leaseMs: 60_000, tasks: ['steps.paused'] });
  expect(thief?.id).toBe(id);
  await engineOf(queue).steps.write({ lease: thief!, name: 'after', valueJson: '"fresh"', leaseMs: 60_000 });
  resume();
  await expect.poll(() => outcome).not.toBeNull();
  expect((outcome as Error).name).toBe('LeaseLostError');
  expect(await stepRows(id)).toEqual([
    { name: 'after', kind: 'step', value: 'fresh' },
    { name: 'before', kind: 'step', value: 'first' },
  ]);
  const [job] = await db.sql<{ status: string; worker_id: string }>(
    `SELECT status, worker_id FROM ${db.jobs} WHERE id = $1`,
    [id],
  );
  expect(job).toEqual({ status: 'running', worker_id: 'thief' });
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
});

test('steps go with their job; requeue(id, { resetSteps: true }) clears them, a plain requeue keeps them', async () => {
  const queue = db.queue();
  const runs: string[] = [];
  const worker = db.worker({
    queue,
    tasks: {
      'steps.dead': async (_p: unknown, ctx: JobContext) => {
        const v = await ctx.step('once', () => {
          runs.push('once');
          return 'v';
        });
        throw new Error(`dead after ${v}`);
      },
    },
  });
  await worker.start();
  const { id } = await queue.enqueue('steps.dead', {}, { maxAttempts: 1 });
  expect((await queue.waitFor(id, { timeoutMs: 20_000 })).status).toBe('dead');
  expect(runs).toEqual(['once']);
  expect(await queue.requeue(id)).toBe(true);
  expect((await queue.waitFor(id, { timeoutMs: 20_000 })).status).toBe('dead');
  expect(runs).toEqual(['once']); // kept: replayed
  expect(await queue.requeue(id, { resetSteps: true })).toBe(true);
  expect((await queue.waitFor(id, { timeoutMs: 20_000 })).status).toBe('dead');
  expect(runs).toEqual(['once', 'once']); // cleared: ran again
  await worker.stop();
  expect((await stepRows(id)).length).toBe(1);
  await db.sql(`UPDATE ${db.jobs} SET updated_at = now() - interval '1 hour' WHERE id = $1`, [id]);
  expect(await queue.prune({ olderThanMs: 60_000 })).toBe(1);
  expect(await stepRows(id)).toEqual([]);
});

test("retention 'delete': a completed job's steps are deleted with it", async () => {
  const queue = db.queue({ retention: { completed: 'delete' } });
  const worker = db.worker({
    queue,
    tasks: {
      'steps.plain': async () => 'plain',
      'steps.one': async (_p: unknown, ctx: JobContext) => ctx.step('x', () => 1),
    },
  });
  await worker.start();
  const plain = await queue.enqueue('steps.plain', {});
  const stepped = await queue.enqueue('steps.one', {});
  await expect
    .poll(
      async () =>
        (await db.sql(`SELECT 1 FROM ${db.jobs} WHERE id IN ($1, $2)`, [plain.id, stepped.id])).length,
    )
    .toBe(0);
  expect(
    await db.sql(`SELECT job_id FROM ${S}.job_steps WHERE job_id IN ($1, $2)`, [plain.id, stepped.id]),
  ).toEqual([]);
  await worker.stop();
  await queue.close(); // connections are shared with other suites on this server
});
