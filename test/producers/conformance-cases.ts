/**
 * The table of test/producers/conformance.test.ts: enqueue calls, valid and invalid, each run
 * through every producer path that can express it. Options are written as the library takes
 * them (camelCase), with `runAt` as an ISO string (each path converts it its way) and JSON
 * markers for what JSON cannot carry ({ $float: 'nan' }) or JavaScript cannot hold ({ $json:
 * '1e400' }: that text, as it is, in the JSON a path sends). `setup` makes the jobs a case needs
 * (a dedupe key's holder, a dependency) and names them; an option given as a function gets
 * those names' ids.
 */
import type { Queue } from '../../src/queue.js';

export const PATHS = ['library', 'sql', 'python', 'http'] as const;
export type PathName = (typeof PATHS)[number];

/** Ids of the jobs a case's setup made, by name. */
export type Named = Record<string, string>;

export interface Case {
  name: string;
  task?: unknown;
  /** `undefined`: no payload given at all (the library's default: JSON null). */
  payload?: unknown;
  options?: Record<string, unknown> | ((ids: Named) => Record<string, unknown>);
  setup?: (queue: Queue) => Promise<Named>;
  /** The paths that can express the call (default: all four), and why the others cannot. */
  only?: { paths: PathName[]; why: string };
  /** The expected answer: a new job, a dedupe hit on the named job, or an error naming a field. */
  expect: { created: true } | { holder: string } | { field: string };
  /**
   * Paths whose error is meant to name another field, and why (the library keeps issue 23's
   * `sequence` unknown until sequences exist; the others name it already).
   */
  fieldOf?: Partial<Record<PathName, string>>;
  /** The error messages are not the same text on every path, and why (the field still is). */
  messagesDiffer?: string;
}

const TASK = 'conf.task';
const nan = { $float: 'nan' };

/** A job holding dedupe key `key` in state `state`, made through the library. */
function holder(
  key: string,
  state: 'pending' | 'running' | 'done',
  options: Record<string, unknown> = {},
  task = TASK,
) {
  return async (queue: Queue): Promise<Named> => {
    const { id } = await queue.enqueue(task, { holder: true }, { dedupeKey: key, ...options });
    if (state !== 'pending') {
      const [job] = await queue.claim('conf-worker', { tasks: [task] });
      if (!job || job.id !== id) throw new Error(`setup: claimed ${job?.id}, not ${id}`);
      if (state === 'done') await queue.complete(job, { ok: true });
    }
    return { holder: id };
  };
}

/** A job without a key in state `state` (a dependency). */
function dependency(state: 'pending' | 'done' | 'dead') {
  return async (queue: Queue): Promise<Named> => {
    const { id } = await queue.enqueue('conf.dep', { dep: true }, { maxAttempts: 1 });
    if (state !== 'pending') {
      const [job] = await queue.claim('conf-worker', { tasks: ['conf.dep'] });
      if (!job) throw new Error('setup: nothing to claim');
      if (state === 'done') await queue.complete(job, 'dep-result');
      else await queue.fail(job, new Error('setup: dead on purpose'));
    }
    return { dep: id };
  };
}

