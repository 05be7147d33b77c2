/**
 * Admin: requeue and cancel decided on the locked row, and deleting finished jobs in batches.
 * Each statement is defined next to the method that binds its parameters; the quoted schema is
 * spliced once, everything else is a parameter.
 */
import type { Executor } from '../db/executor.js';
import { DatabaseError, DedupeConflictError } from '../errors.js';
import type { JobStatus } from '../types.js';
import { notePrune, UNCHANGED_SINCE_SNAPSHOT } from './fragments.js';
import { StatementFamily } from './runner.js';

/** A job's status before and after a one-statement transition (`after` null: it did not apply). */
export interface Transition {
  before: JobStatus;
  after: JobStatus | null;
}

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function adminSql(s: string) {
  const jobs = `${s}.jobs`;
  /**
   * §10 a finished job may be deleted once no dependent of it can still run: its dependents read
   * its status and result (ctx.dependencies), and a requeue of it brings back what it cancelled
   * — nor can one that a requeue can bring back: a dead one, or one that a dependency's failure
   * cancelled. Read from the statement's snapshot: the statements lock their victims FOR UPDATE
   * SKIP LOCKED (a job that an open enqueue depends on holds FOR KEY SHARE: passed by) and keep a
   * row whose version changed since the snapshot (the commit of a new dependent marks it), see
   * UNCHANGED_SINCE_SNAPSHOT.
   */
  const DEPENDENTS_DONE = (alias: string) => `(NOT ${alias}.has_dependents OR (NOT EXISTS (
          SELECT 1 FROM ${s}.job_dependencies AS d JOIN ${jobs} AS c ON c.id = d.job_id
          WHERE d.depends_on = ${alias}.id
            AND (c.status IN ('waiting', 'pending', 'running', 'dead') OR c.cancelled_by IS NOT NULL))
          AND ${UNCHANGED_SINCE_SNAPSHOT(s, alias)}))`;
  return {
    /**
     * §1.2 dead → pending with attempts reset (§1.8); §1.9 wakes workers. One statement that
     * locks the row first and decides on the locked (latest committed) status, so "unknown",
     * "not dead: it is <status>" and "requeued" are one answer from the primary, never a read
     * followed by a write. No row: unknown id; `after` null: the transition did not apply.
     * §8 a dead job of a key of scope 'pending' goes back under the key's lock (taken after the
     * row's, and only for a dead job), so a job of the key that a worker puts back meanwhile sees
     * it; a key already queued is a unique violation (DedupeConflictError), as for §1.7.
     * $1 id, $2 channel.
     */
    requeue: `
      WITH target AS MATERIALIZED (
        SELECT id, status, pending_key FROM ${jobs} WHERE id = $1 FOR NO KEY UPDATE
      ), key_locks AS MATERIALIZED (
        SELECT pg_advisory_xact_lock(${s}.pending_lock_id(t.pending_key)) FROM target AS t
        WHERE t.status = 'dead' AND t.pending_key IS NOT NULL
      ), requeued AS (
        UPDATE ${jobs} AS j SET
          -- §10 back to waiting when a dependency of it is not done (one was requeued meanwhile)
          status = CASE WHEN deps_left > 0 THEN 'waiting' ELSE 'pending' END, attempts = 0, run_after = now(),
          lease_until = NULL, worker_id = NULL,
          run_started_at = NULL, cancel_requested_at = NULL, updated_at = now()
        FROM target AS t
        WHERE j.id = t.id AND t.status = 'dead' AND (SELECT count(*) FROM key_locks) >= 0
        RETURNING j.id, j.status
      )
      SELECT t.status AS before, r.status AS after,
             CASE WHEN r.id IS NOT NULL THEN pg_notify($2, 'jobs') END AS notified
      FROM target AS t LEFT JOIN requeued AS r ON r.id = t.id`,

    /**
     * §1.2 one keyset batch of dead → pending (attempts reset, §1.8), optionally of one task;
     * SKIP LOCKED so it never waits on a row another transition holds; §8 the locks of its keys
     * of scope 'pending' only tried (one of your transactions holding a key it enqueued and
     * waiting for another would otherwise deadlock with this one): when one is taken, nothing is
     * requeued and `busy` says so (the caller goes one job at a time); §1.9 one NOTIFY.
     * $1 task (or null), $2 after id, $3 batch size, $4 channel.
     */
    requeueDeadBatch: `
      WITH picked AS MATERIALIZED (
        SELECT id, pending_key FROM ${jobs}
        WHERE status = 'dead' AND ($1::text IS NULL OR task = $1) AND id > $2::bigint
        ORDER BY id LIMIT $3
        FOR NO KEY UPDATE SKIP LOCKED
      ), key_locks AS MATERIALIZED (
        SELECT pg_try_advisory_xact_lock(k.lock_id) AS taken FROM (
          SELECT DISTINCT ${s}.pending_lock_id(p.pending_key) AS lock_id FROM picked AS p
          WHERE p.pending_key IS NOT NULL ORDER BY 1 OFFSET 0) AS k
      ), requeued AS (
        UPDATE ${jobs} SET
          -- §10 back to waiting when a dependency of it is not done (one was requeued meanwhile)
          status = CASE WHEN deps_left > 0 THEN 'waiting' ELSE 'pending' END, attempts = 0, run_after = now(),
          lease_until = NULL, worker_id = NULL,
          run_started_at = NULL, cancel_requested_at = NULL, updated_at = now()
        WHERE id IN (SELECT id FROM picked) AND status = 'dead'
          AND NOT EXISTS (SELECT 1 FROM key_locks WHERE NOT taken)
        RETURNING id
      ), notified AS (
        SELECT pg_notify($4, 'jobs') FROM (SELECT 1 FROM requeued LIMIT 1) AS any_requeued
      )
      SELECT (SELECT count(*) FROM requeued)::int AS requeued,
             (SELECT max(id) FROM picked)::text AS last_id,
             (SELECT array_agg(id::text) FROM picked) AS ids,
             (SELECT count(*) FROM key_locks WHERE NOT taken)::int AS busy,
             (SELECT count(*) FROM notified) AS notified`,

    /** The ids of one keyset batch of dead jobs (the one-by-one fallback of requeueDeadBatch). */
    deadIds: `
      SELECT j.id::text AS id FROM ${jobs} AS j
      WHERE j.status = 'dead' AND ($1::text IS NULL OR j.task = $1) AND j.id > $2::bigint
      ORDER BY j.id LIMIT $3 -- the bigint id, not the text alias`,

    /**
     * §1.2 pending (§10 or waiting) → cancelled at once, and what depends on it with it (the
     * trigger of migration 14); running → cancellation requested (flag, plus a NOTIFY
     * that the owning worker acts on); §11 the dead head of a sequence → cancelled (its key
     * moves on: the trigger of migration 19). Other finished jobs are left alone. The row is locked first and
     * the transition decided on the locked (latest committed) status, so the status before and
     * after come from one statement on the primary: no row is an unknown id, `after` null a job
     * already finished (`before` says how), `before` running a cancellation requested.
     * $1 id, $2 channel.
     */
    cancel: `
      WITH target AS MATERIALIZED (
        SELECT id, status, (status = 'dead' AND sequence IS NOT NULL) AS blocking
        FROM ${jobs} WHERE id = $1 FOR NO KEY UPDATE
      ), cancelled AS (
        UPDATE ${jobs} AS j SET
          status = CASE WHEN t.status IN ('pending', 'waiting') OR t.blocking THEN 'cancelled' ELSE j.status END,
          cancel_requested_at = CASE WHEN t.status = 'running' THEN coalesce(j.cancel_requested_at, now())
                                     ELSE j.cancel_requested_at END,
          updated_at = now()
        FROM target AS t
        WHERE j.id = t.id AND (t.status IN ('pending', 'running', 'waiting') OR t.blocking)
        RETURNING j.id, j.status
      )
      SELECT t.status AS before, c.status AS after,
             CASE WHEN c.status = 'running' THEN pg_notify($2, 'cancel:' || c.id) END AS notified
      FROM target AS t LEFT JOIN cancelled AS c ON c.id = t.id`,

    /**
     * Deletes one keyset batch of finished jobs (never an active one) older than $2 ms, after
     * id $3: many short transactions instead of one long one. SKIP LOCKED: it never waits on a
     * row another transaction holds (nor makes it wait); such a row is passed by. §7 notes the
     * prune's time for counts() (notePrune).
     */
    pruneBatch: `
      WITH victims AS MATERIALIZED (
        SELECT id FROM ${jobs}
        WHERE id > $3::bigint AND status = ANY($1::text[])
          AND updated_at < now() - $2::float8 * interval '1 millisecond' AND ${DEPENDENTS_DONE('jobs')}
        ORDER BY id
        LIMIT $4
        FOR UPDATE SKIP LOCKED -- a row changed meanwhile is re-checked by the lock itself
      ), deleted AS (
        DELETE FROM ${jobs} WHERE id IN (SELECT id FROM victims)
        RETURNING id
      ), noted AS (${notePrune(s)}
      )
      SELECT count(*)::int AS deleted, (SELECT max(id) FROM victims)::text AS last_id FROM deleted`,

    /**
     * §7 the background pruner (`retention.keepFinishedMs`): deletes up to $2 finished jobs last
     * updated more than $1 ms ago, oldest first, through jobs_finished_idx — cheap when nothing
     * is old enough, never a scan of the table. SKIP LOCKED: it never waits on a row someone
     * else holds (a requeue, an admin action), nor makes them wait; a row that changed before
     * its lock was taken is re-checked by the lock itself (only a still-finished, still-old row
     * is deleted).
     */
    pruneFinished: `
      WITH victims AS MATERIALIZED (
        SELECT id FROM ${jobs}
        WHERE status IN ('done', 'dead', 'cancelled')
          AND updated_at < now() - $1::float8 * interval '1 millisecond' AND ${DEPENDENTS_DONE('jobs')}
        ORDER BY updated_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      ), deleted AS (
        DELETE FROM ${jobs} WHERE id IN (SELECT id FROM victims) RETURNING id
      ), noted AS (${notePrune(s)}
      )
      SELECT count(*)::int AS deleted FROM deleted`,
  };
}

