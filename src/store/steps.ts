/**
 * Durable steps (SPEC §12): a job's checkpoints, sleeps and event waits, and events as set-once
 * latches. Each statement is defined next to the method that binds its parameters; the quoted
 * schema is spliced once, everything else is a parameter. The multi-statement transitions (sleep,
 * wait, emit) are functions of migration 20, each one round trip.
 */
import type { Executor } from '../db/executor.js';
import type { Lease } from '../types.js';
import { MS, OPAQUE_RUNNING } from './fragments.js';
import { digitsArray, jsonArray, leaseValues, StatementFamily, textArray } from './runner.js';

/** One step of a job as stored (value as JSON text). */
export interface StepRow {
  job_id: string;
  name: string;
  kind: 'step' | 'sleep' | 'event';
  value: string | null;
  resolved: boolean;
  wake_at: number | null;
  event: string | null;
  completed_at: number;
}

/** A step to checkpoint under its lease: the value as JSON text. */
export interface StepWrite {
  readonly lease: Lease;
  readonly name: string;
  readonly valueJson: string;
  readonly leaseMs: number;
}

/** A checkpoint's answer: not written (the lease is gone), written, written and the lease renewed. */
export type StepWritten = 0 | 1 | 2;
export const NOT_WRITTEN: StepWritten = 0;
export const WRITTEN: StepWritten = 1;
export const WRITTEN_RENEWED: StepWritten = 2;

/** What ctx.sleep's statement answered (see `step_sleep` in migration 20). */
export type SleepState = 'lost' | 'kind' | 'keyed' | 'cancelled' | 'resolved' | 'suspended';
/**
 * What ctx.waitForEvent's statement answered (see `step_wait` in migration 20; 'deduped' since
 * migration 23: a job with a dedupe key cannot wait. A sequenced job waits holding its key since
 * migration 24).
 */
