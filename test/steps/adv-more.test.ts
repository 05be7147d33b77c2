import { expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { heldClients } from '../support/held-clients.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const S = quoteIdent(TEST_SCHEMA);
const client = heldClients(db);
async function status(id: string) {
  return (await db.sql<{ status: string }>(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id]))[0]?.status;
}

test('prune held open (an old unset event locked and deleted) vs a new waiter, then the emit wakes it', async () => {
  const queue = db.queue();
  await db.sql(`INSERT INTO ${S}.events (name, created_at) VALUES ('old-ev', now() - interval '1 day')`);
  const tx = await client();
  await tx.query('BEGIN');
  const sql = (engineOf(queue).store.steps as unknown as { sql: { eventPrune: string } }).sql.eventPrune;
  expect((await tx.query(sql, [1000])).rows[0].deleted).toBe(1);
  const { id } = await queue.enqueue('p.w', {});
  const [lease] = await queue.claim('pw', { leaseMs: 60_000, tasks: ['p.w'] });
  const waited = engineOf(queue).steps.wait(lease!, 'got', 'old-ev', null);
  await expect
    .poll(
      async () =>
        (
          await db.sql<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
          )
        )[0]?.n,
    )
    .toBeGreaterThan(0);
  await tx.query('COMMIT');
  expect((await waited).state).toBe('waiting');
  expect(await status(id)).toBe('waiting');
  expect(await queue.emitEvent('old-ev', 7)).toBe(true);
  expect(await status(id)).toBe('pending');
  // and a prune while the job waits keeps the event (unset) or not; either way a second emit is false
  expect(await queue.emitEvent('old-ev', 8)).toBe(false);
});

test('a job that ran after its dependency died (run), waits for an event; the dependency is requeued meanwhile', async () => {
  const queue = db.queue();
  const runs = new Map<string, number>();
  const worker = db.worker({
    queue,
    tasks: {
      'f.dep': async (p: { fail: boolean }) => {
        if (p.fail) throw new Error('dep fails');
        return 'dep ok';
      },
      'f.w': async (_: unknown, ctx: JobContext) => {
        runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
        return { got: await ctx.waitForEvent('got', 'flow-ev') };
      },
    },
    pollIntervalMs: 200,
  });
  await worker.start();
  const dep = await queue.enqueue('f.dep', { fail: true }, { maxAttempts: 1 });
  const w = await queue.enqueue('f.w', {}, { dependsOn: [dep.id], onDependencyFailure: 'run' });
  await expect
    .poll(
      async () =>
        (await db.sql<{ e: string }>(`SELECT wait_event AS e FROM ${db.jobs} WHERE id = $1`, [w.id]))[0]?.e,
    )
    .toBe('flow-ev');
  expect(await status(dep.id)).toBe('dead');
  await db.sql(`UPDATE ${db.jobs} SET payload = '{"fail": false}' WHERE id = $1`, [dep.id]);
  await queue.requeue(dep.id);
  await expect.poll(() => status(dep.id)).toBe('done');
  await new Promise((r) => setTimeout(r, 500));
  const s1 = await status(w.id);
  expect(await queue.emitEvent('flow-ev', 'yes')).toBe(true);
  const done = await queue.waitFor(w.id, { timeoutMs: 10_000 });
  process.stdout.write(`after requeue+done of dep: ${s1}; runs ${runs.get(w.id)}\n`);
  expect(done.result).toEqual({ got: { payload: 'yes' } });
  await worker.stop();
});

test('a cancelled waiting job does not keep its event from prune forever', async () => {
  const queue = db.queue();
  const { id } = await queue.enqueue('c.w', {});
  const [lease] = await queue.claim('cw', { leaseMs: 60_000, tasks: ['c.w'] });
  expect((await engineOf(queue).steps.wait(lease!, 'got', 'c-ev', null)).state).toBe('waiting');
  expect(await queue.cancel(id)).toBe(true);
  await queue.prune({ olderThanMs: 0 });
  const left = await db.sql(`SELECT name FROM ${S}.events WHERE name = 'c-ev'`);
  process.stdout.write(`events left after prune: ${JSON.stringify(left)}\n`);
  expect(left).toEqual([]);
});

// Break seen failing: without `AND deps_left = 0` in the reaper's pick (store/steps.ts
// waitWakeTimedOut), the blocked wait (timed out first) filled the pass of one and nothing woke:
// `expected [] to deeply equal [ '<id>' ]`.
test("the reaper's timeout pass is not filled by timed-out waits that still have a dependency left", async () => {
  const queue = db.queue();
  const blocked = await queue.enqueue('r.w', {});
  const free = await queue.enqueue('r.w', {});
  // a wait whose dependency was requeued (deps_left > 0) timed out first, then a plain one
  await db.sql(
    `UPDATE ${db.jobs} SET status = 'waiting', wait_event = 'r-ev',
            wait_timeout = now() - CASE WHEN id = $1 THEN interval '2 hours' ELSE interval '1 hour' END,
            deps_left = CASE WHEN id = $1 THEN 1 ELSE 0 END
      WHERE id IN ($1, $2)`,
    [blocked.id, free.id],
  );
  const engine = engineOf(queue);
  expect(await engine.store.steps.wakeTimedOut(engine.pool, 1)).toEqual([free.id]);
  expect(await status(free.id)).toBe('pending');
  expect(await status(blocked.id)).toBe('waiting');
});
