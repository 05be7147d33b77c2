/**
 * SPEC §8 dedupe modes, each enforced by the database and tried with 40 concurrent enqueues
 * from four queues (own pools): throttle (`windowMs`: the key stays taken after its holder
 * finished, until the window ends) and debounce (`replace`: a pending holder takes the latest
 * payload, priority and run time; a running one never changes; `maxWaitMs` caps how far its run
 * time moves, in database time). Validation refuses what the modes cannot mean.
 *
 * Breaks seen failing: the debounce's `WHERE j.status = 'pending'` removed (a running holder's
 * payload was replaced under its handler: `replaced: true`); the `least(… created_at +
 * maxWaitMs)` cap removed (the run time moved 1,070 ms past createdAt). The throttle's
 * window-row lock guards a race these tests cannot time: two enqueues that both find the window
 * over, where the first one's new job finishes before the second inserts (the active index,
 * §1.7, covers every other interleaving); without the window itself (windowTake a no-op) the
 * "during" phase fails at once.
 */
import { beforeAll, describe, expect, test } from 'vitest';
import { ValidationError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
let queues: Queue[];
beforeAll(() => {
  queues = Array.from({ length: 4 }, () => db.queue({ poolSize: 10 }));
});
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function rowsWithKey(key: string) {
  return db.sql<{
    id: string;
    status: string;
    payload: unknown;
    priority: number;
    run_ms: number;
    created_ms: number;
  }>(
    `SELECT id::text, status, payload, priority,
            extract(epoch FROM run_after) * 1000 AS run_ms, extract(epoch FROM created_at) * 1000 AS created_ms
     FROM ${db.jobs} WHERE dedupe_key = $1 ORDER BY id`,
    [key],
  );
}

describe('throttle: dedupe.windowMs', () => {
  test('40 racing enqueues: one job; the key stays taken after it finished, until the window ends', async () => {
    const key = 'throttle:1';
    // The window must outlast the two rounds of 40 enqueues and the claim between them: 4 s,
    // not the 1.5 s it was, which a loaded machine (the suite's files run side by side) could
    // use up before the "during" round had decided, and that round then created a job.
    const enqueue = (i: number) =>
      (queues[i % 4] as Queue).enqueue('dm.throttle', { i }, { dedupeKey: key, dedupe: { windowMs: 4_000 } });
    const first = await Promise.all(Array.from({ length: 40 }, (_, i) => enqueue(i)));
    const created = first.filter((r) => r.created);
    expect(created).toHaveLength(1);
    expect(new Set(first.map((r) => r.id))).toEqual(new Set([created[0]?.id]));

    // The holder finishes; the window still holds the key.
    const [job] = await db.queue().claim('w', { tasks: ['dm.throttle'] });
    await db.queue().complete(job as never, null);
    const during = await Promise.all(Array.from({ length: 40 }, (_, i) => enqueue(i)));
    expect(during.every((r) => !r.created && r.id === created[0]?.id)).toBe(true);
    expect(await rowsWithKey(key)).toHaveLength(1);

    // After the window: exactly one new holder, whatever the race.
    await sleep(4_100);
    const after = await Promise.all(Array.from({ length: 40 }, (_, i) => enqueue(i)));
    expect(after.filter((r) => r.created)).toHaveLength(1);
    expect(await rowsWithKey(key)).toHaveLength(2);
  });

  test('an active holder older than the window still holds the key (§1.7)', async () => {
    const queue = db.queue();
    const key = 'throttle:2';
    const a = await queue.enqueue('dm.throttle2', null, { dedupeKey: key, dedupe: { windowMs: 100 } });
    await sleep(200);
    const b = await queue.enqueue('dm.throttle2', null, { dedupeKey: key, dedupe: { windowMs: 100 } });
    expect(b).toEqual({ id: a.id, created: false });
  });
});

describe('debounce: dedupe.replace', () => {
  test('40 racing enqueues on a pending holder: one job, carrying one of the calls’ payloads', async () => {
    const key = 'debounce:1';
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (queues[i % 4] as Queue).enqueue(
          'dm.debounce',
          { i },
          { dedupeKey: key, priority: i, delayMs: 60_000, dedupe: { replace: true } },
        ),
      ),
    );
    expect(results.filter((r) => r.created)).toHaveLength(1);
    expect(results.filter((r) => r.replaced)).toHaveLength(39);
    const rows = await rowsWithKey(key);
    expect(rows).toHaveLength(1);
    const payload = rows[0]?.payload as { i: number };
    expect(rows[0]?.priority).toBe(payload.i); // payload and priority from the same call
  });

  test('the latest call wins; a running holder is never replaced', async () => {
    // Break: drop `WHERE j.status = 'pending'` from insertDebounced and the running job's
    // payload is replaced under its handler.
    const queue = db.queue();
    const key = 'debounce:2';
    await queue.enqueue('dm.debounce2', { v: 1 }, { dedupeKey: key, dedupe: { replace: true } });
    const second = await queue.enqueue(
      'dm.debounce2',
      { v: 2 },
      { dedupeKey: key, priority: 5, dedupe: { replace: true } },
    );
    expect(second).toMatchObject({ created: false, replaced: true });
    expect((await rowsWithKey(key))[0]).toMatchObject({ payload: { v: 2 }, priority: 5 });

    const [running] = await queue.claim('w', { tasks: ['dm.debounce2'] });
    expect(running?.payload).toEqual({ v: 2 });
    const third = await queue.enqueue(
      'dm.debounce2',
      { v: 3 },
      { dedupeKey: key, dedupe: { replace: true } },
    );
    expect(third).toEqual({ id: running?.id, created: false, replaced: false });
    expect((await queue.get(running?.id as string))?.payload).toEqual({ v: 2 });
  });

  test('maxWaitMs: repeated calls push the run time, never past createdAt + maxWaitMs (database time)', async () => {
    const queue = db.queue();
    const key = 'debounce:3';
    const options = { dedupeKey: key, delayMs: 600, dedupe: { replace: true, maxWaitMs: 1_000 } };
    await queue.enqueue('dm.debounce3', { n: 0 }, options);
    for (let n = 1; n <= 8; n++) {
      await sleep(150);
      await queue.enqueue('dm.debounce3', { n }, options);
      const [row] = await rowsWithKey(key);
      expect((row?.run_ms as number) - (row?.created_ms as number)).toBeLessThanOrEqual(1_000 + 1);
    }
    const [row] = await rowsWithKey(key);
    expect((row?.run_ms as number) - (row?.created_ms as number)).toBeGreaterThan(990); // capped, not just late
    expect(row?.payload).toEqual({ n: 8 });
    // A first call whose delay is beyond maxWaitMs is capped too.
    await queue.enqueue('dm.debounce4', null, {
      dedupeKey: 'debounce:4',
      delayMs: 60_000,
      dedupe: { replace: true, maxWaitMs: 500 },
    });
    const [capped] = await rowsWithKey('debounce:4');
    expect((capped?.run_ms as number) - (capped?.created_ms as number)).toBeLessThanOrEqual(501);
  });

  test('enqueueMany with modes decides job by job, in input order, in one transaction', async () => {
    const queue = db.queue();
    const results = await queue.enqueueMany([
      { task: 'dm.many', payload: 1, dedupeKey: 'many:1', dedupe: { replace: true } },
      { task: 'dm.many', payload: 2, dedupeKey: 'many:1', dedupe: { replace: true } },
      { task: 'dm.many', payload: 3, dedupeKey: 'many:2', dedupe: { windowMs: 60_000 } },
      { task: 'dm.many', payload: 4, dedupeKey: 'many:2', dedupe: { windowMs: 60_000 } },
      { task: 'dm.many', payload: 5 },
    ]);
    expect(results.map((r) => [r.created, r.replaced ?? null])).toEqual([
      [true, null],
      [false, true],
      [true, null],
      [false, null],
      [true, null],
    ]);
    expect((await rowsWithKey('many:1'))[0]?.payload).toBe(2);
  });
});