export type WaitState =
  | 'lost'
  | 'kind'
  | 'keyed'
  | 'deduped'
  | 'cancelled'
  | 'resolved'
  | 'set'
  | 'timeout'
  | 'waiting';

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function stepSql(s: string) {
  const jobs = `${s}.jobs`;
  const steps = `${s}.job_steps`;
  const STEP_COLUMNS =
    `job_id::text AS job_id, name, kind, value::text AS value, resolved, ${MS('wake_at')}, event, ` +
    MS('completed_at');
  return {
    /**
     * §12 every step of these jobs, for their runs' first ctx.step (one statement for all the
     * jobs that start using steps in the same turn). No lease needed: a write either committed
     * before the claim (seen here) or is fenced out by the new claim token. Also the database's
     * now() (§1.4), against which a sleep's stored instant is compared. $1 ids.
     */
    stepLoad: `
      SELECT ${STEP_COLUMNS}, floor(extract(epoch FROM now()) * 1000)::float8 AS now_ms
      FROM ${steps} WHERE job_id = ANY ($1::bigint[])`,

    /**
     * §12 checkpoints of many steps (of one or many jobs) in one statement, each fenced by its
     * lease (§1.2/§1.3: status, worker, attempt and claim token matched on the job's row, locked
     * in id order; a stale attempt's row is never written). A job's first checkpoint marks it
     * `has_steps` (its delete then deletes its steps), and a checkpoint renews the lease when
     * less than half of it is left (§1.4 database time: a steady stream of steps, whose locks
     * may make the heartbeat skip the row, keeps the lease alive by itself; the others take only
     * the row lock, no new row version). ON CONFLICT DO NOTHING: a stored step is never
     * overwritten. Returns the positions (1-based) of the steps written, and whether their
     * job's lease was renewed.
     * $1 ids, $2 worker ids, $3 attempts, $4 tokens, $5 names, $6 lease ms, $7 values (a JSON array).
     */
    stepWrite: `
      WITH input AS MATERIALIZED (
        SELECT i.*, v.value FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::text[], $6::float8[])
          WITH ORDINALITY AS i(id, worker_id, attempt, token, name, lease_ms, ord)
        JOIN jsonb_array_elements($7::jsonb) WITH ORDINALITY AS v(value, ord) ON v.ord = i.ord
      ), locked AS MATERIALIZED (
        SELECT j.id, l.lease_ms,
               -- the first checkpoint of the job marks it; later ones renew only past half the lease
               (j.has_steps IS NOT TRUE OR j.lease_until < now() + l.lease_ms * interval '0.5 millisecond') AS renew
        FROM ${jobs} AS j
        JOIN (SELECT DISTINCT ON (id) id, worker_id, attempt, token, lease_ms FROM input ORDER BY id) AS l ON j.id = l.id
        WHERE ${OPAQUE_RUNNING} AND j.worker_id = l.worker_id AND j.attempts = l.attempt AND j.claims = l.token
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
      ), renewed AS (
        UPDATE ${jobs} AS j SET lease_until = now() + l.lease_ms * interval '1 millisecond', has_steps = true
        FROM locked AS l WHERE j.id = l.id AND l.renew
        RETURNING j.id
      ), written AS (
        INSERT INTO ${steps} (job_id, name, kind, value)
        SELECT i.id, i.name, 'step', i.value FROM input AS i JOIN locked AS l ON l.id = i.id
        ON CONFLICT (job_id, name) DO NOTHING
        RETURNING job_id, name
      )
      SELECT i.ord::int AS ord, (r.id IS NOT NULL) AS renewed
      FROM input AS i JOIN written AS w ON w.job_id = i.id AND w.name = i.name
      LEFT JOIN renewed AS r ON r.id = i.id`,

    /** §12 ctx.sleep (function step_sleep, migration 20). */
    stepSleep: `SELECT state, ${MS('wake_at')} FROM ${s}.step_sleep($1, $2, $3, $4::bigint, $5, $6::timestamptz, $7::float8)`,

    /** §12 ctx.waitForEvent (function step_wait, migration 20; recreated by migrations 23 and 24). */
    stepWait: `SELECT state, value::text AS value FROM ${s}.step_wait($1, $2, $3, $4::bigint, $5, $6, $7::float8)`,

    /** §12 queue.emitEvent (function emit_event, migration 20). $1 name, $2 payload, $3 channel. */
    eventEmit: `SELECT ${s}.emit_event($1, $2::jsonb, $3) AS set`,

    /** §12 queue.steps(id): a job's steps, in the order they were completed. $1 id. */
    stepList: `SELECT ${STEP_COLUMNS} FROM ${steps} WHERE job_id = $1 ORDER BY completed_at, name`,

    /** §12 requeue(id, { resetSteps: true }): the job's steps go. $1 id. */
    stepReset: `DELETE FROM ${steps} WHERE job_id = $1`,

    /**
     * §12 waits whose timeout passed (§1.4 database time) become pending, their wait answered
     * null in the same statement (an emit before the rerun cannot change it), at most $1 at a time; SKIP LOCKED (an emit or a cancel holding one decides it); the
     * outer WHERE re-checks the locked row (§1.2); §1.9 the wake-up hint. Only waits with no
     * dependency left are picked (one whose dependency was requeued waits for it first): picked
     * and not woken, $1 of them would fill every pass and no other timeout would ever wake.
     * $1 limit, $2 channel.
     */
    waitWakeTimedOut: `
      WITH due AS MATERIALIZED (
        SELECT id FROM ${jobs}
        WHERE status = 'waiting' AND wait_timeout IS NOT NULL AND wait_timeout <= now() AND deps_left = 0
        ORDER BY wait_timeout LIMIT $1
        FOR NO KEY UPDATE SKIP LOCKED
      ), woken AS (
        UPDATE ${jobs} AS j SET status = 'pending', wait_event = NULL, wait_timeout = NULL,
                                run_after = now(), updated_at = now()
        FROM due WHERE j.id = due.id AND j.status = 'waiting' AND j.wait_event IS NOT NULL AND j.deps_left = 0
        RETURNING j.id
      ), answered AS (
        UPDATE ${steps} AS t SET resolved = true, value = 'null'::jsonb, completed_at = now()
        FROM woken WHERE t.job_id = woken.id AND t.kind = 'event' AND NOT t.resolved
        RETURNING 1
      ), notified AS (
        SELECT pg_notify($2, 'jobs') FROM (SELECT 1 FROM woken LIMIT 1) AS any_woken
      )
      SELECT id::text AS id, (SELECT count(*) FROM notified) AS notified FROM woken`,

    /**
     * §12 prune: events set (or created, never set) more than $1 ms ago that no waiting job
     * needs, nor any unanswered wait (a job woken otherwise, not yet rerun). The candidates are locked SKIP LOCKED first (a waiter registering on one holds it
     * FOR SHARE: passed by); a waiting job is found by its own row, so deleting an event that is
     * not set loses no wake-up (the emit inserts it again). $1 ms.
     */
    eventPrune: `
      WITH victims AS MATERIALIZED (
        SELECT e.name FROM ${s}.events AS e
        WHERE coalesce(e.set_at, e.created_at) < now() - $1::float8 * interval '1 millisecond'
          AND NOT EXISTS (SELECT 1 FROM ${jobs} AS w
                          WHERE w.status = 'waiting' AND w.wait_event = e.name AND w.wait_event IS NOT NULL)
          AND NOT EXISTS (SELECT 1 FROM ${steps} AS t WHERE t.event = e.name AND NOT t.resolved)
        FOR UPDATE SKIP LOCKED
      ), deleted AS (
        DELETE FROM ${s}.events WHERE name IN (SELECT name FROM victims) RETURNING 1
      )
      SELECT count(*)::int AS deleted FROM deleted`,
  };
}