export class AdminStatements extends StatementFamily<ReturnType<typeof adminSql>> {
  /**
   * dead → pending, decided on the locked row: its status before, and after (`null`: not
   * requeued); `null` for an unknown id. A {@link DedupeConflictError} when another active job
   * holds its key.
   */
  async requeue(db: Executor, id: string): Promise<Transition | null> {
    try {
      const rows = await this.run<Transition>(db, this.sql.requeue, [id, this.channel]);
      return rows[0] ? { before: rows[0].before, after: rows[0].after } : null;
    } catch (error) {
      if (error instanceof DatabaseError && error.sqlState === '23505') {
        throw new DedupeConflictError(
          `Job ${id} cannot be requeued: another job holds its dedupe key (an active one, or a queued one for a key of scope 'pending'). Cancel or finish that job first`,
          null,
          { cause: error },
        );
      }
      throw error;
    }
  }

  /** Requeues one keyset batch of dead jobs; throws a DatabaseError 23505 when a key is taken. */
  async requeueDeadBatch(
    db: Executor,
    task: string | null,
    afterId: string,
    batchSize: number,
  ): Promise<{ requeued: number; lastId: string | null; busy: boolean }> {
    const rows = await this.run<{ requeued: number; last_id: string | null; busy: number }>(
      db,
      this.sql.requeueDeadBatch,
      [task, afterId, batchSize, this.channel],
    );
    return {
      requeued: Number(rows[0]?.requeued ?? 0),
      lastId: rows[0]?.last_id ?? null,
      busy: Number(rows[0]?.busy ?? 0) > 0,
    };
  }

