/**
 * SPEC §10 workflows from the library: enqueueFlow (atomic, refs resolved, bad graphs refused with
 * nothing written), dependsOn on existing jobs, unblocking in the completing transaction, the
 * failure cascade and its undoing by requeue, ctx.dependencies(), queue.flow().
 */
import { describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { PermanentError, ValidationError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

/** Claims and completes (or fails for good) every due job of `task`; returns their ids. */
async function finish(queue: Queue, task: string, how: 'done' | 'dead' = 'done'): Promise<string[]> {
  const jobs = await queue.claim('test-worker', { tasks: [task], limit: 1000 });
  for (const job of jobs) {
    if (how === 'done') expect(await queue.complete(job, { from: job.id })).toBe(true);
    else expect(await queue.fail(job, new PermanentError('boom'))).toBe('dead');
  }
  return jobs.map((j) => j.id);
}

async function statuses(queue: Queue, ids: Record<string, string>): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const [ref, id] of Object.entries(ids)) out[ref] = (await queue.get(id))?.status ?? 'missing';
  return out;
}

describe('enqueueFlow', () => {
  test('a diamond: roots pending, the rest waiting; each becomes pending when its last dependency is done', async () => {
    const queue = db.queue();
    const { flowId, jobs } = await queue.enqueueFlow([
      { ref: 'a', task: 'wf.a', payload: 1 },
      { ref: 'b', task: 'wf.b', payload: 2 },
      { ref: 'c', task: 'wf.c', payload: 3, dependsOn: ['a'] },
      { ref: 'merge', task: 'wf.merge', payload: {}, dependsOn: ['a', 'b', 'c'] },
    ]);
    expect(flowId).toMatch(/^[0-9a-f-]{36}$/);
    expect(await statuses(queue, jobs)).toEqual({
      a: 'pending',
      b: 'pending',
      c: 'waiting',
      merge: 'waiting',
    });
    expect((await queue.counts()).waiting).toBe(2);
    expect(await queue.claim('w', { tasks: ['wf.c', 'wf.merge'] })).toEqual([]);
    await finish(queue, 'wf.a');
    expect(await statuses(queue, jobs)).toEqual({ a: 'done', b: 'pending', c: 'pending', merge: 'waiting' });
    await finish(queue, 'wf.c');
    expect((await queue.get(jobs.merge as string))?.status).toBe('waiting');
    await finish(queue, 'wf.b');
    expect((await queue.get(jobs.merge as string))?.status).toBe('pending');
    const flow = await queue.flow(flowId);
    expect(flow.map((j) => j.flowRef)).toEqual(['a', 'b', 'c', 'merge']);
    expect(flow.every((j) => j.flowId === flowId)).toBe(true);
    // a bounded graph: the oldest jobs and only their edges
    const whole = await queue.flowGraph(flowId);
    expect(whole.truncated).toBe(false);
    expect(whole.edges).toHaveLength(4);
    const part = await queue.flowGraph(flowId, { limit: 3 });
    expect(part.truncated).toBe(true);
    expect(part.jobs.map((j) => j.flowRef)).toEqual(['a', 'b', 'c']);
    expect(part.edges).toEqual([{ job: jobs.c, dependsOn: jobs.a }]);
    expect((await queue.flowGraph(flowId, { limit: 4 })).truncated).toBe(false);
  });

  test('a cycle, an unknown ref, an unknown id and a dedupe option are refused with nothing written', async () => {
    const queue = db.queue();
    const before = await queue.counts();
    const bad: unknown[][] = [
      [
        { ref: 'a', task: 't', dependsOn: ['c'] },
        { ref: 'b', task: 't', dependsOn: ['a'] },
        { ref: 'c', task: 't', dependsOn: ['b'] },
      ],
      [{ ref: 'a', task: 't', dependsOn: ['a'] }],
      [
        { ref: 'a', task: 't' },
        { ref: 'b', task: 't', dependsOn: ['nope'] },
      ],
      [
        { ref: 'a', task: 't' },
        { ref: 'b', task: 't', dependsOn: ['a', '999999999999'] },
      ],
      [{ ref: 'a', task: 't', dedupeKey: 'k' }],
      // a number that is no safe integer is no job id (it would read as another one)
      [{ ref: 'a', task: 't', dependsOn: [2 ** 53 + 2] }],
      [
        { ref: 'a', task: 't' },
        { ref: 'a', task: 't' },
      ],
    ];
    for (const nodes of bad) {
      await expect(queue.enqueueFlow(nodes as never)).rejects.toBeInstanceOf(ValidationError);
    }
    await expect(
      queue.enqueueFlow([
        { ref: 'a', task: 't', dependsOn: ['c'] },
        { ref: 'b', task: 't', dependsOn: ['a'] },
        { ref: 'c', task: 't', dependsOn: ['b'] },
      ]),
    ).rejects.toThrow(/cycle: "a" depends on "c" depends on "b" depends on "a"/);
    expect(await queue.counts()).toEqual(before);
  });

  test('inside a transaction: nothing exists until it commits, nothing after a rollback', async () => {
    const queue = db.queue();
    let flowId = '';
    await expect(
      queue.transaction(async (client) => {
        ({ flowId } = await queue.enqueueFlow(
          [
            { ref: 'a', task: 'wf.tx' },
            { ref: 'b', task: 'wf.tx', dependsOn: ['a'] },
          ],
          { client },
        ));
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(await queue.flow(flowId)).toEqual([]);
  });
});

describe('dependsOn', () => {
  test('on a done job: pending at once; on a dead one: cancelled, or pending with onDependencyFailure run', async () => {
    const queue = db.queue();
    const { id: ok } = await queue.enqueue('dep.ok', null);
    await finish(queue, 'dep.ok');
    const { id: bad } = await queue.enqueue('dep.bad', null, { maxAttempts: 1 });
    await finish(queue, 'dep.bad', 'dead');
    expect((await queue.get(bad))?.status).toBe('dead');
    const a = await queue.enqueue('dep.child', null, { dependsOn: [ok] });
    const b = await queue.enqueue('dep.child', null, { dependsOn: [ok, bad] });
    const c = await queue.enqueue('dep.child', null, { dependsOn: [ok, bad], onDependencyFailure: 'run' });
    expect((await queue.get(a.id))?.status).toBe('pending');
    expect((await queue.get(b.id))?.status).toBe('cancelled');
    expect((await queue.get(c.id))?.status).toBe('pending');
    // requeueing the dead dependency brings b back to waiting
    expect(await queue.requeue(bad)).toBe(true);
    expect((await queue.get(b.id))?.status).toBe('waiting');
    await finish(queue, 'dep.bad');
    expect((await queue.get(b.id))?.status).toBe('pending');
  });

  test('an unknown dependency id is a ValidationError, nothing written', async () => {
    const queue = db.queue();
    const before = await queue.counts();
    await expect(queue.enqueue('dep.x', null, { dependsOn: ['987654321987'] })).rejects.toBeInstanceOf(
      ValidationError,
    );
    await expect(queue.enqueue('dep.x', null, { dependsOn: ['x'] })).rejects.toBeInstanceOf(ValidationError);
    expect(await queue.counts()).toEqual(before);
  });
});

describe('failure cascade', () => {
  test('a dead dependency cancels its dependents recursively; a requeue brings them back', async () => {
    const queue = db.queue();
    const { jobs } = await queue.enqueueFlow([
      { ref: 'root', task: 'cas.root', maxAttempts: 1 },
      { ref: 'other', task: 'cas.other' },
      { ref: 'mid', task: 'cas.mid', dependsOn: ['root'] },
      { ref: 'leaf', task: 'cas.leaf', dependsOn: ['mid', 'other'] },
      { ref: 'runs', task: 'cas.runs', dependsOn: ['mid'], onDependencyFailure: 'run' },
    ]);
    await finish(queue, 'cas.root', 'dead');
    expect(await statuses(queue, jobs)).toEqual({
      root: 'dead',
      other: 'pending',
      mid: 'cancelled',
      leaf: 'cancelled',
      runs: 'pending',
    });
    expect((await queue.get(jobs.leaf as string))?.lastError).toMatch(
      /requeueing job \d+ brings this job back/,
    );
    expect(await queue.requeue(jobs.root as string)).toBe(true);
    expect(await statuses(queue, jobs)).toMatchObject({ root: 'pending', mid: 'waiting', leaf: 'waiting' });
    await finish(queue, 'cas.root');
    await finish(queue, 'cas.mid');
    await finish(queue, 'cas.other');
    expect(await statuses(queue, jobs)).toMatchObject({ leaf: 'pending' });
  });

  test('cancelling a waiting job cancels what depends on it', async () => {
    const queue = db.queue();
    const { jobs } = await queue.enqueueFlow([
      { ref: 'a', task: 'cc.a' },
      { ref: 'b', task: 'cc.b', dependsOn: ['a'] },
      { ref: 'c', task: 'cc.c', dependsOn: ['b'] },
    ]);
    expect(await queue.cancel(jobs.b as string)).toBe(true);
    expect(await statuses(queue, jobs)).toEqual({ a: 'pending', b: 'cancelled', c: 'cancelled' });
  });
});

describe('ctx.dependencies()', () => {
  test('status and result of each dependency, keyed by ref in the flow and by id outside it', async () => {
    const queue = db.queue();
    const { id: outside } = await queue.enqueue('ctx.outside', null);
    const { jobs } = await queue.enqueueFlow([
      { ref: 'a', task: 'ctx.a', payload: 'A' },
      { ref: 'sink', task: 'ctx.sink', dependsOn: ['a', outside] },
    ]);
    let seen: unknown;
    const worker = db.worker({
      queue,
      tasks: {
        'ctx.a': async (payload) => `${payload}!`,
        'ctx.outside': async () => 42,
        'ctx.sink': async (_payload, ctx) => {
          seen = await ctx.dependencies();
          return 'ok';
        },
      },
      pollIntervalMs: 50,
    });
    await worker.start();
    try {
      const done = await queue.waitFor(jobs.sink as string, { timeoutMs: 20_000 });
      expect(done.status).toBe('done');
    } finally {
      await worker.stop();
    }
    expect(seen).toEqual({
      a: { id: jobs.a, status: 'done', result: 'A!' },
      [outside]: { id: outside, status: 'done', result: 42 },
    });
  });
});

describe('retention', () => {
  test("retention 'delete' keeps a completed job with dependents (its result is what they read), deletes the rest", async () => {
    const queue = db.queue({ schema: 'wf_retention', retention: { completed: 'delete' } });
    await queue.migrate();
    const { jobs } = await queue.enqueueFlow([
      { ref: 'a', task: 'ret.a' },
      { ref: 'b', task: 'ret.b', dependsOn: ['a'] },
    ]);
    const { id: lone } = await queue.enqueue('ret.lone', null);
    // one alone, and the others in one batch
    const [a] = await queue.claim('w', { tasks: ['ret.a'] });
    expect(await queue.complete(a as never, 'A')).toBe(true);
    const [l] = await queue.claim('w', { tasks: ['ret.lone'] });
    expect(await queue.completeMany([{ lease: l as never, result: 'L' }])).toEqual([true]);
    expect(await queue.get(lone)).toBeNull();
    expect(await queue.get(jobs.a as string)).toMatchObject({ status: 'done', result: 'A' });
    expect((await queue.get(jobs.b as string))?.status).toBe('pending');
    // a batch with a job that has dependents and one that has none
    const { jobs: more } = await queue.enqueueFlow([
      { ref: 'p', task: 'ret.p' },
      { ref: 'q', task: 'ret.q', dependsOn: ['p'] },
    ]);
    const { id: lone2 } = await queue.enqueue('ret.p', null);
    const batch = await queue.claim('w', { tasks: ['ret.p'], limit: 10 });
    expect(batch).toHaveLength(2);
    expect(await queue.completeMany(batch.map((lease) => ({ lease, result: lease.id })))).toEqual([
      true,
      true,
    ]);
    expect(await queue.get(lone2)).toBeNull();
    expect(await queue.get(more.p as string)).toMatchObject({ status: 'done', result: more.p });
    expect((await queue.get(more.q as string))?.status).toBe('pending');
    // a stale lease still completes nothing (not deleted, not kept)
    expect(await queue.complete(a as never, 'again')).toBe(false);
    const counts = await queue.counts();
    expect(counts.done).toBe(4); // two rows kept, two deleted and counted
  });

  test('prune keeps a finished job while a dependent of it can still run, and deletes it after', async () => {
    const queue = db.queue({ schema: 'wf_prune' });
    await queue.migrate();
    const { jobs } = await queue.enqueueFlow([
      { ref: 'a', task: 'pr.a' },
      { ref: 'b', task: 'pr.b' },
      { ref: 'c', task: 'pr.c', dependsOn: ['a', 'b'] },
    ]);
    const [a] = await queue.claim('w', { tasks: ['pr.a'] });
    await queue.complete(a as never, 'A');
    await db.sql(`UPDATE "wf_prune".jobs SET updated_at = now() - interval '30 days' WHERE status = 'done'`);
    expect(await queue.prune({ olderThanMs: 86_400_000 })).toBe(0);
    expect((await queue.get(jobs.a as string))?.status).toBe('done');
    for (const task of ['pr.b', 'pr.c']) {
      const [job] = await queue.claim('w', { tasks: [task] });
      await queue.complete(job as never, task);
    }
    await db.sql(`UPDATE "wf_prune".jobs SET updated_at = now() - interval '30 days'`);
    expect(await queue.prune({ olderThanMs: 86_400_000 })).toBe(3);
    expect(await db.sql(`SELECT * FROM "wf_prune".job_dependencies`)).toEqual([]);
  });
});

describe('wake-up', () => {
  // the trigger derives the schema's channel in SQL, as notifyChannel does in TypeScript (hashed
  // when too long for an identifier): a mismatch leaves the worker asleep until its 30 s poll
  test.each([
    ['a short schema name', 'wf_wake'],
    ['a schema name too long for its channel', `wf_wake_${'ü'.repeat(27)}`],
  ])('an unblocked job wakes a sleeping worker at once (%s)', async (_, schema) => {
    const queue = db.queue({ schema });
    await queue.migrate();
    const { jobs } = await queue.enqueueFlow([
      { ref: 'a', task: 'wake.a' },
      { ref: 'b', task: 'wake.b', dependsOn: ['a'] },
    ]);
    const [a] = await queue.claim('manual', { tasks: ['wake.a'] });
    let started = 0;
    const worker = db.worker({
      queue,
      tasks: {
        'wake.b': async () => {
          started = Date.now();
        },
      },
      pollIntervalMs: 30_000,
    });
    // what the worker went through, and whether the hint was sent, for the failure message
    const seen: string[] = [];
    const since = Date.now();
    for (const event of ['error', 'warning', 'listen:connected', 'job:start'] as const) {
      worker.on(event, (detail: unknown) =>
        seen.push(`${Date.now() - since} ms ${event} ${JSON.stringify(detail)}`),
      );
    }
    const listener = await db.pool.connect();
    listener.on('notification', (n) =>
      seen.push(`${Date.now() - since} ms NOTIFY ${n.channel} ${n.payload}`),
    );
    await listener.query(`LISTEN ${quoteIdent(engineOf(queue).channel)}`);
    await worker.start();
    try {
      await new Promise((resolve) => setTimeout(resolve, 300)); // its first claim found nothing
      const completedAt = Date.now();
      expect(await queue.complete(a as never, null)).toBe(true);
      seen.push(`${Date.now() - since} ms completed`);
      const done = await queue.waitFor(jobs.b as string, { timeoutMs: 10_000 }).catch((error: Error) => {
        throw new Error(`${error.message}; seen: ${seen.join(' | ')}`);
      });
      expect(done.status).toBe('done');
      expect(started - completedAt).toBeLessThan(5_000);
    } finally {
      await worker.stop();
      await listener.query('UNLISTEN *');
      listener.release();
    }
  });

  // §1.9 the race behind the test above, held open: waitFor's hint statement locks a pending job
  // while a woken worker claims; the claim skips the row (SKIP LOCKED) and comes back short. The
  // hint statement must announce the job again at its commit, or the worker sleeps until its
  // 30 s poll. (Broken on purpose: without the statement's pg_notify this test waits 30 s.)
  test("a claim that skipped a job locked by waitFor's hint is woken again at its commit", async () => {
    const queue = db.queue({ schema: 'wf_hint_lock' });
    await queue.migrate();
    const target = await queue.enqueue('hint.target', {});
    const started: string[] = [];
    const worker = db.worker({
      queue,
      tasks: {
        'hint.target': async () => {
          started.push('target');
        },
        'hint.other': async () => {
          started.push('other');
        },
      },
      pollIntervalMs: 30_000,
    });
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      const hinted = await engineOf(queue).store.observe.requestFinishHint(holder, target.id);
      expect(hinted?.hinted).toBe(true); // the hint's row lock is now held open
      await worker.start(); // its first claim skips the locked target
      await queue.enqueue('hint.other', {}); // a NOTIFY: the worker claims again, skips again
      const other = Date.now();
      while (!started.includes('other') && Date.now() - other < 10_000)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(started).toEqual(['other']);
      const committedAt = Date.now();
      await holder.query('COMMIT');
      const done = await queue.waitFor(target.id, { timeoutMs: 10_000 });
      expect(done.status).toBe('done');
      expect(Date.now() - committedAt).toBeLessThan(5_000);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      await worker.stop();
    }
  });

  // §1.9 the same race at a dependent's commit: the commit trigger of dependsOn (migration 15)
  // locks each existing dependency; a claim in that moment skips a pending one and comes back
  // short. SET CONSTRAINTS ALL IMMEDIATE runs the deferred trigger now, so its lock is held open
  // across the worker's claims. The trigger must announce again at the commit (migration 21).
  // (Broken on purpose: with migration 21's `OR locked_pending > 0` removed this test failed —
  // the target had not started 10 s after the commit, the worker asleep until its 30 s poll.)
  test("a claim that skipped a dependency locked by a dependent's commit is woken again at that commit", async () => {
    const queue = db.queue({ schema: 'wf_dep_lock' });
    await queue.migrate();
    const target = await queue.enqueue('dep.target', {});
    const started: string[] = [];
    const worker = db.worker({
      queue,
      tasks: {
        'dep.target': async () => {
          started.push('target');
        },
        'dep.other': async () => {
          started.push('other');
        },
        'dep.child': async () => {
          started.push('child');
        },
      },
      pollIntervalMs: 30_000,
    });
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await queue.enqueue('dep.child', {}, { dependsOn: [target.id], client: holder });
      await holder.query('SET CONSTRAINTS ALL IMMEDIATE'); // the commit trigger runs: target locked
      await worker.start(); // its first claim skips the locked target
      await queue.enqueue('dep.other', {}); // a NOTIFY: the worker claims again, skips again
      const other = Date.now();
      while (!started.includes('other') && Date.now() - other < 10_000)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(started).toEqual(['other']);
      // its claims after 'other' (a freed slot wakes the loop) are over: it sleeps until a hint
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(started).toEqual(['other']);
      const committedAt = Date.now();
      await holder.query('COMMIT');
      // polled, not waitFor: waitFor's own hint statement announces a pending job again
      while (!started.includes('target') && Date.now() - committedAt < 10_000)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(started.slice(0, 2)).toEqual(['other', 'target']); // (its dependent may follow at once)
      expect(Date.now() - committedAt).toBeLessThan(5_000);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      await worker.stop();
    }
  });
});
