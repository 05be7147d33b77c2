/**
 * SPEC §12 review fixes: an emit answers the woken jobs' waits in its own statement (prune may
 * then delete the event before the rerun), and a wait woken by its timeout is answered null in
 * the waking statement (a later emit does not change it).
 */
import { expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function status(id: string) {
  return (await db.sql<{ status: string }>(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id]))[0]?.status;
}

/*
 * Deliberate break seen failing (then restored): the fix's src changes removed (emit_event in
 * migration 20 without its `answered` CTE, eventPrune without the unresolved-step NOT EXISTS):
 * "expected 'waiting' to be 'resolved'" (the set event was pruned; the job waited again forever).
 */
test('prune after an emit: the woken job, rerun, still gets the payload', async () => {
  const queue = db.queue();
  const { id } = await queue.enqueue('pr.wait', {});
  const [l1] = await queue.claim('w1', { leaseMs: 60_000 });
  expect((await engineOf(queue).steps.wait(l1!, 'got', 'pr-1', null)).state).toBe('waiting');
  expect(await queue.emitEvent('pr-1', { x: 1 })).toBe(true);
  expect(await status(id)).toBe('pending');
  await sleep(50);
  await queue.prune({ olderThanMs: 10 });
  const [l2] = await queue.claim('w2', { leaseMs: 60_000 });
  expect(l2?.id).toBe(id);
  const r = await engineOf(queue).steps.wait(l2!, 'got', 'pr-1', null);
  expect(r.state).toBe('resolved');
  expect(JSON.parse(r.valueJson!)).toEqual({ payload: { x: 1 } });
});

/*
 * Deliberate break seen failing (then restored), in the same run: waitWakeTimedOut
 * (src/store/steps.ts) without its `answered` CTE: "expected 'set' to be 'resolved'" (the rerun
 * took the late emit's payload instead of null).
 */
test('a wait woken by its timeout answers null even if the event is emitted before the rerun', async () => {
  const queue = db.queue();
  const { id } = await queue.enqueue('to.x', {});
  const [a] = await queue.claim('wt', { leaseMs: 60_000 });
  const e = engineOf(queue);
  expect((await e.steps.wait(a!, 'w', 'ev-to', 100)).state).toBe('waiting');
  await sleep(200);
  await e.steps.wakeTimedOut();
  expect(await status(id)).toBe('pending');
  expect(await queue.emitEvent('ev-to', 'late')).toBe(true);
  const [b] = await queue.claim('wt2', { leaseMs: 60_000 });
  expect(b?.id).toBe(id);
  const r = await e.steps.wait(b!, 'w', 'ev-to', 100);
  expect(r.state).toBe('resolved');
  expect(r.valueJson).toBe('null');
  const rows = await db.sql<{ resolved: boolean }>(`SELECT resolved FROM ${S}.job_steps WHERE job_id = $1`, [
    id,
  ]);
  expect(rows).toEqual([{ resolved: true }]);
});

/*
 * Deliberate break seen failing (then restored): the DELETEs of the 'keyed' branches of
 * step_sleep / step_wait (migration 20) removed: "expected [ { name: 'nap' }, { name: 'w' } ] to deeply equal []" (the refused
 * sleep and wait were stored; the retry would find the sleep passed and go on).
 */
test('a sleep or wait refused as keyed (dedupe scope pending) stores nothing; a retry is refused again', async () => {
  const queue = db.queue();
  const { id } = await queue.enqueue('k.x', {}, { dedupeKey: 'kk', dedupe: { scope: 'pending' } });
  const e = engineOf(queue);
  const [a] = await queue.claim('wk', { leaseMs: 60_000 });
  expect((await e.steps.sleep(a!, 'nap', null, 150)).state).toBe('keyed');
  expect((await e.steps.wait(a!, 'w', 'ev-keyed', 150)).state).toBe('keyed');
  expect(await db.sql(`SELECT name FROM ${S}.job_steps WHERE job_id = $1`, [id])).toEqual([]);
  await sleep(300);
  // the ValidationError fails the attempt; the retry, simulated: back to pending, claimed again
  await db.sql(
    `UPDATE ${db.jobs} SET status = 'pending', lease_until = NULL, worker_id = NULL WHERE id = $1`,
    [id],
  );
  const [b] = await queue.claim('wk2', { leaseMs: 60_000 });
  expect(b?.id).toBe(id);
  expect((await e.steps.sleep(b!, 'nap', null, 150)).state).toBe('keyed');
  expect((await e.steps.wait(b!, 'w', 'ev-keyed', 150)).state).toBe('keyed');
});
