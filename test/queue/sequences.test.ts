/**
 * SPEC §11 sequences (strict per-key FIFO), in one process: one job of a key at a time, in id
 * order, keys side by side; a dead head blocks its key until it is requeued (it runs again,
 * first) or cancelled, and `sequences({ blocked })` lists it; a head that waits for its retry,
 * or is delayed, holds its key; a job whose transaction commits late runs right after the later
 * job that started meanwhile, never beside it — and first, when that one has not started yet;
 * priorities order only heads; the database refuses a second head (the unique index) whatever
 * statement tries; the options are checked. The race of processes is
 * test/queue/sequences-race.test.ts.
 *
 * Deliberate breaks seen failing (in this tree, each restored after its run):
 *  - sequence_advance promoting without looking for a head (`IF head.id IS NOT NULL` → `IF
 *    false`) and jobs_sequence_head_idx made non-unique: "a job whose transaction commits after
 *    a later one started" ran L1 beside L2 (['L2', 'L1'] while L2 was held).
 *  - sequence_advance without its late-commit branch: "… goes first (id order)" claimed E2.
 *  - SEQUENCE_HELD without 'dead' (a dead head no longer holds its key): B and C ran while A was
 *    dead (['A', 'B', 'C']).
 *  - the trigger sequence_left never firing (`WHEN (false AND …)`): after each key's first job
 *    the rest stayed waiting ("three keys" timed out).
 *  - sequence_pass skipping every key (`IF true THEN` for its try-lock): no job of a new key was
 *    ever claimed ("separate calls" timed out).
 *  - sequence_advance looking once (`FOR round IN 1..1`): C stayed waiting after B was cancelled
 *    while the advance waited for B's row.
 *  - sequence_left only trying the key's lock (returning when it is taken): B stayed waiting
 *    after the holder committed ("the head completes while another session holds its key").
 *  - GET /api/sequences reading `blocked` backwards: ?blocked=true listed the live key.
 */
