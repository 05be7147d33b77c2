/**
 * SPEC §13 — a producer that is not the schema's owner, with exactly the grants
 * docs/producers.md lists (USAGE on the schema, EXECUTE on `enqueue` and `enqueue_many`), can
 * enqueue in every mode — dedupe modes, dependsOn (whose commit runs migration 15's deferred
 * trigger as whoever commits) — also from a trigger of its own table; and can do nothing else:
 * not read or write the jobs table, not call the functions behind `enqueue`. Without EXECUTE it
 * cannot enqueue either (PUBLIC has none).
 *
 * The role is a real one (cluster-wide: a random name, dropped after the file); each check runs
 * in a transaction that `SET LOCAL ROLE`s to it, so privileges are checked as PostgreSQL checks
 * that role's own sessions.
 *
 * Deliberate breaks seen failing (each undone after):
 * - `enqueue` and `enqueue_many` without SECURITY DEFINER: the three enqueue tests failed with
 *   "permission denied for function producer_spec" (42501: the helpers run as the caller, who may
 *   not call them, let alone write the table; producer_spec is producer_check since migration 18);
 * - without migration 17's `ALTER FUNCTION … dependencies_committed() SECURITY DEFINER`: the
 *   dependsOn test failed at COMMIT with "permission denied for table jobs" — the deferred
 *   trigger fires after the definer function returned, as the producer;
 * - without `REVOKE … FROM PUBLIC` on the helpers: "cannot call the functions behind enqueue"
 *   failed (producer_spec answered instead of 42501).
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const s = quoteIdent(TEST_SCHEMA);
const producer = `skiplock_producer_${randomBytes(4).toString('hex')}`;
const stranger = `skiplock_stranger_${randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  await db.sql(`CREATE ROLE ${producer} NOLOGIN`);
  await db.sql(`CREATE ROLE ${stranger} NOLOGIN`);
  // exactly what docs/producers.md lists
  await db.sql(`GRANT USAGE ON SCHEMA ${s} TO ${producer}`);
  await db.sql(
    `GRANT EXECUTE ON FUNCTION ${s}.enqueue(text, jsonb, jsonb), ${s}.enqueue_many(jsonb) TO ${producer}`,
  );
  // the stranger: the schema only
  await db.sql(`GRANT USAGE ON SCHEMA ${s} TO ${stranger}`);
  // a table of the producer's own, whose trigger enqueues (the trigger runs as the inserting role)
  await db.sql(`
    CREATE TABLE public.signups (id serial PRIMARY KEY, email text NOT NULL);
    CREATE FUNCTION public.signups_enqueue() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      PERFORM ${s}.enqueue('welcome.send', jsonb_build_object('email', NEW.email), '{"delayMs": 1000}');
      RETURN NULL;
    END
    $fn$;
    CREATE TRIGGER signups_enqueue AFTER INSERT ON public.signups FOR EACH ROW EXECUTE FUNCTION public.signups_enqueue();
    GRANT INSERT ON public.signups TO ${producer};
    GRANT USAGE ON SEQUENCE public.signups_id_seq TO ${producer};`);
});

afterAll(async () => {
  await db.sql('DROP TABLE IF EXISTS public.producer_checks');
  for (const role of [producer, stranger]) {
    await db.sql(`DROP OWNED BY ${role}`);
    await db.sql(`DROP ROLE ${role}`);
  }
});

/** Runs `fn` as `role` in a transaction that commits (or rolls back when `fn` throws). */
async function as<T>(role: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL ROLE ${role}`);
    const value = await fn(client);
    await client.query('COMMIT');
    return value;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

const call = (client: pg.PoolClient, options: unknown, task = 'grants.task') =>
  client
    .query(`SELECT id::text AS id, created FROM ${s}.enqueue($1, '{"n": 1}', $2::jsonb)`, [
      task,
      JSON.stringify(options),
    ])
    .then((r) => r.rows[0] as { id: string; created: boolean });

describe('a producer with only USAGE and EXECUTE', () => {
  test('enqueues, with every dedupe mode, and reads its answers', async () => {
    const results = await as(producer, async (client) => [
      await call(client, {}),
      await call(client, { dedupeKey: 'g-plain' }),
      await call(client, { dedupeKey: 'g-plain' }),
      await call(client, { dedupeKey: 'g-pending', dedupe: { scope: 'pending' } }),
      await call(client, { dedupeKey: 'g-window', dedupe: { windowMs: 60_000 } }),
      await call(client, { dedupeKey: 'g-window', dedupe: { windowMs: 60_000 } }),
      await call(client, {
        dedupeKey: 'g-debounce',
        dedupe: { replace: true, maxWaitMs: 5_000 },
        delayMs: 60_000,
      }),
      await call(client, {
        dedupeKey: 'g-debounce',
        dedupe: { replace: true, maxWaitMs: 5_000 },
        delayMs: 60_000,
      }),
      await call(client, { queue: 'g', group: 'tenant', runAt: '2031-01-01T00:00:00Z' }),
    ]);
    expect(results.map((r) => r.created)).toEqual([true, true, false, true, true, false, true, false, true]);
    const rows = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${s}.jobs WHERE task = 'grants.task'`,
    );
    expect(rows[0]?.n).toBe(6);
  });

  test('enqueue_many, and dependsOn decided at its COMMIT (migration 15’s deferred trigger)', async () => {
    const [done] = await db.sql<{ id: string }>(`SELECT id::text FROM ${s}.enqueue('grants.dep', '{}')`);
    await db.sql(`UPDATE ${s}.jobs SET status = 'done' WHERE id = $1`, [done?.id]);
    const ids = await as(producer, async (client) => {
      const many = await client.query(`SELECT id::text FROM ${s}.enqueue_many($1::jsonb)`, [
        JSON.stringify([
          { task: 'grants.many', payload: 1 },
          { task: 'grants.many', payload: 2, dependsOn: [done?.id] },
        ]),
      ]);
      const one = await call(client, { dependsOn: [done?.id] }, 'grants.dependent');
      return [...many.rows.map((r: { id: string }) => r.id), one.id];
    });
    const rows = await db.sql<{ status: string }>(
      `SELECT status FROM ${s}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [ids],
    );
    // the dependency is done: the commit made both dependents pending
    expect(rows.map((r) => r.status)).toEqual(['pending', 'pending', 'pending']);
  });

  test('from a trigger on its own table', async () => {
    await as(producer, (client) =>
      client.query(`INSERT INTO public.signups (email) VALUES ('ada@example.com')`),
    );
    const rows = await db.sql(`SELECT task, payload FROM ${s}.jobs WHERE task = 'welcome.send'`);
    expect(rows).toEqual([{ task: 'welcome.send', payload: { email: 'ada@example.com' } }]);
  });

  test('cannot read or write the jobs table', async () => {
    for (const statement of [
      `SELECT count(*) FROM ${s}.jobs`,
      `INSERT INTO ${s}.jobs (task) VALUES ('sneaky')`,
      `UPDATE ${s}.jobs SET priority = 0`,
      `DELETE FROM ${s}.dedupe_windows`,
    ]) {
      await expect(
        as(producer, (client) => client.query(statement)),
        statement,
      ).rejects.toMatchObject({ code: '42501' });
    }
  });

  test('cannot call the functions behind enqueue', async () => {
    for (const statement of [
      `SELECT ${s}.producer_check('"t"', NULL, '{}', '{}', 'options', '')`,
      `SELECT * FROM ${s}.producer_insert(${s}.producer_check('"t"', NULL, '{}', '{}', 'options', ''), NULL)`,
      `SELECT ${s}.producer_payload('1', 'payload')`,
      `SELECT ${s}.producer_too_long('task', 5000)`,
      `SELECT ${s}.producer_insert_dependents(ARRAY[]::${s}.producer_job[], ARRAY[]::text[])`,
      `SELECT ${s}.producer_invalid('f', 'm')`,
    ]) {
      await expect(
        as(producer, (client) => client.query(statement)),
        statement,
      ).rejects.toMatchObject({ code: '42501' });
    }
  });
});

/**
 * Issue 25: the commit trigger of dependencies runs as the schema's owner (SECURITY DEFINER, so a
 * producer's commit can decide its dependents). Attached to another table, it would act with the
 * owner's rights on rows someone else wrote: lock the jobs they name FOR NO KEY UPDATE and
 * rewrite them. Broken on purpose (in one run): without migration 18's REVOKEs, "cannot attach…"
 * failed — the producer's CREATE TRIGGER succeeded; without the TG_RELID guard, "…acts only on
 * dependency_checks" failed — the insert into the owner's other table succeeded, running the
 * trigger on rows of that table.
 */
describe('the commit trigger of dependencies (migration 15, SECURITY DEFINER)', () => {
  const fake = (name: string) => `
    CREATE TABLE public.${name} (id bigserial PRIMARY KEY, job_ids bigint[] NOT NULL, first_id bigint NOT NULL)`;

  /** A job with a waiting dependent, and the dependency's row version. */
  async function dependency(): Promise<{ dep: string; dependent: string; xmin: string }> {
    const [dep] = await db.sql<{ id: string }>(`SELECT id::text FROM ${s}.enqueue('grants.victim', '{}')`);
    const [dependent] = await db.sql<{ id: string }>(
      `SELECT id::text FROM ${s}.enqueue('grants.waiter', '{}', jsonb_build_object('dependsOn', jsonb_build_array($1::text)))`,
      [dep?.id],
    );
    const [row] = await db.sql<{ xmin: string }>(`SELECT xmin::text FROM ${s}.jobs WHERE id = $1`, [dep?.id]);
    return { dep: dep?.id as string, dependent: dependent?.id as string, xmin: row?.xmin as string };
  }

  const state = (ids: string[]) =>
    db.sql<{ xmin: string; status: string; deps_left: number }>(
      `SELECT xmin::text, status, deps_left FROM ${s}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [ids],
    );

  test('a producer cannot attach it (or any of the schema’s trigger functions) to a table of its own', async () => {
    await db.sql(`${fake('producer_checks')}; ALTER TABLE public.producer_checks OWNER TO ${producer}`);
    const { dep, dependent } = await dependency();
    const before = await state([dep, dependent]);
    for (const fn of [
      'dependencies_committed',
      'dependency_changed',
      'dependencies_deleted',
      'notify_finished',
    ]) {
      await expect(
        as(producer, (client) =>
          client.query(
            `CREATE TRIGGER sneaky AFTER INSERT ON public.producer_checks FOR EACH ROW EXECUTE FUNCTION ${s}.${fn}()`,
          ),
        ),
        fn,
      ).rejects.toMatchObject({
        code: '42501',
        message: expect.stringMatching(/permission denied for function/),
      });
    }
    // had it attached one, this insert would have run it as the owner on the dependency
    await as(producer, (client) =>
      client.query('INSERT INTO public.producer_checks (job_ids, first_id) VALUES ($1::bigint[], $2)', [
        [dependent],
        Number(dependent) + 1,
      ]),
    );
    expect(await state([dep, dependent])).toEqual(before);
  });

  test('it acts only on dependency_checks: attached elsewhere (by its owner), it refuses and changes nothing', async () => {
    await db.sql(`${fake('owner_checks')};
      CREATE TRIGGER mistaken AFTER INSERT ON public.owner_checks FOR EACH ROW EXECUTE FUNCTION ${s}.dependencies_committed()`);
    const { dep, dependent } = await dependency();
    const before = await state([dep, dependent]);
    await expect(
      db.sql('INSERT INTO public.owner_checks (job_ids, first_id) VALUES ($1::bigint[], $2)', [
        [dependent],
        Number(dependent) + 1,
      ]),
    ).rejects.toMatchObject({
      code: '42501',
      message: expect.stringMatching(
        /runs only as the trigger of .*dependency_checks, not on (public\.)?owner_checks/,
      ),
    });
    expect(await state([dep, dependent])).toEqual(before);
    // and as its own trigger it still decides a commit (the dependent above is waiting on a pending job)
    expect(before.map((r) => [r.status, r.deps_left])).toEqual([
      ['pending', 0],
      ['waiting', 1],
    ]);
    await db.sql('DROP TABLE public.owner_checks');
  });
});

describe('a role without EXECUTE', () => {
  test('cannot enqueue: PUBLIC has no EXECUTE on enqueue or enqueue_many', async () => {
    await expect(as(stranger, (client) => call(client, {}))).rejects.toMatchObject({
      code: '42501',
      message: expect.stringMatching(/permission denied for function enqueue/),
    });
    await expect(
      as(stranger, (client) => client.query(`SELECT * FROM ${s}.enqueue_many('[]')`)),
    ).rejects.toMatchObject({ code: '42501' });
  });
});
