/**
 * SPEC §10 at scale: a fan-out of 10,000 children with one fan-in job over them, and a chain of
 * 1,000 jobs whose failure cancels the rest in one transaction and whose requeue brings them all
 * back — no trigger recursion as deep as the graph. And no full-table scan: with many unrelated
 * jobs and edges in the tables, the statements of a flow's life (insert, dependsOn, unblocking,
 * cascade, restore, ctx.dependencies, queue.flow) read no table sequentially.
 *
 * Deliberate breaks seen failing: the cascade done by trigger recursion instead of one recursive
 * statement (the 1,000 chain: stack depth limit exceeded); the dependents lookup by
 * `d.depends_on = NEW.id` without job_dependencies_depends_on_idx (the scan test: seq_scan on
 * job_dependencies grew).
 */
import type pg from 'pg';
import { describe, expect, test } from 'vitest';
import { PermanentError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

/** Claims up to `limit` due jobs of `task` and completes them in one statement; returns how many. */
async function drain(queue: Queue, task: string, limit = 1000): Promise<number> {
  const jobs = await queue.claim('scale-worker', { tasks: [task], limit });
  if (jobs.length > 0) await queue.completeMany(jobs.map((lease) => ({ lease, result: { id: lease.id } })));
  return jobs.length;
}

async function statusCounts(queue: Queue, flowId: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const job of await queue.flow(flowId)) out[job.status] = (out[job.status] ?? 0) + 1;
  return out;
}

describe('workflows at scale', () => {
  test('a fan-out of 10,000 children and one fan-in job over them', async () => {
    const queue = db.queue();
    const children = Array.from({ length: 10_000 }, (_, i) => ({
      ref: `c${i}`,
      task: 'fan.child',
      payload: i,
      dependsOn: ['root'],
    }));
    const { flowId, jobs } = await queue.enqueueFlow([
      { ref: 'root', task: 'fan.root' },
      ...children,
      { ref: 'sink', task: 'fan.sink', dependsOn: children.map((c) => c.ref) },
    ]);
    expect(Object.keys(jobs)).toHaveLength(10_002);
    expect(await statusCounts(queue, flowId)).toEqual({ pending: 1, waiting: 10_001 });
    // one completion unblocks all 10,000 children, in its own transaction
    expect(await drain(queue, 'fan.root')).toBe(1);
    expect(await statusCounts(queue, flowId)).toEqual({ done: 1, pending: 10_000, waiting: 1 });
    let drained = 0;
    while (drained < 10_000) {
      const n = await drain(queue, 'fan.child');
      expect(n).toBeGreaterThan(0);
      drained += n;
      const sink = await queue.get(jobs.sink as string);
      expect(sink?.status).toBe(drained < 10_000 ? 'waiting' : 'pending');
    }
    const [sink] = await queue.claim('scale-worker', { tasks: ['fan.sink'] });
    expect(sink?.id).toBe(jobs.sink);
    const deps = await db.sql<{ deps_left: number; deps_total: number }>(
      `SELECT deps_left, deps_total FROM ${db.jobs} WHERE id = $1`,
      [jobs.sink],
    );
    expect(deps).toEqual([{ deps_left: 0, deps_total: 10_000 }]);
  }, 120_000);

  test('a chain of 1,000: a failure at its head cancels the rest at once; a requeue brings them back; it then runs in order', async () => {
    const queue = db.queue();
    const nodes = Array.from({ length: 1000 }, (_, i) => ({
      ref: `n${i}`,
      task: 'chain.step',
      payload: i,
      maxAttempts: 1,
      ...(i > 0 ? { dependsOn: [`n${i - 1}`] } : {}),
    }));
    const { flowId, jobs } = await queue.enqueueFlow(nodes);
    const [head] = await queue.claim('scale-worker', { tasks: ['chain.step'] });
    expect(head?.id).toBe(jobs.n0);
    expect(await queue.fail(head as never, new PermanentError('boom'))).toBe('dead');
    expect(await statusCounts(queue, flowId)).toEqual({ dead: 1, cancelled: 999 });
    expect((await queue.get(jobs.n999 as string))?.lastError).toMatch(
      /^Cancelled: job \d+, which it depends on, was cancelled because job \d+ ended dead/,
    );
    expect(await queue.requeue(jobs.n0 as string)).toBe(true);
    expect(await statusCounts(queue, flowId)).toEqual({ pending: 1, waiting: 999 });
    for (let i = 0; i < 1000; i++) {
      const claimed = await queue.claim('scale-worker', { tasks: ['chain.step'], limit: 10 });
      // one at a time: the next is claimable only once this one is done
      expect(claimed.map((j) => j.payload)).toEqual([i]);
      expect(await queue.complete(claimed[0] as never, i)).toBe(true);
    }
    expect(await statusCounts(queue, flowId)).toEqual({ done: 1000 });
  }, 120_000);
});

