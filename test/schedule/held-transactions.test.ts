/**
 * Issue 21, the class audit (docs/state-machine.md, "Reads beyond the locked row"), for the
 * scheduler: a step of another scheduler held open across this one's — the row it locked, the
 * tick's job it inserted, the next run it advanced, none committed — and then the final state:
 * exactly one job for the tick, the schedule's next run and last job, and, for `overlap: false`,
 * never a second active job.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { nextTick } from '../../src/core/cron.js';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { fireDueSchedules, tickKey } from '../../src/engine/scheduler.js';
import type { Queue } from '../../src/queue.js';
import type { ClaimedJob } from '../../src/types.js';
import { type TestDatabase, useTestDatabase } from '../support/database.js';
import { closeOpenTransactions, openTransaction, settledWithin } from '../workflows/support.js';

const db: TestDatabase = useTestDatabase();
afterEach(closeOpenTransactions);

/** Jobs of `task` in `schema`: id, status and dedupe key, oldest first. */
function jobsOf(schema: string, task: string) {
  return db.sql<{ id: string; status: string; dedupe_key: string | null }>(
    `SELECT j.id::text AS id, status, dedupe_key FROM ${quoteIdent(schema)}.jobs AS j WHERE task = $1 ORDER BY j.id`,
    [task],
  );
}

/** The schedule's next run (epoch ms) and last job. */
async function scheduleRow(schema: string, name: string) {
  const rows = await db.sql<{ next: number; last_job_id: string | null }>(
    `SELECT floor(extract(epoch FROM next_run_at) * 1000)::float8 AS next, last_job_id::text AS last_job_id
     FROM ${quoteIdent(schema)}.schedules WHERE name = $1`,
    [name],
  );
  return rows[0];
}

/**
 * Another scheduler's step held open: its due row locked (lockDue), the tick's job inserted and
 * the next run advanced (fire), not committed. `next` as the scheduler computes it: the first
 * tick after its database now.
 */
async function heldStep(queue: Queue, name: string, cron: string) {
  const { store } = engineOf(queue);
  const tx = await openTransaction(db);
  const rows = await store.schedule.lockDue(tx.client, 20);
  const row = rows.find((r) => r.name === name);
  if (!row) throw new Error(`${name} is not due`);
  const tick = new Date(row.next_run_at);
  const next = nextTick({ cron, tz: 'UTC' }, new Date(row.now_ms));
  const [job] = await store.schedule.fire(
    tx.client,
    name,
    [{ dedupeKey: tickKey(name, tick), at: tick }],
    next,
  );
  if (!job) throw new Error('the held step inserted no job');
  return { tx, tick, next, jobId: job.id };
}

describe('a scheduler step held open while another scheduler steps', () => {
  // Break: lockDue without SKIP LOCKED (`FOR UPDATE OF sc`): the second scheduler waited for the
  // held step (both cases: still pending after 5 s).
  for (const end of ['commits', 'rolls back'] as const) {
    test(`the second passes the row by; the held step ${end}: exactly one job for the tick`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const other = db.queue({ poolSize: 4 });
      const name = `held.${end === 'commits' ? 'c' : 'r'}`;
      const task = `${name}.task`;
      // a yearly tick, made due: this year's (the next one is months away)
      const cron = '0 0 1 1 *';
      await queue.schedule(name, { cron, task });
      const schema = engineOf(queue).schema;
      await db.sql(
        `UPDATE ${quoteIdent(schema)}.schedules SET next_run_at = date_trunc('year', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' WHERE name = $1`,
        [name],
      );
      const held = await heldStep(queue, name, cron);
      const meanwhile = await settledWithin(fireDueSchedules(engineOf(other)), 5_000);
      expect(meanwhile).toEqual({
        status: 'fulfilled',
        value: { fired: [], skipped: [], failed: [], more: false, locked: 0 },
      });
      if (end === 'commits') {
        await held.tx.commit();
        expect((await fireDueSchedules(engineOf(other))).locked).toBe(0); // nothing due any more
        expect(await jobsOf(schema, task)).toEqual([
          { id: held.jobId, status: 'pending', dedupe_key: tickKey(name, held.tick) },
        ]);
        expect(await scheduleRow(schema, name)).toEqual({
          next: held.next.getTime(),
          last_job_id: held.jobId,
        });
      } else {
        await held.tx.rollback();
        const step = await fireDueSchedules(engineOf(other));
        expect(step.fired.map((f) => f.tick.getTime())).toEqual([held.tick.getTime()]);
        const jobs = await jobsOf(schema, task);
        expect(jobs.map((j) => [j.status, j.dedupe_key])).toEqual([['pending', tickKey(name, held.tick)]]);
        expect(await scheduleRow(schema, name)).toEqual({
          next: nextTick({ cron, tz: 'UTC' }, held.tick).getTime(),
          last_job_id: jobs[0]?.id,
        });
      }
      // the tick's job runs
      const [lease, ...more] = await queue.claim('w', { tasks: [task] });
      expect(more).toEqual([]);
      expect(await queue.complete(lease as ClaimedJob, null)).toBe(true);
    });
  }
});

