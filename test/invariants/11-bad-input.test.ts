/**
 * Guards SPEC §1.11 "Bad input gets a clear error and changes nothing" (and the §3 contract for
 * ids: a malformed id throws, a well-formed unknown one gives `null` / `false`).
 *
 * Every case calls one Queue method with one bad input and asserts: it rejects with a
 * `ValidationError` (`code === 'ERR_VALIDATION'`) whose `field` names the offending input, and
 * the jobs table is exactly as before (same row count, and the same fingerprint of every row,
 * so an UPDATE slipping through is caught as well as an INSERT). A round-trip test then proves
 * the other side: names and payloads full of SQL and JSON metacharacters are *not* bad input
 * and come back verbatim.
 *
 * Deliberate breaks made in a private copy (/work/scratch-a), each watched failing here:
 *  1. `requireInt` accepting any finite number (`Number.isInteger` → `Number.isFinite`): 5 cases
 *     failed (priority 1.5, maxAttempts 2.5, specs[1].priority 1.5, claim limit 1.5, lease
 *     attempt 1.5), each with a DatabaseError (SQLSTATE 22P02) instead of a ValidationError.
 *  2. The U+0000 check of `toJsonText` removed: the 4 NUL cases (payload string, deep payload,
 *     payload key, result) failed with a DatabaseError from jsonb instead of a ValidationError.
 *  3. `requireJobId` reduced to `String(value)`: 51 cases failed (every malformed id resolved
 *     with null/false/true or hit 22P02, and one of them, which PostgreSQL cast to the seed
 *     job's id, cancelled it: the seed-untouched test caught that).
 *  4. `enqueueMany` validating and inserting entry by entry: the 6 batch cases failed on the row
 *     count (entry [0] written before entry [1] threw).
 *  5. `requireName` returning `value.trim()`: the round-trip cases with edge whitespace failed.
 *  6. A naive NUL check (`text.includes('\\u0000')`): the round trip of the six characters
 *     `\u0000` (not a NUL) failed with a false ValidationError.
 *  7. `toJsonText` without its non-finite check (the state before issue 21): the 12 NaN /
 *     ±Infinity / Invalid Date cases resolved (each stored `null` in its place), and complete()
 *     with NaN finished the seed job, so the seed test failed too.
 *  8. The path left out of that error (field = the top-level field): the 10 cases whose number
 *     sits below the top level failed on `field`.
 *  9. `completeMany` serialising and completing item by item: item [0] completed the seed job
 *     before item [1] threw (the snapshot and the seed test failed).
 */
