/**
 * Review of SPEC §10 (flows-review): the cost of a failure cascade. The trigger's recursive
 * statement (migration 14, dependency_changed, "victims") is planned from the statistics of
 * `jobs`; while they say there are no waiting jobs — a fresh database, or an existing table right
 * after migration 14 until autovacuum re-analyses it (10 % of the table must change first) —
 * PostgreSQL drives each level of the recursion from jobs_waiting_idx: every waiting job in the
 * table is visited once per level (O(depth × waiting jobs)). A 1,000-deep chain then takes ~10 s
 * to cancel; a deeper one never fits the statement timeout, so the failure of its root can never
 * be written, and because the reaper writes every expired lease in one statement, no expired
 * lease of the schema is recovered any more (§1.5).
 *
 * These tests fail on the current code; they pass once the recursion looks jobs up by primary
 * key only (see the report).
 */
import { describe, expect, test } from 'vitest';
import { PermanentError } from '../../src/errors.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

/**
 * A table as it is right after migration 14 on an existing database: a history of finished jobs,
 * analysed, no waiting job seen (autovacuum off, so the statistics stay so for the test — on a
 * large table autovacuum waits for 10 % of it to change). Then 10,000 unrelated jobs waiting for
 * a job that is still pending (other flows). The other test's jobs are deleted first: this
 * file's database holds only these tests' rows.
 */
async function existingTable(): Promise<void> {
  const deps = db.jobs.replace(/jobs$/, 'job_dependencies');
  await db.sql(`DELETE FROM ${db.jobs}`);
  await db.sql(
    `INSERT INTO ${db.jobs} (task, status) SELECT 'history', 'done' FROM generate_series(1, 20000)`,
  );
  for (const table of [db.jobs, deps]) {
    await db.sql(`ALTER TABLE ${table} SET (autovacuum_enabled = off)`);
    await db.sql(`ANALYZE ${table}`);
  }
  const setup = db.queue({ poolSize: 1 });
  await setup.enqueueFlow([
    { ref: 'r', task: 'other.root' },
    ...Array.from({ length: 10_000 }, (_, i) => ({ ref: `c${i}`, task: 'other.child', dependsOn: ['r'] })),
  ]);
}

function chain(task: string, n: number) {
  return Array.from({ length: n }, (_, i) => ({
    ref: `n${i}`,
    task: i === 0 ? `${task}.root` : `${task}.link`,
    maxAttempts: 1,
    ...(i > 0 ? { dependsOn: [`n${i - 1}`] } : {}),
  }));
}

describe('failure cascade cost', () => {
  test('the death of the root of a 200-deep chain is written within a 3 s statement timeout, whatever else waits', async () => {
    await existingTable();
    const setup = db.queue({ poolSize: 2 });
    const { jobs } = await setup.enqueueFlow(chain('cost1', 200));
    const queue = db.queue({ poolSize: 2, statementTimeoutMs: 3_000 });
    const [root] = await queue.claim('w', { tasks: ['cost1.root'] });
    expect(root).toBeDefined();
    expect(await queue.fail(root as never, new PermanentError('boom'))).toBe('dead');
    expect((await setup.get(jobs.n199 as string))?.status).toBe('cancelled');
  });

  test("a deep chain's root whose lease expires does not stop the reaper recovering other jobs", async () => {
    await existingTable();
    const setup = db.queue({ poolSize: 2 });
    await setup.enqueueFlow(chain('cost2', 200));
    const { id: other } = await setup.enqueue('cost2.other', null);
    const queue = db.queue({ poolSize: 2, statementTimeoutMs: 3_000 });
    const [root] = await queue.claim('w', { tasks: ['cost2.root'] });
    const [unrelated] = await queue.claim('w', { tasks: ['cost2.other'] });
    expect(root && unrelated).toBeTruthy();
    await db.expireLease((root as { id: string }).id);
    await db.expireLease(other);
    // the root dies in the reaper's statement (its last attempt), cancelling the chain
    const reaped = await queue.reap();
    expect(reaped.sort()).toEqual([(root as { id: string }).id, other].sort());
    expect((await setup.get(other))?.status).toBe('pending');
  });
});
