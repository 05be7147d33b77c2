/**
 * SPEC §13 — one enqueue, four producers that cannot drift: every case of conformance-cases.ts
 * goes through `queue.enqueue` (the library), `<schema>.enqueue(task, payload, options)` (SQL),
 * `skiplock.enqueue` (the Python client, clients/python) and `POST /api/jobs` (HTTP), each on an
 * emptied jobs table with the case's setup made again, and each path must leave the same thing:
 * - the same answer: a new job (`created: true`), or a dedupe hit on the same holder;
 * - the same rows: every column of every job (the new one and the setup's, which a debounce
 *   rewrites) but the ids, timestamps and flow ids, which are compared by what they point at —
 *   run_after relative to the row's creation (exact for a new row; within a second for a holder
 *   the call rewrote), the same edges (job_dependencies), throttle windows and pending checks;
 * - the same wake-up hint: a NOTIFY on the schema's channel delivered by the call, or none;
 * - or, for bad input, an error naming the same field (and the same message, unless the case
 *   says why not), with nothing written.
 * The library is the reference; a difference is reported per path and column. The same for
 * batches: `queue.enqueueMany`, `<schema>.enqueue_many` and the Python client's `enqueue_many`
 * (plain, dedupe modes mixed, dependsOn, bad elements), compared the same way, ids' order too.
 *
 * Python runs through test/producers/fixtures/python_driver.py (the venv of test/support/python.ts):
 * without it these cases skip with a note, and fail under SKIPLOCK_REQUIRE_PYTHON=1 (CI).
 *
 * Deliberate breaks seen failing (each undone after):
 * - migration 17 with DEFAULT_PRIORITY 99: 28 cases failed, 'sql' and 'python' differing from the
 *   library on `priority` ("priority 99 instead of 100"); 'http', which calls the library, did not;
 * - the Python client sending `dedupe_key` under its Python name, and at once the HTTP route
 *   passing `runAt` on as a string: 29 cases failed — every dedupe case of 'python'
 *   ("options.dedupe_key: is not a known option"), and every runAt case of 'http' (no job where
 *   the library made one; "runAt: must be a valid Date" where the others named the ISO form).
 * - enqueue_many's job-by-job path ordered by the database's collation with NULLs last (the
 *   library orders keys by code point, jobs without a key first): "dedupe modes mixed" failed
 *   (the rows' ids in another order); its one-INSERT path drawing its ids in reverse: "plain"
 *   failed the same way (claim order among equals would not follow the input).
 * - issue 25, in one run: the library comparing keys by UTF-16 units, migration 18 without its
 *   byte bound on dedupeKey and its payload check, HTTP's body checks and the Python client as
 *   before the review: 7 of the new cases failed — "dedupeKey over 2400 bytes" (SQL and Python
 *   answered a job where the library refused), the two unknown-option cases and both runAt-order
 *   cases (HTTP named sequence, runAt before task, or the ISO form instead of "give either"), "a
 *   payload number beyond a double" (SQL and Python made a job), and "dedupe modes with keys
 *   beyond U+FFFF" (SQL and Python drew the ids in another order than the library).
 * A check-then-insert in the SQL function is not caught here (one call at a time cannot race):
 * sql-function.test.ts's held-open races catch it.
 * The last test proves the comparison itself can fail: a drifted copy of the SQL function
 * (another default priority; an option dropped) is caught.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type AdminServer, startAdminServer } from '../../src/admin/server.js';
import { quoteIdent } from '../../src/db/identifier.js';
import { ValidationError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { type Listener, listen } from '../support/listener.js';
import {
  describeWithPython,
  type PythonDriver,
  pythonMissing,
  startPythonDriver,
} from '../support/python.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { REPO_ROOT } from '../support/spawn.js';
import { CASES, type Case, type Named, PATHS, type PathName } from './conformance-cases.js';

const db = useTestDatabase();
const s = quoteIdent(TEST_SCHEMA);
let queue: Queue;
let server: AdminServer;
let listener: Listener;
let python: PythonDriver | null = null;

beforeAll(async () => {
  queue = db.queue();
  server = await startAdminServer({ queue, port: 0, token: null, sampleIntervalMs: 3_600_000 });
  listener = await listen(db.url);
  if (pythonMissing() === null)
    python = startPythonDriver(join(REPO_ROOT, 'test/producers/fixtures/python_driver.py'));
});
afterAll(async () => {
  await python?.close();
  await listener?.close();
  await server?.close();
});

/** What a path answered: the job (id, created) or an error's field and message. */
type Answer = { id: string; created: boolean };
type Outcome = { ok: Answer | Answer[] } | { error: { field: string | null; message: string; kind: string } };

