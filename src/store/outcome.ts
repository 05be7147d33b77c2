/**
 * Outcomes: every owner transition that ends a claim — done (or deleted and counted), retry or
 * dead, cancelled, released — each a compare-and-set on the lease (§1.2, §1.3). Each statement is
 * defined next to the method that binds its parameters; the quoted schema is spliced once,
 * everything else is a parameter.
 */
import type { Executor } from '../db/executor.js';
import type { Lease } from '../types.js';
import { countDeleted, LEASE_GUARD, OPAQUE_RUNNING } from './fragments.js';
import { byId, leaseKey, leaseValues, type Runner, StatementFamily } from './runner.js';

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function outcomeSql(s: string) {
  const jobs = `${s}.jobs`;
  return {
    /** §1.2/§1.3 running → done, only under the lease (all four fields). $5 result. */
    complete: `
      UPDATE ${jobs} SET status = 'done', result = $5::jsonb, lease_until = NULL, worker_id = NULL,
                         updated_at = now()
      WHERE ${LEASE_GUARD}
      RETURNING id`,

    /**
     * §1.2/§1.3 running → deleted (`retention: { completed: 'delete' }`), only under the lease;
     * §7 counted in the same transaction. A deleted job keeps no result.
     */
    completeDelete: `
      WITH done AS (
        DELETE FROM ${jobs} WHERE ${LEASE_GUARD}
        RETURNING id
      ), counted AS (${countDeleted(s, 'done')}
      )
      SELECT id::text AS id, (SELECT count(*) FROM counted) AS counted FROM done`,

    /**
     * §1.2/§1.3 as completeMany, deleting instead of keeping a done row; §7 counted in the same
     * statement. $1 ids, $2 worker ids, $3 attempts, $4 tokens.
     */
    completeManyDelete: `
      WITH done AS (
        DELETE FROM ${jobs} AS j
        USING unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[]) AS c(id, worker_id, attempt, token)
        WHERE j.id = c.id AND ${OPAQUE_RUNNING} AND j.worker_id = c.worker_id AND j.attempts = c.attempt
          AND j.claims = c.token
        RETURNING j.id, c.token
      ), counted AS (${countDeleted(s, 'done')}
      )
      SELECT id::text AS id, token::text AS token, (SELECT count(*) FROM counted) AS counted FROM done`,

    /**
     * §1.2/§1.3 many completions in one statement, each row guarded by its own lease: a lease
     * that no longer owns its job completes nothing. Returns the (id, token) of each lease that
     * completed, so a stale and a live lease of one job get their own answers. Rows are found by
     * primary key (see OPAQUE_RUNNING).
     * $1 ids, $2 worker ids, $3 attempts, $4 tokens, $5 results (JSON text).
     */
    completeMany: `
      UPDATE ${jobs} AS j SET status = 'done', result = c.result::jsonb, lease_until = NULL, worker_id = NULL,
                              updated_at = now()
      FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::text[])
           AS c(id, worker_id, attempt, token, result)
      WHERE j.id = c.id AND ${OPAQUE_RUNNING} AND j.worker_id = c.worker_id AND j.attempts = c.attempt
        AND j.claims = c.token
      RETURNING j.id::text AS id, c.token::text AS token`,

    /**
     * §1.2/§1.3 running → pending (retry at now() + $5 ms, §1.4) or dead when attempts are
     * spent (§1.8, keeping last_error); cancelled instead when cancellation was requested
     * meanwhile, so a failing handler cannot make a cancelled job run again. §2 worker_id only
     * while running. $5 error text, $6 retry delay ms.
     */
    fail: `
      UPDATE ${jobs} SET
        status = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                      WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
        run_after = CASE WHEN attempts >= max_attempts OR cancel_requested_at IS NOT NULL THEN run_after
                         ELSE now() + $6::float8 * interval '1 millisecond' END,
        last_error = $5, lease_until = NULL, worker_id = NULL, updated_at = now()
      WHERE ${LEASE_GUARD}
      RETURNING status`,

    /**
     * §1.2/§1.3 running → cancelled for the owner of a job whose cancellation was requested,
     * once its handler has been aborted. $5 note stored as last_error.
     */
    cancelRunning: `
      UPDATE ${jobs} SET status = 'cancelled', lease_until = NULL, worker_id = NULL, last_error = $5,
                         updated_at = now()
      WHERE ${LEASE_GUARD} AND cancel_requested_at IS NOT NULL
      RETURNING id`,

    /**
     * §1.3 running → pending without spending the attempt (shutdown); the claim token is not
     * given back, so this lease stays dead forever. A job whose cancellation was requested ends
     * cancelled instead of running again. $5 channel.
     */
    release: `
      WITH released AS (
        UPDATE ${jobs} SET
          status = CASE WHEN cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
          attempts = attempts - 1, lease_until = NULL, worker_id = NULL, run_started_at = NULL,
          updated_at = now()
        WHERE ${LEASE_GUARD}
        RETURNING id, status
      )
      -- §1.9 a job put back wakes an idle worker (a rolling deploy hands work over at once)
      SELECT id, CASE WHEN status = 'pending' THEN pg_notify($5, 'jobs') END AS notified FROM released`,

    /**
     * §1.3 release for many leases in one statement (a stopping worker's held jobs): each row
     * guarded by its own lease, rows found by primary key (see OPAQUE_RUNNING); §1.9 one NOTIFY
     * when any job went back to pending. Returns the (id, token) of each lease released.
     * $1 ids, $2 worker ids, $3 attempts, $4 tokens, $5 channel.
     */
    releaseMany: `
      WITH released AS (
        UPDATE ${jobs} AS j SET
          status = CASE WHEN j.cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
          attempts = j.attempts - 1, lease_until = NULL, worker_id = NULL, run_started_at = NULL,
          updated_at = now()
        FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[]) AS r(id, worker_id, attempt, token)
        WHERE j.id = r.id AND ${OPAQUE_RUNNING} AND j.worker_id = r.worker_id AND j.attempts = r.attempt
          AND j.claims = r.token
        RETURNING j.id, r.token, j.status
      ), notified AS (
        SELECT pg_notify($5, 'jobs') FROM (SELECT 1 FROM released WHERE status = 'pending' LIMIT 1) AS any_pending
      )
      SELECT id::text AS id, token::text AS token, (SELECT count(*) FROM notified) AS notified FROM released`,
  };
}

