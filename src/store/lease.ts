/**
 * Leases: the heartbeat, the row lock of ctx.transaction, and recovery of expired leases (§1.3,
 * §1.5). Each statement is defined next to the method that binds its parameters; the quoted
 * schema is spliced once, everything else is a parameter.
 */
import type { Executor } from '../db/executor.js';
import type { Lease } from '../types.js';
import { HOLDER, LEASE_GUARD, OPAQUE_RUNNING, SUPERSEDED, TOOK_OVER } from './fragments.js';
import { leaseKey, leaseValues, StatementFamily } from './runner.js';

/** What a heartbeat learned about one lease. */
export interface LeaseRenewal {
  state: 'renewed' | 'busy' | 'lost';
  /** `queue.cancel(id)` was called while it ran (known only when renewed). */
  cancelRequested: boolean;
}

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function leaseSql(s: string) {
  const jobs = `${s}.jobs`;
  return {
    /**
     * §1.2/§1.3 locks the job's row under its lease, inside the caller's transaction (the
     * worker's ctx.transaction, before the handler's function runs): no row means the lease is
     * gone. While the lock is held nobody can reap or complete the job.
     */
    lockLease: `SELECT id FROM ${jobs} WHERE ${LEASE_GUARD} FOR NO KEY UPDATE`,

    /**
     * §1.3 heartbeat for the lease's owner only; §1.4 database time. Touches only lease_until
     * (no indexed column), so it can be a HOT update.
     */
    renewLease: `
      UPDATE ${jobs} SET lease_until = now() + $5::float8 * interval '1 millisecond'
      WHERE ${LEASE_GUARD}
      RETURNING id`,

    /**
     * §1.3 the heartbeat of a whole worker in one statement: renews each lease it still holds,
     * in database time (§1.4), and reports per lease `renewed`, or `owned` without `renewed`
     * (busy: the row is locked by another transaction — e.g. the job's own ctx.transaction — and
     * was skipped, never waited for, so one locked row cannot stall every lease of the worker),
     * or neither (lost). Also reports whether cancellation was requested, so a lost NOTIFY
     * cannot hide a cancel. Rows are locked in id order (no deadlock with other batches).
     * $1 worker_id, $2 ids, $3 attempts, $4 tokens, $5 lease ms.
     */
    renewLeases: `
      WITH held AS MATERIALIZED (
        SELECT l.id, l.attempt, l.token FROM unnest($2::bigint[], $3::int[], $4::bigint[]) AS l(id, attempt, token)
      ), locked AS MATERIALIZED (
        SELECT j.id FROM ${jobs} AS j JOIN held AS h ON j.id = h.id
        WHERE ${OPAQUE_RUNNING} AND j.worker_id = $1 AND j.attempts = h.attempt AND j.claims = h.token
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
      ), renewed AS (
        UPDATE ${jobs} AS j SET lease_until = now() + $5::float8 * interval '1 millisecond'
        FROM locked WHERE j.id = locked.id
        RETURNING j.id, j.claims, (j.cancel_requested_at IS NOT NULL) AS cancel_requested
      )
      SELECT h.id::text AS id, h.token::text AS token, (r.id IS NOT NULL) AS renewed,
             coalesce(r.cancel_requested, false) AS cancel_requested,
             (r.id IS NOT NULL OR EXISTS (
                SELECT 1 FROM ${jobs} AS j
                WHERE j.id = h.id AND ${OPAQUE_RUNNING} AND j.worker_id = $1 AND j.claims = h.token
             )) AS owned
      FROM held AS h LEFT JOIN renewed AS r ON r.id = h.id AND r.claims = h.token -- per claim, not per job`,

    /**
     * §9 a handler's progress, for the lease's owner only (§1.2/§1.3), renewing the lease as the
     * heartbeat does (§1.4 database time): the row lock this write holds for a moment may make a
     * heartbeat skip the row, and this is that beat's renewal. The row is taken with SKIP LOCKED
     * (a row locked by another transaction is not waited for; no row: busy or not the owner's —
     * the caller keeps the value for its next write). Touches no indexed column and not
     * updated_at (progress is not a transition). $5 progress (JSON text), $6 lease ms.
     */
    writeProgress: `
      WITH locked AS MATERIALIZED (
        SELECT id FROM ${jobs} WHERE ${LEASE_GUARD} FOR NO KEY UPDATE SKIP LOCKED
      )
      UPDATE ${jobs} AS j SET progress = $5::jsonb, lease_until = now() + $6::float8 * interval '1 millisecond'
      FROM locked WHERE j.id = locked.id
      RETURNING j.id`,

    /**
     * §9 the last progress of an attempt, before its outcome or inside its ctx.transaction
     * (whose lock it then already holds): as writeProgress, but waits for the row (§1.2/§1.3).
     */
    writeProgressWaiting: `
      UPDATE ${jobs} SET progress = $5::jsonb, lease_until = now() + $6::float8 * interval '1 millisecond'
      WHERE ${LEASE_GUARD}
      RETURNING id`,

    /**
     * §1.5 recovery by lease ownership: only leases expired in database time (§1.4) are
     * reclaimed; SKIP LOCKED so concurrent reapers never block each other or an owner that is
     * finishing; the outer WHERE re-checks (§1.2). A crash spends the attempt (poison jobs die).
     * §8 a job of a key of scope 'pending' whose next job is already queued is cancelled as
     * superseded, and the queued job continues its attempt count (as in fail); the key's lock is
     * only tried (its owner may hold it, finishing the job, and wait for this row): a job whose
     * key is busy is left for the next pass.
     * $1 channel.
     */
    reap: `
      WITH expired AS MATERIALIZED (
        SELECT id, pending_key, attempts, max_attempts, cancel_requested_at FROM ${jobs}
        WHERE status = 'running' AND lease_until < now()
        FOR NO KEY UPDATE SKIP LOCKED -- §10 not skipped for an enqueue's FOR KEY SHARE (migration 15)
      ), ${HOLDER(
        s,
        '(SELECT * FROM expired WHERE attempts < max_attempts AND cancel_requested_at IS NULL)',
        false,
        `NULL::timestamptz, k.attempts, ${TOOK_OVER('k.id', 'k.attempts', "'LeaseExpired'::text")}`,
      )}, reaped AS (
        UPDATE ${jobs} AS j SET
          status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                        WHEN j.attempts >= j.max_attempts THEN 'dead'
                        WHEN h.id IS NOT NULL THEN 'cancelled' ELSE 'pending' END,
          run_after = now(),
          -- §8 a superseded job's reason first (lists and logs show a last_error's first line)
          last_error = CASE WHEN h.id IS NOT NULL AND j.cancel_requested_at IS NULL AND j.attempts < j.max_attempts
                            THEN ${SUPERSEDED('h.id', 'j.pending_key')} || E'\n' ELSE '' END
                       || format('LeaseExpired: the lease of worker %s on attempt %s of %s expired at %s; the job was reclaimed',
                                 j.worker_id, j.attempts, j.max_attempts, j.lease_until),
          lease_until = NULL, worker_id = NULL, updated_at = now()
        FROM expired AS e LEFT JOIN holder AS h ON h.job_id = e.id
        WHERE j.id = e.id AND j.status = 'running' AND j.lease_until < now()
          AND h.id IS DISTINCT FROM 0   -- the key's lock was taken: the next pass
        RETURNING j.id, j.status, j.pending_key
      ), notified AS (
        -- §1.9 jobs back to pending wake idle workers (not only the reaping one); §8 so does a
        -- job of a key of scope 'pending' that ended (the key's queued job may start)
        SELECT pg_notify($1, 'jobs')
        FROM (SELECT 1 FROM reaped WHERE status = 'pending' OR pending_key IS NOT NULL LIMIT 1) AS any_pending
      )
      SELECT id::text AS id, (SELECT count(*) FROM notified) AS notified FROM reaped`,
  };
}

