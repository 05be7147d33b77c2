/**
 * The review of the producers (issue 25), each finding attacked against migration 18 and the
 * library: one key order for library and SQL (a batch of each sharing keys never deadlock),
 * enqueue_many with dependsOn written set-based and capped, dedupeKey bounded in bytes (an
 * incompressible key one B-tree entry cannot hold), payload numbers JavaScript cannot hold, and
 * long names refused by their size. The commit trigger's guard is in grants.test.ts, the
 * producers' agreement on each of these in conformance.test.ts.
 *
 * Deliberate breaks seen failing (each undone after): see each describe's comment. They were made
 * in one run (each break touches only its own mechanism) and every test below but the two that
 * show the bounds hold ("2400 incompressible bytes goes in", "the largest a double holds") failed,
 * each for its own reason as noted.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { beforeAll, describe, expect, inject, test } from 'vitest';
import { compareCodePoints } from '../../src/core/key-order.js';
import { quoteIdent } from '../../src/db/identifier.js';
import { ValidationError } from '../../src/errors.js';
import { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { databaseUrl } from '../support/urls.js';

const db = useTestDatabase();
const s = quoteIdent(TEST_SCHEMA);
let queue: Queue;

beforeAll(() => {
  queue = db.queue();
});

/** The error of a statement (or a call) that must fail. */
async function failure(run: Promise<unknown>): Promise<pg.DatabaseError & ValidationError> {
  try {
    await run;
  } catch (error) {
    return error as pg.DatabaseError & ValidationError;
  }
  throw new Error('it did not fail');
}

async function counts(): Promise<{ jobs: number; edges: number; windows: number }> {
  const [row] = await db.sql<{ jobs: number; edges: number; windows: number }>(
    `SELECT (SELECT count(*) FROM ${s}.jobs)::int AS jobs, (SELECT count(*) FROM ${s}.job_dependencies)::int AS edges,
            (SELECT count(*) FROM ${s}.dedupe_windows)::int AS windows`,
  );
  return row as { jobs: number; edges: number; windows: number };
}

/** A deterministic pseudo-random source (the failures must replay). */
function lcg(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1_103_515_245 + 12_345) % 2 ** 31;
    return x / 2 ** 31;
  };
}

/** `n` random characters of the CJK block (3 bytes each in UTF-8, and no run a compressor can use). */
function cjk(n: number, random: () => number): string {
  let out = '';
  for (let i = 0; i < n; i++) out += String.fromCharCode(0x4e00 + Math.floor(random() * 0x5000));
  return out;
}

/** Resolves once `n` backends of this database wait for a lock (the server's own view; no sleep). */
async function lockWaiters(n: number): Promise<void> {
  await expect
    .poll(
      async () =>
        (
          await db.sql<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'`,
          )
        )[0]?.n,
      { timeout: 10_000 },
    )
    .toBeGreaterThanOrEqual(n);
}

/**
 * Broken on purpose: compareCodePoints as JavaScript's `<` (UTF-16 code units) — the first test
 * failed (the sorted arrays differ), and so did the race: the library's batch, holding nothing
 * while it waited for '\u{1F600}', lost that key to enqueue_many (which had taken '\uFFFF' first)
 * and answered [false, false] instead of going in. Had it won the key, the two would have
 * deadlocked (40P01): either way the two orders cannot both hold.
 */