export const CASES: Case[] = [
  // ---- valid calls: the stored row, the answer, the wake-up hint ----
  { name: 'defaults', payload: { n: 1 }, expect: { created: true } },
  {
    name: 'every plain option',
    payload: { n: 2 },
    options: {
      queue: 'conf-q',
      priority: -5,
      maxAttempts: 7,
      timeoutMs: 1500,
      delayMs: 60_000,
      group: 'tenant-1',
    },
    expect: { created: true },
  },
  {
    name: 'runAt in UTC, milliseconds',
    options: { runAt: '2031-01-02T03:04:05.678Z' },
    payload: [],
    expect: { created: true },
  },
  {
    name: 'runAt with an offset (the same instant)',
    options: { runAt: '2031-01-02T05:04:05.678+02:00', priority: 1 },
    payload: 'text',
    expect: { created: true },
  },
  { name: 'payload null', payload: null, expect: { created: true } },
  { name: 'payload not given: JSON null', expect: { created: true } },
  {
    name: 'payload of every JSON kind',
    payload: {
      s: 'ü "quoted" \\ back\nslash 😀',
      n: [0, -1, 1.5, 1e-7, 2 ** 53 - 1],
      b: [true, false],
      o: { deep: { x: null } },
    },
    expect: { created: true },
  },
  {
    name: 'largest priority and attempts',
    options: { priority: 2_147_483_647, maxAttempts: 1_000_000 },
    expect: { created: true },
  },
  { name: 'smallest priority', options: { priority: -2_147_483_648 }, expect: { created: true } },
  { name: 'delayMs rounded to the millisecond', options: { delayMs: 1500.6 }, expect: { created: true } },
  { name: 'delayMs 0', options: { delayMs: 0 }, expect: { created: true } },
  { name: 'timeoutMs null: none', options: { timeoutMs: null }, expect: { created: true } },
  { name: 'dedupeKey null: none', options: { dedupeKey: null }, expect: { created: true } },
  { name: 'task of 1000 characters', task: 't'.repeat(1000), expect: { created: true } },
  {
    name: 'task of 500 astral characters (1000 UTF-16 units)',
    task: '😀'.repeat(500),
    expect: { created: true },
  },
  { name: 'group with a queue', options: { queue: 'tenants', group: 'acme' }, expect: { created: true } },
  {
    name: 'sequence (SPEC §11): stored, the job waits for its turn',
    options: { sequence: 'account:42', queue: 'seq-q', priority: 3 },
    expect: { created: true },
  },
  {
    name: 'onDependencyFailure run without dependsOn: not stored',
    options: { onDependencyFailure: 'run' },
    expect: { created: true },
  },
  { name: 'dependsOn empty: no dependencies', options: { dependsOn: [] }, expect: { created: true } },

  // ---- dedupe: every mode, hit and miss ----
  { name: 'dedupeKey, new', options: { dedupeKey: 'k-new' }, expect: { created: true } },
  {
    name: 'dedupeKey hit on a pending holder',
    payload: { second: true },
    options: { dedupeKey: 'k', priority: 1 },
    setup: holder('k', 'pending'),
    expect: { holder: 'holder' },
  },
  {
    name: 'dedupeKey hit on a running holder',
    options: { dedupeKey: 'k' },
    setup: holder('k', 'running'),
    expect: { holder: 'holder' },
  },
  {
    name: 'dedupeKey: a done holder holds nothing',
    options: { dedupeKey: 'k' },
    setup: holder('k', 'done'),
    expect: { created: true },
  },
  {
    name: "scope 'pending': hit on a queued holder",
    options: { dedupeKey: 'kp', dedupe: { scope: 'pending' } },
    setup: holder('kp', 'pending', { dedupe: { scope: 'pending' } }),
    expect: { holder: 'holder' },
  },
  {
    name: "scope 'pending': a running holder lets one more queue",
    options: { dedupeKey: 'kp', dedupe: { scope: 'pending' } },
    setup: holder('kp', 'running', { dedupe: { scope: 'pending' } }),
    expect: { created: true },
  },
  {
    name: "scope 'active' spelt out: the plain mode",
    options: { dedupeKey: 'ka', dedupe: { scope: 'active' } },
    expect: { created: true },
  },
  {
    name: 'throttle (windowMs): new key, the window starts',
    options: { dedupeKey: 'kw', dedupe: { windowMs: 60_000 } },
    expect: { created: true },
  },
  {
    name: 'throttle: hit while the window holds',
    options: { dedupeKey: 'kw', dedupe: { windowMs: 60_000 } },
    setup: holder('kw', 'pending', { dedupe: { windowMs: 60_000 } }),
    expect: { holder: 'holder' },
  },
  {
    name: 'throttle: hit on a holder that finished within the window',
    options: { dedupeKey: 'kw', dedupe: { windowMs: 60_000 } },
    setup: holder('kw', 'done', { dedupe: { windowMs: 60_000 } }),
    expect: { holder: 'holder' },
  },
  {
    name: 'debounce (replace): a pending holder takes the payload, priority and run time',
    payload: { replaced: 'yes' },
    options: { dedupeKey: 'kr', dedupe: { replace: true }, priority: 3, delayMs: 30_000 },
    setup: holder('kr', 'pending', { dedupe: { replace: true }, delayMs: 10_000 }),
    expect: { holder: 'holder' },
  },
  {
    name: 'debounce: maxWaitMs caps the run time at the holder’s creation + maxWaitMs',
    options: { dedupeKey: 'kr', dedupe: { replace: true, maxWaitMs: 20_000 }, delayMs: 600_000 },
    setup: holder('kr', 'pending', { dedupe: { replace: true, maxWaitMs: 20_000 }, delayMs: 10_000 }),
    expect: { holder: 'holder' },
  },
  {
    name: 'debounce: new key capped by maxWaitMs',
    options: { dedupeKey: 'kr-new', dedupe: { replace: true, maxWaitMs: 5_000 }, delayMs: 60_000 },
    expect: { created: true },
  },
  {
    name: 'debounce: a running holder is left alone',
    payload: { replaced: 'no' },
    options: { dedupeKey: 'kr', dedupe: { replace: true } },
    setup: holder('kr', 'running', { dedupe: { replace: true } }),
    expect: { holder: 'holder' },
  },
  {
    name: 'debounce: a holder of another task is left alone',
    payload: { replaced: 'no' },
    options: { dedupeKey: 'kr', dedupe: { replace: true } },
    setup: holder('kr', 'pending', { dedupe: { replace: true } }, 'conf.other'),
    expect: { holder: 'holder' },
  },

  // ---- dependsOn (SPEC §10) ----
  {
    name: 'dependsOn a pending job: waiting',
    options: (ids) => ({ dependsOn: [ids.dep] }),
    setup: dependency('pending'),
    expect: { created: true },
  },
  {
    name: 'dependsOn a done job: pending at the commit, with the hint',
    options: (ids) => ({ dependsOn: [ids.dep] }),
    setup: dependency('done'),
    expect: { created: true },
  },
  {
    name: 'dependsOn a dead job: cancelled at the commit',
    options: (ids) => ({ dependsOn: [ids.dep] }),
    setup: dependency('dead'),
    expect: { created: true },
  },
  {
    name: "dependsOn a dead job with onDependencyFailure 'run': pending",
    options: (ids) => ({ dependsOn: [ids.dep], onDependencyFailure: 'run' }),
    setup: dependency('dead'),
    expect: { created: true },
  },
  {
    name: 'dependsOn as a number and repeated: one edge',
    options: (ids) => ({ dependsOn: [Number(ids.dep), ids.dep] }),
    setup: dependency('pending'),
    expect: { created: true },
  },
  {
    name: 'dependsOn jobs of one flow: joins the flow',
    options: (ids) => ({ dependsOn: [ids.a, ids.b], delayMs: 5_000, group: 'g' }),
    setup: async (queue) => {
      const { jobs } = await queue.enqueueFlow([
        { ref: 'a', task: 'conf.flow', payload: 1 },
        { ref: 'b', task: 'conf.flow', payload: 2 },
      ]);
      return { a: jobs.a as string, b: jobs.b as string };
    },
    expect: { created: true },
  },

  // ---- invalid input: an error naming the field, nothing written ----
  { name: 'task empty', task: '', expect: { field: 'task' } },
  { name: 'task null', task: null, expect: { field: 'task' } },
  {
    name: 'task a number',
    task: 5,
    only: {
      paths: ['library', 'python', 'http'],
      why: 'the SQL function takes task as text: 5 arrives as "5", a valid name',
    },
    expect: { field: 'task' },
  },
  { name: 'task too long', task: 'x'.repeat(1001), expect: { field: 'task' } },
  { name: 'task too long in UTF-16 units', task: `${'😀'.repeat(500)}x`, expect: { field: 'task' } },
  {
    name: 'task with NUL',
    task: 'a\u0000b',
    only: {
      paths: ['library', 'python', 'http'],
      why: 'PostgreSQL text cannot hold NUL: no SQL call can send it',
    },
    expect: { field: 'task' },
  },
  { name: 'queue empty', options: { queue: '' }, expect: { field: 'queue' } },
  { name: 'queue a number', options: { queue: 7 }, expect: { field: 'queue' } },
  {
    name: 'queue null',
    options: { queue: null },
    only: { paths: ['library', 'sql', 'http'], why: 'Python None means "not given" (the default queue)' },
    expect: { field: 'queue' },
  },
  { name: 'priority fractional', options: { priority: 1.5 }, expect: { field: 'priority' } },
  { name: 'priority a string', options: { priority: '5' }, expect: { field: 'priority' } },
  { name: 'priority beyond int4', options: { priority: 2_147_483_648 }, expect: { field: 'priority' } },
  { name: 'priority a boolean', options: { priority: true }, expect: { field: 'priority' } },
  { name: 'maxAttempts 0', options: { maxAttempts: 0 }, expect: { field: 'maxAttempts' } },
  {
    name: 'maxAttempts beyond the bound',
    options: { maxAttempts: 1_000_001 },
    expect: { field: 'maxAttempts' },
  },
  { name: 'delayMs negative', options: { delayMs: -1 }, expect: { field: 'delayMs' } },
  { name: 'delayMs a string', options: { delayMs: '10s' }, expect: { field: 'delayMs' } },
  {
    name: 'delayMs beyond a hundred years',
    options: { delayMs: 3_153_600_000_001 },
    expect: { field: 'delayMs' },
  },
  {
    name: 'runAt and delayMs',
    options: { runAt: '2031-01-01T00:00:00Z', delayMs: 5 },
    expect: { field: 'runAt' },
  },
  {
    name: 'runAt not a timestamp',
    options: { runAt: 'tomorrow' },
    expect: { field: 'runAt' },
    messagesDiffer: 'the library takes a Date ("must be a valid Date"), the others an ISO 8601 string',
  },
  {
    name: 'runAt without its offset',
    options: { runAt: '2031-01-01T09:00:00' },
    only: {
      paths: ['sql', 'http'],
      why: 'a Date and an aware datetime always have an offset (Python refuses a naive one: test_enqueue.py)',
    },
    expect: { field: 'runAt' },
  },
  {
    name: 'runAt past the year 9999 (UTC)',
    options: { runAt: '9999-12-31T23:00:00-05:00' },
    expect: { field: 'runAt' },
    messagesDiffer: 'the library shows the Date as ISO, the others the string given',
  },
  {
    name: 'runAt a day that does not exist',
    options: { runAt: '2031-02-30T09:00:00Z' },
    only: { paths: ['sql', 'http'], why: 'a Date or a datetime cannot be built for February 30' },
    expect: { field: 'runAt' },
  },
  { name: 'timeoutMs 0', options: { timeoutMs: 0 }, expect: { field: 'timeoutMs' } },
  { name: 'timeoutMs fractional', options: { timeoutMs: 2.5 }, expect: { field: 'timeoutMs' } },
  {
    name: 'dedupe without dedupeKey',
    options: { dedupe: { scope: 'pending' } },
    expect: { field: 'dedupe' },
  },
  {
    name: 'dedupe not an object',
    options: { dedupeKey: 'k', dedupe: 'pending' },
    expect: { field: 'dedupe' },
  },
  {
    name: 'dedupe with an unknown key',
    options: { dedupeKey: 'k', dedupe: { window: 5 } },
    expect: { field: 'dedupe.window' },
  },
  {
    name: 'dedupe.scope unknown',
    options: { dedupeKey: 'k', dedupe: { scope: 'all' } },
    expect: { field: 'dedupe.scope' },
  },
  {
    name: 'dedupe.replace not a boolean',
    options: { dedupeKey: 'k', dedupe: { replace: 'yes' } },
    expect: { field: 'dedupe.replace' },
  },
  {
    name: 'dedupe.windowMs under 1 ms',
    options: { dedupeKey: 'k', dedupe: { windowMs: 0.4 } },
    expect: { field: 'dedupe.windowMs' },
  },
  {
    name: 'dedupe replace and windowMs',
    options: { dedupeKey: 'k', dedupe: { replace: true, windowMs: 10 } },
    expect: { field: 'dedupe.windowMs' },
  },
  {
    name: 'dedupe maxWaitMs without replace',
    options: { dedupeKey: 'k', dedupe: { maxWaitMs: 10 } },
    expect: { field: 'dedupe.maxWaitMs' },
  },
  {
    name: "dedupe scope 'pending' with replace",
    options: { dedupeKey: 'k', dedupe: { scope: 'pending', replace: true } },
    expect: { field: 'dedupe.scope' },
  },
  { name: 'dedupeKey empty', options: { dedupeKey: '' }, expect: { field: 'dedupeKey' } },
  { name: 'dependsOn not an array', options: { dependsOn: '42' }, expect: { field: 'dependsOn' } },
  { name: 'dependsOn a bad id', options: { dependsOn: ['1', '0'] }, expect: { field: 'dependsOn[1]' } },
  {
    name: 'dependsOn a job that does not exist',
    options: { dependsOn: ['999999999'] },
    expect: { field: 'dependsOn' },
  },
  {
    name: 'dependsOn with a dedupeKey',
    options: (ids) => ({ dependsOn: [ids.dep], dedupeKey: 'k' }),
    setup: dependency('pending'),
    expect: { field: 'dependsOn' },
  },
  { name: 'group of 201 bytes', options: { group: `${'é'.repeat(100)}x` }, expect: { field: 'group' } },
  {
    name: 'queue and group too long together',
    options: { queue: '€'.repeat(800), group: 'g'.repeat(200), priority: 1 },
    task: 'x',
    expect: { field: 'queue' },
  },
  { name: 'group empty', options: { group: '' }, expect: { field: 'group' } },
  {
    name: 'onDependencyFailure unknown',
    options: { onDependencyFailure: 'ignore' },
    expect: { field: 'onDependencyFailure' },
  },
  {
    name: 'an unknown option',
    options: { dedupe_key: 'k' },
    only: {
      paths: ['library', 'sql', 'http'],
      why: 'Python has no such keyword: a TypeError, before the client runs',
    },
    expect: { field: 'options.dedupe_key' },
    messagesDiffer: 'each lists its own known options (the library has client)',
  },
  { name: 'sequence empty', options: { sequence: '' }, expect: { field: 'sequence' } },
  { name: 'sequence not a string', options: { sequence: 42 }, expect: { field: 'sequence' } },
  {
    name: 'sequence of 201 bytes',
    options: { sequence: `${'é'.repeat(100)}x` },
    expect: { field: 'sequence' },
  },
  {
    name: 'sequence with a dedupeKey',
    options: { sequence: 'account:42', dedupeKey: 'k' },
    expect: { field: 'sequence' },
  },
  {
    name: 'sequence with dependsOn',
    options: (ids) => ({ sequence: 'account:42', dependsOn: [ids.dep] }),
    setup: dependency('pending'),
    expect: { field: 'sequence' },
  },
  {
    name: 'a NaN in the payload',
    payload: { items: [1, nan] },
    only: { paths: ['library', 'python'], why: 'JSON (SQL jsonb, an HTTP body) cannot carry NaN' },
    expect: { field: 'payload.items[1]' },
    messagesDiffer: 'each language says what to send instead in its own terms (null / None)',
  },
  {
    name: 'a NUL in a payload string',
    payload: { s: 'a\u0000b' },
    only: { paths: ['library', 'python', 'http'], why: 'jsonb cannot hold U+0000: no SQL call can send it' },
    expect: { field: 'payload' },
  },
  {
    name: 'a lone surrogate in the payload',
    payload: { s: '\ud800' },
    only: { paths: ['library', 'python', 'http'], why: 'jsonb cannot hold it: no SQL call can send it' },
    expect: { field: 'payload' },
  },

  // ---- the review of issue 25 ----
  {
    name: 'dedupeKey of 2400 bytes (the bound)',
    options: { dedupeKey: '€'.repeat(800) },
    expect: { created: true },
  },
  {
    name: 'dedupeKey over 2400 bytes: one index entry cannot hold it',
    options: { dedupeKey: `${'€'.repeat(800)}x` },
    expect: { field: 'dedupeKey' },
  },
  {
    name: 'two unknown options: the smallest by code point is named (U+FFFF before U+1F600)',
    options: { '\u{1F600}': 1, '\uFFFF': 2 },
    only: { paths: ['library', 'sql', 'http'], why: 'Python has no such keywords: a TypeError' },
    expect: { field: 'options.\uFFFF' },
    messagesDiffer: 'the library lists client among its known options, SQL and HTTP sequence',
  },
  {
    name: 'an unknown option and sequence: the unknown option first',
    options: { sequence: 'account:42', bogus: 1 },
    only: { paths: ['library', 'sql', 'http'], why: 'Python has no bogus keyword: a TypeError' },
    expect: { field: 'options.bogus' },
    messagesDiffer: 'the library lists client among its known options, SQL and HTTP sequence',
  },
  {
    name: 'task empty and runAt not a timestamp: task first',
    task: '',
    options: { runAt: 'tomorrow' },
    expect: { field: 'task' },
  },
  {
    name: 'runAt not a timestamp with delayMs: the pair first',
    options: { runAt: 'tomorrow', delayMs: 5 },
    expect: { field: 'runAt' },
  },
  {
    name: 'a payload number at the largest double',
    payload: { big: 1.7976931348623157e308, small: -1.7976931348623157e308 },
    expect: { created: true },
  },
  {
    name: 'a payload number beyond a double (JavaScript would read Infinity)',
    payload: { a: [1, { $json: `1${'0'.repeat(400)}` }] },
    only: {
      paths: ['sql', 'python', 'http'],
      why: 'a JavaScript number cannot be beyond a double: the library never sees one',
    },
    expect: { field: 'payload.a[1]' },
    messagesDiffer:
      'HTTP parses the body with JavaScript, where it is already Infinity (the library’s message)',
  },
  {
    name: 'task of more than 3000 bytes: refused by its size',
    task: 'ü'.repeat(1501),
    expect: { field: 'task' },
    messagesDiffer: 'SQL (and so Python) counts the bytes of a string that long, without reading it',
  },
  {
    name: 'client over HTTP',
    options: { client: { query: 1 } },
    only: {
      paths: ['http', 'sql'],
      why: 'the library takes a client (the SQL function names it unknown, as HTTP does)',
    },
    expect: { field: 'options.client' },
    messagesDiffer: 'HTTP says why no client can come over HTTP',
  },
];