import { describe, expect, test } from 'vitest';
import { startAdminServer } from '../../src/admin/server.js';
import { quoteIdent } from '../../src/db/identifier.js';
import { ValidationError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Run {
  id: string;
  label: string;
  attempt: number;
  start: number;
  end: number | null;
}

/** A worker of task 'seq.t' whose handler records each run; `gate(label)` holds a run until released. */
function recordingWorker(
  options: { fail?: (label: string, attempt: number) => boolean; hold?: Set<string> } = {},
) {
  const runs: Run[] = [];
  const releases = new Map<string, () => void>();
  const worker = db.worker({
    concurrency: 10,
    pollIntervalMs: 60_000,
    backoff: { baseMs: 300, capMs: 300 },
    tasks: {
      'seq.t': async (payload: unknown, { job }) => {
        const label = String(payload);
        const run: Run = { id: job.id, label, attempt: job.attempt, start: performance.now(), end: null };
        runs.push(run);
        if (options.hold?.has(label)) {
          await new Promise<void>((resolve) => releases.set(label, resolve));
          options.hold.delete(label);
        } else {
          await sleep(15);
        }
        run.end = performance.now();
        if (options.fail?.(label, job.attempt)) throw new Error(`${label} fails (test)`);
        return null;
      },
    },
  });
  return {
    worker,
    runs,
    labels: () => runs.map((r) => r.label),
    release: (label: string) => releases.get(label)?.(),
    started: (label: string) => runs.some((r) => r.label === label),
  };
}

async function statusOf(queue: Queue, id: string): Promise<string | undefined> {
  return (await queue.get(id))?.status;
}

/** No two runs of these labels overlap. */
function expectOneAtATime(runs: readonly Run[]): void {
  const sorted = [...runs].sort((a, b) => a.start - b.start);
  for (let i = 1; i < sorted.length; i++) {
    const before = sorted[i - 1] as Run;
    const after = sorted[i] as Run;
    expect(before.end, `${before.label} still running when ${after.label} started`).not.toBeNull();
    expect(after.start).toBeGreaterThanOrEqual(before.end as number);
  }
}

describe('one job of a key at a time, in id order', () => {
  test('three keys of six jobs: each key in order and alone, the keys side by side; the rest wait', async () => {
    const queue = db.queue();
    const specs = [];
    for (let n = 0; n < 6; n++) {
      for (const key of ['a', 'b', 'c']) specs.push({ task: 'seq.t', payload: `${key}${n}`, sequence: key });
    }
    const ids = (await queue.enqueueMany(specs)).map((r) => r.id);
    // behind its head, a job is waiting (not claimable, not backlog)
    expect(await statusOf(queue, ids[3] as string)).toBe('waiting');
    const { worker, runs } = recordingWorker();
    await worker.start();
    await expect.poll(() => runs.filter((r) => r.end !== null).length, { timeout: 10_000 }).toBe(18);
    await worker.stop();
    for (const key of ['a', 'b', 'c']) {
      const mine = runs.filter((r) => r.label.startsWith(key));
      expect(mine.map((r) => r.label)).toEqual([0, 1, 2, 3, 4, 5].map((n) => `${key}${n}`));
      expectOneAtATime(mine);
    }
    // keys are independent: some run of another key started while a's first one ran
    const [a0] = runs.filter((r) => r.label === 'a0');
    expect(runs.some((r) => !r.label.startsWith('a') && r.start < (a0?.end as number))).toBe(true);
    expect((await queue.counts()).done).toBe(18);
  });

  test('enqueue in separate calls and queues: the key is the same key in every queue', async () => {
    const queue = db.queue();
    const first = await queue.enqueue('seq.t', 'q1', { sequence: 'shared', queue: 'one' });
    const second = await queue.enqueue('seq.t', 'q2', { sequence: 'shared', queue: 'two' });
    const { worker, runs, labels } = recordingWorker();
    await worker.start();
    await expect.poll(() => runs.filter((r) => r.end !== null).length, { timeout: 10_000 }).toBe(2);
    await worker.stop();
    expect(labels()).toEqual(['q1', 'q2']);
    expectOneAtATime(runs);
    expect([await statusOf(queue, first.id), await statusOf(queue, second.id)]).toEqual(['done', 'done']);
  });
});

describe('a dead head blocks its key', () => {
  test('until it is requeued: then it runs again, first, and the key goes on in order', async () => {
    const queue = db.queue();
    let failing = true;
    const a = await queue.enqueue('seq.t', 'A', { sequence: 'acct', maxAttempts: 1 });
    const b = await queue.enqueue('seq.t', 'B', { sequence: 'acct' });
    const c = await queue.enqueue('seq.t', 'C', { sequence: 'acct' });
    const { worker, labels } = recordingWorker({ fail: (label) => label === 'A' && failing });
    await worker.start();
    await expect.poll(() => statusOf(queue, a.id), { timeout: 10_000 }).toBe('dead');
    await sleep(300); // time enough for B to start, were the key not blocked
    expect(labels()).toEqual(['A']);
    expect([await statusOf(queue, b.id), await statusOf(queue, c.id)]).toEqual(['waiting', 'waiting']);
    expect(await queue.sequences({ blocked: true })).toEqual([
      { key: 'acct', headId: a.id, headStatus: 'dead', queued: 2 },
    ]);
    expect(await queue.sequences()).toEqual([{ key: 'acct', headId: a.id, headStatus: 'dead', queued: 2 }]);
    failing = false;
    expect(await queue.requeue(a.id)).toBe(true);
    await expect.poll(() => statusOf(queue, c.id), { timeout: 10_000 }).toBe('done');
    await worker.stop();
    expect(labels()).toEqual(['A', 'A', 'B', 'C']);
    expect(await statusOf(queue, a.id)).toBe('done');
    expect(await queue.sequences()).toEqual([]);
  });

  test('until it is cancelled: then the next one runs', async () => {
    const queue = db.queue();
    const a = await queue.enqueue('seq.t', 'A2', { sequence: 'acct2', maxAttempts: 1 });
    const b = await queue.enqueue('seq.t', 'B2', { sequence: 'acct2' });
    const { worker, labels } = recordingWorker({ fail: (label) => label === 'A2' });
    await worker.start();
    await expect.poll(() => statusOf(queue, a.id), { timeout: 10_000 }).toBe('dead');
    expect(await statusOf(queue, b.id)).toBe('waiting');
    // a dead job that blocks its key can be cancelled (a dead job of no sequence cannot)
    expect(await queue.cancelOrThrow(a.id)).toEqual({ id: a.id, status: 'cancelled', wasRunning: false });
    await expect.poll(() => statusOf(queue, b.id), { timeout: 10_000 }).toBe('done');
    await worker.stop();
    expect(labels()).toEqual(['A2', 'B2']);
    expect(await statusOf(queue, a.id)).toBe('cancelled');
  });

  test('or deleted (a prune of dead jobs): the next one runs', async () => {
    const queue = db.queue();
    const a = await queue.enqueue('seq.t', 'A3', { sequence: 'acct3', maxAttempts: 1 });
    const b = await queue.enqueue('seq.t', 'B3', { sequence: 'acct3' });
    const { worker, labels } = recordingWorker({ fail: (label) => label === 'A3' });
    await worker.start();
    await expect.poll(() => statusOf(queue, a.id), { timeout: 10_000 }).toBe('dead');
    await db.sql(`DELETE FROM ${db.jobs} WHERE id = $1`, [a.id]);
    await expect.poll(() => statusOf(queue, b.id), { timeout: 10_000 }).toBe('done');
    await worker.stop();
    expect(labels()).toEqual(['A3', 'B3']);
  });
});

describe('a head holds its key while it waits', () => {
  test('for its retry: the next job starts only after its second attempt', async () => {
    const queue = db.queue();
    await queue.enqueue('seq.t', 'R1', { sequence: 'retry' });
    const b = await queue.enqueue('seq.t', 'R2', { sequence: 'retry' });
    const { worker, runs, labels } = recordingWorker({
      fail: (label, attempt) => label === 'R1' && attempt === 1,
    });
    await worker.start();
    await expect.poll(() => statusOf(queue, b.id), { timeout: 10_000 }).toBe('done');
    await worker.stop();
    expect(labels()).toEqual(['R1', 'R1', 'R2']);
    expectOneAtATime(runs);
    // the retry waited its 300 ms backoff, and R2 waited for it
    expect((runs[1] as Run).start - ((runs[0] as Run).end as number)).toBeGreaterThan(200);
  });

  test('for its delay: a later job with no delay waits behind it', async () => {
    const queue = db.queue();
    await queue.enqueue('seq.t', 'D1', { sequence: 'delayed', delayMs: 400 });
    const b = await queue.enqueue('seq.t', 'D2', { sequence: 'delayed' });
    const t0 = performance.now();
    const { worker, runs, labels } = recordingWorker();
    await worker.start();
    await expect.poll(() => statusOf(queue, b.id), { timeout: 10_000 }).toBe('done');
    await worker.stop();
    expect(labels()).toEqual(['D1', 'D2']);
    expect((runs[0] as Run).start - t0).toBeGreaterThan(300);
  });
});

describe('late commits (ids are drawn at insert)', () => {
  test('a job whose transaction commits after a later one started runs right after it, never beside it', async () => {
    const queue = db.queue();
    const client = await db.pool.connect();
    const hold = new Set(['L2']);
    const { worker, runs, labels, release, started } = recordingWorker({ hold });
    try {
      await client.query('BEGIN');
      const late = await queue.enqueue('seq.t', 'L1', { sequence: 'late', client });
      const later = await queue.enqueue('seq.t', 'L2', { sequence: 'late' });
      expect(BigInt(late.id)).toBeLessThan(BigInt(later.id));
      await worker.start();
      await expect.poll(() => started('L2'), { timeout: 10_000 }).toBe(true);
      await client.query('COMMIT');
      await sleep(400); // L1 is visible now: it must not start while L2 runs
      expect(labels()).toEqual(['L2']);
      expect(await statusOf(queue, late.id)).toBe('waiting');
      release('L2');
      await expect.poll(() => statusOf(queue, late.id), { timeout: 10_000 }).toBe('done');
    } finally {
      client.release();
      await worker.stop();
    }
    expect(labels()).toEqual(['L2', 'L1']);
    expectOneAtATime(runs);
  });

  test('a job whose transaction commits before the later one started goes first (id order)', async () => {
    const queue = db.queue();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const first = await queue.enqueue('seq.t', 'E1', { sequence: 'early', client });
      const second = await queue.enqueue('seq.t', 'E2', { sequence: 'early' });
      // a pass (a claim of another task) advances the key to E2 (E1 is not visible yet)
      expect(await queue.claim('w-late', { tasks: ['seq.none'] })).toEqual([]);
      expect(await statusOf(queue, second.id)).toBe('pending');
      await client.query('COMMIT');
      // the next claim's pass sees E1 arrive: E2, which never started, goes back to waiting, and
      // that claim (a statement after its pass) takes E1
      const [job] = await queue.claim('w-late', { tasks: ['seq.t'] });
      expect(job?.id).toBe(first.id);
      expect(await statusOf(queue, second.id)).toBe('waiting');
      expect(await queue.claim('w-late', { tasks: ['seq.t'] })).toEqual([]);
      await queue.complete(job as NonNullable<typeof job>, null);
      const [next] = await queue.claim('w-late', { tasks: ['seq.t'] });
      expect(next?.id).toBe(second.id);
      await queue.complete(next as NonNullable<typeof next>, null);
    } finally {
      client.release();
    }
  });
});

