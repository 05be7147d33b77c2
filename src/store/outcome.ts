/**
 * Outcomes: every owner transition that ends a claim — done (or deleted and counted), retry or
 * dead, cancelled, released — each a compare-and-set on the lease (§1.2, §1.3). Each statement is
 * defined next to the method that binds its parameters; the quoted schema is spliced once,
 * everything else is a parameter.
 */
import type { Executor } from '../db/executor.js';
import type { Lease } from '../types.js';
import {
  countDeleted,
  HOLDER,
  LEASE_GUARD,
  OPAQUE_RUNNING,
  SUPERSEDED,
  TOOK_OVER,
  UNBLOCK,
} from './fragments.js';
import {
  byId,
  digitsArray,
  jsonArray,
  leaseKey,
  leaseValues,
  type Runner,
  StatementFamily,
  textArray,
} from './runner.js';

/** A batch of completions: each item's lease and its result as JSON text. */
type CompletionBatch = readonly { lease: Lease; resultJson: string }[];

/** Decimal strings of positive int8s without leading zeros: a shorter one is smaller, equal lengths compare as text. */
function decimal(x: string, y: string): number {
  return x.length - y.length || (x < y ? -1 : x > y ? 1 : 0);
}

function byLease(batch: CompletionBatch, a: number, b: number): number {
  const x = (batch[a] as CompletionBatch[number]).lease;
  const y = (batch[b] as CompletionBatch[number]).lease;
  return decimal(x.id, y.id) || decimal(x.token, y.token);
}

/**
 * The positions of the batch in job id order (one lock order for all batch statements: no
 * deadlocks), a lease listed twice kept once — its first entry, which alone answers true
 * (SPEC §3). Ids and tokens come from requireLease or the database. A batch already in order
 * (a worker's completions mostly are) is checked in one pass and not sorted; nothing is
 * allocated per item but its position.
 */
function uniqueOrder(batch: CompletionBatch): number[] {
  const order = new Array<number>(batch.length);
  let ascending = true;
  for (let i = 0; i < batch.length; i++) {
    order[i] = i;
    if (ascending && i > 0 && byLease(batch, i - 1, i) >= 0) ascending = false;
  }
  if (ascending) return order;
  order.sort((a, b) => byLease(batch, a, b) || a - b);
  return order.filter((position, i) => i === 0 || byLease(batch, order[i - 1] as number, position) !== 0);
}

/**
 * $1–$4 of the batch statements for the items at `positions`: ids, worker ids, attempts, tokens,
 * as array literals built in one pass (see digitsArray, textArray).
 */
