/**
 * Issue 21, the class audit (docs/state-machine.md, "Reads beyond the locked row"), for
 * workflows — the statements test/workflows/held-transactions.test.ts does not hold open: an
 * enqueue whose dependency is being deleted, a prune while a dead dependent is requeued, the
 * transitions of a dependency not covered there (cancelRunning, release of a cancelled job,
 * requeueDead), and a dependent's own requeue while its dependency's requeue is in flight. Each
 * holds the competing transaction open across the statement, then asserts the final state of
 * every job and drives the dependent to its end.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { PermanentError, ValidationError } from '../../src/errors.js';
import type { Queue } from '../../src/queue.js';
import type { ClaimedJob } from '../../src/types.js';
import { type TestDatabase, useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import {
  claimOne,
  closeOpenTransactions,
  openTransaction,
  settledWithin,
  stateOf,
  untilLockWaiters,
} from './support.js';

const db: TestDatabase = useTestDatabase();
const schema = quoteIdent(TEST_SCHEMA);
afterEach(closeOpenTransactions);

let seq = 0;
const fresh = (what: string) => `hr.${what}.${++seq}`;

/** Rows of the write's side tables that name `task`'s jobs (none: nothing was written). */
async function writtenFor(task: string): Promise<{ jobs: number; edges: number; checks: number }> {
  const [row] = await db.sql<{ jobs: number; edges: number; checks: number }>(
    `SELECT (SELECT count(*)::int FROM ${db.jobs} WHERE task = $1) AS jobs,
            (SELECT count(*)::int FROM ${db.jobs} AS j JOIN ${schema}.job_dependencies AS d
               ON d.job_id = j.id WHERE j.task = $1) AS edges,
            (SELECT count(*)::int FROM ${schema}.dependency_checks) AS checks`,
    [task],
  );
  return row as { jobs: number; edges: number; checks: number };
}

/** Claims the one due job of `task`, which must be `id`, and completes it. */
async function runToEnd(queue: Queue, task: string, id: string, result: unknown = null): Promise<void> {
  const lease = await claimOne(queue, task);
  expect(lease.id).toBe(id);
  expect(await queue.complete(lease, result)).toBe(true);
}

describe('an enqueue with dependsOn while a DELETE of the dependency is in flight', () => {
  // Break: lockDependencies without FOR KEY SHARE (a plain read of the snapshot): the enqueue
  // wrote its edge to the job being deleted. On its own, its commit's trigger then waited for the
  // DELETE and found nothing to decide from: the "commits" cases ended with a dependent waiting
  // forever on a job that no longer existed (no ValidationError); in your transaction it did not
  // wait at all (no lock waiter within 10 s, all four cases). The other two passed.
  const deleters = {
    // a completion under retention 'delete' inside your transaction (ctx.transaction)
    "completion under retention 'delete'": async (queue: Queue, lease: ClaimedJob) => {
      const tx = await openTransaction(db);
      expect(await queue.complete(lease, { v: 1 }, { client: tx.client })).toBe(true);
      return tx;
    },
    // one batch of prune() (the background pruner's statement is the same kind of DELETE)
    prune: async (queue: Queue, lease: ClaimedJob) => {
      expect(await queue.complete(lease, { v: 1 })).toBe(true);
      const tx = await openTransaction(db);
      const { deleted } = await engineOf(queue).store.admin.pruneBatch(tx.client, ['done'], 0, '0', 5_000);
      expect(deleted).toBeGreaterThanOrEqual(1);
      return tx;
    },
  };
  for (const [name, startDelete] of Object.entries(deleters)) {
    for (const inYourTransaction of [false, true]) {
      for (const end of ['commits', 'rolls back'] as const) {
        const where = inYourTransaction ? 'in your transaction' : 'on its own';
        test(`${name} ${end}; the enqueue ${where} waits for it`, async () => {
          const retention = name === 'prune' ? 'keep' : 'delete';
          const queue = db.queue({ poolSize: 4, retention: { completed: retention } });
          const task = fresh('dep');
          const child = fresh('child');
          await queue.enqueue(task, null);
          const lease = await claimOne(queue, task);
          const deleting = await startDelete(queue, lease);
          const caller = inYourTransaction ? await openTransaction(db) : null;
          const enqueueing = settledWithin(
            queue.enqueue(child, null, { dependsOn: [lease.id], client: caller?.client }),
            10_000,
          );
          await untilLockWaiters(db, 1); // its FOR KEY SHARE waits for the DELETE
          if (end === 'commits') await deleting.commit();
          else await deleting.rollback();
          const outcome = await enqueueing;
          await caller?.commit(); // your transaction is still usable after the error
          if (end === 'commits') {
            expect(outcome).toMatchObject({ status: 'rejected' });
            const reason = (outcome as { reason: unknown }).reason;
            expect(reason).toBeInstanceOf(ValidationError);
            expect((reason as ValidationError).field).toBe('dependsOn');
            expect((reason as Error).message).toMatch(`job ${lease.id} does not exist`);
            expect(await writtenFor(child)).toEqual({ jobs: 0, edges: 0, checks: 0 });
            expect(await stateOf(db, lease.id)).toBeNull();
          } else {
            expect(outcome).toMatchObject({ status: 'fulfilled', value: { created: true } });
            const id = (outcome as { value: { id: string } }).value.id;
            expect(await writtenFor(child)).toEqual({ jobs: 1, edges: 1, checks: 0 });
            if (name === 'prune') {
              // the dependency is done: pending at the commit
              expect(await stateOf(db, id)).toEqual({ status: 'pending', depsLeft: 0 });
            } else {
              // still running: waiting; its completion keeps it (it has a dependent) and unblocks
              expect(await stateOf(db, id)).toEqual({ status: 'waiting', depsLeft: 1 });
              expect(await queue.complete(lease, { v: 1 })).toBe(true);
              expect(await stateOf(db, id)).toEqual({ status: 'pending', depsLeft: 0 });
            }
            expect(await engineOf(queue).flows.dependencies(id)).toEqual({
              [lease.id]: { id: lease.id, status: 'done', result: { v: 1 } },
            });
            await runToEnd(queue, child, id);
          }
        });
      }
    }
  }
});