describe('after review: what a mode must not do', () => {
  test('debounce never replaces a holder of another task or queue, or one waiting to retry', async () => {
    // Break: drop `AND j.task = EXCLUDED.task AND j.queue = EXCLUDED.queue` (or `j.attempts = 0`)
    // from insertDebounced: the e-mail job gets the account deletion's payload.
    const queue = db.queue();
    const mail = await queue.enqueue(
      'dm.mail',
      { to: 'a@example.com' },
      { dedupeKey: 'rv:1', delayMs: 60_000, dedupe: { replace: true } },
    );
    const other = await queue.enqueue(
      'dm.delete',
      { user: 7 },
      { dedupeKey: 'rv:1', queue: 'other', dedupe: { replace: true } },
    );
    expect(other).toEqual({ id: mail.id, created: false, replaced: false });
    expect((await queue.get(mail.id))?.payload).toEqual({ to: 'a@example.com' });

    await queue.enqueue('dm.retry', { v: 1 }, { dedupeKey: 'rv:2', dedupe: { replace: true } });
    const [claimed] = await queue.claim('w', { tasks: ['dm.retry'] });
    await queue.fail(claimed as never, new Error('boom'), { retryInMs: 60_000 }); // pending, attempts 1
    const again = await queue.enqueue('dm.retry', { v: 2 }, { dedupeKey: 'rv:2', dedupe: { replace: true } });
    expect(again).toEqual({ id: claimed?.id, created: false, replaced: false });
    expect((await queue.get(claimed?.id as string))?.payload).toEqual({ v: 1 });
  });

  test('a throttle window inside a long transaction runs from the enqueue, not from BEGIN', async () => {
    // Break: now() instead of clock_timestamp() in windowLock/windowTake: the window is over
    // before the transaction commits, and a second job comes at once.
    const queue = db.queue();
    const first = await queue.transaction(async (client) => {
      await sleep(1_200);
      return queue.enqueue('dm.longtx', null, { client, dedupeKey: 'rv:3', dedupe: { windowMs: 1_000 } });
    });
    expect(first.created).toBe(true);
    const [job] = await queue.claim('w', { tasks: ['dm.longtx'] });
    await queue.complete(job as never, null);
    const second = await queue.enqueue('dm.longtx', null, { dedupeKey: 'rv:3', dedupe: { windowMs: 1_000 } });
    expect(second).toEqual({ id: first.id, created: false });
  });

  test('a throttle on a client outside any transaction still decides under its lock', async () => {
    const client = await db.pool.connect();
    try {
      const queue = db.queue();
      const a = await queue.enqueue('dm.auto', null, {
        client,
        dedupeKey: 'rv:4',
        dedupe: { windowMs: 60_000 },
      });
      const b = await queue.enqueue('dm.auto', null, {
        client,
        dedupeKey: 'rv:4',
        dedupe: { windowMs: 60_000 },
      });
      expect(a.created).toBe(true);
      expect(b).toEqual({ id: a.id, created: false });
      expect((await client.query('SELECT 1 AS one')).rows[0].one).toBe(1); // no transaction left open
    } finally {
      client.release();
    }
  });

  test('a throttle given a pg Pool as client runs in a transaction of its own', async () => {
    // Break: treat the pool as one connection (SAVEPOINT, RELEASE on whatever connection is
    // free): "RELEASE SAVEPOINT can only be used in transaction blocks", or a stranger's
    // transaction joined.
    const queue = db.queue();
    const options = { client: db.pool, dedupeKey: 'rv:5', dedupe: { windowMs: 60_000 } };
    const results = await Promise.all(
      Array.from({ length: 6 }, () => queue.enqueue('dm.pool', null, options)),
    );
    expect(results.filter((r) => r.created)).toHaveLength(1);
  });

  test('batches with modes that share keys in opposite orders never deadlock', async () => {
    // Break: decide a batch's jobs in input order instead of key order: deadlock_detected (40P01)
    // in most rounds.
    for (let round = 0; round < 10; round++) {
      const keys = [`dl:${round}:a`, `dl:${round}:b`, `dl:${round}:c`];
      const batch = (order: string[]) =>
        (queues[round % 4] as Queue).enqueueMany(
          order.map((key) => ({ task: 'dm.order', dedupeKey: key, dedupe: { windowMs: 60_000 } })),
        );
      const [x, y] = await Promise.all([batch(keys), batch([...keys].reverse())]);
      expect(x.filter((r) => r.created).length + y.filter((r) => r.created).length).toBe(3);
    }
  });
});