  async deadIds(db: Executor, task: string | null, afterId: string, batchSize: number): Promise<string[]> {
    const rows = await this.run<{ id: string }>(db, this.sql.deadIds, [task, afterId, batchSize]);
    return rows.map((row) => String(row.id));
  }

  /**
   * pending → cancelled, running → cancellation requested, decided on the locked row: its status
   * before, and after (`null`: finished, left alone); `null` for an unknown id.
   */
  async cancel(db: Executor, id: string): Promise<Transition | null> {
    const rows = await this.run<Transition>(db, this.sql.cancel, [id, this.channel]);
    return rows[0] ? { before: rows[0].before, after: rows[0].after } : null;
  }

  /** Deletes up to `batchSize` finished jobs after id `afterId`; returns the count and the cursor. */
  async pruneBatch(
    db: Executor,
    statuses: readonly string[],
    olderThanMs: number,
    afterId: string,
    batchSize: number,
  ): Promise<{ deleted: number; lastId: string | null }> {
    const rows = await this.run<{ deleted: number; last_id: string | null }>(db, this.sql.pruneBatch, [
      statuses,
      olderThanMs,
      afterId,
      batchSize,
    ]);
    return { deleted: Number(rows[0]?.deleted ?? 0), lastId: rows[0]?.last_id ?? null };
  }

  /** Deletes up to `limit` finished jobs older than `olderThanMs` (the background pruner); returns how many. */
  async pruneFinished(db: Executor, olderThanMs: number, limit: number): Promise<number> {
    const rows = await this.run<{ deleted: number }>(db, this.sql.pruneFinished, [olderThanMs, limit]);
    return Number(rows[0]?.deleted ?? 0);
  }
}
