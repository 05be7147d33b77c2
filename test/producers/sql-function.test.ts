/**
 * SPEC §13 — `<schema>.enqueue(task, payload, options)` and `<schema>.enqueue_many(jobs)` as SQL
 * callers use them, beyond the conformance table: inside the caller's transaction (§1.6: a
 * rollback leaves no job and no wake-up; a commit delivers one NOTIFY however many jobs, none for
 * a dedupe hit — §1.9), two transactions racing for one dedupe key (one held open: the other
 * waits for it, then gets its job, or inserts when it rolls back), an `AFTER INSERT` trigger of a
 * user table, every isolation level, bad input of every kind with nothing written, the hashed
 * channel of a long schema name, and enqueue_many's order and batch rules.
 *
 * Notifications are checked without sleeps: a marker NOTIFY sent after the transaction ends
 * arrives after everything it delivered (test/support/listener.ts).
 *
 * Deliberate breaks seen failing (each undone after):
 * - migration 17's plain insert as check-then-insert (a SELECT of the key, then an INSERT without
 *   ON CONFLICT): the held-open plain race and the two opposite-order enqueue_many calls failed
 *   with a unique violation (23505) instead of answering with the holder;
 * - its plain insert asking for a hint on a dedupe hit: "a dedupe hit sends no hint" failed (1
 *   hint instead of 0);
 * - the channel computed from the quoted identifier instead of the schema's name: every hint test
 *   failed (no hint on the channel workers listen on), the long-name one by its 10 s timeout.
 * Not a break: enqueue() called three times in one transaction sends pg_notify three times, and
 * PostgreSQL folds identical notifications of a transaction into one — that is what keeps §1.9's
 * "one per transaction" for a caller's own loop ("a commit delivers … one hint").
 */