export class LeaseStatements extends StatementFamily<ReturnType<typeof leaseSql>> {
  /**
   * Locks the job's row under `lease` inside the caller's transaction (`db` must be its
   * client); false when the lease no longer owns the job.
   */
  async lockLease(db: Executor, lease: Lease): Promise<boolean> {
    const rows = await this.run(db, this.sql.lockLease, leaseValues(lease));
    return rows.length === 1;
  }

  async renewLease(db: Executor, lease: Lease, leaseMs: number): Promise<boolean> {
    const rows = await this.run(db, this.sql.renewLease, [...leaseValues(lease), leaseMs]);
    return rows.length === 1;
  }

  /**
   * Renews every listed lease of `workerId` (each must be one of its own); answers per lease, in
   * input order: `renewed`, `busy` (still its own, but its row is locked by another transaction
   * and was skipped rather than waited for) or `lost`, with the cancel flag of renewed ones.
   */
  async renewLeases(
    db: Executor,
    workerId: string,
    leases: readonly Lease[],
    leaseMs: number,
  ): Promise<LeaseRenewal[]> {
    if (leases.length === 0) return [];
    const rows = await this.run<{
      id: string;
      token: string;
      renewed: boolean;
      owned: boolean;
      cancel_requested: boolean;
    }>(db, this.sql.renewLeases, [
      workerId,
      leases.map((l) => l.id),
      leases.map((l) => l.attempt),
      leases.map((l) => l.token),
      leaseMs,
    ]);
    const answers = new Map(rows.map((row) => [`${row.id}/${row.token}`, row]));
    return leases.map((lease) => {
      const row = answers.get(leaseKey(lease));
      const state = row?.renewed ? 'renewed' : row?.owned ? 'busy' : 'lost';
      return { state, cancelRequested: row?.cancel_requested === true };
    });
  }

  /**
   * Stores a handler's progress under its lease and renews the lease; false when the lease is
   * not the owner's, or (unless `wait`) when the row was locked by another transaction.
   */
  async writeProgress(
    db: Executor,
    lease: Lease,
    progressJson: string,
    leaseMs: number,
    wait: boolean,
  ): Promise<boolean> {
    const text = wait ? this.sql.writeProgressWaiting : this.sql.writeProgress;
    const rows = await this.run(db, text, [...leaseValues(lease), progressJson, leaseMs]);
    return rows.length === 1;
  }

  async reap(db: Executor): Promise<string[]> {
    const rows = await this.run<{ id: string }>(db, this.sql.reap, [this.channel]);
    return rows.map((row) => String(row.id));
  }
}