describe('one key order: code points, in the library and in SQL (COLLATE "C")', () => {
  test('compareCodePoints sorts as PostgreSQL sorts COLLATE "C"', async () => {
    const random = lcg(25);
    const fixed = [
      '',
      'a',
      'ab',
      'b',
      'é',
      '\uD7FF',
      '\uE000',
      '\uFFFF',
      '\u{10000}',
      '\u{1F600}',
      '\u{10FFFF}',
    ];
    const pool = [0x41, 0xe9, 0x4e00, 0xd7ff, 0xe000, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x10ffff];
    const made = Array.from({ length: 300 }, () =>
      Array.from({ length: 1 + Math.floor(random() * 3) }, () =>
        String.fromCodePoint(pool[Math.floor(random() * pool.length)] as number),
      ).join(''),
    );
    const keys = [...fixed, ...made];
    const [row] = await db.sql<{ sorted: string[] }>(
      `SELECT array_agg(k ORDER BY k COLLATE "C") AS sorted FROM unnest($1::text[]) AS k`,
      [keys],
    );
    expect([...keys].sort(compareCodePoints)).toEqual(row?.sorted);
  });

  test('a library batch and an enqueue_many call sharing throttled keys wait for each other, no deadlock', async () => {
    // Four rounds: with the two orders apart, each round is a race for the held key that ends in
    // a deadlock whenever the library's batch wins it (it waited first: most of the time).
    for (let round = 0; round < 4; round++) {
      const first = `\u{1F600}${round}`; // before '\uFFFF' in UTF-16 units, after it by code point
      const second = `\uFFFF${round}`;
      const mode = { dedupe: { windowMs: 60_000 } };
      // a third transaction holds the window row of `first` (its insert of the key, uncommitted)
      const holder = await db.pool.connect();
      const other = await db.pool.connect();
      try {
        await holder.query('BEGIN');
        await holder.query(`SELECT * FROM ${s}.enqueue('order.hold', '{}', $1::jsonb)`, [
          JSON.stringify({ dedupeKey: first, ...mode }),
        ]);
        // the library's batch (its own transaction): by code point it takes `second`, then waits for `first`
        const library = queue.enqueueMany([
          { task: `order.lib${round}`, payload: 1, dedupeKey: first, ...mode },
          { task: `order.lib${round}`, payload: 2, dedupeKey: second, ...mode },
        ]);
        await lockWaiters(1);
        // enqueue_many: `second` first too — it waits for the library's batch, holding nothing
        const sql = other.query<{ id: string; created: boolean }>(
          `SELECT r.id::text AS id, r.created FROM ${s}.enqueue_many($1::jsonb) WITH ORDINALITY AS r(id, created, n) ORDER BY r.n`,
          [
            JSON.stringify([
              { task: `order.sql${round}`, payload: 3, dedupeKey: second, ...mode },
              { task: `order.sql${round}`, payload: 4, dedupeKey: first, ...mode },
            ]),
          ],
        );
        await lockWaiters(2);
        await holder.query('ROLLBACK');
        const [libraryResult, sqlResult] = await Promise.allSettled([library, sql]);
        expect(libraryResult.status, String((libraryResult as PromiseRejectedResult).reason)).toBe(
          'fulfilled',
        );
        expect(sqlResult.status, String((sqlResult as PromiseRejectedResult).reason)).toBe('fulfilled');
        const made = (libraryResult as PromiseFulfilledResult<{ id: string; created: boolean }[]>).value;
        const answered = (
          sqlResult as PromiseFulfilledResult<pg.QueryResult<{ id: string; created: boolean }>>
        ).value.rows;
        // the library's batch went in; enqueue_many found both windows taken by it
        expect(made.map((r) => r.created)).toEqual([true, true]);
        expect(answered).toEqual([
          { id: made[1]?.id, created: false },
          { id: made[0]?.id, created: false },
        ]);
        const jobs = await db.sql<{ task: string; dedupe_key: string }>(
          `SELECT task, dedupe_key FROM ${s}.jobs WHERE dedupe_key = ANY($1::text[]) ORDER BY id`,
          [[first, second]],
        );
        expect(jobs).toEqual([
          { task: `order.lib${round}`, dedupe_key: second },
          { task: `order.lib${round}`, dedupe_key: first },
        ]);
        const windows = await db.sql<{ key: string; job_id: string }>(
          `SELECT key, job_id::text FROM ${s}.dedupe_windows WHERE key = ANY($1::text[]) ORDER BY key COLLATE "C"`,
          [[first, second]],
        );
        expect(windows).toEqual([
          { key: second, job_id: made[1]?.id },
          { key: first, job_id: made[0]?.id },
        ]);
      } finally {
        await holder.query('ROLLBACK').catch(() => undefined);
        holder.release();
        other.release();
      }
    }
  }, 30_000);
});