import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { notifyChannel, quoteIdent } from '../../src/db/identifier.js';
import { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { type Listener, listen } from '../support/listener.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const s = quoteIdent(TEST_SCHEMA);
let listener: Listener;

beforeAll(async () => {
  listener = await listen(db.url);
});
beforeEach(async () => {
  await listener.sync(db.pool);
});
afterAll(async () => {
  await listener.close();
});

/** Runs `fn` in a transaction on a client of its own, ended by `end`. */
async function transaction<T>(
  end: 'COMMIT' | 'ROLLBACK',
  fn: (client: pg.PoolClient) => Promise<T>,
  begin = 'BEGIN',
) {
  const client = await db.pool.connect();
  try {
    await client.query(begin);
    const value = await fn(client);
    await client.query(end);
    return value;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

async function enqueue(
  client: pg.ClientBase | pg.Pool,
  task: string,
  payload: unknown,
  options?: unknown,
): Promise<{ id: string; created: boolean }> {
  const { rows } = await client.query(
    options === undefined
      ? `SELECT id::text AS id, created FROM ${s}.enqueue($1, $2::jsonb)`
      : `SELECT id::text AS id, created FROM ${s}.enqueue($1, $2::jsonb, $3::jsonb)`,
    options === undefined
      ? [task, JSON.stringify(payload)]
      : [task, JSON.stringify(payload), JSON.stringify(options)],
  );
  return rows[0];
}

/** The 'jobs' hints delivered before a marker sent now. */
async function hintsDelivered(): Promise<number> {
  const marker = `marker-${Math.random().toString(36).slice(2)}`;
  await listener.mark(db.pool, marker);
  let hints = 0;
  for (let payload = await listener.next(); payload !== marker; payload = await listener.next()) {
    if (payload === 'jobs') hints++;
  }
  return hints;
}

/** Rows of every table an enqueue writes. */
async function tableCounts(): Promise<Record<string, number>> {
  const [row] = await db.sql<Record<string, number>>(
    `SELECT (SELECT count(*) FROM ${s}.jobs)::int AS jobs, (SELECT count(*) FROM ${s}.job_dependencies)::int AS edges,
            (SELECT count(*) FROM ${s}.dedupe_windows)::int AS windows, (SELECT count(*) FROM ${s}.dependency_checks)::int AS checks`,
  );
  return row as Record<string, number>;
}

/** Resolves once backend `pid` waits for a lock (event-driven on the server's own view, no sleep). */
async function waitsForLock(pid: number): Promise<void> {
  await expect
    .poll(
      async () =>
        (
          await db.sql<{ w: string | null }>(
            'SELECT wait_event_type AS w FROM pg_stat_activity WHERE pid = $1',
            [pid],
          )
        )[0]?.w,
    )
    .toBe('Lock');
}

describe('§1.6/§1.9 in the caller’s transaction', () => {
  test('a rolled-back transaction leaves no job and sends no wake-up', async () => {
    const before = await tableCounts();
    const { id } = await transaction('ROLLBACK', async (client) => {
      const result = await enqueue(
        client,
        'sql.rollback',
        { n: 1 },
        { dedupeKey: 'rb', dedupe: { windowMs: 60_000 } },
      );
      const dependent = await enqueue(client, 'sql.rollback', {}, { dependsOn: [result.id] });
      expect(dependent.created).toBe(true);
      // inside, the caller sees its jobs
      const { rows } = await client.query(`SELECT count(*)::int AS n FROM ${s}.jobs WHERE id IN ($1, $2)`, [
        result.id,
        dependent.id,
      ]);
      expect(rows[0].n).toBe(2);
      return result;
    });
    expect(await db.sql(`SELECT 1 FROM ${s}.jobs WHERE id = $1`, [id])).toEqual([]);
    expect(await tableCounts()).toEqual(before);
    expect(await hintsDelivered()).toBe(0);
  });

  test('a commit delivers its jobs and one hint, however many enqueues it made', async () => {
    const ids = await transaction('COMMIT', async (client) => [
      (await enqueue(client, 'sql.commit', { n: 1 })).id,
      (await enqueue(client, 'sql.commit', { n: 2 }, { priority: 1 })).id,
      (await client.query(`SELECT id::text FROM ${s}.enqueue_many('[{"task": "sql.commit", "payload": 3}]')`))
        .rows[0].id,
    ]);
    const rows = await db.sql<{ status: string }>(
      `SELECT status FROM ${s}.jobs WHERE id = ANY($1::bigint[])`,
      [ids],
    );
    expect(rows.map((r) => r.status)).toEqual(['pending', 'pending', 'pending']);
    expect(await hintsDelivered()).toBe(1);
  });

  test('nothing is visible to other sessions (or to a claim) before the commit', async () => {
    const queue = db.queue();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { id } = await enqueue(client, 'sql.invisible', {});
      expect(await queue.get(id)).toBeNull();
      expect(await queue.claim('w-sql', { tasks: ['sql.invisible'] })).toEqual([]);
      await client.query('COMMIT');
      const [job] = await queue.claim('w-sql', { tasks: ['sql.invisible'] });
      expect(job?.id).toBe(id);
    } finally {
      client.release();
    }
  });

  test('a dedupe hit sends no hint', async () => {
    const { id } = await enqueue(db.pool, 'sql.hit', {}, { dedupeKey: 'hit-key' });
    expect(await hintsDelivered()).toBe(1);
    expect(await enqueue(db.pool, 'sql.hit', {}, { dedupeKey: 'hit-key' })).toEqual({ id, created: false });
    // a debounce hit on a holder of another task: not replaced, so nothing changed
    expect(
      await enqueue(db.pool, 'sql.hit.other', {}, { dedupeKey: 'hit-key', dedupe: { replace: true } }),
    ).toEqual({ id, created: false });
    expect(await hintsDelivered()).toBe(0);
  });

  test.each([['REPEATABLE READ'], ['SERIALIZABLE'], ['READ COMMITTED']])(
    'works in a %s transaction',
    async (level) => {
      const result = await transaction(
        'COMMIT',
        (client) => enqueue(client, 'sql.isolation', { level }, { dedupeKey: `iso-${level}` }),
        `BEGIN ISOLATION LEVEL ${level}`,
      );
      expect(result.created).toBe(true);
      expect(await enqueue(db.pool, 'sql.isolation', {}, { dedupeKey: `iso-${level}` })).toEqual({
        id: result.id,
        created: false,
      });
    },
  );
});

describe('§1.7 two transactions race for one dedupe key', () => {
  for (const mode of [
    { name: 'plain', options: {} },
    { name: "scope 'pending'", options: { dedupe: { scope: 'pending' } } },
    { name: 'throttle', options: { dedupe: { windowMs: 60_000 } } },
    { name: 'debounce', options: { dedupe: { replace: true } } },
  ]) {
    test(`${mode.name}: the second waits for the first; its commit makes it the holder`, async () => {
      const key = `race-commit-${mode.name}`;
      const first = await db.pool.connect();
      const second = await db.pool.connect();
      try {
        await first.query('BEGIN');
        const held = await enqueue(first, 'sql.race', { who: 'first' }, { dedupeKey: key, ...mode.options });
        expect(held.created).toBe(true);
        const pid = (await second.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        const racing = enqueue(second, 'sql.race', { who: 'second' }, { dedupeKey: key, ...mode.options });
        await waitsForLock(pid);
        await first.query('COMMIT');
        expect(await racing).toEqual({ id: held.id, created: false });
      } finally {
        first.release();
        second.release();
      }
      const rows = await db.sql<{ id: string; payload: unknown }>(
        `SELECT id::text, payload FROM ${s}.jobs WHERE coalesce(dedupe_key, pending_key) = $1`,
        [key],
      );
      // a debounce hit on the pending holder takes its payload; the others keep the first's
      expect(rows).toEqual([
        { id: expect.any(String), payload: { who: mode.name === 'debounce' ? 'second' : 'first' } },
      ]);
    });

    test(`${mode.name}: when the first rolls back, the second inserts its own job`, async () => {
      const key = `race-rollback-${mode.name}`;
      const first = await db.pool.connect();
      const second = await db.pool.connect();
      let won: { id: string; created: boolean };
      try {
        await first.query('BEGIN');
        const held = await enqueue(first, 'sql.race', { who: 'first' }, { dedupeKey: key, ...mode.options });
        const pid = (await second.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        const racing = enqueue(second, 'sql.race', { who: 'second' }, { dedupeKey: key, ...mode.options });
        await waitsForLock(pid);
        await first.query('ROLLBACK');
        won = await racing;
        expect(won.created).toBe(true);
        expect(won.id).not.toBe(held.id);
      } finally {
        first.release();
        second.release();
      }
      const rows = await db.sql<{ id: string; payload: unknown }>(
        `SELECT id::text, payload FROM ${s}.jobs WHERE coalesce(dedupe_key, pending_key) = $1`,
        [key],
      );
      expect(rows).toEqual([{ id: won.id, payload: { who: 'second' } }]);
    });
  }

  test('two enqueue_many calls sharing keys in opposite orders never deadlock', async () => {
    const keys = Array.from({ length: 20 }, (_, i) => `many-${i}`);
    const batch = (order: string[]) =>
      JSON.stringify(order.map((key) => ({ task: 'sql.many', payload: key, dedupeKey: key })));
    const first = await db.pool.connect();
    const second = await db.pool.connect();
    try {
      await first.query('BEGIN');
      await second.query('BEGIN');
      const a = first.query(`SELECT * FROM ${s}.enqueue_many($1::jsonb)`, [batch(keys)]);
      const b = second.query(`SELECT * FROM ${s}.enqueue_many($1::jsonb)`, [batch([...keys].reverse())]);
      const [ra, rb] = await Promise.all([
        a.then(async (r) => {
          await first.query('COMMIT');
          return r.rows;
        }),
        b.then(async (r) => {
          await second.query('COMMIT');
          return r.rows;
        }),
      ]);
      expect(ra.filter((r) => r.created).length + rb.filter((r) => r.created).length).toBe(20);
    } finally {
      first.release();
      second.release();
    }
  });
});

describe('from a trigger', () => {
  beforeAll(async () => {
    await db.sql(`
      CREATE TABLE public.orders (id serial PRIMARY KEY, email text NOT NULL, priority numeric NOT NULL DEFAULT 100);
      CREATE FUNCTION public.orders_enqueue() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM ${s}.enqueue('order.confirm', jsonb_build_object('order', NEW.id, 'email', NEW.email),
                             jsonb_build_object('dedupeKey', 'order:' || NEW.id, 'priority', NEW.priority));
        RETURN NULL;
      END
      $fn$;
      CREATE TRIGGER orders_enqueue AFTER INSERT ON public.orders FOR EACH ROW EXECUTE FUNCTION public.orders_enqueue();`);
  });

  test('an AFTER INSERT trigger enqueues with the row, in the inserting transaction', async () => {
    const [order] = await db.sql<{ id: number }>(
      `INSERT INTO public.orders (email, priority) VALUES ('ada@example.com', 5) RETURNING id`,
    );
    const jobs = await db.sql(
      `SELECT task, payload, priority, dedupe_key, status FROM ${s}.jobs WHERE dedupe_key = $1`,
      [`order:${order?.id}`],
    );
    expect(jobs).toEqual([
      {
        task: 'order.confirm',
        payload: { order: order?.id, email: 'ada@example.com' },
        priority: 5,
        dedupe_key: `order:${order?.id}`,
        status: 'pending',
      },
    ]);
    expect(await hintsDelivered()).toBe(1);
  });

  test('an insert rolled back takes its jobs with it, and no hint', async () => {
    const before = await tableCounts();
    const ids = await transaction(
      'ROLLBACK',
      async (client) =>
        (
          await client.query(
            `INSERT INTO public.orders (email) SELECT 'x' || g FROM generate_series(1, 3) AS g RETURNING id`,
          )
        ).rows,
    );
    expect(ids).toHaveLength(3);
    expect(await tableCounts()).toEqual(before);
    expect(await hintsDelivered()).toBe(0);
  });

  test('bad input from the trigger fails the insert: no order, no job', async () => {
    const before = await tableCounts();
    const failed = await db
      .sql(`INSERT INTO public.orders (email, priority) VALUES ('z', 1.5)`)
      .catch((e: pg.DatabaseError) => e);
    expect(failed).toMatchObject({
      code: '22023',
      column: 'priority',
      message: 'priority: must be an integer, got 1.5',
    });
    expect(await db.sql(`SELECT 1 FROM public.orders WHERE email = 'z'`)).toEqual([]);
    expect(await tableCounts()).toEqual(before);
    expect(await hintsDelivered()).toBe(0);
  });
});

describe('§1.11 bad input: a 22023 naming the field, nothing written, no hint', () => {
  const BAD: { call: string; params: unknown[]; field: string }[] = [
    { call: `${s}.enqueue($1, '{}', '[]')`, params: ['t'], field: 'options' },
    { call: `${s}.enqueue($1, '{}', '"queue"')`, params: ['t'], field: 'options' },
    {
      call: `${s}.enqueue($1, '{}', '{"priority": 1, "Priority": 2}')`,
      params: ['t'],
      field: 'options.Priority',
    },
    { call: `${s}.enqueue(NULL, '{}')`, params: [], field: 'task' },
    {
      call: `${s}.enqueue($1, '{}', $2::jsonb)`,
      params: ['t', '{"dependsOn": [1, 2, "x"]}'],
      field: 'dependsOn[2]',
    },
    {
      call: `${s}.enqueue($1, '{}', $2::jsonb)`,
      params: ['t', JSON.stringify({ dependsOn: Array(10_001).fill('1') })],
      field: 'dependsOn',
    },
    {
      call: `${s}.enqueue($1, '{}', '{"dedupeKey": "k", "dedupe": {"windowMs": 1e20}}')`,
      params: ['t'],
      field: 'dedupe.windowMs',
    },
    {
      call: `${s}.enqueue($1, '{}', '{"runAt": "2031-01-01T00:00:00+16:00"}')`,
      params: ['t'],
      field: 'runAt',
    },
    { call: `${s}.enqueue_many('{}')`, params: [], field: 'jobs' },
    { call: `${s}.enqueue_many(NULL)`, params: [], field: 'jobs' },
    { call: `${s}.enqueue_many('[{"task": "a"}, 5]')`, params: [], field: 'jobs[1]' },
    {
      call: `${s}.enqueue_many('[{"task": "a"}, {"task": "b", "prio": 1}]')`,
      params: [],
      field: 'jobs[1].prio',
    },
    {
      call: `${s}.enqueue_many('[{"task": "a"}, {"task": "b", "sequence": "s", "dedupeKey": "k"}]')`,
      params: [],
      field: 'jobs[1].sequence',
    },
    {
      call: `${s}.enqueue_many('[{"task": "a", "dedupeKey": "k"}, {"task": "b", "dependsOn": ["1"]}]')`,
      params: [],
      field: 'jobs[0].dedupeKey',
    },
    {
      call: `${s}.enqueue_many('[{"task": "a"}, {"task": "b", "dependsOn": ["999999999"]}]')`,
      params: [],
      field: 'jobs[1].dependsOn',
    },
  ];
  test.each(BAD)('$call → $field', async ({ call, params, field }) => {
    const before = await tableCounts();
    const error = await transaction('COMMIT', async (client) => {
      // a job the transaction wrote before: the error aborts it too (the caller rolls back)
      await enqueue(client, 'sql.bad.before', {});
      return client.query(`SELECT * FROM ${call}`, params).then(
        () => null,
        (e: pg.DatabaseError) => e,
      );
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: '22023', column: field });
    expect((error as Error).message.startsWith(`${field}: `)).toBe(true);
    expect((error as pg.DatabaseError).hint).toMatch(/Nothing was enqueued/);
    expect(await tableCounts()).toEqual(before);
    expect(await hintsDelivered()).toBe(0);
  });

  test('options NULL and payload NULL are the defaults', async () => {
    const [row] = await db.sql<{ id: string }>(`SELECT id::text FROM ${s}.enqueue('sql.nulls', NULL, NULL)`);
    const [job] = await db.sql(`SELECT payload, priority, queue FROM ${s}.jobs WHERE id = $1`, [row?.id]);
    expect(job).toEqual({ payload: null, priority: 100, queue: 'default' });
  });
});

describe('enqueue_many', () => {
  test('answers in input order, ids drawn in input order; a repeated key gives the first one; one hint', async () => {
    const jobs = [
      { task: 'many.a', payload: 1, dedupeKey: 'mk-z' },
      { task: 'many.b', payload: 2 },
      { task: 'many.c', payload: 3, dedupeKey: 'mk-a' },
      { task: 'many.d', payload: 4, dedupeKey: 'mk-z' },
    ];
    await listener.sync(db.pool);
    const rows = await db.sql<{ id: string; created: boolean }>(
      `SELECT r.id::text AS id, r.created FROM ${s}.enqueue_many($1::jsonb) WITH ORDINALITY AS r(id, created, n) ORDER BY r.n`,
      [JSON.stringify(jobs)],
    );
    expect(rows.map((r) => r.created)).toEqual([true, true, true, false]);
    expect(rows[3]?.id).toBe(rows[0]?.id);
    const ids = rows.slice(0, 3).map((r) => BigInt(r.id));
    expect([...ids].sort((a, b) => (a < b ? -1 : 1))).toEqual(ids);
    expect(await hintsDelivered()).toBe(1);
  });

  test('with dependsOn: every job with its edges, one pending check for the call', async () => {
    const { id: dep } = await enqueue(db.pool, 'many.dep', {});
    const rows = await transaction('COMMIT', async (client) => {
      const result = await client.query(`SELECT id::text, created FROM ${s}.enqueue_many($1::jsonb)`, [
        JSON.stringify([
          { task: 'many.w', payload: 1, dependsOn: [dep] },
          { task: 'many.p', payload: 2 },
          { task: 'many.w', dependsOn: [dep, dep] },
        ]),
      ]);
      const { rows: checks } = await client.query(
        `SELECT job_ids::text[] AS ids FROM ${s}.dependency_checks`,
      );
      expect(checks).toEqual([{ ids: [result.rows[0].id, result.rows[2].id] }]);
      return result.rows;
    });
    const jobs = await db.sql(
      `SELECT task, status, deps_left FROM ${s}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [rows.map((r) => r.id)],
    );
    expect(jobs).toEqual([
      { task: 'many.w', status: 'waiting', deps_left: 1 },
      { task: 'many.p', status: 'pending', deps_left: 0 },
      { task: 'many.w', status: 'waiting', deps_left: 1 },
    ]);
    expect(await db.sql(`SELECT count(*)::int AS n FROM ${s}.dependency_checks`)).toEqual([{ n: 0 }]);
  });

  test('an empty array writes nothing and answers nothing', async () => {
    expect(await db.sql(`SELECT * FROM ${s}.enqueue_many('[]')`)).toEqual([]);
    expect(await hintsDelivered()).toBe(0);
  });
});

describe('§1.9 the channel of a long schema name is hashed, as the library hashes it', () => {
  const long = `producers_${'x'.repeat(50)}`;
  let queue: Queue;
  let longListener: Listener;

  beforeAll(async () => {
    queue = new Queue({ connectionString: db.url, schema: long });
    await queue.migrate();
    longListener = await listen(db.url, long);
  });
  afterAll(async () => {
    await longListener.close();
    await queue.close();
  });

  test('its enqueue wakes the channel a Worker of that schema listens on', async () => {
    expect(Buffer.byteLength(notifyChannel(long))).toBeLessThanOrEqual(63);
    expect(notifyChannel(long)).not.toContain(long);
    await db.sql(`SELECT ${quoteIdent(long)}.enqueue('long.task', '{}')`);
    expect(await longListener.next((p) => p === 'jobs', 10_000)).toBe('jobs');
  });
});