import { beforeAll, describe, expect, test } from 'vitest';
import { ValidationError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import type { ClaimedJob, Job } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

/** Jobs created before the cases run: one in every state a bad call could wrongly touch. */
interface Seed {
  pendingId: string;
  deadId: string;
  running: ClaimedJob;
}

interface BadCase {
  /** What is wrong, for the test name. */
  name: string;
  /** The `ValidationError.field` expected. */
  field: string;
  call: (queue: Queue, seed: Seed) => Promise<unknown>;
}

let queue: Queue;
let seed: Seed;

beforeAll(async () => {
  queue = db.queue();
  const pending = await queue.enqueue('seed.pending', { n: 1 }, { dedupeKey: 'seed-key' });
  await queue.enqueue('seed.dead', { n: 2 }, { maxAttempts: 1 });
  const [toKill] = await queue.claim('seed-worker', { tasks: ['seed.dead'] });
  expect(await queue.fail(toKill!, new Error('boom'))).toBe('dead');
  await queue.enqueue('seed.running', { n: 3 });
  const [running] = await queue.claim('seed-worker', { tasks: ['seed.running'] });
  seed = { pendingId: pending.id, deadId: toKill!.id, running: running! };
});

/** Row count plus a hash of every row (any INSERT, UPDATE or DELETE changes it). */
async function snapshot(): Promise<{ count: number; hash: string }> {
  const [row] = await db.sql<{ hash: string | null }>(
    `SELECT md5(string_agg(j::text, '|' ORDER BY j.id)) AS hash FROM ${db.jobs} AS j`,
  );
  return { count: await db.jobCount(), hash: row?.hash ?? '' };
}

function circular(): unknown {
  const value: Record<string, unknown> = { a: 1 };
  value.self = value;
  return value;
}

const good = (task: string) => ({ task, payload: { ok: true } });

const enqueueCases: BadCase[] = [
  // Unserialisable payloads.
  { name: 'BigInt inside the payload', field: 'payload', call: (q) => q.enqueue('t', { n: 1n }) },
  { name: 'BigInt as the payload', field: 'payload', call: (q) => q.enqueue('t', 10n) },
  { name: 'circular payload', field: 'payload', call: (q) => q.enqueue('t', circular()) },
  { name: 'function as the payload', field: 'payload', call: (q) => q.enqueue('t', () => 1) },
  { name: 'symbol as the payload', field: 'payload', call: (q) => q.enqueue('t', Symbol('s')) },
  {
    name: 'payload whose toJSON throws',
    field: 'payload',
    call: (q) =>
      q.enqueue('t', {
        toJSON() {
          throw new Error('no JSON for you');
        },
      }),
  },
  // Numbers JSON cannot carry: JSON.stringify would store them as null.
  { name: 'NaN inside the payload', field: 'payload.x', call: (q) => q.enqueue('t', { x: Number.NaN }) },
  {
    name: 'Infinity as the payload',
    field: 'payload',
    call: (q) => q.enqueue('t', Number.POSITIVE_INFINITY),
  },
  {
    name: '-Infinity in an array of the payload',
    field: 'payload.items[2]',
    call: (q) => q.enqueue('t', { items: [1, null, Number.NEGATIVE_INFINITY] }),
  },
  {
    name: 'NaN deep in the payload, under a key that is not an identifier',
    field: 'payload.order["line items"][0].price',
    call: (q) => q.enqueue('t', { order: { 'line items': [{ price: 0 / 0 }] } }),
  },
  {
    name: 'NaN returned by a toJSON inside the payload',
    field: 'payload.amount.value',
    call: (q) => q.enqueue('t', { amount: { toJSON: () => ({ value: Number.NaN, unit: 'EUR' }) } }),
  },
  {
    name: 'a Number object holding NaN in the payload',
    field: 'payload.n',
    call: (q) => q.enqueue('t', { n: new Number(Number.NaN) }),
  },
  {
    name: 'an Invalid Date in the payload',
    field: 'payload.at',
    call: (q) => q.enqueue('t', { at: new Date('not a date') }),
  },
  { name: 'U+0000 in a payload string', field: 'payload', call: (q) => q.enqueue('t', { s: 'a\u0000b' }) },
  {
    name: 'U+0000 deep in the payload',
    field: 'payload',
    call: (q) => q.enqueue('t', { a: [1, { b: ['x', 'y\\\u0000'] }] }),
  },
  { name: 'U+0000 in a payload key', field: 'payload', call: (q) => q.enqueue('t', { 'k\u0000': 1 }) },
  {
    name: 'lone surrogate in a payload string',
    field: 'payload',
    call: (q) => q.enqueue('t', { s: 'x\ud800' }),
  },
  {
    name: 'lone surrogate in a result',
    field: 'result',
    call: async (q) => q.complete({ id: '1', workerId: 'w', attempt: 1, token: '1' }, 'y\udc00'),
  },
  {
    name: 'lone surrogate in a dedupe key',
    field: 'dedupeKey',
    call: (q) => q.enqueue('t', {}, { dedupeKey: 'k\ud800' }),
  },
  {
    name: 'runAt in the year 10000',
    field: 'runAt',
    call: (q) => q.enqueue('t', {}, { runAt: new Date('+010000-01-01') }),
  },
  {
    name: 'a Date as the options object',
    field: 'options',
    call: (q) => q.enqueue('t', {}, new Date() as never),
  },
  // Task names.
  { name: 'empty task name', field: 'task', call: (q) => q.enqueue('', {}) },
  { name: 'number as task name', field: 'task', call: (q) => q.enqueue(42 as never, {}) },
  { name: 'missing task name', field: 'task', call: (q) => q.enqueue(undefined as never, {}) },
  { name: 'U+0000 in the task name', field: 'task', call: (q) => q.enqueue('a\u0000b', {}) },
  { name: 'task name of 1001 characters', field: 'task', call: (q) => q.enqueue('x'.repeat(1001), {}) },
  { name: 'empty queue name', field: 'queue', call: (q) => q.enqueue('t', {}, { queue: '' }) },
  // Integers.
  { name: 'priority 1.5', field: 'priority', call: (q) => q.enqueue('t', {}, { priority: 1.5 }) },
  { name: 'priority NaN', field: 'priority', call: (q) => q.enqueue('t', {}, { priority: Number.NaN }) },
  {
    name: 'priority Infinity',
    field: 'priority',
    call: (q) => q.enqueue('t', {}, { priority: Number.POSITIVE_INFINITY }),
  },
  {
    name: 'priority as a string',
    field: 'priority',
    call: (q) => q.enqueue('t', {}, { priority: '1' as never }),
  },
  { name: 'priority beyond int4', field: 'priority', call: (q) => q.enqueue('t', {}, { priority: 2 ** 31 }) },
  { name: 'maxAttempts 0', field: 'maxAttempts', call: (q) => q.enqueue('t', {}, { maxAttempts: 0 }) },
  { name: 'maxAttempts -1', field: 'maxAttempts', call: (q) => q.enqueue('t', {}, { maxAttempts: -1 }) },
  { name: 'maxAttempts 2.5', field: 'maxAttempts', call: (q) => q.enqueue('t', {}, { maxAttempts: 2.5 }) },
  { name: 'timeoutMs 0', field: 'timeoutMs', call: (q) => q.enqueue('t', {}, { timeoutMs: 0 }) },
  // Times.
  { name: 'negative delayMs', field: 'delayMs', call: (q) => q.enqueue('t', {}, { delayMs: -1 }) },
  { name: 'NaN delayMs', field: 'delayMs', call: (q) => q.enqueue('t', {}, { delayMs: Number.NaN }) },
  {
    name: 'Infinity delayMs',
    field: 'delayMs',
    call: (q) => q.enqueue('t', {}, { delayMs: Number.POSITIVE_INFINITY }),
  },
  {
    name: 'runAt an invalid Date',
    field: 'runAt',
    call: (q) => q.enqueue('t', {}, { runAt: new Date('not a date') }),
  },
  {
    name: 'runAt a string, not a Date',
    field: 'runAt',
    call: (q) => q.enqueue('t', {}, { runAt: '2030-01-01T00:00:00Z' as never }),
  },
  {
    name: 'both runAt and delayMs',
    field: 'runAt',
    call: (q) => q.enqueue('t', {}, { runAt: new Date(), delayMs: 1000 }),
  },
  // Options.
  {
    name: 'unknown option dedupe_key',
    field: 'options.dedupe_key',
    call: (q) => q.enqueue('t', {}, { dedupe_key: 'x' } as never),
  },
  { name: 'empty dedupeKey', field: 'dedupeKey', call: (q) => q.enqueue('t', {}, { dedupeKey: '' }) },
  { name: 'options not an object', field: 'options', call: (q) => q.enqueue('t', {}, 'fast' as never) },
];

const enqueueManyCases: BadCase[] = [
  {
    name: 'entry [1] of 3 has a BigInt payload',
    field: 'specs[1].payload',
    call: (q) => q.enqueueMany([good('m.a'), { task: 'm.b', payload: { n: 2n } }, good('m.c')]),
  },
  {
    name: 'entry [1] of 3 has NaN in its payload',
    field: 'specs[1].payload.n',
    call: (q) => q.enqueueMany([good('m.a'), { task: 'm.b', payload: { n: Number.NaN } }, good('m.c')]),
  },
  {
    name: 'entry [1] of 3 has an empty task',
    field: 'specs[1].task',
    call: (q) => q.enqueueMany([good('m.a'), { task: '', payload: {} }, good('m.c')]),
  },
  {
    name: 'entry [1] of 3 has priority 1.5',
    field: 'specs[1].priority',
    call: (q) => q.enqueueMany([good('m.a'), { ...good('m.b'), priority: 1.5 }, good('m.c')]),
  },
  {
    name: 'entry [1] of 3 has a negative delayMs',
    field: 'specs[1].delayMs',
    call: (q) => q.enqueueMany([good('m.a'), { ...good('m.b'), delayMs: -5 }, good('m.c')]),
  },
  {
    name: 'entry [1] of 3 has an unknown key',
    field: 'specs[1].dedupe_key',
    call: (q) => q.enqueueMany([good('m.a'), { ...good('m.b'), dedupe_key: 'k' } as never, good('m.c')]),
  },
  {
    name: 'entry [1] of 3 is null',
    field: 'specs[1]',
    call: (q) => q.enqueueMany([good('m.a'), null as never, good('m.c')]),
  },
  { name: 'specs not an array', field: 'specs', call: (q) => q.enqueueMany(good('m.a') as never) },
  {
    name: 'flow node [1] of 2 has NaN in its payload',
    field: 'nodes[1].payload.x',
    call: (q) =>
      q.enqueueFlow([
        { ref: 'a', task: 'f.a', payload: {} },
        { ref: 'b', task: 'f.b', payload: { x: Number.NaN }, dependsOn: ['a'] },
      ]),
  },
];

/** Malformed ids: not the decimal string (or safe integer) of a positive int8. */
const MALFORMED_IDS: [label: string, id: unknown][] = [
  ["'abc'", 'abc'],
  ["''", ''],
  ["'-1'", '-1'],
  ["'1.5'", '1.5'],
  ["'0'", '0'],
  ["'007'", '007'],
  ["' 1'", ' 1'],
  ["'1e3'", '1e3'],
  ["'99999999999999999999' (20 digits)", '99999999999999999999'],
  ["'9223372036854775808' (int8 max + 1)", '9223372036854775808'],
  ['NaN', Number.NaN],
  ['1.5 (a number)', 1.5],
  ['-1 (a number)', -1],
  ['null', null],
  ['undefined', undefined],
  ['an object', { id: '1' }],
];

const idCases: BadCase[] = MALFORMED_IDS.flatMap(([label, id]) => [
  { name: `get(${label})`, field: 'id', call: (q: Queue) => q.get(id as never) },
  { name: `requeue(${label})`, field: 'id', call: (q: Queue) => q.requeue(id as never) },
  { name: `cancel(${label})`, field: 'id', call: (q: Queue) => q.cancel(id as never) },
]);

const claimAndListCases: BadCase[] = [
  { name: 'claim limit 0', field: 'limit', call: (q) => q.claim('w', { limit: 0 }) },
  { name: 'claim limit 1.5', field: 'limit', call: (q) => q.claim('w', { limit: 1.5 }) },
  { name: 'claim limit NaN', field: 'limit', call: (q) => q.claim('w', { limit: Number.NaN }) },
  { name: "claim workerId ''", field: 'workerId', call: (q) => q.claim('') },
  { name: 'claim workerId missing', field: 'workerId', call: (q) => q.claim(undefined as never) },
  { name: 'claim leaseMs 0', field: 'leaseMs', call: (q) => q.claim('w', { leaseMs: 0 }) },
  { name: 'claim tasks []', field: 'tasks', call: (q) => q.claim('w', { tasks: [] }) },
  { name: "claim tasks ['']", field: 'tasks[0]', call: (q) => q.claim('w', { tasks: [''] }) },
  { name: 'claim unknown option', field: 'options.task', call: (q) => q.claim('w', { task: 'x' } as never) },
  { name: "list status 'bogus'", field: 'status', call: (q) => q.list({ status: 'bogus' as never }) },
  { name: 'list limit 0', field: 'limit', call: (q) => q.list({ limit: 0 }) },
  { name: "list after 'abc'", field: 'after', call: (q) => q.list({ after: 'abc' }) },
  { name: 'findActive empty key', field: 'dedupeKey', call: (q) => q.findActive('') },
];

/** Calls with the running seed job's lease (or a damaged copy of it): the job must stay running. */
const leaseCases: BadCase[] = [
  {
    name: 'complete with lease attempt 0',
    field: 'lease.attempt',
    call: (q, s) =>
      q.complete({ id: s.running.id, workerId: s.running.workerId, attempt: 0, token: s.running.token }),
  },
  {
    name: 'complete with lease attempt missing',
    field: 'lease.attempt',
    call: (q, s) =>
      q.complete({ id: s.running.id, workerId: s.running.workerId, token: s.running.token } as never),
  },
  {
    // SPEC §1.3: a lease without its token cannot prove ownership.
    name: 'complete with lease token missing',
    field: 'lease.token',
    call: (q, s) =>
      q.complete({ id: s.running.id, workerId: s.running.workerId, attempt: s.running.attempt } as never),
  },
  {
    name: 'fail with lease token not a token',
    field: 'lease.token',
    call: (q, s) => q.fail({ ...s.running, token: 'x' }, new Error('nope')),
  },
  {
    name: 'completeMany with a lease token of the wrong type',
    field: 'items[0].lease.token',
    call: (q, s) => q.completeMany([{ lease: { ...s.running, token: 1 as never } }]),
  },
  {
    name: 'complete with lease attempt 1.5',
    field: 'lease.attempt',
    call: (q, s) =>
      q.complete({ id: s.running.id, workerId: s.running.workerId, attempt: 1.5, token: s.running.token }),
  },
  {
    name: 'complete with lease workerId empty',
    field: 'lease.workerId',
    call: (q, s) => q.complete({ ...s.running, workerId: '' }),
  },
  {
    name: 'complete with lease id malformed',
    field: 'lease.id',
    call: (q, s) => q.complete({ ...s.running, id: 'abc' }),
  },
  { name: 'complete with no lease', field: 'lease', call: (q) => q.complete(null as never) },
  {
    name: 'complete with a BigInt result',
    field: 'result',
    call: (q, s) => q.complete(s.running, { total: 10n }),
  },
  {
    name: 'complete with NaN in the result',
    field: 'result.total',
    call: (q, s) => q.complete(s.running, { total: Number.NaN }),
  },
  {
    name: 'complete with Infinity as the result',
    field: 'result',
    call: (q, s) => q.complete(s.running, Number.POSITIVE_INFINITY),
  },
  {
    // the whole batch is refused before any write: item [0] would complete the seed job
    name: 'completeMany whose item [1] has Infinity in its result',
    field: 'items[1].result.ratio',
    call: (q, s) =>
      q.completeMany([
        { lease: s.running, result: { ok: true } },
        { lease: s.running, result: { ratio: 1 / 0 } },
      ]),
  },
  {
    name: 'complete with a circular result',
    field: 'result',
    call: (q, s) => q.complete(s.running, circular()),
  },
  {
    name: 'complete with U+0000 in the result',
    field: 'result',
    call: (q, s) => q.complete(s.running, 'nul\u0000'),
  },
  {
    name: 'fail with lease attempt 0',
    field: 'lease.attempt',
    call: (q, s) => q.fail({ ...s.running, attempt: 0 }, new Error('x')),
  },
  {
    name: 'fail with negative retryInMs',
    field: 'retryInMs',
    call: (q, s) => q.fail(s.running, new Error('x'), { retryInMs: -1 }),
  },
  { name: 'renewLease with leaseMs 0', field: 'leaseMs', call: (q, s) => q.renewLease(s.running, 0) },
  {
    name: 'renewLease with lease attempt 0',
    field: 'lease.attempt',
    call: (q, s) => q.renewLease({ ...s.running, attempt: 0 }),
  },
  {
    name: 'release with lease attempt -1',
    field: 'lease.attempt',
    call: (q, s) => q.release({ ...s.running, attempt: -1 }),
  },
];

describe('SPEC §1.11: bad input is a ValidationError naming the field, and changes nothing', () => {
  test.each([...enqueueCases, ...enqueueManyCases, ...idCases, ...claimAndListCases, ...leaseCases])(
    '$name → $field',
    async ({ field, call }) => {
      const before = await snapshot();
      const error = await call(queue, seed).then(
        (value) => {
          throw new Error(`expected a ValidationError on ${field}, resolved with ${String(value)}`);
        },
        (caught: unknown) => caught,
      );
      expect(error).toBeInstanceOf(ValidationError);
      expect(error).toMatchObject({ code: 'ERR_VALIDATION', field, name: 'ValidationError' });
      // The message names the field too, for people reading a log.
      expect((error as ValidationError).message.startsWith(`${field}: `)).toBe(true);
      expect(await snapshot()).toEqual(before);
    },
  );

  test('after all those calls the seed jobs are untouched, and the real lease still completes', async () => {
    expect((await queue.get(seed.pendingId))?.status).toBe('pending');
    expect((await queue.get(seed.deadId))?.status).toBe('dead');
    const running = await queue.get(seed.running.id);
    expect(running).toMatchObject({ status: 'running', workerId: 'seed-worker', attempts: 1, result: null });
    expect(await queue.complete(seed.running, { ok: true })).toBe(true);
    expect(await queue.get(seed.running.id)).toMatchObject({ status: 'done', result: { ok: true } });
  });
});

describe('SPEC §3: a well-formed id that does not exist is not an error', () => {
  test.each(['987654321', '9223372036854775807'])('get/requeue/cancel of %s', async (id) => {
    const before = await snapshot();
    expect(await queue.get(id)).toBeNull();
    expect(await queue.requeue(id)).toBe(false);
    expect(await queue.cancel(id)).toBe(false);
    expect(await snapshot()).toEqual(before);
  });

  test('a safe integer id is accepted as well as its string', async () => {
    expect(await queue.get(987654321 as never)).toBeNull();
    const job = await queue.get(Number(seed.pendingId) as never);
    expect(job?.id).toBe(seed.pendingId);
  });
});

/** Strings that break naive SQL or JSON handling. None of them is bad input. */
const NASTY: string[] = [
  `it's "quoted" and ''doubled''`,
  'back\\slash, \\\\ two, \\n not a newline, \\" not a quote',
  "'); DROP TABLE jobs; --",
  'x" OR "1"="1',
  '$1 $2::text $$dollar$$ $tag$quoted$tag$',
  'ünïcödé 日本語 Ελληνικά 🚀 👩‍👩‍👧 \u2028\u2029 \u200b',
  'line1\nline2\r\n\ttabbed\f\b\v',
  '%_ LIKE wildcards * ? [a-z] {json}',
  '\\u0000 is six characters here, not a NUL',
  '{"looks":"like json"}',
  ' leading and trailing spaces ',
];

function expectVerbatim(job: Job | null | undefined, s: string, label: string, dedupeKey: string): void {
  expect(job).toBeTruthy();
  expect(job?.task).toBe(`task ${label} ${s}`);
  expect(job?.queue).toBe(`queue ${label} ${s}`);
  expect(job?.dedupeKey).toBe(dedupeKey);
  expect(job?.payload).toEqual({ s, list: [s, { [s]: s }], [s]: [s] });
}

describe('names and payloads full of metacharacters round-trip verbatim', () => {
  test.each(NASTY.map((s, i) => [i, s] as const))('#%i %j', async (i, s) => {
    const viaOne = await queue.enqueue(
      `task one ${s}`,
      { s, list: [s, { [s]: s }], [s]: [s] },
      { queue: `queue one ${s}`, dedupeKey: `key one ${s}` },
    );
    const [viaMany] = await queue.enqueueMany([
      {
        task: `task many ${s}`,
        payload: { s, list: [s, { [s]: s }], [s]: [s] },
        queue: `queue many ${s}`,
        dedupeKey: `key many ${s}`,
      },
    ]);
    expect(viaOne.created).toBe(true);
    expect(viaMany?.created).toBe(true);

    for (const [label, id] of [
      ['one', viaOne.id],
      ['many', viaMany!.id],
    ] as const) {
      const dedupeKey = `key ${label} ${s}`;
      expectVerbatim(await queue.get(id), s, label, dedupeKey);

      const active = await queue.findActive(dedupeKey);
      expect(active?.id).toBe(id);
      expectVerbatim(active, s, label, dedupeKey);

      const listed = await queue.list({ task: `task ${label} ${s}`, queue: `queue ${label} ${s}` });
      expect(listed.map((job) => job.id)).toEqual([id]);

      const workerId = `worker ${i} ${s}`;
      const claimed = await queue.claim(workerId, {
        tasks: [`task ${label} ${s}`],
        queues: [`queue ${label} ${s}`],
        limit: 10,
      });
      expect(claimed.map((job) => job.id)).toEqual([id]);
      expectVerbatim(claimed[0], s, label, dedupeKey);
      expect(claimed[0]?.workerId).toBe(workerId);

      expect(await queue.complete(claimed[0]!, { echo: s })).toBe(true);
      expect(await queue.get(id)).toMatchObject({
        status: 'done',
        workerId: null,
        attemptedBy: [workerId],
        result: { echo: s },
      });
    }
    // Same key again while nothing holds it: a new job, found by the exact key.
    const again = await queue.enqueue(`task one ${s}`, null, { dedupeKey: `key one ${s}` });
    expect(again.created).toBe(true);
    expect((await queue.findActive(`key one ${s}`))?.id).toBe(again.id);
    expect(await queue.cancel(again.id)).toBe(true);
  });

  test('the jobs table survived every string above', async () => {
    const [row] = await db.sql<{ table: string | null }>('SELECT to_regclass($1)::text AS table', [db.jobs]);
    expect(row?.table).not.toBeNull();
    expect((await queue.get(seed.pendingId))?.status).toBe('pending');
  });
});
