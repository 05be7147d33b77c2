/** Adversarial races of §12 with raw transactions held open; every test asserts the end state. */
import { expect, test } from 'vitest';
import { notifyChannel, quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import type { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { heldClients, someoneBlocked } from '../support/held-clients.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);
const client = heldClients(db);
async function job(id: string) {
  return (
    await db.sql<{ status: string; wait_event: string | null; wait_timeout: Date | null; attempts: number }>(
      `SELECT status, wait_event, wait_timeout, attempts FROM ${db.jobs} WHERE id = $1`,
      [id],
    )
  )[0];
}
async function stepsOf(id: string) {
  return db.sql<{ name: string; resolved: boolean; value: unknown }>(
    `SELECT name, resolved, value FROM ${S}.job_steps WHERE job_id = $1 ORDER BY name`,
    [id],
  );
}
const blocked = () => someoneBlocked(db);
/** A job claimed and suspended waiting for `event` (timeout ms or null); returns its id. */
async function waitingJob(queue: Queue, task: string, event: string, timeoutMs: number | null) {
  const { id } = await queue.enqueue(task, {});
  const [lease] = await queue.claim(`w-${id}`, { leaseMs: 60_000, tasks: [task] });
  expect(lease?.id).toBe(id);
  const r = await engineOf(queue).steps.wait(lease!, 'got', event, timeoutMs);
  expect(r.state).toBe('waiting');
  return { id, lease: lease! };
}

test('emit held open vs the timeout wake: the reaper skips; emit commits: pending once with the payload', async () => {
  const queue = db.queue();
  const { id } = await waitingJob(queue, 'r.t1', 'ev-t1', 50);
  await new Promise((r) => setTimeout(r, 100));
  const tx = await client();
  await tx.query('BEGIN');
  expect(await queue.emitEvent('ev-t1', 'P', { client: tx })).toBe(true);
  expect(await engineOf(queue).steps.wakeTimedOut()).toEqual([]);
  await tx.query('COMMIT');
  expect(await engineOf(queue).steps.wakeTimedOut()).toEqual([]);
  expect((await job(id))?.status).toBe('pending');
  expect(await stepsOf(id)).toEqual([{ name: 'got', resolved: true, value: { payload: 'P' } }]);
});

test('emit held open vs the timeout wake, emit rolls back: the timeout wakes it, null', async () => {
  const queue = db.queue();
  const { id } = await waitingJob(queue, 'r.t2', 'ev-t2', 50);
  await new Promise((r) => setTimeout(r, 100));
  const tx = await client();
  await tx.query('BEGIN');
  expect(await queue.emitEvent('ev-t2', 'P', { client: tx })).toBe(true);
  expect(await engineOf(queue).steps.wakeTimedOut()).toEqual([]);
  await tx.query('ROLLBACK');
  expect(await engineOf(queue).steps.wakeTimedOut()).toEqual([id]);
  expect((await job(id))?.status).toBe('pending');
  expect(await stepsOf(id)).toEqual([{ name: 'got', resolved: true, value: null }]);
});

test('timeout wake held open (in a tx) vs the emit: the emit waits, then wakes nobody; step null', async () => {
  const queue = db.queue();
  const { id } = await waitingJob(queue, 'r.t3', 'ev-t3', 50);
  await new Promise((r) => setTimeout(r, 100));
  const tx = await client();
  await tx.query('BEGIN');
  const sql = (engineOf(queue).store.steps as unknown as { sql: { waitWakeTimedOut: string } }).sql
    .waitWakeTimedOut;
  const channel = `skiplock:${TEST_SCHEMA}`;
  const woke = await tx.query(sql, [10, channel]);
  expect(woke.rows.map((r) => r.id)).toEqual([id]);
  const emitted = queue.emitEvent('ev-t3', 'P');
  await blocked();
  await tx.query('COMMIT');
  expect(await emitted).toBe(true);
  expect((await job(id))?.status).toBe('pending');
  expect(await stepsOf(id)).toEqual([{ name: 'got', resolved: true, value: null }]);
  // and if the wake rolled back, the emit wakes it with the payload
  const other = await waitingJob(queue, 'r.t3b', 'ev-t3b', 50);
  await new Promise((r) => setTimeout(r, 100));
  await tx.query('BEGIN');
  expect((await tx.query(sql, [10, channel])).rows.map((r) => r.id)).toEqual([other.id]);
  const emitted2 = queue.emitEvent('ev-t3b', 'Q');
  await blocked();
  await tx.query('ROLLBACK');
  expect(await emitted2).toBe(true);
  expect((await job(other.id))?.status).toBe('pending');
  expect(await stepsOf(other.id)).toEqual([{ name: 'got', resolved: true, value: { payload: 'Q' } }]);
});

test('cancel held open vs emit: both orders, commit and rollback', async () => {
  const queue = db.queue();
  // cancel first, held open; emit waits; cancel commits → cancelled, step unanswered, event set
  const a = await waitingJob(queue, 'r.c1', 'ev-c1', null);
  const tx = await client();
  await tx.query('BEGIN');
  await tx.query(
    `UPDATE ${db.jobs} SET status = 'cancelled', updated_at = now() WHERE id = $1 AND status = 'waiting'`,
    [a.id],
  );
  const e1 = queue.emitEvent('ev-c1', 1);
  await blocked();
  await tx.query('COMMIT');
  expect(await e1).toBe(true);
  expect((await job(a.id))?.status).toBe('cancelled');
  // cancel first, rolled back → woken
  const b = await waitingJob(queue, 'r.c2', 'ev-c2', null);
  await tx.query('BEGIN');
  await tx.query(
    `UPDATE ${db.jobs} SET status = 'cancelled', updated_at = now() WHERE id = $1 AND status = 'waiting'`,
    [b.id],
  );
  const e2 = queue.emitEvent('ev-c2', 2);
  await blocked();
  await tx.query('ROLLBACK');
  expect(await e2).toBe(true);
  expect((await job(b.id))?.status).toBe('pending');
  expect(await stepsOf(b.id)).toEqual([{ name: 'got', resolved: true, value: { payload: 2 } }]);
  // emit first held open; queue.cancel waits; emit commits → cancel finds pending → cancelled
  const c = await waitingJob(queue, 'r.c3', 'ev-c3', null);
  await tx.query('BEGIN');
  expect(await queue.emitEvent('ev-c3', 3, { client: tx })).toBe(true);
  const cancelled = queue.cancel(c.id);
  await blocked();
  await tx.query('COMMIT');
  expect(await cancelled).toBe(true);
  expect((await job(c.id))?.status).toBe('cancelled');
  // emit first held open, rolled back: cancel → cancelled from waiting
  const d = await waitingJob(queue, 'r.c4', 'ev-c4', null);
  await tx.query('BEGIN');
  await queue.emitEvent('ev-c4', 4, { client: tx });
  const cancelled2 = queue.cancel(d.id);
  await blocked();
  await tx.query('ROLLBACK');
  expect(await cancelled2).toBe(true);
  expect((await job(d.id))?.status).toBe('cancelled');
  expect(await db.sql(`SELECT set_at FROM ${S}.events WHERE name = 'ev-c4'`)).toEqual([{ set_at: null }]);
});

test('two emits in two held-open transactions: one true, one false, one payload; and the first rolled back', async () => {
  const queue = db.queue();
  const w = await waitingJob(queue, 'r.e1', 'ev-2x', null);
  const t1 = await client();
  const t2 = await client();
  await t1.query('BEGIN');
  await t2.query('BEGIN');
  expect(await queue.emitEvent('ev-2x', 'first', { client: t1 })).toBe(true);
  const second = queue.emitEvent('ev-2x', 'second', { client: t2 });
  await blocked();
  await t1.query('COMMIT');
  expect(await second).toBe(false);
  await t2.query('COMMIT');
  expect(await db.sql(`SELECT payload FROM ${S}.events WHERE name = 'ev-2x'`)).toEqual([
    { payload: 'first' },
  ]);
  expect(await stepsOf(w.id)).toEqual([{ name: 'got', resolved: true, value: { payload: 'first' } }]);
  // a new event name (no row yet) and the first rolls back: the second sets it
  const w2 = await waitingJob(queue, 'r.e2', 'ev-2y', null);
  await db.sql(`DELETE FROM ${S}.events WHERE name = 'ev-2y'`); // as after a prune of an unset event
  await t1.query('BEGIN');
  await t2.query('BEGIN');
  expect(await queue.emitEvent('ev-2y', 'first', { client: t1 })).toBe(true);
  const second2 = queue.emitEvent('ev-2y', 'second', { client: t2 });
  await blocked();
  await t1.query('ROLLBACK');
  expect(await second2).toBe(true);
  await t2.query('COMMIT');
  expect((await job(w2.id))?.status).toBe('pending');
  expect(await stepsOf(w2.id)).toEqual([{ name: 'got', resolved: true, value: { payload: 'second' } }]);
});

test('emit in a savepoint rolled back while the outer transaction commits: nothing set, nobody woken', async () => {
  const queue = db.queue();
  const w = await waitingJob(queue, 'r.s1', 'ev-sp', null);
  const { id: k } = await queue.enqueue('r.s2', {});
  const [lease] = await queue.claim('w-k', { leaseMs: 60_000, tasks: ['r.s2'] });
  const tx = await client();
  const listener = await client();
  const heard: string[] = [];
  listener.on('notification', (n) => heard.push(String(n.payload)));
  await listener.query(`LISTEN ${quoteIdent(notifyChannel(TEST_SCHEMA))}`);
  await tx.query('BEGIN');
  await tx.query('SAVEPOINT a');
  expect(await queue.emitEvent('ev-sp', 'x', { client: tx })).toBe(true);
  // a waiter blocked on the savepoint's lock
  const waited = engineOf(queue).steps.wait(lease!, 'got', 'ev-sp', null);
  await blocked();
  await tx.query('ROLLBACK TO SAVEPOINT a');
  expect((await waited).state).toBe('waiting');
  await tx.query('COMMIT');
  await new Promise((r) => setTimeout(r, 200));
  expect(heard.filter((h) => h === 'jobs')).toEqual([]);
  expect((await job(w.id))?.status).toBe('waiting');
  expect((await job(k))?.status).toBe('waiting');
  expect(await db.sql(`SELECT set_at FROM ${S}.events WHERE name = 'ev-sp'`)).toEqual([{ set_at: null }]);
  expect(await queue.emitEvent('ev-sp', 'y')).toBe(true);
  expect((await job(w.id))?.status).toBe('pending');
  expect((await job(k))?.status).toBe('pending');
});

test('a stale run (lease expired, reclaimed) cannot sleep, wait or step; the new run is unaffected', async () => {
  const queue = db.queue();
  const { id } = await queue.enqueue('r.stale', {});
  const [old] = await queue.claim('old', { leaseMs: 60_000, tasks: ['r.stale'] });
  await db.expireLease(id);
  await engineOf(queue).reap();
  const [fresh] = await queue.claim('new', { leaseMs: 60_000, tasks: ['r.stale'] });
  expect(fresh?.id).toBe(id);
  const eng = engineOf(queue);
  expect(await eng.steps.write({ lease: old!, name: 's', valueJson: '"old"', leaseMs: 60_000 })).toBe(0);
  expect((await eng.steps.sleep(old!, 'z', null, 60_000)).state).toBe('lost');
  expect((await eng.steps.wait(old!, 'w', 'ev-stale', null)).state).toBe('lost');
  expect(await eng.steps.write({ lease: fresh!, name: 's', valueJson: '"new"', leaseMs: 60_000 })).toBe(2);
  expect(await eng.steps.write({ lease: fresh!, name: 's', valueJson: '"again"', leaseMs: 60_000 })).toBe(0);
  expect(await stepsOf(id)).toEqual([{ name: 's', resolved: true, value: 'new' }]);
  expect((await job(id))?.status).toBe('running');
});

test('a stale step write held open on the job row while requeue resetSteps... (dead job)', async () => {
  const queue = db.queue();
  const { id } = await queue.enqueue('r.rq', {}, { maxAttempts: 1 });
  const [lease] = await queue.claim('x', { leaseMs: 60_000, tasks: ['r.rq'] });
  const eng = engineOf(queue);
  expect(await eng.steps.write({ lease: lease!, name: 'a', valueJson: '1', leaseMs: 60_000 })).toBe(2);
  // the write of step b is in a transaction held open on the job's row
  const tx = await client();
  await tx.query('BEGIN');
  const sql = (eng.store.steps as unknown as { sql: { stepWrite: string } }).sql.stepWrite;
  const r = await tx.query(sql, [
    [id],
    [lease!.workerId],
    [lease!.attempt],
    [lease!.token],
    ['b'],
    [60_000],
    '[2]',
  ]);
  expect(r.rows.length).toBe(1);
  // the job fails meanwhile (blocked), then dies; requeue with resetSteps after
  const failed = queue.fail(lease!, new Error('boom'));
  await blocked();
  await tx.query('COMMIT');
  await failed;
  expect((await job(id))?.status).toBe('dead');
  await queue.requeue(id, { resetSteps: true });
  expect(await stepsOf(id)).toEqual([]);
  expect((await job(id))?.status).toBe('pending');
});