/**
 * Broken on purpose: the batch INSERTs ordering by dedupe_key without COLLATE "C" (the library's
 * in store/enqueue.ts, enqueue_many's in migration 18): the rows went in as the database's ICU
 * collation sorts (a, A, b, B) — against the job-by-job batches' and the other producers' code
 * point order, which would let two batches sharing keys take them in opposite orders.
 */
describe('batch INSERTs in code point order, whatever the database’s collation', () => {
  test('in a database whose default collation is ICU en-US, the library and enqueue_many insert A, B, a, b', async () => {
    const adminUrl = inject('adminUrl');
    const name = `skiplock_icu_${randomBytes(5).toString('hex')}`;
    const admin = async (statement: string) => {
      const client = new pg.Client({ connectionString: adminUrl });
      client.on('error', () => undefined);
      await client.connect();
      try {
        await client.query(statement);
      } finally {
        await client.end();
      }
    };
    await admin(
      `CREATE DATABASE ${name} TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'`,
    );
    const url = databaseUrl(adminUrl, name);
    const icu = new Queue({ connectionString: url, schema: TEST_SCHEMA });
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => undefined);
    try {
      await icu.migrate();
      await client.connect();
      const keys = ['b', 'B', 'a', 'A'];
      const { rows: order } = await client.query<{ sorted: string[] }>(
        'SELECT array_agg(k ORDER BY k) AS sorted FROM unnest($1::text[]) AS k',
        [keys],
      );
      expect(order[0]?.sorted).toEqual(['a', 'A', 'b', 'B']); // the database's own order differs
      await icu.enqueueMany(keys.map((k) => ({ task: 'icu.lib', payload: k, dedupeKey: `lib-${k}` })));
      await client.query(`SELECT * FROM ${s}.enqueue_many($1::jsonb)`, [
        JSON.stringify(keys.map((k) => ({ task: 'icu.sql', payload: k, dedupeKey: `sql-${k}` }))),
      ]);
      // one INSERT each: the heap order of its rows is the order it inserted them in
      const { rows } = await client.query<{ task: string; keys: string[] }>(
        `SELECT task, array_agg(payload #>> '{}' ORDER BY ctid) AS keys FROM ${s}.jobs GROUP BY task ORDER BY task`,
      );
      expect(rows).toEqual([
        { task: 'icu.lib', keys: ['A', 'B', 'a', 'b'] },
        { task: 'icu.sql', keys: ['A', 'B', 'a', 'b'] },
      ]);
    } finally {
      await client.end().catch(() => undefined);
      await icu.close();
      await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    }
  }, 60_000);
});

/**
 * Broken on purpose: migration 17's producer_insert_dependents (a loop of one INSERT per job and
 * per job's edges): "one statement each" failed with 40 INSERT statements into jobs and 30 into
 * job_dependencies; without the size checks (SQL and library), the capped calls failed naming
 * jobs[0].dependsOn (job 1 does not exist) after checking every element (4.7 s and 15 s), instead
 * of `jobs`.
 */
