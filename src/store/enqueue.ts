/**
 * Enqueue: one job or a batch in one INSERT (§1.6, §1.7 dedupe through the partial unique index,
 * §1.9 NOTIFY), and the holders of dedupe keys. Each statement is defined next to the method that
 * binds its parameters; the quoted schema is spliced once, everything else is a parameter.
 */
import type { NewJob } from '../core/job-spec.js';
import type { Executor } from '../db/executor.js';
import { quoteLiteral } from '../db/identifier.js';
import { ACTIVE, ON_DEDUPE_CONFLICT, RUN_AFTER } from './fragments.js';
import { digitsArray, jsonArray, StatementFamily, textArray } from './runner.js';

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function enqueueSql(s: string) {
  const jobs = `${s}.jobs`;
  return {
    /**
     * §1.7 dedupe through the partial unique index (ON CONFLICT, never check-then-insert);
     * §1.9 one pg_notify in the inserting transaction, and none for a dedupe hit. Statements
     * that may run on a caller's client return no void column (pg_notify's, cast to text): an ORM
     * may fail to read one (Prisma does, skiplock/adapters).
     * §9 the producer span's trace context goes in with the row (a hit leaves the holder's alone).
     * $1 queue, $2 task, $3 payload, $4 priority, $5 dedupe_key, $6 max_attempts, $7 run_at,
     * $8 delay_ms, $9 timeout_ms, $10 channel, $11 group_key, $12 trace_context (JSON or null),
     * $13 sequence (§11: a trigger of migration 19 writes such a job waiting).
     */
    insertOne: `
      WITH ins AS (
        INSERT INTO ${jobs} (queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms, group_key,
                             trace_context, sequence)
        VALUES ($1, $2, $3::jsonb, $4, $5, $6, ${RUN_AFTER('$7', '$8')}, $9, $11, $12::jsonb, $13)
        ${ON_DEDUPE_CONFLICT}
        RETURNING id
      )
      SELECT id::text AS id, pg_notify($10, 'jobs')::text FROM ins`,

    /**
     * §1.7 as above for a whole batch in one INSERT (unnest of parallel arrays); ids are drawn
     * first so each input row learns whether it was inserted; the payloads come as one JSON array
     * ($3, json: each payload is a jsonb of its own, limited as before), the other columns as
     * array literals (src/store/runner.ts). §1.9 one NOTIFY for the batch,
     * in its transaction — or none when $10 is null (the caller then hints after the commit).
     * $11 group keys, $12 trace contexts (§9, JSON or null: one producer span per call), $13
     * sequence keys (§11; ids are drawn in input order, so a batch's jobs of one key run in it).
     */
    insertMany: `
      WITH input AS MATERIALIZED (
        SELECT nextval(${quoteLiteral(`${s}.jobs_id_seq`)}::regclass) AS id, t.*
        FROM unnest($1::text[], $2::text[],
                    -- json, not jsonb: one jsonb value holds at most 256 MB, a batch's payloads may be more
                    ARRAY(SELECT p.payload::jsonb FROM json_array_elements($3::json) WITH ORDINALITY AS p(payload, n) ORDER BY p.n),
                    $4::int[], $5::text[], $6::int[],
                    $7::timestamptz[], $8::float8[], $9::int[], $11::text[], $12::text[], $13::text[])
             WITH ORDINALITY AS t(queue, task, payload, priority, dedupe_key, max_attempts,
                                  run_at, delay_ms, timeout_ms, group_key, trace_context, sequence, ord)
      ), ins AS (
        INSERT INTO ${jobs} (id, queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms,
                             group_key, trace_context, sequence)
        SELECT id, queue, task, payload, priority, dedupe_key, max_attempts,
               ${RUN_AFTER('run_at', 'delay_ms')}, timeout_ms, group_key, trace_context::jsonb, sequence
        -- §3 rows go in dedupe-key order: two batches that share keys wait for each other in
        -- one order and never deadlock (a key repeated in the batch: its first entry wins);
        -- code point order (COLLATE "C"), whatever the database's collation: the order of the
        -- library's job-by-job batches and of enqueue_many (core/key-order.ts)
        FROM input ORDER BY dedupe_key COLLATE "C", ord
        ${ON_DEDUPE_CONFLICT}
        RETURNING id
      ), notified AS (
        SELECT pg_notify($10, 'jobs') FROM (SELECT 1 FROM ins LIMIT 1) AS any_inserted WHERE $10::text IS NOT NULL
      )
      SELECT input.id::text AS id, (ins.id IS NOT NULL) AS created,
             (SELECT count(*) FROM notified) AS notified
      FROM input LEFT JOIN ins ON ins.id = input.id
      ORDER BY input.ord`,

    /**
     * §1.7/§8 debounce (`dedupe.replace`): one INSERT whose conflict with a *pending* holder
     * replaces that holder's payload, priority and run time in the same statement (the row lock
     * of ON CONFLICT: a claim racing it either took the job first — then it is running and the
     * WHERE leaves it alone — or skips it until this commits). Only a holder of the same task
     * queue and group that has not run yet (no retry waiting for its backoff) is replaced. `created`
     * tells an insert from a replacement; no row: the holder was not replaced. A run time is
     * never past created_at + $10 ms (maxWaitMs; the holder's created_at on a replacement).
     * §1.9 NOTIFY when a row changed. §9 a replaced holder keeps its own trace context (the span
     * of the enqueue that created it).
     * $1–$9 as insertOne, $10 max wait ms (or null), $11 channel, $12 group_key, $13 trace_context.
     */
    insertDebounced: `
      WITH ins AS (
        INSERT INTO ${jobs} AS j (queue, task, payload, priority, dedupe_key, max_attempts, run_after, timeout_ms,
                                  group_key, trace_context)
        VALUES ($1, $2, $3::jsonb, $4, $5, $6,
                least(${RUN_AFTER('$7', '$8')}, now() + $10::float8 * interval '1 millisecond'), $9, $12,
                $13::jsonb)
        ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND ${ACTIVE}
        DO UPDATE SET payload = EXCLUDED.payload, priority = EXCLUDED.priority,
          run_after = least(${RUN_AFTER('$7', '$8')}, j.created_at + $10::float8 * interval '1 millisecond'),
          updated_at = now()
        WHERE j.status = 'pending' AND j.attempts = 0 AND j.task = EXCLUDED.task AND j.queue = EXCLUDED.queue
          AND j.group_key IS NOT DISTINCT FROM EXCLUDED.group_key
        RETURNING j.id, (j.xmax = 0) AS created
      )
      SELECT id::text AS id, created, pg_notify($11, 'jobs')::text FROM ins`,

    /**
     * §8 throttle (`dedupe.windowMs`): takes the key's window row (created on first use) and
     * its lock until the transaction ends, so throttled enqueues of one key decide one at a
     * time; returns whether the window still holds and its holder. §1.4 database time, and the
     * clock's, not the transaction's start (a caller's long transaction must not see a window
     * as over, or as still running, when it is not).
     */
    windowLock: `
      INSERT INTO ${s}.dedupe_windows AS w (key, until, job_id) VALUES ($1, '-infinity', 0)
      ON CONFLICT (key) DO UPDATE SET key = w.key
      RETURNING (w.until > clock_timestamp()) AS taken, w.job_id::text AS job_id`,

    /** §8 a new holder of a throttled key: its window runs $2 ms from now (the clock's). */
    windowTake: `
      UPDATE ${s}.dedupe_windows
      SET until = clock_timestamp() + $2::float8 * interval '1 millisecond', job_id = $3::bigint
      WHERE key = $1`,

    /**
     * §8 scope 'pending' (one queued and one running job per key): under the key's lock (which
     * every job of the key going back to pending takes, migration 10), an insert whose conflict
     * with the key's queued job is a hit — a running job of the key is no conflict: this one
     * waits for it (the picks skip it meanwhile). §1.9 NOTIFY when inserted. §9 the trace context
     * goes in with the row.
     * $1–$9 as insertOne ($5 the key), $10 channel, $11 group_key, $12 trace_context.
     */
    insertPending: `
      WITH locked AS MATERIALIZED (
        SELECT pg_advisory_xact_lock(${s}.pending_lock_id($5::text))
      ), ins AS (
        INSERT INTO ${jobs} (queue, task, payload, priority, pending_key, max_attempts, run_after, timeout_ms,
                             group_key, trace_context)
        SELECT $1::text, $2::text, $3::jsonb, $4::int, $5::text, $6::int, ${RUN_AFTER('$7', '$8')}, $9::int, $11::text,
               $12::jsonb
        FROM locked
        ON CONFLICT (pending_key) WHERE status = 'pending' AND pending_key IS NOT NULL DO NOTHING
        RETURNING id
      )
      SELECT id::text AS id, pg_notify($10, 'jobs')::text FROM ins`,

    /**
     * §8 the locks of keys of scope 'pending', all in one statement and in the one lock order
     * (two batches that share keys never deadlock), held until the transaction ends.
     */
    lockPendingKeys: `
      SELECT count(pg_advisory_xact_lock(k.lock_id))::int AS locked FROM (
        SELECT DISTINCT ${s}.pending_lock_id(key) AS lock_id FROM unnest($1::text[]) AS key ORDER BY 1 OFFSET 0) AS k`,

    /** §8 the queued holders of keys of scope 'pending' (after an insert met a conflict). */
    pendingIdsByKey: `
      SELECT id::text AS id, pending_key AS dedupe_key FROM ${jobs}
      WHERE pending_key = ANY($1::text[]) AND status = 'pending'`,

    /** §1.7 the active holders of some dedupe keys (after an insert met a conflict). */
    activeIdsByKey: `
      SELECT id::text AS id, dedupe_key FROM ${jobs}
      WHERE dedupe_key = ANY($1::text[]) AND ${ACTIVE}`,
  };
}