/** A call as a path gets it (the case's options resolved with the setup's ids). */
interface Call {
  task: unknown;
  hasTask: boolean;
  payload: unknown;
  options: Record<string, unknown>;
}

/** Values JSON cannot carry, written as markers in the cases: real values for JavaScript. */
function revive(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(revive);
  if (typeof value === 'object' && value !== null) {
    const marker = (value as { $float?: string }).$float;
    if (marker !== undefined && Object.keys(value).length === 1)
      return Number(marker === 'nan' ? Number.NaN : marker);
    const raw = rawMarker(value);
    if (raw !== undefined) return JSON.parse(raw);
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, revive(v)]));
  }
  return value;
}

/** The text of a { $json: text } marker. */
function rawMarker(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const raw = (value as { $json?: unknown }).$json;
  return typeof raw === 'string' && Object.keys(value).length === 1 ? raw : undefined;
}

/** JSON text of `value`, each { $json: text } marker written as that text itself (1e400 stays 1e400). */
function jsonWithRaw(value: unknown): string {
  const raws: string[] = [];
  const text = JSON.stringify(value, (_key, v: unknown) => {
    const raw = rawMarker(v);
    if (raw === undefined) return v;
    raws.push(raw);
    return `\u0000raw${raws.length - 1}\u0000`;
  });
  return text.replace(/"\\u0000raw(\d+)\\u0000"/g, (_, i: string) => raws[Number(i)] as string);
}

function libraryError(error: unknown): Outcome {
  if (error instanceof ValidationError)
    return { error: { field: error.field, message: error.message, kind: 'validation' } };
  return {
    error: {
      field: null,
      message: String((error as Error).message),
      kind: String((error as { code?: string }).code),
    },
  };
}

const SNAKE: Record<string, string> = {
  dedupeKey: 'dedupe_key',
  maxAttempts: 'max_attempts',
  runAt: 'run_at',
  delayMs: 'delay_ms',
  timeoutMs: 'timeout_ms',
  dependsOn: 'depends_on',
  onDependencyFailure: 'on_dependency_failure',
  windowMs: 'window_ms',
  maxWaitMs: 'max_wait_ms',
};