describe('prune while a dead dependent of a done job is requeued', () => {
  // Break: 'dead' left out of DEPENDENTS_DONE's statuses (store/admin.ts): prune deleted the
  // done dependency of the dead dependent, which a requeue was bringing back (both tests: the
  // dependency gone after the prune; requeued, the dependent would run with ctx.dependencies()
  // empty).
  for (const held of [false, true]) {
    test(`${held ? 'the requeue held open across the prune' : 'prune, then the requeue'}: the dependent runs with its dependency's result`, async () => {
      const queue = db.queue({ poolSize: 4 });
      const task = fresh('dep');
      const child = fresh('child');
      const { id: parent } = await queue.enqueue(task, null);
      const { id: dependent } = await queue.enqueue(child, null, { dependsOn: [parent], maxAttempts: 1 });
      await runToEnd(queue, task, parent, { v: 'parent' });
      expect(await queue.fail(await claimOne(queue, child), new PermanentError('boom'))).toBe('dead');
      const tx = held ? await openTransaction(db) : null;
      if (tx)
        expect((await engineOf(queue).store.admin.requeue(tx.client, dependent))?.after).toBe('pending');
      // done, old enough; its dependent dead (a requeue runs it again): kept
      expect(await settledWithin(queue.prune({ olderThanMs: 0, statuses: ['done'] }), 5_000)).toMatchObject({
        status: 'fulfilled',
      });
      if (tx) await tx.commit();
      else expect(await queue.requeue(dependent)).toBe(true);
      expect(await stateOf(db, parent)).toMatchObject({ status: 'done' });
      expect(await stateOf(db, dependent)).toEqual({ status: 'pending', depsLeft: 0 });
      const lease = await claimOne(queue, child);
      expect(await engineOf(queue).flows.dependencies(lease.id)).toEqual({
        [parent]: { id: parent, status: 'done', result: { v: 'parent' } },
      });
      expect(await queue.complete(lease, null)).toBe(true);
      // nobody needs it any more: both go
      await queue.prune({ olderThanMs: 0, statuses: ['done'] });
      expect([await stateOf(db, parent), await stateOf(db, dependent)]).toEqual([null, null]);
    });
  }
});

