/**
 * SPEC §9 typed tasks: `defineTask` with zod, valibot and arktype schemas (Standard Schema). An
 * enqueue of a defined task is validated before anything is written (a ValidationError naming
 * the payload's path) and takes the task's defaults; a Worker given `tasks: [a, b]` checks the
 * stored payload against the schema before the handler runs (a payload that fails goes dead at
 * once, the handler never called) and gives the handler the schema's output; a PermanentError,
 * or a task's `retryIf` returning false, sends the job dead at once; a task's backoff is used.
 * The compile-time half (a wrong payload does not compile) is test/task/types.fixture.ts,
 * checked by `npm run check`.
 *
 * Deliberate breaks seen failing (in a private copy of src/): `checkPayload` not called by
 * enqueue (the invalid payloads were written); the worker’s schema check removed from
 * taskEntry (the handler ran with the stored payload, untransformed); `fail`’s `$8` ignored (the
 * PermanentError job was retried until its fifth attempt); the dispatcher not passing the task’s
 * retryIf (the "fatal" job was retried).
 */
import { type } from 'arktype';
import * as v from 'valibot';
import { describe, expect, test } from 'vitest';
import { z } from 'zod';
import { defineTask, PermanentError, type Task, ValidationError } from '../../src/index.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

async function rowsOf(task: string) {
  return db.sql<{
    id: string;
    status: string;
    queue: string;
    priority: number;
    max_attempts: number;
    timeout_ms: number | null;
    payload: unknown;
    result: unknown;
    attempts: number;
    last_error: string | null;
    retry_in_s: number;
  }>(
    `SELECT id::text, status, queue, priority, max_attempts, timeout_ms, payload, result, attempts, last_error,
            extract(epoch FROM run_after - now())::float8 AS retry_in_s
     FROM ${db.jobs} AS j WHERE task = $1 ORDER BY j.id -- the bigint, not the text alias`,
    [task],
  );
}

// The same payload shape, { to: an email, count: a positive integer (default 1) }, in each library.
const schemas = {
  zod: z.object({ to: z.string().email(), count: z.number().int().positive().default(1) }),
  valibot: v.object({
    to: v.pipe(v.string(), v.email()),
    count: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 1),
  }),
  arktype: type({ to: 'string.email', count: 'number.integer > 0 = 1' }),
};

describe.each(Object.entries(schemas))('defineTask with a %s schema', (library, schema) => {
  const name = `typed.${library}`;
  const task = defineTask({
    name,
    schema,
    handler: (payload) => ({ got: payload }),
    queue: `q-${library}`,
    priority: 7,
    maxAttempts: 4,
    timeoutMs: 9_000,
  }) as Task<{ to: string; count?: number }, { to: string; count: number }, unknown>;

  test('enqueue: a valid payload is written with the task’s defaults (the call’s own options win)', async () => {
    const queue = db.queue();
    await queue.enqueue(task, { to: 'ada@example.com' });
    await queue.enqueue(task, { to: 'bob@example.com', count: 2 }, { priority: 1, queue: undefined });
    const rows = await rowsOf(name);
    expect(rows.map((r) => [r.queue, r.priority, r.max_attempts, r.timeout_ms, r.payload])).toEqual([
      [`q-${library}`, 7, 4, 9_000, { to: 'ada@example.com' }], // the payload as given, not transformed
      [`q-${library}`, 1, 4, 9_000, { to: 'bob@example.com', count: 2 }],
    ]);
  });

  test('enqueue and enqueueMany: an invalid payload is a ValidationError naming its path; nothing is written', async () => {
    const queue = db.queue();
    const before = (await rowsOf(name)).length;
    const error = await queue.enqueue(task, { to: 'not an address' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('payload.to');
    expect((error as ValidationError).message).toContain(`does not match the schema of task "${name}"`);
    const many = await queue
      .enqueueMany([
        { task, payload: { to: 'a@example.com' } },
        { task, payload: { to: 'b@example.com', count: -1 } },
      ])
      .catch((e: unknown) => e);
    expect(many).toBeInstanceOf(ValidationError);
    expect((many as ValidationError).field).toBe('specs[1].payload.count');
    expect(await rowsOf(name)).toHaveLength(before);
  });

  test('a Worker with tasks: [task] gives the handler the schema’s output and stores its result', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue(task, { to: 'cy@example.com' }, { queue: 'default' });
    const worker = db.worker({ queue, pollIntervalMs: 100, tasks: [task] });
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 10_000 }).toBe('done');
    await worker.stop();
    expect((await queue.get(id))?.result).toEqual({ got: { to: 'cy@example.com', count: 1 } });
  });
});