/** The four producers, each with its own conventions (runAt as a Date, a datetime, a string). */
const PRODUCERS: Record<PathName, (call: Call, sqlFunction?: string) => Promise<Outcome>> = {
  async library(call) {
    const options = revive(call.options) as Record<string, unknown>;
    if (typeof options.runAt === 'string') options.runAt = new Date(options.runAt);
    try {
      const result = await queue.enqueue(call.task as string, revive(call.payload), options);
      return { ok: { id: result.id, created: result.created } };
    } catch (error) {
      return libraryError(error);
    }
  },

  async sql(call, sqlFunction = `${s}.enqueue`) {
    const payload = call.payload === undefined ? null : jsonWithRaw(call.payload);
    try {
      const rows = await db.sql<{ id: string; created: boolean }>(
        `SELECT id::text AS id, created FROM ${sqlFunction}($1, $2::jsonb, $3::jsonb)`,
        [call.task, payload, JSON.stringify(call.options)],
      );
      return { ok: rows[0] as { id: string; created: boolean } };
    } catch (error) {
      const e = error as pg.DatabaseError;
      return e.code === '22023'
        ? { error: { field: e.column ?? null, message: e.message, kind: 'validation' } }
        : { error: { field: null, message: e.message, kind: e.code ?? 'unknown' } };
    }
  },

  async python(call) {
    if (python === null) throw new Error('no Python driver');
    const kwargs: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(call.options)) {
      let v = value;
      if (key === 'runAt' && typeof v === 'string') v = { $datetime: v };
      if (key === 'dedupe' && typeof v === 'object' && v !== null && !Array.isArray(v)) {
        v = Object.fromEntries(Object.entries(v).map(([k, x]) => [SNAKE[k] ?? k, x]));
      }
      kwargs[SNAKE[key] ?? key] = v;
    }
    const reply = await python.request<{
      ok?: { id: string; created: boolean };
      error?: Record<string, string | null>;
    }>({
      op: 'enqueue',
      url: db.url,
      schema: TEST_SCHEMA,
      task: call.task,
      payload: call.payload ?? null,
      kwargs,
    });
    if (reply.ok) return { ok: reply.ok };
    const e = reply.error ?? {};
    return {
      error: {
        field: e.field ?? null,
        message: String(e.message),
        kind: e.kind === 'ValidationError' ? 'validation' : `${e.kind} ${e.sqlstate ?? ''}`,
      },
    };
  },

  async http(call) {
    const body: Record<string, unknown> = { ...call.options };
    if (call.hasTask) body.task = call.task;
    if (call.payload !== undefined) body.payload = call.payload;
    const response = await fetch(new URL('/api/jobs', server.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: jsonWithRaw(body),
    });
    const answer = (await response.json()) as {
      id: string;
      created: boolean;
      error?: { field?: string; message: string; code: string };
    };
    if (response.status === 201 || response.status === 200) {
      if (answer.created !== (response.status === 201))
        throw new Error(`HTTP ${response.status} with created ${answer.created}`);
      return { ok: { id: answer.id, created: answer.created } };
    }
    const e = answer.error ?? { message: `HTTP ${response.status}`, code: '?' };
    return {
      error: {
        field: e.field ?? null,
        message: e.message,
        kind: response.status === 400 ? 'validation' : `${response.status} ${e.code}`,
      },
    };
  },
};

/** What a path left behind, with ids replaced by what they point at. */
interface Result {
  answer: unknown;
  /** Nothing in the tables changed (the setup's rows as they were, no edge, window or check added). */
  untouched: boolean;
  hinted: boolean;
  jobs: Record<string, unknown>[];
  edges: string[];
  windows: string[];
  checks: number;
}

interface JobRow {
  id: string;
  row: Record<string, unknown>;
  flow_id: string | null;
  cancelled_by: string | null;
  last_error: string | null;
  rel_created_ms: number;
  rel_updated_ms: number;
  run_after_ms: number;
}

async function emptyTables(): Promise<void> {
  await db.sql(
    `TRUNCATE ${s}.jobs, ${s}.job_dependencies, ${s}.dedupe_windows, ${s}.dependency_checks, ${s}.sequence_arrivals`,
  );
}

async function jobRows(): Promise<JobRow[]> {
  return db.sql<JobRow>(
    `SELECT j.id::text AS id,
            to_jsonb(j) - ARRAY['id', 'created_at', 'updated_at', 'run_after', 'lease_until', 'run_started_at',
                                'cancel_requested_at', 'flow_id', 'cancelled_by', 'last_error'] AS row,
            j.flow_id::text AS flow_id, j.cancelled_by::text AS cancelled_by, j.last_error,
            round(extract(epoch FROM j.run_after - j.created_at) * 1000)::float8 AS rel_created_ms,
            round(extract(epoch FROM j.run_after - j.updated_at) * 1000)::float8 AS rel_updated_ms,
            floor(extract(epoch FROM j.run_after) * 1000)::float8 AS run_after_ms
     FROM ${s}.jobs AS j ORDER BY j.id`,
  );
}