describe('composition and enforcement', () => {
  test('priorities order only heads: a key’s urgent job waits behind its older one', async () => {
    const queue = db.queue();
    const x1 = await queue.enqueue('seq.p', 'X1', { sequence: 'x', priority: 100 });
    const x2 = await queue.enqueue('seq.p', 'X2', { sequence: 'x', priority: 0 });
    const y1 = await queue.enqueue('seq.p', 'Y1', { sequence: 'y', priority: 50 });
    const claimed = await queue.claim('w-prio', { tasks: ['seq.p'], limit: 10 });
    expect(claimed.map((j) => j.id)).toEqual([y1.id, x1.id]);
    expect(await statusOf(queue, x2.id)).toBe('waiting');
    // the database refuses a second head of a key, whatever statement tries (the unique index)
    await expect(db.sql(`UPDATE ${db.jobs} SET status = 'pending' WHERE id = $1`, [x2.id])).rejects.toThrow(
      /jobs_sequence_head_idx/,
    );
    for (const job of claimed) await queue.complete(job, null);
    const [last] = await queue.claim('w-prio', { tasks: ['seq.p'] });
    expect(last?.id).toBe(x2.id);
    await queue.complete(last as NonNullable<typeof last>, null);
  });

  test('a flow’s nodes may carry a sequence; cancelling a pending head moves its key on', async () => {
    const queue = db.queue();
    const flow = await queue.enqueueFlow([
      { ref: 'f1', task: 'seq.f', payload: 1, sequence: 'flowkey' },
      { ref: 'f2', task: 'seq.f', payload: 2, sequence: 'flowkey' },
      { ref: 'f3', task: 'seq.f', payload: 3, sequence: 'flowkey' },
    ]);
    const [f1, f2, f3] = ['f1', 'f2', 'f3'].map((ref) => flow.jobs[ref] as string) as [
      string,
      string,
      string,
    ];
    expect(await queue.claim('w-flow', { tasks: ['seq.none'] })).toEqual([]); // the pass: f1 is the head
    expect(await statusOf(queue, f1)).toBe('pending');
    expect(await queue.cancel(f1)).toBe(true);
    expect(await statusOf(queue, f2)).toBe('pending');
    const [job] = await queue.claim('w-flow', { tasks: ['seq.f'] });
    expect(job?.id).toBe(f2);
    await queue.complete(job as NonNullable<typeof job>, null);
    expect(await statusOf(queue, f3)).toBe('pending');
  });

  test('bad options are refused, nothing written', async () => {
    const queue = db.queue();
    const before = await db.jobCount();
    const field = async (call: Promise<unknown>) => {
      const error = await call.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ValidationError);
      return (error as ValidationError).field;
    };
    expect(await field(queue.enqueue('seq.bad', null, { sequence: '' }))).toBe('sequence');
    expect(await field(queue.enqueue('seq.bad', null, { sequence: 'k', dedupeKey: 'd' }))).toBe('sequence');
    expect(await field(queue.enqueue('seq.bad', null, { sequence: 'k', dependsOn: ['1'] }))).toBe('sequence');
    expect(await field(queue.enqueue('seq.bad', null, { sequence: 'é'.repeat(101) }))).toBe('sequence');
    expect(
      await field(
        queue.enqueueFlow([
          { ref: 'a', task: 'seq.bad' },
          { ref: 'b', task: 'seq.bad', sequence: 'k', dependsOn: ['a'] },
        ]),
      ),
    ).toBe('nodes[1].sequence');
    expect(await field(queue.sequences({ limit: 0 }))).toBe('limit');
    expect(await db.jobCount()).toBe(before);
  });
});