describe('what an enqueue checks', () => {
  test('the payload as it will be stored (JSON): a Date is refused at enqueue, not at the worker', async () => {
    const queue = db.queue();
    const task = defineTask({ name: 'typed.date', schema: z.object({ at: z.date() }), handler: () => null });
    const error = await queue.enqueue(task, { at: new Date() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('payload.at');
    expect((error as ValidationError).message).toMatch(
      /checked as it is stored, as JSON: a Date becomes a string/,
    );
    const iso = defineTask({
      name: 'typed.date',
      schema: z.object({ at: z.coerce.date() }),
      handler: () => null,
    });
    expect((await queue.enqueue(iso, { at: new Date() })).created).toBe(true);
    expect(await rowsOf('typed.date')).toHaveLength(1);
  });

  test('a schema that throws is a ValidationError naming the task; enqueueMany reports its first bad spec', async () => {
    const queue = db.queue();
    const throwing = defineTask({
      name: 'typed.throws',
      schema: {
        '~standard': {
          version: 1,
          vendor: 'test',
          validate: () => {
            throw new Error('validator bug');
          },
        },
      },
      handler: () => null,
    });
    await expect(queue.enqueue(throwing, null)).rejects.toThrow(
      /payload: the schema of task "typed.throws" threw instead of returning its issues: validator bug/,
    );
    const task = defineTask({
      name: 'typed.order',
      schema: z
        .object({ n: z.number() })
        .refine(async () => new Promise((r) => setTimeout(() => r(true), 5))),
      handler: () => null,
    });
    const error = await queue
      .enqueueMany([
        { task, payload: { n: 1 } },
        { task, payload: { n: 'one' } },
        { task, payload: { n: 'two' } },
      ])
      .catch((e: unknown) => e);
    expect((error as ValidationError).field).toBe('specs[1].payload.n');
    expect(await rowsOf('typed.order')).toHaveLength(0);
    expect(await rowsOf('typed.throws')).toHaveLength(0);
  });
});

describe('failures of typed tasks', () => {
  test('a stored payload that fails the schema goes dead at once; the handler never runs', async () => {
    const queue = db.queue();
    let calls = 0;
    const task = defineTask({
      name: 'typed.stale',
      schema: z.object({ id: z.number() }),
      handler: () => void calls++,
      maxAttempts: 5,
    });
    // Written by name (an older producer, another language): no schema on the way in.
    const { id } = await queue.enqueue('typed.stale', { id: 'seven' });
    const worker = db.worker({ queue, pollIntervalMs: 100, tasks: [task] });
    await worker.start();
    await expect.poll(async () => (await queue.get(id))?.status, { timeout: 10_000 }).toBe('dead');
    await worker.stop();
    expect(calls).toBe(0);
    const job = await queue.get(id);
    expect(job?.attempts).toBe(1);
    expect(job?.lastError).toMatch(
      /PermanentError: The payload does not match the schema of task "typed.stale": id: /,
    );
  });

  test('PermanentError and retryIf false send the job dead at once; retryIf true retries with the task’s backoff', async () => {
    const queue = db.queue();
    const handler = (payload: { kind: string }) => {
      if (payload.kind === 'permanent') throw new PermanentError('unknown address');
      throw new Error(payload.kind);
    };
    const task = defineTask({
      name: 'typed.fails',
      schema: z.object({ kind: z.string() }),
      handler,
      maxAttempts: 5,
      backoff: { baseMs: 60_000, capMs: 60_000 },
      retryIf: (error) => !(error instanceof Error && error.message === 'fatal'),
    });
    for (const kind of ['permanent', 'fatal', 'transient']) await queue.enqueue(task, { kind });
    const worker = db.worker({ queue, pollIntervalMs: 100, backoff: { baseMs: 1, capMs: 1 }, tasks: [task] });
    await worker.start();
    await expect
      .poll(async () => (await rowsOf('typed.fails')).map((r) => r.attempts), { timeout: 10_000 })
      .toEqual([1, 1, 1]);
    await expect
      .poll(async () => (await rowsOf('typed.fails')).map((r) => r.status), { timeout: 10_000 })
      .toEqual(['dead', 'dead', 'pending']);
    await worker.stop();
    const rows = await rowsOf('typed.fails');
    expect(rows.map((r) => r.attempts)).toEqual([1, 1, 1]); // dead after one attempt of five
    expect(rows[0]?.last_error).toMatch(/^PermanentError: unknown address/);
    expect(rows[1]?.last_error).toMatch(/fatal/);
    expect(rows[2]?.retry_in_s).toBeGreaterThan(50); // the task's backoff, not the worker's 1 ms
  });

  test('queue.fail with a PermanentError: dead at once', async () => {
    const queue = db.queue();
    await queue.enqueue('typed.manual', null, { maxAttempts: 5 });
    const [lease] = await queue.claim('w', { tasks: ['typed.manual'] });
    expect(await queue.fail(lease as never, new PermanentError('no'))).toBe('dead');
  });
});

describe('validation', () => {
  const schema = z.object({});
  test('defineTask refuses what cannot be a task, naming the field', () => {
    const bad: [object, RegExp][] = [
      [{ name: '', schema, handler: () => null }, /task.name/],
      [{ name: 't', schema: {}, handler: () => null }, /task "t": schema: must be a Standard Schema/],
      [{ name: 't', schema, handler: 'no' }, /task "t": handler: must be a function/],
      [{ name: 't', schema, handler: () => null, retryIf: true }, /task "t": retryIf/],
      [{ name: 't', schema, handler: () => null, priority: 1.5 }, /task "t": priority/],
      [{ name: 't', schema, handler: () => null, maxAttempts: 0 }, /task "t": maxAttempts/],
      [
        { name: 't', schema, handler: () => null, backoff: { baseMs: -1 } },
        /task "t": backoff.baseMs: must be/,
      ],
      [{ name: 't', schema, handler: () => null, retries: 3 }, /retries/],
    ];
    for (const [config, message] of bad) {
      expect(() => defineTask(config as never), JSON.stringify(config)).toThrow(ValidationError);
      expect(() => defineTask(config as never)).toThrow(message);
    }
  });

  test('a Worker’s tasks: defined tasks, once each, under their own names', () => {
    const a = defineTask({ name: 'typed.a', schema, handler: () => null });
    expect(() => db.worker({ tasks: [a, a] })).toThrow(/tasks\[1\].*repeats the task "typed.a"/);
    expect(() => db.worker({ tasks: [a, (() => null) as never] })).toThrow(/tasks\[1\].*defineTask/);
    expect(() => db.worker({ tasks: { 'typed.b': a } })).toThrow(/its key must be its name/);
    expect(() => db.worker({ tasks: [] })).toThrow(/at least one task/);
  });
});