/** $1–$9 of insertOne and insertDebounced: one job's columns. */
function jobValues(job: NewJob): unknown[] {
  return [
    job.queue,
    job.task,
    job.payloadJson,
    job.priority,
    job.dedupeKey,
    job.maxAttempts,
    job.runAt?.toISOString() ?? null,
    job.delayMs,
    job.timeoutMs,
  ];
}

export class EnqueueStatements extends StatementFamily<ReturnType<typeof enqueueSql>> {
  /** Inserts one job; `null` on a dedupe hit (the caller then looks the holder up). */
  async insertOne(db: Executor, job: NewJob): Promise<string | null> {
    const rows = await this.run<{ id: string }>(db, this.sql.insertOne, [
      ...jobValues(job),
      this.channel,
      job.group,
      job.traceContext,
      job.sequence,
    ]);
    return rows[0]?.id ?? null;
  }

  /**
   * Inserts a batch in one statement; per input row, its id and whether it was inserted. With
   * `notify` false no NOTIFY is sent in the statement (the caller hints after the commit).
   */
  async insertMany(
    db: Executor,
    jobs: readonly NewJob[],
    notify = true,
  ): Promise<{ id: string; created: boolean }[]> {
    // bound without the driver's per-element escaping (see digitsArray): queues and tasks
    // repeat and are escaped once per run, the payloads (already JSON) are not escaped at all
    const n = jobs.length;
    const queue = new Array<string>(n);
    const task = new Array<string>(n);
    const payload = new Array<string>(n);
    const priority = new Array<number>(n);
    const dedupeKey = new Array<string | null>(n);
    const maxAttempts = new Array<number>(n);
    const runAt = new Array<string | null>(n);
    const delayMs = new Array<number | null>(n);
    const timeoutMs = new Array<number | null>(n);
    const group = new Array<string | null>(n);
    const trace = new Array<string | null>(n);
    const sequence = new Array<string | null>(n);
    let sequenced = false;
    for (let i = 0; i < n; i++) {
      const j = jobs[i] as NewJob;
      queue[i] = j.queue;
      task[i] = j.task;
      payload[i] = j.payloadJson;
      priority[i] = j.priority;
      dedupeKey[i] = j.dedupeKey;
      maxAttempts[i] = j.maxAttempts;
      runAt[i] = j.runAt?.toISOString() ?? null;
      delayMs[i] = j.delayMs;
      timeoutMs[i] = j.timeoutMs;
      group[i] = j.group;
      trace[i] = j.traceContext;
      sequence[i] = j.sequence;
      if (j.sequence !== null) sequenced = true;
    }
    const rows = await this.run<{ id: string; created: boolean }>(db, this.sql.insertMany, [
      textArray(queue),
      textArray(task),
      jsonArray(payload),
      digitsArray(priority),
      textArray(dedupeKey),
      digitsArray(maxAttempts),
      textArray(runAt),
      digitsArray(delayMs),
      digitsArray(timeoutMs),
      notify ? this.channel : null,
      textArray(group),
      textArray(trace),
      sequenced ? textArray(sequence) : null,
    ]);
    return rows.map((row) => ({ id: String(row.id), created: row.created }));
  }