describe('no full-table scan', () => {
  test("a flow's statements read jobs and job_dependencies through indexes only", async () => {
    const queue = db.queue();
    await queue.migrate();
    // many unrelated finished jobs, chained by edges, so that a scan would be the planner's
    // worst choice by far (and visible)
    await db.sql(`
      WITH ins AS (
        INSERT INTO ${db.jobs} (task, status, has_dependents, deps_total)
        SELECT 'filler', 'done', true, 1 FROM generate_series(1, 30000) RETURNING id
      )
      INSERT INTO ${db.jobs.replace(/jobs$/, 'job_dependencies')} (job_id, depends_on)
      SELECT id, id - 1 FROM ins`);
    await db.sql(`ANALYZE ${db.jobs}`);
    await db.sql(`ANALYZE ${db.jobs.replace(/jobs$/, 'job_dependencies')}`);

    const client: pg.PoolClient = await db.pool.connect();
    try {
      const seqScans = async () => {
        await client.query('SELECT pg_stat_force_next_flush()');
        await client.query('SELECT 1'); // the flush happens as the previous statement's transaction ends
        await client.query('SELECT pg_stat_clear_snapshot()');
        const { rows } = await client.query<{ relname: string; seq_scan: string }>(
          `SELECT relname, seq_scan FROM pg_stat_user_tables
           WHERE relid IN ($1::regclass, $2::regclass) ORDER BY relname`,
          [db.jobs, db.jobs.replace(/jobs$/, 'job_dependencies')],
        );
        return Object.fromEntries(rows.map((r) => [r.relname, Number(r.seq_scan)]));
      };
      const before = await seqScans();
      // the whole life of a flow, on this one connection
      const { flowId, jobs } = await queue.enqueueFlow(
        [
          { ref: 'a', task: 'scan.a', maxAttempts: 1 },
          { ref: 'b', task: 'scan.b' },
          { ref: 'c', task: 'scan.c', dependsOn: ['a', 'b'] },
          { ref: 'd', task: 'scan.d', dependsOn: ['c'] },
        ],
        { client },
      );
      await queue.enqueue('scan.e', null, { dependsOn: [jobs.b as string], client });
      const [b] = await queue.claim('scan-worker', { tasks: ['scan.b'] });
      expect(await queue.complete(b as never, 'B', { client })).toBe(true);
      // a goes dead (cancelling c and d), is requeued (bringing them back), then done
      const [a] = await queue.claim('scan-worker', { tasks: ['scan.a'] });
      await client.query('BEGIN');
      await client.query(
        `UPDATE ${db.jobs} SET status = 'dead', lease_until = NULL, worker_id = NULL WHERE id = $1`,
        [a?.id],
      );
      await client.query('COMMIT');
      expect((await queue.get(jobs.d as string))?.status).toBe('cancelled');
      await client.query(`UPDATE ${db.jobs} SET status = 'pending', attempts = 0 WHERE id = $1`, [a?.id]);
      expect((await queue.get(jobs.d as string))?.status).toBe('waiting');
      await client.query(`UPDATE ${db.jobs} SET status = 'done', result = '"A"' WHERE id = $1`, [a?.id]);
      expect((await queue.get(jobs.c as string))?.status).toBe('pending');
      // e joined the flow of the job it depends on
      expect(await queue.flow(flowId)).toHaveLength(5);
      const after = await seqScans();
      expect(after).toEqual(before);
    } finally {
      client.release();
    }
  }, 60_000);
});