/**
 * Resolves once another backend runs a statement whose text contains `marker`, or once `done`
 * has settled (the statement may have come and gone between two looks).
 */
async function untilStatementRuns(marker: string, done: Promise<unknown>): Promise<void> {
  let settled = false;
  const settle = () => {
    settled = true;
  };
  done.then(settle, settle);
  const deadline = Date.now() + 10_000;
  while (!settled) {
    const rows = await db.sql(
      `SELECT 1 FROM pg_stat_activity
       WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
         AND position($1 IN query) > 0`,
      [marker],
    );
    if (rows.length > 0) return;
    if (Date.now() > deadline) throw new Error(`no statement with ${marker} started`);
  }
}

describe('overlap: false when a held step commits while the next step is under way', () => {
  // Found by this audit, failed before the fix: lockDue read whether the last job is active in
  // its own statement (an EXISTS beside the lock). A row another step fired and committed after
  // that statement's snapshot is re-checked on its latest version by the lock — its next tick
  // already due — but the EXISTS read the new last job from the older snapshot, where it did not
  // exist yet: the step fired the next tick beside the active one (two active jobs of an
  // overlap: false schedule). It takes a firing transaction that spans a tick (a slow step, a
  // per-second cron); the fillers only widen that instant. Fixed: scheduleLastActive reads it
  // after the locks, in a statement of its own. Break: the fix reverted (the EXISTS back in
  // lockDue) — the step fired the next tick in 10 runs of 10 (in round 0 seven times, round 1
  // three times: a round can miss the instant, the step's snapshot coming after the commit;
  // hence three rounds).
  test("the step that meets the committed row sees its tick's job active: the next tick is skipped, never run beside it", async () => {
    const schema = 'held_overlap';
    const queue = db.queue({ schema, poolSize: 4 });
    const other = db.queue({ schema, poolSize: 4 });
    await queue.migrate();
    const schedules = `${quoteIdent(schema)}.schedules`;
    const name = 'overlap';
    const task = 'overlap.task';
    const cron = '* * * * * *';
    await queue.schedule(name, { cron, task, overlap: false });
    // Due rows ahead of it that a third session holds: the next step's statement takes its
    // snapshot, then walks past them (skipped) before it reaches the schedule.
    await db.sql(
      `INSERT INTO ${schedules} (name, cron, task, next_run_at)
       SELECT 'filler-' || g, '0 0 1 1 *', 'filler', now() - interval '1 hour' FROM generate_series(1, 200000) AS g`,
    );
    const fillers = await openTransaction(db);
    await fillers.client.query(`SELECT 1 FROM ${schedules} WHERE name LIKE 'filler-%' FOR UPDATE`);
    const seen: string[] = [];
    for (let round = 0; round < 3; round++) {
      await db.sql(`UPDATE ${schedules} SET next_run_at = now() - interval '1 second' WHERE name = $1`, [
        name,
      ]);
      // A step that began before the next tick fired this one's job and advanced it to that tick.
      const held = await heldStep(queue, name, cron);
      // That next tick is due by the time the next step begins.
      for (;;) {
        const [row] = await db.sql<{ due: boolean }>('SELECT clock_timestamp() > $1::timestamptz AS due', [
          held.next,
        ]);
        if (row?.due) break;
      }
      const stepping = fireDueSchedules(engineOf(other));
      stepping.catch(() => undefined); // awaited below
      await untilStatementRuns('FOR UPDATE OF sc SKIP LOCKED', stepping);
      await held.tx.commit();
      const step = await stepping;
      const active = (await jobsOf(schema, task)).filter(
        (j) => j.status === 'pending' || j.status === 'running',
      );
      // skipped for the overlap on the committed row — or passed by while still locked: never fired
      expect(step.fired, `round ${round}`).toEqual([]);
      if (step.locked === 1) {
        expect(step.skipped.map((s) => s.reason)).toEqual(['overlap']);
        expect(step.skipped[0]?.tick.getTime()).toBeGreaterThanOrEqual(held.next.getTime());
      } else {
        expect(step).toMatchObject({ locked: 0, skipped: [] });
      }
      seen.push(step.locked === 1 ? 'skipped' : 'passed by');
      expect(active.map((j) => j.id)).toEqual([held.jobId]);
      // the tick's job runs; the next round starts from no active job
      const [lease, ...more] = await queue.claim('w', { tasks: [task] });
      expect(more).toEqual([]);
      expect(await queue.complete(lease as ClaimedJob, null)).toBe(true);
    }
    expect(seen).toHaveLength(3);
    await fillers.rollback();
  });
});