describe('held transactions (docs/state-machine.md, reads beyond the locked row)', () => {
  /** Runs `fn` in a transaction on a client of its own, ended by the returned `end`. */
  async function holding(fn: (client: import('pg').PoolClient) => Promise<void>) {
    const client = await db.pool.connect();
    await client.query('BEGIN');
    await fn(client);
    return async (how: 'COMMIT' | 'ROLLBACK' = 'COMMIT') => {
      await client.query(how);
      client.release();
    };
  }
  const lockKey = (key: string) => (client: import('pg').PoolClient) =>
    client.query(`SELECT pg_advisory_xact_lock(${S}.sequence_lock_id($1))`, [key]).then(() => undefined);

  test('the head completes while another session holds its key: the completion waits, then the next job advances', async () => {
    const queue = db.queue();
    const a = await queue.enqueue('seq.h1', 'A', { sequence: 'hk' });
    const b = await queue.enqueue('seq.h1', 'B', { sequence: 'hk' });
    const [job] = await queue.claim('w-h', { tasks: ['seq.h1'] });
    expect(job?.id).toBe(a.id);
    const end = await holding(lockKey('hk'));
    let completed = false;
    const completion = queue.complete(job as NonNullable<typeof job>, null).then((won) => {
      completed = won;
    });
    await sleep(300);
    expect(completed).toBe(false); // its trigger waits for the key
    await end('COMMIT');
    await completion;
    expect(completed).toBe(true);
    expect([await statusOf(queue, a.id), await statusOf(queue, b.id)]).toEqual(['done', 'pending']);
  });

  test('a claim’s pass meets a key another session holds: the key stays noted, the next pass advances it', async () => {
    const queue = db.queue();
    const end = await holding(lockKey('pk'));
    const j = await queue.enqueue('seq.h2', 'J', { sequence: 'pk' });
    expect(await queue.claim('w-h', { tasks: ['seq.h2'] })).toEqual([]); // passed by (busy)
    expect(await statusOf(queue, j.id)).toBe('waiting');
    const noted = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${S}.sequence_arrivals WHERE sequence = 'pk'`,
    );
    expect(noted[0]?.n).toBe(1);
    await end('COMMIT');
    const [job] = await queue.claim('w-h', { tasks: ['seq.h2'] });
    expect(job?.id).toBe(j.id);
    await queue.complete(job as NonNullable<typeof job>, null);
  });

  test('the next job is cancelled while the advance waits for its row: the one after it advances', async () => {
    const queue = db.queue();
    const a = await queue.enqueue('seq.h3', 'A', { sequence: 'ck' });
    const b = await queue.enqueue('seq.h3', 'B', { sequence: 'ck' });
    const c = await queue.enqueue('seq.h3', 'C', { sequence: 'ck' });
    const [job] = await queue.claim('w-h', { tasks: ['seq.h3'] });
    expect(job?.id).toBe(a.id);
    // another session cancels B and holds its transaction open …
    const end = await holding(async (client) => {
      await client.query(`UPDATE ${db.jobs} SET status = 'cancelled' WHERE id = $1`, [b.id]);
    });
    const completion = queue.complete(job as NonNullable<typeof job>, null);
    await sleep(300); // A's completion advances the key: its update of B waits for that row
    await end('COMMIT');
    // … the advance finds B cancelled once it has the row, and takes C
    expect(await completion).toBe(true);
    expect([await statusOf(queue, b.id), await statusOf(queue, c.id)]).toEqual(['cancelled', 'pending']);
  });
});

describe('the admin API', () => {
  // Deliberate break seen failing: api.ts passing `blocked: query.blocked === 'false'` (the
  // route listed every key under ?blocked=true).
  test('GET /api/sequences lists keys with their heads; ?blocked=true only dead heads; bad input is a 400', async () => {
    const queue = db.queue();
    const dead = await queue.enqueue('seq.api', 'D', { sequence: 'api-dead' });
    await queue.enqueue('seq.api', 'D2', { sequence: 'api-dead' });
    const live = await queue.enqueue('seq.api', 'L', { sequence: 'api-live' });
    await db.sql(`UPDATE ${db.jobs} SET status = 'dead' WHERE id = $1`, [dead.id]);
    const server = await startAdminServer({ queue, port: 0, token: null, sampleIntervalMs: 60_000 });
    try {
      const get = async (path: string) => {
        const response = await fetch(new URL(path, server.url));
        return { status: response.status, body: (await response.json()) as Record<string, unknown> };
      };
      const blocked = await get('/api/sequences?blocked=true');
      expect(blocked).toEqual({
        status: 200,
        body: {
          sequences: [{ key: 'api-dead', headId: dead.id, headStatus: 'dead', queued: 1 }],
          next: null,
        },
      });
      const page = await get('/api/sequences?after=api-dead&limit=1');
      expect(page.body).toEqual({
        sequences: [
          {
            key: 'api-live',
            headId: live.id,
            headStatus: expect.stringMatching(/waiting|pending/),
            queued: 0,
          },
        ],
        next: 'api-live',
      });
      for (const [path, field] of [
        ['/api/sequences?limit=0', 'limit'],
        ['/api/sequences?blocked=yes', 'blocked'],
        ['/api/sequences?key=x', 'key'],
      ] as const) {
        const reply = await get(path);
        expect(reply.status, path).toBe(400);
        expect((reply.body.error as { field?: string }).field, path).toBe(field);
      }
    } finally {
      await server.close();
    }
  });
});