describe('enqueue_many with dependsOn: set-based, and capped', () => {
  test('its jobs and its edges go in one statement each, and the commit decides them', async () => {
    await db.sql(`
      CREATE TABLE public.insert_statements (tbl text NOT NULL);
      CREATE FUNCTION public.count_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        INSERT INTO public.insert_statements VALUES (TG_TABLE_NAME);
        RETURN NULL;
      END $fn$;
      CREATE TRIGGER count_insert AFTER INSERT ON ${s}.jobs FOR EACH STATEMENT EXECUTE FUNCTION public.count_insert();
      CREATE TRIGGER count_insert AFTER INSERT ON ${s}.job_dependencies FOR EACH STATEMENT EXECUTE FUNCTION public.count_insert();`);
    try {
      const done = (await queue.enqueue('set.dep', 1)).id;
      const pending = (await queue.enqueue('set.dep', 2)).id;
      const [job] = await queue.claim('w', { tasks: ['set.dep'] });
      expect(job?.id).toBe(done);
      await queue.complete(job as NonNullable<typeof job>, 'ok');
      await db.sql('TRUNCATE public.insert_statements');
      const specs = Array.from({ length: 40 }, (_, i) => ({
        task: 'set.many',
        payload: i,
        ...(i % 4 === 3 ? {} : { dependsOn: i % 2 === 0 ? [done] : [done, pending, done] }),
      }));
      const rows = await db.sql<{ id: string; created: boolean }>(
        `SELECT r.id::text AS id, r.created FROM ${s}.enqueue_many($1::jsonb) WITH ORDINALITY AS r(id, created, n) ORDER BY r.n`,
        [JSON.stringify(specs)],
      );
      const statements = await db.sql<{ tbl: string; n: number }>(
        'SELECT tbl, count(*)::int AS n FROM public.insert_statements GROUP BY tbl ORDER BY tbl',
      );
      expect(statements).toEqual([
        { tbl: 'job_dependencies', n: 1 },
        { tbl: 'jobs', n: 1 },
      ]);
      // the final state: ids in input order; each job as its dependencies decide at the commit
      expect(rows.map((r) => r.created)).toEqual(specs.map(() => true));
      expect(rows.map((r) => BigInt(r.id))).toEqual(
        rows.map((r) => BigInt(r.id)).sort((a, b) => (a < b ? -1 : 1)),
      );
      const stored = await db.sql<{
        id: string;
        status: string;
        deps_left: number;
        deps_total: number;
        edges: number;
      }>(
        `SELECT j.id::text, j.status, j.deps_left, j.deps_total,
                (SELECT count(*)::int FROM ${s}.job_dependencies AS d WHERE d.job_id = j.id) AS edges
         FROM ${s}.jobs AS j WHERE j.task = 'set.many' ORDER BY j.id`,
      );
      expect(stored.map((r) => [r.status, r.deps_left, r.deps_total, r.edges])).toEqual(
        specs.map((_, i) =>
          i % 4 === 3 ? ['pending', 0, 0, 0] : i % 2 === 0 ? ['pending', 0, 1, 1] : ['waiting', 1, 2, 2],
        ),
      );
      const marked = await db.sql<{ id: string; has_dependents: boolean }>(
        `SELECT id::text, has_dependents FROM ${s}.jobs WHERE id IN ($1, $2) ORDER BY id`,
        [done, pending],
      );
      expect(marked.every((r) => r.has_dependents)).toBe(true);
      expect(await db.sql(`SELECT 1 FROM ${s}.dependency_checks`)).toEqual([]);
    } finally {
      await db.sql(`
        DROP TRIGGER count_insert ON ${s}.jobs;
        DROP TRIGGER count_insert ON ${s}.job_dependencies;
        DROP FUNCTION public.count_insert();
        DROP TABLE public.insert_statements;`);
    }
  });

  test('a call of more than 100000 jobs with dependsOn is refused at once, nothing written (SQL and library)', async () => {
    const before = await counts();
    const specs = Array.from({ length: 100_001 }, (_, i) => ({ task: 'cap.jobs', payload: i }));
    (specs[0] as Record<string, unknown>).dependsOn = ['1'];
    const sql = await failure(db.sql(`SELECT * FROM ${s}.enqueue_many($1::jsonb)`, [JSON.stringify(specs)]));
    expect([sql.code, sql.column]).toEqual(['22023', 'jobs']);
    expect(sql.message).toBe(
      'jobs: must hold at most 100000 jobs in a call with dependsOn, got 100001: split the call',
    );
    const library = await failure(queue.enqueueMany(specs as never));
    expect(library).toBeInstanceOf(ValidationError);
    expect(library.field).toBe('specs');
    expect(library.message).toBe(
      'specs: must hold at most 100000 jobs in a call with dependsOn, got 100001: split the call',
    );
    // without dependsOn the same call is no dependent call: not capped (the library's batch too)
    expect(await counts()).toEqual(before);
  }, 60_000);

  test('a call of more than 1000000 dependsOn entries in all is refused at once, nothing written', async () => {
    const before = await counts();
    const ids = Array.from({ length: 10_000 }, () => '1');
    const specs = Array.from({ length: 101 }, () => ({ task: 'cap.edges', dependsOn: ids }));
    const sql = await failure(db.sql(`SELECT * FROM ${s}.enqueue_many($1::jsonb)`, [JSON.stringify(specs)]));
    expect([sql.code, sql.column, sql.message]).toEqual([
      '22023',
      'jobs',
      'jobs: must hold at most 1000000 dependsOn entries in all in one call, got 1010000: split the call',
    ]);
    const library = await failure(queue.enqueueMany(specs as never));
    expect([library.field, library.message]).toEqual([
      'specs',
      'specs: must hold at most 1000000 dependsOn entries in all in one call, got 1010000: split the call',
    ]);
    expect(await counts()).toEqual(before);
  }, 60_000);
});