describe("other transitions of a dependency while the caller's transaction that adds its dependent is open", () => {
  // Break: the constraint trigger dependencies_committed not deferred (NOT DEFERRABLE: it ran at
  // the INSERT, deciding from the dependency's status then, and held the dependency's lock from
  // then on): cancelRunning and release waited for the caller's commit (still pending after 5 s),
  // requeueDead passed the locked dependency by (requeued 0) — every test of this block.

  async function runningDependency(queue: Queue, task: string) {
    await queue.enqueue(task, null, { maxAttempts: 1 });
    return claimOne(queue, task);
  }

  test('cancelRunning (a cancelled job aborted by its worker): the dependent is cancelled at the commit', async () => {
    const queue = db.queue({ poolSize: 4 });
    const task = fresh('dep');
    const lease = await runningDependency(queue, task);
    const tx = await openTransaction(db);
    const { id: child } = await queue.enqueue(fresh('child'), null, {
      dependsOn: [lease.id],
      client: tx.client,
    });
    expect(await queue.cancel(lease.id)).toBe(true); // requested: it is running
    const cancelling = engineOf(queue).store.outcome.cancelRunning(engineOf(queue).pool, lease, 'Cancelled');
    expect(await settledWithin(cancelling, 5_000)).toEqual({ status: 'fulfilled', value: true });
    await tx.commit();
    expect((await stateOf(db, lease.id))?.status).toBe('cancelled');
    expect(await stateOf(db, child)).toEqual({ status: 'cancelled', depsLeft: 1 });
    expect((await queue.get(child))?.lastError).toMatch(`job ${lease.id}, which it depends on, is cancelled`);
  });

  test('release of a job whose cancel was requested: the dependent is cancelled at the commit', async () => {
    const queue = db.queue({ poolSize: 4 });
    const lease = await runningDependency(queue, fresh('dep'));
    const tx = await openTransaction(db);
    const { id: child } = await queue.enqueue(fresh('child'), null, {
      dependsOn: [lease.id],
      client: tx.client,
    });
    expect(await queue.cancel(lease.id)).toBe(true);
    expect(await settledWithin(queue.release(lease), 5_000)).toEqual({ status: 'fulfilled', value: true });
    await tx.commit();
    expect((await stateOf(db, lease.id))?.status).toBe('cancelled');
    expect(await stateOf(db, child)).toEqual({ status: 'cancelled', depsLeft: 1 });
  });

  test('requeueDead of the dead dependency: the dependent waits for it and runs once it is done', async () => {
    const queue = db.queue({ poolSize: 4 });
    const task = fresh('dep');
    const lease = await runningDependency(queue, task);
    expect(await queue.fail(lease, new PermanentError('boom'))).toBe('dead');
    const tx = await openTransaction(db);
    const childTask = fresh('child');
    const { id: child } = await queue.enqueue(childTask, null, { dependsOn: [lease.id], client: tx.client });
    expect(await settledWithin(queue.requeueDead({ task }), 5_000)).toEqual({
      status: 'fulfilled',
      value: { requeued: 1, skipped: 0 },
    });
    await tx.commit();
    expect(await stateOf(db, child)).toEqual({ status: 'waiting', depsLeft: 1 });
    await runToEnd(queue, task, lease.id, 2);
    expect(await stateOf(db, child)).toEqual({ status: 'pending', depsLeft: 0 });
    await runToEnd(queue, childTask, child);
  });
});

describe("a dead dependent's requeue while its dependency's requeue is in flight", () => {
  // Break: the requeue's status decided from the snapshot's counter (`CASE WHEN (SELECT x.deps_left
  // FROM jobs AS x WHERE x.id = j.id) > 0` instead of the locked row's deps_left): the requeue
  // that waited for the dependency's made the dependent pending while its dependency was pending
  // again — it ran before it (status pending, depsLeft 1).
  test("onDependencyFailure 'run': the dependent goes back to waiting, and runs after its dependency", async () => {
    const queue = db.queue({ poolSize: 4 });
    const task = fresh('dep');
    const childTask = fresh('child');
    await queue.enqueue(task, null, { maxAttempts: 1 });
    const lease = await claimOne(queue, task);
    const { id: child } = await queue.enqueue(childTask, null, {
      dependsOn: [lease.id],
      onDependencyFailure: 'run',
      maxAttempts: 1,
    });
    expect(await queue.fail(lease, new PermanentError('boom'))).toBe('dead');
    // it runs anyway, and dies too
    expect(await queue.fail(await claimOne(queue, childTask), new PermanentError('boom'))).toBe('dead');
    // the dependency's requeue in flight: its trigger has counted the dependent up (and holds it)
    const tx = await openTransaction(db);
    expect((await engineOf(queue).store.admin.requeue(tx.client, lease.id))?.after).toBe('pending');
    const requeueing = queue.requeue(child);
    await untilLockWaiters(db, 1);
    await tx.commit();
    expect(await requeueing).toBe(true);
    expect(await stateOf(db, child)).toEqual({ status: 'waiting', depsLeft: 1 });
    expect(await queue.claim('w', { tasks: [childTask] })).toEqual([]);
    await runToEnd(queue, task, lease.id);
    expect(await stateOf(db, child)).toEqual({ status: 'pending', depsLeft: 0 });
    await runToEnd(queue, childTask, child);
  });
});