  /**
   * Debounce: inserts the job, or replaces a pending holder's payload, priority and run time.
   * `null`: the holder is running (not replaced).
   */
  async insertDebounced(db: Executor, job: NewJob): Promise<{ id: string; created: boolean } | null> {
    const rows = await this.run<{ id: string; created: boolean }>(db, this.sql.insertDebounced, [
      ...jobValues(job),
      job.dedupe?.maxWaitMs ?? null,
      this.channel,
      job.group,
      job.traceContext,
    ]);
    const row = rows[0];
    return row ? { id: String(row.id), created: row.created } : null;
  }

  /** Throttle: locks the key's window until the transaction ends; whether it holds, and its holder. */
  async windowLock(tx: Executor, key: string): Promise<{ taken: boolean; jobId: string }> {
    const rows = await this.run<{ taken: boolean; job_id: string }>(tx, this.sql.windowLock, [key]);
    return { taken: rows[0]?.taken === true, jobId: String(rows[0]?.job_id) };
  }

  async windowTake(tx: Executor, key: string, windowMs: number, jobId: string): Promise<void> {
    await this.run(tx, this.sql.windowTake, [key, windowMs, jobId]);
  }

  /** Scope 'pending': inserts the job unless its key has a queued job; `null` on such a hit. */
  async insertPending(db: Executor, job: NewJob): Promise<string | null> {
    const rows = await this.run<{ id: string }>(db, this.sql.insertPending, [
      ...jobValues(job),
      this.channel,
      job.group,
      job.traceContext,
    ]);
    return rows[0]?.id ?? null;
  }

  /** Scope 'pending': takes these keys' locks until the transaction ends. */
  async lockPendingKeys(tx: Executor, keys: readonly string[]): Promise<void> {
    await this.run(tx, this.sql.lockPendingKeys, [keys]);
  }

  /** The ids of the queued jobs holding these keys of scope 'pending', by key. */
  async pendingIdsByKey(db: Executor, keys: readonly string[]): Promise<Map<string, string>> {
    const rows = await this.run<{ id: string; dedupe_key: string }>(db, this.sql.pendingIdsByKey, [keys]);
    return new Map(rows.map((row) => [row.dedupe_key, String(row.id)]));
  }

  /** The ids of the active jobs holding these dedupe keys, by key. */
  async activeIdsByKey(db: Executor, keys: readonly string[]): Promise<Map<string, string>> {
    const rows = await this.run<{ id: string; dedupe_key: string }>(db, this.sql.activeIdsByKey, [keys]);
    return new Map(rows.map((row) => [row.dedupe_key, String(row.id)]));
  }
}