function leaseArrays(batch: CompletionBatch, positions: readonly number[]): [string, string, string, string] {
  const leases = new Array<Lease>(positions.length);
  for (let i = 0; i < positions.length; i++)
    leases[i] = (batch[positions[i] as number] as CompletionBatch[number]).lease;
  return [
    digitsArray(leases.map((lease) => lease.id)),
    textArray(leases.map((lease) => lease.workerId)),
    digitsArray(leases.map((lease) => lease.attempt)),
    digitsArray(leases.map((lease) => lease.token)),
  ];
}

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function outcomeSql(s: string) {
  const jobs = `${s}.jobs`;
  return {
    /**
     * §1.2/§1.3 running → done, only under the lease (all four fields). §1.9/§8 a job of a key of
     * scope 'pending' wakes workers: the key's queued job may start now. $5 result, $6 channel.
     * No void column (pg_notify's is cast to text): it may run on an ORM's client, which may not
     * read one (Prisma, skiplock/adapters). §10 unblocks its dependents in its transaction, after
     * the job's lock (see UNBLOCK).
     */
    complete: `
      WITH done AS (
        UPDATE ${jobs} SET status = 'done', result = $5::jsonb, lease_until = NULL, worker_id = NULL,
                           updated_at = now()
        WHERE ${LEASE_GUARD}
        RETURNING id, pending_key, has_dependents
      ), ${UNBLOCK(s, 'done', '$6')}
      SELECT id, CASE WHEN pending_key IS NOT NULL THEN pg_notify($6, 'jobs')::text END AS notified,
             (SELECT count(*) FROM unblocked)::int AS unblocked
      FROM done`,

    /**
     * §1.2/§1.3 running → deleted (`retention: { completed: 'delete' }`), only under the lease;
     * §7 counted in the same transaction. A deleted job keeps no result. §8 wakes workers as
     * complete does. §10 never a job with dependents. $5 channel.
     */
    completeDelete: `
      WITH done AS (
        -- §10 a job with dependents is kept (their ctx.dependencies() reads its result): the
        -- caller completes it with complete instead. Marked when an enqueue of another
        -- transaction adds one (its lock makes this wait, and the re-check reads the mark); an
        -- edge added in this same transaction (ctx.transaction, a caller's client) is read here
        DELETE FROM ${jobs} AS j WHERE ${LEASE_GUARD} AND NOT has_dependents
          AND NOT EXISTS (SELECT 1 FROM ${s}.job_dependencies AS d WHERE d.depends_on = j.id)
        RETURNING id, pending_key
      ), counted AS (${countDeleted(s, 'done')}
      )
      SELECT id::text AS id, (SELECT count(*) FROM counted) AS counted,
             CASE WHEN pending_key IS NOT NULL THEN pg_notify($5, 'jobs')::text END AS notified
      FROM done`,

    /**
     * §1.2/§1.3 as completeMany, deleting instead of keeping a done row; §7 counted in the same
     * statement; §8 wakes workers as complete does. §10 never a job with dependents (the caller
     * completes those with completeMany). §11 with $6 true, never a job whose cancel was
     * requested (re-checked on the row once locked: a cancel that commits while this waits).
     * $1 ids, $2 worker ids, $3 attempts, $4 tokens, $5 channel, $6 uncancelled only.
     */
    completeManyDelete: `
      WITH done AS (
        DELETE FROM ${jobs} AS j
        USING unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[]) WITH ORDINALITY
              AS c(id, worker_id, attempt, token, ord)
        WHERE j.id = c.id AND ${OPAQUE_RUNNING} AND j.worker_id = c.worker_id AND j.attempts = c.attempt
          AND j.claims = c.token AND NOT j.has_dependents
          AND ($6::boolean IS NOT TRUE OR j.cancel_requested_at IS NULL)
        RETURNING c.ord, j.pending_key
      ), counted AS (${countDeleted(s, 'done')}
      )
      SELECT ord::int AS ord, (SELECT count(*) FROM counted) AS counted,
             CASE WHEN pending_key IS NOT NULL THEN pg_notify($5, 'jobs') END AS notified
      FROM done`,

    /**
     * §1.2/§1.3 many completions in one statement, each row guarded by its own lease: a lease
     * that no longer owns its job completes nothing. Returns the (id, token) of each lease that
     * completed, so a stale and a live lease of one job get their own answers. Rows are found by
     * primary key (see OPAQUE_RUNNING). §8 wakes workers as complete does (one NOTIFY per
     * transaction: PostgreSQL folds repeats). §10 unblocks the batch's dependents in its
     * transaction once it holds the batch's jobs: locked in id order, one counter update per
     * dependent (see UNBLOCK). Returns the position (1-based) of each lease that completed.
     * $1 ids, $2 worker ids, $3 attempts, $4 tokens (array literals), $5 the results (one JSON
     * array, in the same order), $6 channel, $7 (§11) true: never a job whose cancel was requested.
     */
    completeMany: `
      WITH done AS (
        UPDATE ${jobs} AS j SET status = 'done', result = $5::jsonb -> (c.ord::int - 1), lease_until = NULL,
                                worker_id = NULL, updated_at = now()
        FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[]) WITH ORDINALITY
             AS c(id, worker_id, attempt, token, ord)
        WHERE j.id = c.id AND ${OPAQUE_RUNNING} AND j.worker_id = c.worker_id AND j.attempts = c.attempt
          AND j.claims = c.token AND ($7::boolean IS NOT TRUE OR j.cancel_requested_at IS NULL)
        RETURNING c.ord, j.id, j.pending_key, j.has_dependents
      ), ${UNBLOCK(s, 'done', '$6')}, notified AS (
        SELECT pg_notify($6, 'jobs') FROM (SELECT 1 FROM done WHERE pending_key IS NOT NULL LIMIT 1) AS any_keyed
      )
      SELECT ord::int AS ord, (SELECT count(*) FROM notified) AS notified,
             (SELECT count(*) FROM unblocked)::int AS unblocked
      FROM done`,

    /**
     * §1.2/§1.3 running → pending (retry at now() + $5 ms, §1.4) or dead when attempts are
     * spent (§1.8, keeping last_error); cancelled instead when cancellation was requested
     * meanwhile, so a failing handler cannot make a cancelled job run again. §2 worker_id only
     * while running. §8 a retry of a key of scope 'pending' whose next job is already queued is
     * cancelled as superseded (one queued per key), decided under the key's lock, and the queued
     * job takes the retry over: it waits at least the backoff (a runaway's too) and continues the
     * attempt count, so a key whose work keeps failing still backs off and goes dead. The
     * takeover is decided on the failing row as it is once locked (`failing`, after the key's
     * lock and the queued job's, the one lock order): a cancel that committed while this waited
     * for the key wins, and the queued job takes nothing over (the snapshot taken before that wait
     * still showed no cancel). A job of such a key that ends wakes workers for the queued one.
     * §9 $8 true: dead at once (a PermanentError, retryIf false), whatever attempts are left.
     * $5 error text, $6 retry delay ms, $7 channel, $8 permanent.
     */
    fail: `
      WITH ${HOLDER(
        s,
        `(SELECT id, pending_key FROM ${jobs}
          WHERE ${LEASE_GUARD} AND cancel_requested_at IS NULL AND attempts < max_attempts AND NOT $8::boolean)`,
        true,
      )}, failing AS MATERIALIZED (
        -- the failing row when the key has a queued job, locked after the key's lock and the
        -- queued job's: as it is now
        SELECT id, pending_key, attempts, cancel_requested_at FROM ${jobs}
        WHERE ${LEASE_GUARD} AND EXISTS (SELECT 1 FROM holder WHERE holder.id IS NOT NULL)
        FOR NO KEY UPDATE
      ), took_over AS MATERIALIZED (
        -- the takeover by a second call (the key's lock is held already): its statements see the
        -- queued job even when it was committed after this statement's snapshot
        SELECT ${s}.pending_holder(f.pending_key, f.id, true, now() + $6::float8 * interval '1 millisecond',
                                   f.attempts, ${TOOK_OVER('f.id', 'f.attempts', '$5::text')}) AS id
        FROM failing AS f JOIN holder AS h ON h.job_id = f.id
        WHERE h.id IS NOT NULL AND f.cancel_requested_at IS NULL
      )
      UPDATE ${jobs} SET
        status = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                      WHEN attempts >= max_attempts OR $8::boolean THEN 'dead'
                      WHEN EXISTS (SELECT 1 FROM holder WHERE holder.id IS NOT NULL) THEN 'cancelled'
                      ELSE 'pending' END,
        run_after = CASE WHEN attempts >= max_attempts OR $8::boolean OR cancel_requested_at IS NOT NULL THEN run_after
                         ELSE now() + $6::float8 * interval '1 millisecond' END,
        last_error = CASE WHEN attempts >= max_attempts OR $8::boolean OR cancel_requested_at IS NOT NULL THEN $5
                          -- the reason first: lists and logs show a last_error's first line
                          ELSE coalesce((SELECT ${SUPERSEDED('holder.id', 'pending_key')} || E'\n'
                                         FROM holder WHERE holder.id IS NOT NULL), '') || $5 END,
        lease_until = NULL, worker_id = NULL, updated_at = now()
      WHERE ${LEASE_GUARD} AND (SELECT count(*) FROM took_over) >= 0
      RETURNING status,
                CASE WHEN pending_key IS NOT NULL AND status <> 'pending' THEN pg_notify($7, 'jobs') END AS notified`,

    /**
     * §1.2/§1.3 running → cancelled for the owner of a job whose cancellation was requested,
     * once its handler has been aborted. §8 wakes workers as complete does.
     * $5 note stored as last_error, $6 channel.
     */
    cancelRunning: `
      UPDATE ${jobs} SET status = 'cancelled', lease_until = NULL, worker_id = NULL, last_error = $5,
                         updated_at = now()
      WHERE ${LEASE_GUARD} AND cancel_requested_at IS NOT NULL
      RETURNING id, CASE WHEN pending_key IS NOT NULL THEN pg_notify($6, 'jobs') END AS notified`,

    /**
     * §1.3 running → pending without spending the attempt (shutdown); the claim token is not
     * given back, so this lease stays dead forever. A job whose cancellation was requested ends
     * cancelled instead of running again; §8 so does one of a key of scope 'pending' whose next
     * job is already queued (superseded, as in fail, with nothing to take over: the attempt was
     * given back). $5 channel.
     */
    release: `
      WITH ${HOLDER(s, `(SELECT id, pending_key FROM ${jobs} WHERE ${LEASE_GUARD} AND cancel_requested_at IS NULL)`, true)},
      released AS (
        UPDATE ${jobs} SET
          status = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                        WHEN EXISTS (SELECT 1 FROM holder WHERE holder.id IS NOT NULL) THEN 'cancelled'
                        ELSE 'pending' END,
          last_error = CASE WHEN cancel_requested_at IS NOT NULL THEN last_error
                            ELSE coalesce((SELECT ${SUPERSEDED('holder.id', 'pending_key')}
                                           FROM holder WHERE holder.id IS NOT NULL), last_error) END,
          attempts = attempts - 1, lease_until = NULL, worker_id = NULL, run_started_at = NULL,
          updated_at = now()
        WHERE ${LEASE_GUARD}
        RETURNING id, status, pending_key
      )
      -- §1.9 a job put back wakes an idle worker (a rolling deploy hands work over at once); §8 so
      -- does one of a key of scope 'pending' that ends (the key's queued job may start)
      SELECT id, CASE WHEN status = 'pending' OR pending_key IS NOT NULL THEN pg_notify($5, 'jobs') END AS notified
      FROM released`,

    /**
     * §1.3 release for many leases in one statement (a stopping worker's held jobs): each row
     * guarded by its own lease, rows found by primary key (see OPAQUE_RUNNING); §8 superseded
     * as in release. The keys' locks are only tried: one of your transactions holding a key it
     * enqueued and waiting for another would otherwise deadlock with this one; a lease whose key
     * is busy is returned as `busy`, unreleased (the caller releases it alone, which waits for
     * one lock only). §1.9 one NOTIFY when any job went back to pending or was of a key of scope
     * 'pending'. Returns the (id, token) of each lease released, and the busy ones.
     * $1 ids, $2 worker ids, $3 attempts, $4 tokens, $5 channel.
     */
    releaseMany: `
      WITH leases AS MATERIALIZED (
        SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[]) AS r(id, worker_id, attempt, token)
      ), ${HOLDER(
        s,
        `(SELECT j.id, j.pending_key FROM ${jobs} AS j JOIN leases AS r ON j.id = r.id
           WHERE ${OPAQUE_RUNNING} AND j.worker_id = r.worker_id AND j.attempts = r.attempt AND j.claims = r.token
             AND j.cancel_requested_at IS NULL)`,
        false,
      )}, released AS (
        UPDATE ${jobs} AS j SET
          status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                        WHEN h.id IS NOT NULL THEN 'cancelled' ELSE 'pending' END,
          last_error = CASE WHEN j.cancel_requested_at IS NULL AND h.id IS NOT NULL
                            THEN ${SUPERSEDED('h.id', 'j.pending_key')} ELSE j.last_error END,
          attempts = j.attempts - 1, lease_until = NULL, worker_id = NULL, run_started_at = NULL,
          updated_at = now()
        FROM leases AS r LEFT JOIN holder AS h ON h.job_id = r.id
        WHERE j.id = r.id AND ${OPAQUE_RUNNING} AND j.worker_id = r.worker_id AND j.attempts = r.attempt
          AND j.claims = r.token AND h.id IS DISTINCT FROM 0
        RETURNING j.id, r.token, j.status, j.pending_key
      ), notified AS (
        SELECT pg_notify($5, 'jobs')
        FROM (SELECT 1 FROM released WHERE status = 'pending' OR pending_key IS NOT NULL LIMIT 1) AS any_pending
      )
      SELECT id::text AS id, token::text AS token, false AS busy, (SELECT count(*) FROM notified) AS notified
      FROM released
      UNION ALL
      SELECT h.job_id::text, NULL, true, 0 FROM holder AS h WHERE h.id = 0`,

    /**
     * §11 a batch's outcomes in one statement, each row guarded by its own lease (§1.2/§1.3; rows
     * found by primary key, see OPAQUE_RUNNING, locked in id order: the caller sorts): per job
     * done with its result, or failed — pending again after its own retry delay, or dead when its
     * own attempts are spent or the error is permanent (§1.8, §9) — and cancelled, whatever the
     * handler returned, when cancellation was requested while the batch ran (read on the row as
     * locked: a cancel that commits while this waits for the row is seen). §10 unblocks the
     * completed jobs' dependents (see UNBLOCK); a dead or cancelled job's dependents follow
     * through the status trigger, as for one job. Two cases are left to the single-job
     * statements, and their rows not returned (the caller writes them next): a retry of a key of
     * scope 'pending' (§8: the takeover of `fail`, decided under the key's lock) and, with $11
     * (`retention: { completed: 'delete' }`), a completion (completeMany deletes and counts it).
     * §8 wakes workers when a job of a keyed scope ends (as complete and fail do).
     * $1 ids, $2 worker ids, $3 attempts, $4 tokens, $5 kinds ('done' | 'fail'), $6 results (one
     * JSON array, in the same order), $7 error texts, $8 retry delays ms, $9 permanent,
     * $10 channel, $11 completions deferred (delete-on-complete).
     */
    settleMany: `
      WITH settled AS (
        UPDATE ${jobs} AS j SET
          status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                        WHEN c.kind = 'done' THEN 'done'
                        WHEN j.attempts >= j.max_attempts OR c.permanent THEN 'dead'
                        ELSE 'pending' END,
          result = CASE WHEN j.cancel_requested_at IS NULL AND c.kind = 'done'
                        THEN $6::jsonb -> (c.ord::int - 1) ELSE j.result END,
          run_after = CASE WHEN j.cancel_requested_at IS NULL AND c.kind = 'fail'
                             AND j.attempts < j.max_attempts AND NOT c.permanent
                           THEN now() + c.retry_ms * interval '1 millisecond' ELSE j.run_after END,
          last_error = CASE WHEN j.cancel_requested_at IS NOT NULL
                            THEN 'Cancelled: cancellation was requested while its batch ran'
                            WHEN c.kind = 'fail' THEN c.error ELSE j.last_error END,
          lease_until = NULL, worker_id = NULL, updated_at = now()
        FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::text[], $7::text[], $8::float8[],
                    $9::boolean[]) WITH ORDINALITY
             AS c(id, worker_id, attempt, token, kind, error, retry_ms, permanent, ord)
        WHERE j.id = c.id AND ${OPAQUE_RUNNING} AND j.worker_id = c.worker_id AND j.attempts = c.attempt
          AND j.claims = c.token
          -- left to fail (§8 takeover under the key's lock) and to completeMany (delete and count)
          AND NOT (j.pending_key IS NOT NULL AND c.kind = 'fail' AND j.cancel_requested_at IS NULL
                   AND j.attempts < j.max_attempts AND NOT c.permanent)
          AND NOT ($11::boolean AND c.kind = 'done' AND j.cancel_requested_at IS NULL)
        RETURNING c.ord, j.id, j.status, j.pending_key, j.has_dependents
      ), done AS (
        SELECT id, has_dependents FROM settled WHERE status = 'done'
      ), ${UNBLOCK(s, 'done', '$10')}, notified AS (
        SELECT pg_notify($10, 'jobs') FROM (SELECT 1 FROM settled WHERE pending_key IS NOT NULL LIMIT 1) AS any_keyed
      )
      SELECT ord::int AS ord, status, (SELECT count(*) FROM notified) AS notified,
             (SELECT count(*) FROM unblocked)::int AS unblocked
      FROM settled`,
  };
}