export class OutcomeStatements extends StatementFamily<ReturnType<typeof outcomeSql>> {
  /**
   * @param deleteCompleted `retention: { completed: 'delete' }`: completions delete the row and
   *   count it (§7).
   */
  constructor(
    runner: Runner,
    sql: ReturnType<typeof outcomeSql>,
    private readonly deleteCompleted: boolean,
  ) {
    super(runner, sql);
  }

  /** running → done (or deleted and counted, with `deleteCompleted`), under the lease. */
  async complete(db: Executor, lease: Lease, resultJson: string): Promise<boolean> {
    const rows = this.deleteCompleted
      ? await this.run(db, this.sql.completeDelete, leaseValues(lease))
      : await this.run(db, this.sql.complete, [...leaseValues(lease), resultJson]);
    return rows.length === 1;
  }

  /**
   * Completes many leases in one statement; answers per input item, in input order (SPEC §3):
   * a stale and a live lease of one job each get their own answer, and a lease listed twice
   * completes once (its first entry answers true).
   */
  async completeMany(
    db: Executor,
    batch: readonly { lease: Lease; resultJson: string }[],
  ): Promise<boolean[]> {
    const first = new Map<string, number>();
    batch.forEach((item, i) => {
      const key = leaseKey(item.lease);
      if (!first.has(key)) first.set(key, i);
    });
    const unique = [...first.values()].map((i) => batch[i] as { lease: Lease; resultJson: string });
    const items = byId(unique, (i) => i.lease.id); // one lock order for all batch statements: no deadlocks
    const leases = [
      items.map((i) => i.lease.id),
      items.map((i) => i.lease.workerId),
      items.map((i) => i.lease.attempt),
      items.map((i) => i.lease.token),
    ];
    const rows = this.deleteCompleted
      ? await this.run<{ id: string; token: string }>(db, this.sql.completeManyDelete, leases)
      : await this.run<{ id: string; token: string }>(db, this.sql.completeMany, [
          ...leases,
          items.map((i) => i.resultJson),
        ]);
    const completed = new Set(rows.map((row) => `${row.id}/${row.token}`));
    return batch.map(
      (item, i) => first.get(leaseKey(item.lease)) === i && completed.has(leaseKey(item.lease)),
    );
  }

  async fail(
    db: Executor,
    lease: Lease,
    errorText: string,
    retryInMs: number,
  ): Promise<'pending' | 'dead' | 'cancelled' | null> {
    const rows = await this.run<{ status: 'pending' | 'dead' | 'cancelled' }>(db, this.sql.fail, [
      ...leaseValues(lease),
      errorText,
      retryInMs,
    ]);
    return rows[0]?.status ?? null;
  }

  async cancelRunning(db: Executor, lease: Lease, note: string): Promise<boolean> {
    const rows = await this.run(db, this.sql.cancelRunning, [...leaseValues(lease), note]);
    return rows.length === 1;
  }

  async release(db: Executor, lease: Lease): Promise<boolean> {
    const rows = await this.run(db, this.sql.release, [...leaseValues(lease), this.channel]);
    return rows.length === 1;
  }

  /** Releases many leases in one statement; answers per input lease, in input order. */
  async releaseMany(db: Executor, leases: readonly Lease[]): Promise<boolean[]> {
    if (leases.length === 0) return [];
    const sorted = byId(leases, (lease) => lease.id); // one lock order for all batch statements
    const rows = await this.run<{ id: string; token: string }>(db, this.sql.releaseMany, [
      sorted.map((l) => l.id),
      sorted.map((l) => l.workerId),
      sorted.map((l) => l.attempt),
      sorted.map((l) => l.token),
      this.channel,
    ]);
    const released = new Set(rows.map((row) => `${row.id}/${row.token}`));
    return leases.map((lease) => released.has(leaseKey(lease)));
  }
}