export class StepStatements extends StatementFamily<ReturnType<typeof stepSql>> {
  /** Every step of these jobs (rows of any of them, in no order), and the database's now in ms. */
  async load(db: Executor, ids: readonly string[]): Promise<(StepRow & { now_ms: number })[]> {
    return this.run<StepRow & { now_ms: number }>(db, this.sql.stepLoad, [digitsArray(ids)]);
  }

  /**
   * Checkpoints `items` in one statement; per item, {@link NOT_WRITTEN} (its lease does not own
   * the job), {@link WRITTEN}, or {@link WRITTEN_RENEWED} (and the lease was renewed by it).
   */
  async write(db: Executor, items: readonly StepWrite[]): Promise<StepWritten[]> {
    if (items.length === 0) return [];
    const rows = await this.run<{ ord: number; renewed: boolean }>(db, this.sql.stepWrite, [
      digitsArray(items.map((i) => i.lease.id)),
      textArray(items.map((i) => i.lease.workerId)),
      digitsArray(items.map((i) => i.lease.attempt)),
      digitsArray(items.map((i) => i.lease.token)),
      textArray(items.map((i) => i.name)),
      digitsArray(items.map((i) => i.leaseMs)),
      jsonArray(items.map((i) => i.valueJson)),
    ]);
    const written = new Array<StepWritten>(items.length).fill(NOT_WRITTEN);
    for (const row of rows) written[Number(row.ord) - 1] = row.renewed ? WRITTEN_RENEWED : WRITTEN;
    return written;
  }

  async sleep(
    db: Executor,
    lease: Lease,
    name: string,
    until: Date | null,
    ms: number | null,
  ): Promise<{ state: SleepState; wakeAt: number | null }> {
    const rows = await this.run<{ state: SleepState; wake_at: number | null }>(db, this.sql.stepSleep, [
      ...leaseValues(lease),
      name,
      until,
      ms,
    ]);
    const row = rows[0];
    return { state: row?.state ?? 'lost', wakeAt: row?.wake_at ?? null };
  }

  async wait(
    db: Executor,
    lease: Lease,
    name: string,
    event: string,
    timeoutMs: number | null,
  ): Promise<{ state: WaitState; valueJson: string | null }> {
    const rows = await this.run<{ state: WaitState; value: string | null }>(db, this.sql.stepWait, [
      ...leaseValues(lease),
      name,
      event,
      timeoutMs,
    ]);
    const row = rows[0];
    return { state: row?.state ?? 'lost', valueJson: row?.value ?? null };
  }

  /** Sets event `name` once; true when this call set it (then its waiting jobs are pending). */
  async emit(db: Executor, name: string, payloadJson: string): Promise<boolean> {
    const rows = await this.run<{ set: boolean }>(db, this.sql.eventEmit, [name, payloadJson, this.channel]);
    return rows[0]?.set === true;
  }

  async list(db: Executor, id: string): Promise<StepRow[]> {
    return this.run<StepRow>(db, this.sql.stepList, [id]);
  }

  async reset(db: Executor, id: string): Promise<void> {
    await this.run(db, this.sql.stepReset, [id]);
  }

  /** Wakes up to `limit` jobs whose wait timed out; returns their ids. */
  async wakeTimedOut(db: Executor, limit: number): Promise<string[]> {
    const rows = await this.run<{ id: string }>(db, this.sql.waitWakeTimedOut, [limit, this.channel]);
    return rows.map((row) => row.id);
  }

  /** Deletes events older than `olderThanMs` that no waiting job needs; returns how many. */
  async pruneEvents(db: Executor, olderThanMs: number): Promise<number> {
    const rows = await this.run<{ deleted: number }>(db, this.sql.eventPrune, [olderThanMs]);
    return Number(rows[0]?.deleted ?? 0);
  }
}