describe('the answer of a requeue that makes the job waiting', () => {
  // Found by the test above: the requeue statements make a dead job whose dependency is not done
  // `waiting` (SPEC §10), but queue.requeue() answered false for it, requeueOrThrow() said
  // 'pending', and requeueDead()'s one-job-at-a-time fallback did not count it (all three failed
  // before the fix: false, 'pending', { requeued: 0, skipped: 1 }).
  test('requeue, requeueOrThrow and requeueDead (its one-by-one fallback too) count it as requeued', async () => {
    const queue = db.queue({ poolSize: 4 });
    const task = fresh('dep');
    const childTask = fresh('child');
    await queue.enqueue(task, null, { maxAttempts: 1 });
    const lease = await claimOne(queue, task);
    const children = await queue.enqueueMany(
      [0, 1, 2].map(() => ({
        task: childTask,
        payload: null,
        dependsOn: [lease.id],
        onDependencyFailure: 'run' as const,
        maxAttempts: 1,
      })),
    );
    expect(await queue.fail(lease, new PermanentError('boom'))).toBe('dead');
    for (const _ of children) {
      expect(await queue.fail(await claimOne(queue, childTask), new PermanentError('boom'))).toBe('dead');
    }
    expect(await queue.requeue(lease.id)).toBe(true); // the dependency: pending, its dependents counted up
    const [a, b, c] = children.map((r) => r.id) as [string, string, string];
    expect(await queue.requeue(a)).toBe(true);
    expect(await queue.requeueOrThrow(b)).toEqual({ id: b, status: 'waiting' });
    // a dead job of the batch whose dedupe key is active again: the batch goes one job at a time
    await queue.enqueue(childTask, null, { dedupeKey: `${childTask}.key`, maxAttempts: 1 });
    expect(await queue.fail(await claimOne(queue, childTask), new PermanentError('boom'))).toBe('dead');
    await queue.enqueue(fresh('holder'), null, { dedupeKey: `${childTask}.key` });
    expect(await queue.requeueDead({ task: childTask })).toEqual({ requeued: 1, skipped: 1 });
    for (const id of [a, b, c]) expect(await stateOf(db, id)).toEqual({ status: 'waiting', depsLeft: 1 });
    await runToEnd(queue, task, lease.id);
    for (const id of [a, b, c]) expect(await stateOf(db, id)).toEqual({ status: 'pending', depsLeft: 0 });
  });
});

describe('cancel of a waiting job while its last dependency completes', () => {
  // Both serialise on the dependent's row (unblock_dependents locks it in a statement of its
  // own, the cancel in its `target`), and each decides on the version the other left. Breaks:
  // cancel's `target` without its lock — still green (its UPDATE waits for the row and re-checks
  // it); unblock_dependents reading the dependent's status by a subquery of its UPDATE — still
  // green (the PERFORM before it waited, so that statement's snapshot is newer than the cancel);
  // that subquery with the PERFORM removed too — the completion that waited for the cancel made
  // the cancelled dependent pending again ("the cancel held open commits": pending, not cancelled).
  for (const first of ['completion', 'cancel'] as const) {
    for (const end of ['commits', 'rolls back'] as const) {
      test(`the ${first} held open ${end}: the dependent ends cancelled or pending, its counter exact`, async () => {
        const queue = db.queue({ poolSize: 4 });
        const task = fresh('dep');
        const childTask = fresh('child');
        await queue.enqueue(task, null);
        const lease = await claimOne(queue, task);
        const { id: child } = await queue.enqueue(childTask, null, { dependsOn: [lease.id] });
        const tx = await openTransaction(db);
        let second: Promise<unknown>;
        if (first === 'completion') {
          expect(await queue.complete(lease, 1, { client: tx.client })).toBe(true);
          second = queue.cancel(child);
        } else {
          expect((await engineOf(queue).store.admin.cancel(tx.client, child))?.after).toBe('cancelled');
          second = queue.complete(lease, 1);
        }
        await untilLockWaiters(db, 1);
        if (end === 'commits') await tx.commit();
        else await tx.rollback();
        const answer = await second;
        const parent = await stateOf(db, lease.id);
        const state = await stateOf(db, child);
        if (first === 'completion') {
          expect(answer).toBe(true); // waiting or pending: cancelled either way
          expect(parent?.status).toBe(end === 'commits' ? 'done' : 'running');
          expect(state).toEqual({ status: 'cancelled', depsLeft: end === 'commits' ? 0 : 1 });
          if (end === 'rolls back') expect(await queue.complete(lease, 1)).toBe(true);
          expect(await stateOf(db, child)).toEqual({ status: 'cancelled', depsLeft: 0 });
        } else {
          expect(answer).toBe(true);
          expect(parent?.status).toBe('done');
          if (end === 'commits') {
            expect(state).toEqual({ status: 'cancelled', depsLeft: 0 });
          } else {
            expect(state).toEqual({ status: 'pending', depsLeft: 0 });
            await runToEnd(queue, childTask, child);
          }
        }
        expect(await queue.claim('w', { tasks: [childTask] })).toEqual([]);
      });
    }
  }
});