/**
 * Broken on purpose: without the byte bound (library and migration 18), the 3,000-byte key
 * reached the index: the library failed with 54000 "index row size 3016 exceeds btree version 4
 * maximum 2704 for index jobs_dedupe_key_idx" — a DatabaseError, not a ValidationError naming
 * dedupeKey.
 */
describe('dedupeKey: at most 2400 bytes, the same bound in the library and SQL', () => {
  const random = lcg(2704);
  const tooLong = cjk(1000, random); // 1000 characters (a valid name), 3000 bytes
  const atBound = cjk(800, random); // 2400 bytes

  test('a key of 1000 incompressible characters (3000 bytes) is a ValidationError naming it, nothing written', async () => {
    const before = await counts();
    for (const dedupe of [undefined, { scope: 'pending' }, { windowMs: 60_000 }, { replace: true }]) {
      const options = { dedupeKey: tooLong, ...(dedupe ? { dedupe } : {}) };
      const library = await failure(queue.enqueue('key.long', {}, options as never));
      expect(library, String(library)).toBeInstanceOf(ValidationError);
      expect([library.field, library.message]).toEqual([
        'dedupeKey',
        'dedupeKey: must be at most 2400 bytes in UTF-8 (it is one index entry), got 3000 bytes',
      ]);
      const sql = await failure(
        db.sql(`SELECT * FROM ${s}.enqueue('key.long', '{}', $1::jsonb)`, [JSON.stringify(options)]),
      );
      expect([sql.code, sql.column, sql.message]).toEqual(['22023', 'dedupeKey', library.message]);
      const many = await failure(
        db.sql(`SELECT * FROM ${s}.enqueue_many($1::jsonb)`, [
          JSON.stringify([{ task: 'ok' }, { task: 'key.long', ...options }]),
        ]),
      );
      expect([many.code, many.column]).toEqual(['22023', 'jobs[1].dedupeKey']);
    }
    expect(await counts()).toEqual(before);
  });

  test('a key of 2400 incompressible bytes goes in, in every mode, and dedupes', async () => {
    const modes = [undefined, { scope: 'pending' }, { windowMs: 60_000 }, { replace: true }];
    for (const [i, dedupe] of modes.entries()) {
      const key = `${i}${atBound.slice(1)}`;
      const options = JSON.stringify({ dedupeKey: key, ...(dedupe ? { dedupe } : {}) });
      const first = await queue.enqueue('key.bound', { i }, {
        dedupeKey: key,
        ...(dedupe ? { dedupe } : {}),
      } as never);
      const [again] = await db.sql<{ id: string; created: boolean }>(
        `SELECT id::text AS id, created FROM ${s}.enqueue('key.bound', '{}', $1::jsonb)`,
        [options],
      );
      expect(first.created).toBe(true);
      expect(again).toEqual({ id: first.id, created: false });
    }
    const [row] = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${s}.jobs WHERE task = 'key.bound'`,
    );
    expect(row?.n).toBe(4);
  });
});

/**
 * Broken on purpose: producer_check without producer_payload (migration 17's
 * `coalesce(p_payload, 'null')`): the first payload, 1e400 deep in it, went in ("it did not fail").
 */
describe('payload numbers a double cannot hold', () => {
  const huge = `1${'0'.repeat(400)}`;
  // 2^1024 - 2^970: JSON.parse reads it as Infinity; one less, as the largest double
  const overflow = (2n ** 1024n - 2n ** 970n).toString();
  const largest = (2n ** 1024n - 2n ** 970n - 1n).toString();

  test('are refused by the SQL producer, naming the path to the first one, nothing written', async () => {
    const before = await counts();
    for (const [payload, field, sign] of [
      [`{"a": {"b": [0, -${huge}]}}`, 'payload.a.b[1]', '-Infinity'],
      [`{"a b": 1e400}`, 'payload["a b"]', 'Infinity'],
      [`${overflow}`, 'payload', 'Infinity'],
      [`[1, 2, {"x": [-${overflow}.0]}]`, 'payload[2].x[0]', '-Infinity'],
    ] as const) {
      const error = await failure(db.sql(`SELECT * FROM ${s}.enqueue('num.big', $1::jsonb)`, [payload]));
      expect([error.code, error.column], payload).toEqual(['22023', field]);
      expect(error.message).toContain(`JavaScript would read ${sign}`);
      expect(error.message).toMatch(/send it as a string instead$/);
      const many = await failure(
        db.sql(
          `SELECT * FROM ${s}.enqueue_many(jsonb_build_array('{"task": "ok"}'::jsonb, jsonb_build_object('task', 'num.big', 'payload', $1::jsonb)))`,
          [payload],
        ),
      );
      expect([many.code, many.column]).toEqual(['22023', `jobs[1].${field}`]);
    }
    expect(await counts()).toEqual(before);
  });

  test('the largest a double holds goes in and reads back finite', async () => {
    const [row] = await db.sql<{ id: string }>(`SELECT id::text FROM ${s}.enqueue('num.max', $1::jsonb)`, [
      `{"n": ${largest}, "m": -1.7976931348623157e308, "tiny": 1e-400}`,
    ]);
    const job = await queue.get(row?.id as string);
    expect(job?.payload).toEqual({ n: Number.MAX_VALUE, m: -Number.MAX_VALUE, tiny: 0 });
  });
});

/**
 * Broken on purpose: migration 17's producer_name (no size check before counting: a name over 500
 * characters is split into one row per character) and enqueue converting the task to jsonb first:
 * the 16 MB task took about 13 s to be refused (the message then counted its characters; the
 * test failed on that message first). Fixed, the four calls took 3.5 s together, most of it
 * sending 16 MB each.
 */
describe('a very long name is refused by its size, before any work', () => {
  test('a task, queue or dedupe key of 16 MB: 22023 naming it, quickly', async () => {
    const long = 'x'.repeat(16 * 1024 * 1024);
    for (const [sql, params, field] of [
      [`SELECT * FROM ${s}.enqueue($1, '{}')`, [long], 'task'],
      [`SELECT * FROM ${s}.enqueue('t', '{}', jsonb_build_object('queue', $1::text))`, [long], 'queue'],
      [
        `SELECT * FROM ${s}.enqueue('t', '{}', jsonb_build_object('dedupeKey', $1::text))`,
        [long],
        'dedupeKey',
      ],
      [
        `SELECT * FROM ${s}.enqueue_many(jsonb_build_array(jsonb_build_object('task', $1::text)))`,
        [long],
        'jobs[0].task',
      ],
    ] as const) {
      const started = performance.now();
      const error = await failure(db.sql(sql, [...params]));
      const ms = performance.now() - started;
      expect([error.code, error.column]).toEqual(['22023', field]);
      expect(error.message).toBe(`${field}: must be at most 1000 characters, got a string of 16777216 bytes`);
      expect(ms, `${field}: ${ms} ms`).toBeLessThan(8_000); // generous: sending 16 MB is most of it (about 1 s)
    }
  }, 60_000);
});