/** True when a wake-up hint arrived since the last sync (a marker sent now closes the window). */
async function hinted(): Promise<boolean> {
  const marker = `conformance-${randomBytes(4).toString('hex')}`;
  await listener.mark(db.pool, marker);
  let seen = false;
  for (;;) {
    const payload = await listener.next();
    if (payload === marker) return seen;
    if (payload === 'jobs') seen = true;
  }
}

/** Runs one case through one path on emptied tables; returns what it left, normalised. */
async function run(path: PathName, c: Case, sqlFunction?: string): Promise<Result> {
  return observe(c.setup, (named) => {
    const call: Call = {
      task: 'task' in c ? c.task : 'conf.task',
      hasTask: 'task' in c ? c.task !== undefined : true,
      payload: c.payload,
      options: typeof c.options === 'function' ? c.options(named) : (c.options ?? {}),
    };
    return {
      absolute: JSON.stringify(call.options).includes('runAt'),
      outcome: PRODUCERS[path](call, sqlFunction),
    };
  });
}

/**
 * Runs `invoke` on emptied tables after `setup`; returns what it left, normalised: ids by what
 * they are (the setup's by name, new jobs as new#n in id order), flows by first sight.
 */
async function observe(
  setup: ((queue: Queue) => Promise<Named>) | undefined,
  invoke: (named: Named) => { absolute: boolean; outcome: Promise<Outcome> },
): Promise<Result> {
  await emptyTables();
  const named: Named = setup ? await setup(queue) : {};
  const before = await jobRows();
  const sideTables = () =>
    db.sql(
      `SELECT (SELECT count(*) FROM ${s}.job_dependencies)::int AS edges, (SELECT count(*) FROM ${s}.dedupe_windows)::int AS windows,
              (SELECT json_agg(w ORDER BY key) FROM ${s}.dedupe_windows AS w)::text AS w`,
    );
  const sideBefore = JSON.stringify(await sideTables());
  await listener.sync(db.pool);
  const { absolute, outcome: pending } = invoke(named);
  const outcome = await pending;
  const wasHinted = await hinted();
  const after = await jobRows();
  const untouched =
    JSON.stringify(after) === JSON.stringify(before) && JSON.stringify(await sideTables()) === sideBefore;

  const names = new Map<string, string>(Object.entries(named).map(([name, id]) => [id, name]));
  for (const row of after) {
    if (!names.has(row.id))
      names.set(row.id, before.some((b) => b.id === row.id) ? `setup#${row.id}` : `new#${names.size}`);
  }
  const name = (id: string | null) => (id === null ? null : (names.get(id) ?? `unknown#${id}`));
  const flows = new Map<string, string>();
  const flow = (id: string | null) => {
    if (id === null) return null;
    if (!flows.has(id)) flows.set(id, `flow#${flows.size}`);
    return flows.get(id);
  };
  const jobs = after.map((r) => {
    const fresh = !before.some((b) => b.id === r.id);
    return {
      id: name(r.id),
      ...r.row,
      flow_id: flow(r.flow_id),
      cancelled_by: name(r.cancelled_by),
      last_error: r.last_error?.replace(/\bjob (\d+)/g, (_, id: string) => `job ${name(id)}`) ?? null,
      // exact for a row the call wrote; a holder it rewrote was created before the call
      run_after:
        absolute && fresh
          ? { at: r.run_after_ms }
          : { fromCreation: r.rel_created_ms, fromUpdate: r.rel_updated_ms, fresh },
    };
  });
  const edges = (
    await db.sql<{ job_id: string; depends_on: string }>(
      `SELECT job_id::text, depends_on::text FROM ${s}.job_dependencies`,
    )
  )
    .map((e) => `${name(e.job_id)} → ${name(e.depends_on)}`)
    .sort();
  const windows = (
    await db.sql<{ key: string; job_id: string; s: number }>(
      `SELECT key, job_id::text, round(extract(epoch FROM until - now()))::int AS s FROM ${s}.dedupe_windows ORDER BY key`,
    )
  ).map((w) => `${w.key} → ${name(w.job_id)} for ~${w.s} s`);
  const checks =
    (await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.dependency_checks`))[0]?.n ?? -1;
  const one = (a: Answer) => ({ created: a.created, id: name(a.id) });
  const answer =
    'ok' in outcome
      ? Array.isArray(outcome.ok)
        ? outcome.ok.map(one)
        : one(outcome.ok)
      : { error: { ...outcome.error, message: outcome.error.message } };
  return { answer, untouched, hinted: wasHinted, jobs, edges, windows, checks };
}

/** Every difference of `other` from `reference`, as readable lines (none: they agree). */
function differences(c: Case, path: PathName, reference: Result, other: Result): string[] {
  const out: string[] = [];
  const refAnswer = reference.answer as { error?: { field: string; message: string; kind: string } };
  const answer = other.answer as { error?: { field: string; message: string; kind: string } };
  if (refAnswer.error || answer.error) {
    const want = c.fieldOf?.[path] ?? (c.expect as { field?: string }).field;
    if (!answer.error) out.push(`answer: ${JSON.stringify(other.answer)} instead of an error naming ${want}`);
    else {
      if (answer.error.kind !== 'validation')
        out.push(`error kind ${answer.error.kind}: ${answer.error.message}`);
      if (answer.error.field !== want)
        out.push(`error field ${answer.error.field} instead of ${want} (${answer.error.message})`);
      if (
        !c.messagesDiffer &&
        refAnswer.error &&
        answer.error.message !== refAnswer.error.message &&
        !c.fieldOf?.[path]
      ) {
        out.push(
          `error message ${JSON.stringify(answer.error.message)} instead of ${JSON.stringify(refAnswer.error.message)}`,
        );
      }
    }
  } else if (JSON.stringify(answer) !== JSON.stringify(refAnswer)) {
    out.push(`answer ${JSON.stringify(answer)} instead of ${JSON.stringify(refAnswer)}`);
  }
  if (other.hinted !== reference.hinted)
    out.push(`wake-up hint ${other.hinted} instead of ${reference.hinted}`);
  if (other.jobs.length !== reference.jobs.length)
    out.push(`${other.jobs.length} jobs instead of ${reference.jobs.length}`);
  reference.jobs.forEach((ref, i) => {
    const job = other.jobs[i] ?? {};
    for (const key of new Set([...Object.keys(ref), ...Object.keys(job)])) {
      const a = (ref as Record<string, unknown>)[key];
      const b = (job as Record<string, unknown>)[key];
      if (key === 'run_after' && !sameRunAfter(a, b))
        out.push(`job ${ref.id}: run_after ${JSON.stringify(b)} instead of ${JSON.stringify(a)}`);
      else if (key !== 'run_after' && JSON.stringify(a) !== JSON.stringify(b))
        out.push(`job ${ref.id}: ${key} ${JSON.stringify(b)} instead of ${JSON.stringify(a)}`);
    }
  });
  for (const key of ['edges', 'windows', 'checks'] as const) {
    if (JSON.stringify(other[key]) !== JSON.stringify(reference[key]))
      out.push(`${key}: ${JSON.stringify(other[key])} instead of ${JSON.stringify(reference[key])}`);
  }
  return out;
}

/** run_after: exact for rows the call wrote; within a second for a holder written before it. */
function sameRunAfter(a: unknown, b: unknown): boolean {
  if (a === undefined || b === undefined) return a === b;
  const x = a as { at?: number; fromCreation?: number; fromUpdate?: number; fresh?: boolean };
  const y = b as typeof x;
  if (x.at !== undefined || y.at !== undefined) return x.at === y.at;
  if (x.fresh && y.fresh) return x.fromCreation === y.fromCreation && x.fromUpdate === y.fromUpdate;
  const near = (p?: number, q?: number) => p !== undefined && q !== undefined && Math.abs(p - q) <= 1_000;
  return near(x.fromCreation, y.fromCreation) && near(x.fromUpdate, y.fromUpdate);
}

/** The expectation of the case itself, on the reference path. */
function checkExpectation(c: Case, result: Result, path: PathName): void {
  const answer = result.answer as {
    created?: boolean;
    id?: string;
    error?: { field: string; kind: string; message: string };
  };
  if ('field' in c.expect) {
    expect(answer.error, `${path}: ${JSON.stringify(answer)}`).toBeDefined();
    expect(answer.error?.field, `${path}: ${answer.error?.message}`).toBe(
      c.fieldOf?.[path] ?? c.expect.field,
    );
    expect(result.untouched, `${path}: nothing written`).toBe(true);
    expect(result.hinted, `${path}: no wake-up hint`).toBe(false);
  } else if ('holder' in c.expect) {
    expect(answer).toEqual({ created: false, id: c.expect.holder });
  } else {
    expect(answer, JSON.stringify(answer)).toMatchObject({ created: true });
    expect(String(answer.id)).toMatch(/^new#/);
  }
}

function pathsOf(c: Case): PathName[] {
  return c.only?.paths ?? [...PATHS];
}

describeWithPython('§13 conformance: library, SQL function, Python client and POST /api/jobs', () => {
  for (const c of CASES) {
    test(c.name, async () => {
      const paths = pathsOf(c);
      const reference = paths[0] as PathName;
      const results = new Map<PathName, Result>();
      for (const path of paths) results.set(path, await run(path, c));
      const ref = results.get(reference) as Result;
      checkExpectation(c, ref, reference);
      const report = paths
        .slice(1)
        .flatMap((path) =>
          differences(c, path, ref, results.get(path) as Result).map((d) => `${path}: ${d}`),
        );
      for (const path of paths) checkExpectation(c, results.get(path) as Result, path);
      expect(report, `paths differ from ${reference}`).toEqual([]);
    });
  }
});

describe('§13 conformance: the comparison catches a path that drifts', () => {
  test('a SQL function with another default priority, or one that drops an option, differs from the library', async () => {
    await db.sql(`
      CREATE OR REPLACE FUNCTION public.conformance_drifted_default(task text, payload jsonb, options jsonb,
                                                                   OUT id bigint, OUT created boolean)
      LANGUAGE sql AS $$ SELECT * FROM ${s}.enqueue(task, payload, '{"priority": 99}'::jsonb || options) $$`);
    await db.sql(`
      CREATE OR REPLACE FUNCTION public.conformance_drifted_option(task text, payload jsonb, options jsonb,
                                                                  OUT id bigint, OUT created boolean)
      LANGUAGE sql AS $$ SELECT * FROM ${s}.enqueue(task, payload, options - 'priority') $$`);
    const defaults = CASES.find((c) => c.name === 'defaults') as Case;
    const fractional = CASES.find((c) => c.name === 'priority fractional') as Case;
    const lib = await run('library', defaults);
    const drifted = await run('sql', defaults, 'public.conformance_drifted_default');
    expect(differences(defaults, 'sql', lib, drifted)).toEqual(['job new#0: priority 99 instead of 100']);
    const libError = await run('library', fractional);
    const droppedError = await run('sql', fractional, 'public.conformance_drifted_option');
    expect(differences(fractional, 'sql', libError, droppedError).join('\n')).toMatch(
      /instead of an error naming priority/,
    );
    // and the real function agrees
    expect(differences(defaults, 'sql', lib, await run('sql', defaults))).toEqual([]);
  });
});

/**
 * enqueue_many: `queue.enqueueMany(specs)` against `<schema>.enqueue_many(jobs)` and the Python
 * client's `enqueue_many(conn, jobs)` (dicts with its keyword names). Each API names its
 * parameter in errors — `specs[1].priority` in the library, `jobs[1].priority` in the others —
 * so the library's are read with `jobs[` for `specs[`.
 */
type BatchPath = 'library' | 'sql' | 'python';
interface BatchCase {
  name: string;
  specs: (ids: Named) => Record<string, unknown>[];
  setup?: (queue: Queue) => Promise<Named>;
  expect: { created: true } | { field: string };
  messagesDiffer?: string;
}

const BATCH_PRODUCERS: Record<BatchPath, (specs: Record<string, unknown>[]) => Promise<Outcome>> = {
  async library(specs) {
    try {
      const results = await queue.enqueueMany(specs as never);
      return { ok: results.map((r) => ({ id: r.id, created: r.created })) };
    } catch (error) {
      const outcome = libraryError(error);
      if ('error' in outcome) {
        outcome.error.field = outcome.error.field?.replace(/^specs\[/, 'jobs[') ?? null;
        outcome.error.message = outcome.error.message.replace(/^specs\[/, 'jobs[');
      }
      return outcome;
    }
  },
  async sql(specs) {
    try {
      const rows = await db.sql<Answer>(
        `SELECT r.id::text AS id, r.created FROM ${s}.enqueue_many($1::jsonb) WITH ORDINALITY AS r(id, created, n) ORDER BY r.n`,
        [JSON.stringify(specs)],
      );
      return { ok: rows };
    } catch (error) {
      const e = error as pg.DatabaseError;
      return {
        error: {
          field: e.column ?? null,
          message: e.message,
          kind: e.code === '22023' ? 'validation' : String(e.code),
        },
      };
    }
  },
  async python(specs) {
    if (python === null) throw new Error('no Python driver');
    const jobs = specs.map((spec) =>
      Object.fromEntries(
        Object.entries(spec).map(([key, value]) => [
          SNAKE[key] ?? key,
          key === 'dedupe' && typeof value === 'object' && value !== null
            ? Object.fromEntries(Object.entries(value).map(([k, v]) => [SNAKE[k] ?? k, v]))
            : value,
        ]),
      ),
    );
    const reply = await python.request<{ ok?: Answer[]; error?: Record<string, string | null> }>({
      op: 'enqueue_many',
      url: db.url,
      schema: TEST_SCHEMA,
      jobs,
    });
    if (reply.ok) return { ok: reply.ok };
    const e = reply.error ?? {};
    return {
      error: {
        field: e.field ?? null,
        message: String(e.message),
        kind: e.kind === 'ValidationError' ? 'validation' : `${e.kind} ${e.sqlstate ?? ''}`,
      },
    };
  },
};

const BATCHES: BatchCase[] = [
  {
    name: 'plain: options, a key repeated in the call, a key an existing job holds',
    setup: async (q) => ({ held: (await q.enqueue('conf.held', {}, { dedupeKey: 'b-held' })).id }),
    specs: () => [
      { task: 'b.a', payload: 1, priority: 5 },
      { task: 'b.b', payload: 2, dedupeKey: 'b-1', delayMs: 1_000 },
      { task: 'b.c', payload: 3, dedupeKey: 'b-1' },
      { task: 'b.d', payload: 4, dedupeKey: 'b-held' },
      { task: 'b.e', payload: 5, group: 'g', queue: 'q', maxAttempts: 2, timeoutMs: 50 },
    ],
    expect: { created: true },
  },
  {
    name: 'dedupe modes mixed in one call (job by job, in key order)',
    setup: async (q) => ({
      queued: (await q.enqueue('conf.held', {}, { dedupeKey: 'b-p', dedupe: { scope: 'pending' } })).id,
    }),
    specs: () => [
      { task: 'b.w', payload: 1, dedupeKey: 'b-w', dedupe: { windowMs: 60_000 } },
      { task: 'b.p', payload: 2, dedupeKey: 'b-p', dedupe: { scope: 'pending' } },
      { task: 'b.r', payload: 'first', dedupeKey: 'B-r', dedupe: { replace: true }, delayMs: 10_000 },
      { task: 'b.r', payload: 'second', dedupeKey: 'B-r', dedupe: { replace: true }, delayMs: 20_000 },
      { task: 'b.plain', payload: 5 },
      { task: 'b.w', payload: 6, dedupeKey: 'b-w', dedupe: { windowMs: 60_000 } },
      { task: 'b.k', payload: 7, dedupeKey: 'a-plain' },
    ],
    expect: { created: true },
  },
  {
    name: 'dedupe modes with keys beyond U+FFFF: one key order, code points (issue 25)',
    specs: () => [
      { task: 'b.o', payload: 1, dedupeKey: '\u{1F600}', dedupe: { windowMs: 60_000 } },
      { task: 'b.o', payload: 2, dedupeKey: '\uFFFF', dedupe: { windowMs: 60_000 } },
      { task: 'b.o', payload: 3, dedupeKey: '\uE000', dedupe: { replace: true } },
      { task: 'b.o', payload: 4, dedupeKey: '\u{10000}', dedupe: { scope: 'pending' } },
      { task: 'b.o', payload: 5, dedupeKey: 'z' },
    ],
    expect: { created: true },
  },
  {
    name: 'dependsOn in a call: every job with its edges',
    setup: async (q) => {
      const pending = (await q.enqueue('conf.dep', 1)).id;
      const done = (await q.enqueue('conf.dep.done', 2)).id;
      const [job] = await q.claim('conf-worker', { tasks: ['conf.dep.done'] });
      if (job?.id !== done) throw new Error('setup: claimed the wrong job');
      await q.complete(job, 'ok');
      return { pending, done };
    },
    specs: (ids) => [
      { task: 'b.w', payload: 1, dependsOn: [ids.pending] },
      { task: 'b.p', payload: 2, onDependencyFailure: 'run' },
      { task: 'b.w2', payload: 3, dependsOn: [ids.done, ids.pending, ids.done], delayMs: 5_000 },
    ],
    expect: { created: true },
  },
  {
    name: 'a bad element: nothing written',
    specs: () => [{ task: 'ok' }, { task: 'bad', priority: 1.5 }],
    expect: { field: 'jobs[1].priority' },
  },
  {
    name: 'a bad element deep in an option',
    specs: () => [{ task: 'ok', dedupeKey: 'k', dedupe: { scope: 'x' } }],
    expect: { field: 'jobs[0].dedupe.scope' },
  },
  {
    name: 'an unknown key in an element',
    specs: () => [{ task: 'ok', prio: 1 }],
    expect: { field: 'jobs[0].prio' },
    messagesDiffer: 'each lists its own known names (Python its keywords)',
  },
  {
    name: 'dependsOn and a dedupe key in one call',
    setup: async (q) => ({ dep: (await q.enqueue('conf.dep', {})).id }),
    specs: (ids) => [
      { task: 'k', dedupeKey: 'k' },
      { task: 'w', dependsOn: [ids.dep] },
    ],
    expect: { field: 'jobs[0].dedupeKey' },
    messagesDiffer: 'each names its own call (enqueueMany, enqueue_many)',
  },
];

describeWithPython('§13 conformance of enqueue_many: library, SQL function and Python client', () => {
  for (const b of BATCHES) {
    test(b.name, async () => {
      const results = new Map<BatchPath, Result>();
      for (const path of ['library', 'sql', 'python'] as const) {
        results.set(
          path,
          await observe(b.setup, (named) => ({
            absolute: false,
            outcome: BATCH_PRODUCERS[path](b.specs(named)),
          })),
        );
      }
      const ref = results.get('library') as Result;
      const asCase = { name: b.name, expect: b.expect, messagesDiffer: b.messagesDiffer } as Case;
      const answer = ref.answer as { error?: { field: string } } | { created: boolean }[];
      if ('field' in b.expect) {
        expect((answer as { error?: { field: string } }).error?.field).toBe(b.expect.field);
        expect(ref.untouched).toBe(true);
      } else {
        expect(Array.isArray(answer) && answer.every((a) => typeof a.created === 'boolean')).toBe(true);
      }
      const report = (['sql', 'python'] as const).flatMap((path) =>
        differences(asCase, path, ref, results.get(path) as Result).map((d) => `${path}: ${d}`),
      );
      expect(report, 'paths differ from the library').toEqual([]);
    });
  }
});