/** §11 one job's outcome in a batch: done with its result (JSON text), or failed. */
export type BatchOutcome =
  | { readonly lease: Lease; readonly kind: 'done'; readonly resultJson: string }
  | {
      readonly lease: Lease;
      readonly kind: 'fail';
      readonly errorText: string;
      readonly retryInMs: number;
      readonly permanent: boolean;
    };

/** What {@link OutcomeStatements.settleMany} wrote for one job; `unwritten`: left to the single-job statements. */
export type SettledStatus = 'done' | 'pending' | 'dead' | 'cancelled' | 'unwritten';

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
    if (this.deleteCompleted) {
      const deleted = await this.run(db, this.sql.completeDelete, [...leaseValues(lease), this.channel]);
      if (deleted.length === 1) return true;
      // §10 not deleted: a job with dependents (kept as done), or a lease that lost its job
    }
    const rows = await this.run(db, this.sql.complete, [...leaseValues(lease), resultJson, this.channel]);
    return rows.length === 1;
  }

  /**
   * Completes many leases in one statement; answers per input item, in input order (SPEC §3):
   * a stale and a live lease of one job each get their own answer, and a lease listed twice
   * completes once (its first entry answers true). §11 `uncancelled`: a job whose cancel was
   * requested is not completed either (answers false; a batch writes it cancelled).
   */
  async completeMany(db: Executor, batch: CompletionBatch, uncancelled = false): Promise<boolean[]> {
    const order = uniqueOrder(batch);
    const answers = new Array<boolean>(batch.length).fill(false);
    let rest = order;
    if (this.deleteCompleted) {
      const rows = await this.run<{ ord: number }>(db, this.sql.completeManyDelete, [
        ...leaseArrays(batch, order),
        this.channel,
        uncancelled,
      ]);
      const deleted = new Array<boolean>(order.length).fill(false);
      for (const row of rows) deleted[row.ord - 1] = true;
      // §10 not deleted: jobs with dependents (kept as done), or leases that lost their jobs
      rest = order.filter((position, i) => {
        if (deleted[i]) answers[position] = true;
        return !deleted[i];
      });
    }
    if (rest.length > 0) {
      const rows = await this.run<{ ord: number }>(db, this.sql.completeMany, [
        ...leaseArrays(batch, rest),
        jsonArray(rest.map((position) => (batch[position] as CompletionBatch[number]).resultJson)),
        this.channel,
        uncancelled,
      ]);
      for (const row of rows) answers[rest[row.ord - 1] as number] = true;
    }
    return answers;
  }

  /**
   * §11 a batch's outcomes in one statement; one answer per item, in input order: what it became,
   * or `unwritten` — its lease is gone, or its write is left to the single-job statements (a
   * retry of a key of scope 'pending', a completion that deletes the row).
   */
  async settleMany(db: Executor, batch: readonly BatchOutcome[]): Promise<SettledStatus[]> {
    const answers = new Array<SettledStatus>(batch.length).fill('unwritten');
    if (batch.length === 0) return answers;
    const order = byId(
      batch.map((_, i) => i),
      (i) => (batch[i] as BatchOutcome).lease.id,
    ); // one lock order for all batch statements
    const items = order.map((i) => batch[i] as BatchOutcome);
    const rows = await this.run<{ ord: number; status: SettledStatus }>(db, this.sql.settleMany, [
      digitsArray(items.map((item) => item.lease.id)),
      textArray(items.map((item) => item.lease.workerId)),
      digitsArray(items.map((item) => item.lease.attempt)),
      digitsArray(items.map((item) => item.lease.token)),
      textArray(items.map((item) => item.kind)),
      jsonArray(items.map((item) => (item.kind === 'done' ? item.resultJson : 'null'))),
      items.map((item) => (item.kind === 'fail' ? item.errorText : null)),
      items.map((item) => (item.kind === 'fail' ? item.retryInMs : 0)),
      items.map((item) => item.kind === 'fail' && item.permanent),
      this.channel,
      this.deleteCompleted,
    ]);
    for (const row of rows) answers[order[row.ord - 1] as number] = row.status;
    return answers;
  }

  /** `permanent`: dead at once, whatever attempts are left (§9). */
  async fail(
    db: Executor,
    lease: Lease,
    errorText: string,
    retryInMs: number,
    permanent = false,
  ): Promise<'pending' | 'dead' | 'cancelled' | null> {
    const rows = await this.run<{ status: 'pending' | 'dead' | 'cancelled' }>(db, this.sql.fail, [
      ...leaseValues(lease),
      errorText,
      retryInMs,
      this.channel,
      permanent,
    ]);
    return rows[0]?.status ?? null;
  }

  async cancelRunning(db: Executor, lease: Lease, note: string): Promise<boolean> {
    const rows = await this.run(db, this.sql.cancelRunning, [...leaseValues(lease), note, this.channel]);
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
    const rows = await this.run<{ id: string; token: string; busy: boolean }>(db, this.sql.releaseMany, [
      sorted.map((l) => l.id),
      sorted.map((l) => l.workerId),
      sorted.map((l) => l.attempt),
      sorted.map((l) => l.token),
      this.channel,
    ]);
    const released = new Set(rows.filter((row) => !row.busy).map((row) => `${row.id}/${row.token}`));
    // §8 leases whose key's lock was taken: one at a time, each waiting for its one lock
    const busy = new Set(rows.filter((row) => row.busy).map((row) => String(row.id)));
    for (const lease of sorted) {
      if (busy.has(lease.id) && (await this.release(db, lease))) released.add(leaseKey(lease));
    }
    return leases.map((lease) => released.has(leaseKey(lease)));
  }
}