describe('validation (SPEC §1.11)', () => {
  test('modes that cannot mean anything are refused, naming the field; nothing is written', async () => {
    const queue = db.queue();
    const bad: [object, string][] = [
      [{ dedupe: { replace: true } }, 'dedupe'], // no dedupeKey
      [{ dedupeKey: 'k', dedupe: { scope: 'pending', windowMs: 10 } }, 'dedupe.scope'],
      [{ dedupeKey: 'k', dedupe: { scope: 'pending', replace: true } }, 'dedupe.scope'],
      [{ dedupe: { scope: 'pending' } }, 'dedupe'], // no dedupeKey
      [{ dedupeKey: 'k', dedupe: { scope: 'all' } }, 'dedupe.scope'],
      [{ dedupeKey: 'k', dedupe: { windowMs: 0 } }, 'dedupe.windowMs'],
      [{ dedupeKey: 'k', dedupe: { replace: true, windowMs: 10 } }, 'dedupe.windowMs'],
      [{ dedupeKey: 'k', dedupe: { maxWaitMs: 10 } }, 'dedupe.maxWaitMs'],
      [{ dedupeKey: 'k', dedupe: { replace: 'yes' } }, 'dedupe.replace'],
      [{ dedupeKey: 'k', dedupe: { debounce: true } }, 'dedupe.debounce'],
      [{ dedupeKey: 'k', dedupe: { windowMs: 0.2 } }, 'dedupe.windowMs'],
    ];
    for (const [options, field] of bad) {
      const error = await queue.enqueue('dm.bad', null, options as never).catch((e: unknown) => e);
      expect(error, JSON.stringify(options)).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field, JSON.stringify(options)).toBe(field);
    }
    const many = await queue
      .enqueueMany([
        { task: 'dm.bad', dedupeKey: 'k' },
        { task: 'dm.bad', dedupe: { replace: true } } as never,
      ])
      .catch((e: unknown) => e);
    expect((many as ValidationError).field).toBe('specs[1].dedupe');
    expect(await db.sql(`SELECT 1 FROM ${db.jobs} WHERE task = 'dm.bad'`)).toEqual([]);
  });
});
