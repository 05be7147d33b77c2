/**
 * §12 ctx.waitForEvent in a job that holds a key: a dedupe key is refused (migration 23: `waiting`
 * would give that key up); a sequence's head waits holding its key (migration 24: an event waiter
 * is in the key's hold), and the jobs behind it wait until it is done.
 *
 * Failing on main before migration 23:
 * - dedupe key: the second enqueue of the key made a second job while the first waited; the
 *   emit then raised 23505 on jobs_dedupe_key_idx (event not set, every waiter on it left waiting);
 * - sequence: the head's `waiting` left the key and the advance put the head itself back to
 *   pending at once: claimed and suspended again in a loop (247 runs in 1.5 s), never waiting.
 *
 * Breaks of migration 24 seen failing (each one alone, then restored):
 * - the head lookup of `sequence_advance_many` with the old hold (`status IN SEQUENCE_HELD`): the
 *   pass over B's and C's arrivals found no head, made B pending and hit jobs_sequence_head_idx
 *   (23505: A holds it), so the pass failed and k1's notes stayed ("expected 2 to be +0"); the
 *   held-open test's pass failed the same way;
 * - the row trigger's WHEN left as migration 22's HEAD_LEAVES: the cancelled waiting head did not
 *   leave its key, B stayed waiting ("Job … was still waiting after 10000 ms");
 * - the unique head index with the old predicate: a second holder of k1 beside the waiting head
 *   was accepted ('promise resolved "[]" instead of rejecting');
 * - queue.sequences() (store/sequences.ts) with the old head predicate: B listed as the head,
 *   queued 1;
 * - the 'sequenced' refusal kept in step_wait: the heads never waited ("expected null to be
 *   'e1'", "expected 'sequenced' to be 'waiting'").
 * Not caught by a test, on purpose: the next-job lookup without `wait_event IS NULL` changes no
 * outcome (an event waiter of a key is its holder, which the head lookup finds first); it is what
 * lets the lookup use jobs_sequence_waiting_idx, whose predicate now has `wait_event IS NULL`.
 * test/queue/migrations.test.ts › "migration 24 …" covers the data a version before 23 left.
 */
import { expect, onTestFinished, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { heldClients } from '../support/held-clients.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);
const client = heldClients(db);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function row(id: string) {
  return (
    await db.sql<{ status: string; wait_event: string | null; claims: number; last_error: string | null }>(
      `SELECT status, wait_event, claims::int AS claims, last_error FROM ${db.jobs} WHERE id = $1`,
      [id],
    )
  )[0];
}

function waiter(runs: Map<string, number>) {
  return async (payload: { event: string }, ctx: JobContext) => {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
    return { got: await ctx.waitForEvent('got', payload.event) };
  };
}

test('a job with a dedupe key cannot wait (its key would be free, the emit would fail); others on the event are woken', async () => {
  const queue = db.queue();
  const runs = new Map<string, number>();
  const worker = db.worker({
    queue,
    tasks: { 'dd.wait': waiter(runs) },
    concurrency: 4,
    pollIntervalMs: 200,
  });
  await worker.start();
  const plain = await queue.enqueue('dd.wait', { event: 'dd-ev' });
  await expect.poll(async () => (await row(plain.id))?.status).toBe('waiting');
  const a = await queue.enqueue('dd.wait', { event: 'dd-ev' }, { dedupeKey: 'order-1', maxAttempts: 1 });
  const done = await queue.waitFor(a.id, { timeoutMs: 10_000 });
  expect(done.status).toBe('dead');
  expect(done.lastError).toMatch(/dedupe key/);
  expect(await queue.steps(a.id)).toEqual([]); // nothing stored: no timeout started
  // the key was held while it ran: a second enqueue was a dedupe hit or made a job after it ended
  expect(await queue.emitEvent('dd-ev', 'go')).toBe(true);
  expect((await queue.waitFor(plain.id, { timeoutMs: 10_000 })).result).toEqual({ got: { payload: 'go' } });
  // an event already set answers a keyed job at once (no suspension)
  const b = await queue.enqueue('dd.wait', { event: 'dd-ev' }, { dedupeKey: 'order-2' });
  expect((await queue.waitFor(b.id, { timeoutMs: 10_000 })).result).toEqual({ got: { payload: 'go' } });
  await worker.stop();
});

/** A run of a job: started and ended (returned, thrown or suspended), in this process's clock. */
interface Run {
  job: string;
  start: number;
  end: number | null;
}

/** Tasks of sequence k: 'sq.wait' waits for its payload's event, 'sq.work' works 100 ms. */
function sequenceTasks(runs: Run[]) {
  const track = async <T>(ctx: JobContext, fn: () => Promise<T>): Promise<T> => {
    const run: Run = { job: ctx.job.id, start: performance.now(), end: null };
    runs.push(run);
    try {
      return await fn();
    } finally {
      run.end = performance.now();
    }
  };
  return {
    'sq.wait': (payload: { event: string; timeoutMs?: number }, ctx: JobContext) =>
      track(ctx, async () => ({
        got: await ctx.waitForEvent(
          'got',
          payload.event,
          payload.timeoutMs === undefined ? undefined : { timeoutMs: payload.timeoutMs },
        ),
      })),
    'sq.work': (_: unknown, ctx: JobContext) =>
      track(ctx, async () => {
        await sleep(100);
        return 'worked';
      }),
  };
}

/** The runs never overlap, and the last run of each job comes in `order`. */
function expectOneAtATime(runs: Run[], order: string[]): void {
  const sorted = [...runs].sort((a, b) => a.start - b.start);
  for (let i = 1; i < sorted.length; i++) {
    const before = sorted[i - 1] as Run;
    const run = sorted[i] as Run;
    expect(before.end, `run of ${before.job} ended`).not.toBeNull();
    expect(run.start, `${run.job} started after ${before.job} ended`).toBeGreaterThanOrEqual(
      before.end as number,
    );
  }
  const lastRuns = order.map((id) => sorted.filter((r) => r.job === id).at(-1)?.start ?? Number.NaN);
  expect(lastRuns.every((t, i) => i === 0 || t > (lastRuns[i - 1] as number))).toBe(true);
}

async function notes(key: string): Promise<number> {
  return (
    await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${S}.sequence_arrivals WHERE sequence = $1`, [
      key,
    ])
  )[0]?.n as number;
}

/** For `ms`, polled: none of `ids` has started (no run, still waiting). */
async function staysQueued(runs: Run[], ids: string[], ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    expect(runs.filter((r) => ids.includes(r.job))).toEqual([]);
    for (const id of ids) expect((await row(id))?.status, `job ${id}`).toBe('waiting');
    await sleep(100);
  }
}

test('a sequence head waiting for an event holds its key: the jobs behind it wait; after the emit it is done, then they run in order', async () => {
  const queue = db.queue();
  const runs: Run[] = [];
  const worker = db.worker({ queue, tasks: sequenceTasks(runs), concurrency: 4, pollIntervalMs: 100 });
  onTestFinished(() => worker.stop({ timeoutMs: 1_000 })); // a failed test leaves no worker behind
  await worker.start();
  const a = await queue.enqueue('sq.wait', { event: 'e1' }, { sequence: 'k1' });
  await expect.poll(async () => (await row(a.id))?.wait_event, { timeout: 10_000 }).toBe('e1');
  expect((await row(a.id))?.status).toBe('waiting');
  const b = await queue.enqueue('sq.work', {}, { sequence: 'k1' });
  const c = await queue.enqueue('sq.work', {}, { sequence: 'k1' });
  // the worker's passes look at B's and C's arrivals (notes deleted) and keep the waiting head
  await expect.poll(() => notes('k1'), { timeout: 10_000 }).toBe(0);
  await staysQueued(runs, [b.id, c.id], 1_500);
  expect(runs.filter((r) => r.job === a.id)).toHaveLength(1); // no loop
  expect((await row(a.id))?.status).toBe('waiting');
  expect(await queue.sequences()).toEqual([{ key: 'k1', headId: a.id, headStatus: 'waiting', queued: 2 }]);
  // the index is the proof: no second holder beside the waiting head
  await expect(db.sql(`UPDATE ${db.jobs} SET status = 'pending' WHERE id = $1`, [b.id])).rejects.toThrow(
    /jobs_sequence_head_idx/,
  );
  expect(await queue.emitEvent('e1', 'go')).toBe(true);
  const last = await queue.waitFor(c.id, { timeoutMs: 10_000 });
  expect(last.status).toBe('done');
  await worker.stop();
  expect((await queue.get(a.id))?.status).toBe('done');
  expect((await queue.get(a.id))?.result).toEqual({ got: { payload: 'go' } });
  expect((await queue.get(b.id))?.status).toBe('done');
  expect(last.result).toBe('worked');
  expect(runs.filter((r) => r.job === a.id)).toHaveLength(2);
  expectOneAtATime(runs, [a.id, b.id, c.id]);
  expect(await queue.sequences()).toEqual([]);
});

test('a waiting head cancelled: its key moves on, the next job runs; the emit after it wakes nobody', async () => {
  const queue = db.queue();
  const runs: Run[] = [];
  const worker = db.worker({ queue, tasks: sequenceTasks(runs), concurrency: 4, pollIntervalMs: 100 });
  onTestFinished(() => worker.stop({ timeoutMs: 1_000 })); // a failed test leaves no worker behind
  await worker.start();
  const a = await queue.enqueue('sq.wait', { event: 'e2' }, { sequence: 'k2' });
  await expect.poll(async () => (await row(a.id))?.wait_event, { timeout: 10_000 }).toBe('e2');
  const b = await queue.enqueue('sq.work', {}, { sequence: 'k2' });
  const c = await queue.enqueue('sq.work', {}, { sequence: 'k2' });
  await expect.poll(() => notes('k2'), { timeout: 10_000 }).toBe(0);
  await staysQueued(runs, [b.id, c.id], 500);
  expect(await queue.cancel(a.id)).toBe(true);
  expect((await queue.waitFor(c.id, { timeoutMs: 10_000 })).status).toBe('done');
  expect(await queue.emitEvent('e2', 'late')).toBe(true);
  await sleep(300);
  await worker.stop();
  expect((await row(a.id))?.status).toBe('cancelled');
  expect((await row(b.id))?.status).toBe('done');
  expect(runs.filter((r) => r.job === a.id)).toHaveLength(1);
  expectOneAtATime(runs, [a.id, b.id, c.id]);
  expect(await queue.sequences()).toEqual([]);
});

test("a waiting head whose timeout passes (the worker's timed wake) runs again with null, then the key goes on", async () => {
  const queue = db.queue();
  const runs: Run[] = [];
  const worker = db.worker({ queue, tasks: sequenceTasks(runs), concurrency: 4, pollIntervalMs: 100 });
  onTestFinished(() => worker.stop({ timeoutMs: 1_000 })); // a failed test leaves no worker behind
  await worker.start();
  const a = await queue.enqueue('sq.wait', { event: 'e3', timeoutMs: 1_200 }, { sequence: 'k3' });
  await expect.poll(async () => (await row(a.id))?.wait_event, { timeout: 10_000 }).toBe('e3');
  const b = await queue.enqueue('sq.work', {}, { sequence: 'k3' });
  const c = await queue.enqueue('sq.work', {}, { sequence: 'k3' });
  await expect.poll(() => notes('k3'), { timeout: 10_000 }).toBe(0);
  await staysQueued(runs, [b.id, c.id], 400);
  expect((await queue.waitFor(c.id, { timeoutMs: 10_000 })).status).toBe('done');
  await worker.stop();
  expect((await queue.get(a.id))?.status).toBe('done');
  expect((await queue.get(a.id))?.result).toEqual({ got: null });
  expect((await row(b.id))?.status).toBe('done');
  expect(runs.filter((r) => r.job === a.id)).toHaveLength(2);
  expectOneAtATime(runs, [a.id, b.id, c.id]);
});

test('emit held open while an arrival of the key is advanced, and the key lock held open while the emit commits: one holder throughout, end state in order', async () => {
  const queue = db.queue();
  const engine = engineOf(queue);
  const claim = async (task: string) => queue.claim('w-held', { leaseMs: 60_000, tasks: [task] });
  const within = <T>(p: Promise<T>, what: string) =>
    Promise.race([p, sleep(5_000).then(() => Promise.reject(new Error(`${what} blocked`)))]);
  const a = await queue.enqueue('h.a', {}, { sequence: 'k4' });
  const [leaseA] = await claim('h.a'); // the pass advances k4: A is its head
  expect(leaseA?.id).toBe(a.id);
  expect((await engine.steps.wait(leaseA!, 'got', 'e4', null)).state).toBe('waiting');
  const b = await queue.enqueue('h.b', {}, { sequence: 'k4' });
  expect(await claim('h.b')).toEqual([]); // the pass keeps A: B stays queued
  expect(await notes('k4')).toBe(0);
  // the emit, held open: A is pending in it, still waiting for everyone else
  const tx = await client();
  await tx.query('BEGIN');
  expect(await queue.emitEvent('e4', 'P', { client: tx })).toBe(true);
  const c = await queue.enqueue('h.b', {}, { sequence: 'k4' });
  expect(await notes('k4')).toBe(1);
  // a pass over C's arrival meanwhile: never waits for the emit, never advances B
  expect(await within(claim('h.b'), 'the pass')).toEqual([]);
  expect(await notes('k4')).toBe(0);
  expect((await row(a.id))?.status).toBe('waiting');
  expect((await row(b.id))?.status).toBe('waiting');
  expect((await row(c.id))?.status).toBe('waiting');
  await tx.query('COMMIT');
  expect((await row(a.id))?.status).toBe('pending');
  // A again: its wait is answered; it waits once more on another event, and this time the key's
  // lock is held open (an advance in flight) while that emit commits: a wake is no leave, no wait
  const [leaseA2] = await claim('h.a');
  expect(leaseA2?.id).toBe(a.id);
  expect(await engine.steps.wait(leaseA2!, 'got', 'e4', null)).toEqual({
    state: 'resolved',
    valueJson: '{"payload": "P"}',
  });
  expect((await engine.steps.wait(leaseA2!, 'again', 'e4b', null)).state).toBe('waiting');
  await tx.query('BEGIN');
  await tx.query(`SELECT pg_advisory_xact_lock(${S}.sequence_lock_id('k4'))`);
  expect(await within(queue.emitEvent('e4b', 'Q'), 'the emit')).toBe(true);
  expect((await row(a.id))?.status).toBe('pending');
  expect((await row(b.id))?.status).toBe('waiting');
  await tx.query('COMMIT');
  const [leaseA3] = await claim('h.a');
  expect(leaseA3?.id).toBe(a.id);
  expect((await engine.steps.wait(leaseA3!, 'again', 'e4b', null)).state).toBe('resolved');
  expect(await queue.complete(leaseA3!, 'a done')).toBe(true);
  // the completion advanced B, then C after B
  for (const next of [b, c]) {
    expect((await row(next.id))?.status).toBe('pending');
    const [lease] = await claim('h.b');
    expect(lease?.id).toBe(next.id);
    expect(await claim('h.b')).toEqual([]); // one at a time
    expect(await queue.complete(lease!, 'b done')).toBe(true);
  }
  for (const id of [a.id, b.id, c.id]) expect((await row(id))?.status).toBe('done');
  expect(await queue.steps(a.id)).toMatchObject([
    { name: 'got', kind: 'event', value: { payload: 'P' } },
    { name: 'again', kind: 'event', value: { payload: 'Q' } },
  ]);
});

test('a sleeping head still holds its key', async () => {
  const queue = db.queue();
  const order: string[] = [];
  const worker = db.worker({
    queue,
    tasks: {
      'seq.sleep': async (_: unknown, ctx: JobContext) => {
        await ctx.sleep('nap', 400);
        order.push(`sleep ${ctx.job.id}`);
        return 'slept';
      },
      'seq.next': async (_: unknown, ctx: JobContext) => {
        order.push(`next ${ctx.job.id}`);
        return 'next ran';
      },
    },
    concurrency: 4,
    pollIntervalMs: 200,
  });
  await worker.start();
  const sleeper = await queue.enqueue('seq.sleep', {}, { sequence: 'k5' });
  const after = await queue.enqueue('seq.next', {}, { sequence: 'k5' });
  expect((await queue.waitFor(after.id, { timeoutMs: 10_000 })).status).toBe('done');
  expect((await queue.get(sleeper.id))?.status).toBe('done');
  expect(order).toEqual([`sleep ${sleeper.id}`, `next ${after.id}`]);
  await worker.stop();
});
