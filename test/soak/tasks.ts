/**
 * The soak's handler (one task, behaviour chosen by the payload, see workload.ts). It records
 * every run — start, abort, side effect, ledger insert, end — through a {@link RunRecorder}, so
 * the verifier can line up the runs of one job across processes and see which one overlapped
 * which, and whether the late one had been told to stop.
 */
import type pg from 'pg';
import {
  type ClaimedJob,
  type JobContext,
  PermanentError,
  type Queue,
  type TaskMap,
} from '../../src/index.js';
import { abortReasonName, type RecordWriter, type SoakPayload, type WorkerRecord } from './records.js';
import { Rng } from './rng.js';
import { followPayload, TASK } from './workload.js';

/** The duplicate-completion detector: one row per job, written in the transaction that completes it. */
export const LEDGER_TABLE = 'soak.ledger';
/** Cascade roots the producer has decided to requeue: a root's handler succeeds once its id is here. */
export const REQUEUED_TABLE = 'soak.requeued';
/** §12 what the transactional step of a stepped job writes (step-checks.ts counts its rows). */
export const STEP_LEDGER_TABLE = 'soak.step_ledger';

/** Gives each handler run an id and writes its records. */
export class RunRecorder {
  private seq = 0;

  constructor(
    private readonly processName: string,
    private readonly out: RecordWriter<WorkerRecord>,
  ) {}

  begin(job: ClaimedJob, payload: SoakPayload, signal: AbortSignal): Run {
    const id = `${this.processName}:${job.id}:${job.attempt}:${++this.seq}`;
    const token = (job as { token?: unknown }).token;
    this.out.write({
      type: 'start',
      t: Date.now(),
      run: id,
      job: job.id,
      attempt: job.attempt,
      kind: payload.kind,
      ...(typeof token === 'string' ? { token } : {}),
      ...(payload.seq === undefined ? {} : { seq: payload.seq }),
    });
    const onAbort = () =>
      this.out.write({ type: 'abort', t: Date.now(), run: id, reason: abortReasonName(signal.reason) });
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    return new Run(id, job.id, signal, this.out);
  }

  get writer(): RecordWriter<WorkerRecord> {
    return this.out;
  }
}

/** One handler run. */
export class Run {
  constructor(
    readonly id: string,
    private readonly job: string,
    private readonly signal: AbortSignal,
    private readonly out: RecordWriter<WorkerRecord>,
  ) {}

  note(type: 'effect' | 'ledger' | 'ledger-refused'): void {
    this.out.write({ type, t: Date.now(), run: this.id, job: this.job });
  }

  deps(deps: { id: string; status: string }[]): void {
    this.out.write({ type: 'deps', t: Date.now(), run: this.id, job: this.job, deps });
  }

  spawned(
    via: 'client' | 'own',
    outcome: { result?: { id: string; created: boolean }; error?: string },
  ): void {
    this.out.write({ type: 'spawn', t: Date.now(), run: this.id, job: this.job, via, ...outcome });
  }

  end(outcome: 'returned' | 'threw', error?: unknown): void {
    // The handler looks at its signal first, then records its end: reading `aborted` checks the
    // lease deadline and may abort the run right here (a process resumed past its lease), and
    // that abort must be recorded before the end it precedes. (Taking the end's time first made
    // a run aborted by this very read look as if it had acted before its abort whenever the
    // millisecond changed in between: one soak in CI, seed 87739538, the same seed clean on rerun.)
    const aborted = this.signal.aborted;
    this.out.write({
      type: 'end',
      t: Date.now(),
      run: this.id,
      job: this.job,
      outcome,
      aborted,
      ...(error === undefined
        ? {}
        : { error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) }),
    });
  }
}

/** Waits `ms`; with a signal, rejects with its reason as soon as it is aborted. */
export function work(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * The tasks module of a soak worker. `spawnQueue` (a Queue with a pool of its own) writes the
 * follow-ups of spawners, so that their held transactions never take the worker's connections.
 */
export function soakTasks(recorder: RunRecorder, spawnQueue: Queue): TaskMap {
  const rng = new Rng(process.pid);
  return {
    [TASK]: async (payload: SoakPayload, ctx: JobContext<SoakPayload>) => {
      const run = recorder.begin(ctx.job, payload, ctx.signal);
      const signal = payload.respectSignal ? ctx.signal : undefined;
      try {
        if (payload.deps) run.deps(Object.values(await ctx.dependencies()));
        // Never awaited: the follow-up's transaction may still be open when the handler returns,
        // so the completion races its commit (the race of "a dependent added to a running job";
        // before migration 15 the completion waited for its lock and missed the new edge). It
        // records its own outcome and never rejects.
        if (payload.spawn) void spawnFollowUp(spawnQueue, rng, run, ctx.job.id, payload);
        await work(ctx.job.attempt === 1 ? payload.firstMs : payload.ms, signal);
        if (ctx.job.attempt <= payload.failAttempts) {
          throw new Error(`soak: planned failure of attempt ${ctx.job.attempt} [run ${run.id}]`);
        }
        const result: { run: string; steps?: string[] } = { run: run.id };
        if (payload.steps) result.steps = await steppedWork(ctx, run, payload.steps.sleepMs);
        if (payload.finish === 'tx') {
          await ctx.transaction(async (client) => {
            if (payload.gate && !(await gateOpen(client, ctx.job.id))) {
              throw new PermanentError(
                `soak: cascade root, fails until the producer requeues it [run ${run.id}]`,
              );
            }
            await insertLedger(client, run, ctx.job);
            if (payload.holdMs > 0 && !payload.spawn) await work(payload.holdMs, signal);
            return result;
          });
        } else if (payload.finish === 'effect') {
          run.note('effect');
        }
        run.end('returned');
        return result;
      } catch (error) {
        run.end('threw', error);
        throw error;
      }
    },
  };
}

/**
 * Enqueues a follow-up that depends on `parent` (this running job): inside a transaction of its
 * own held open `holdMs` after the enqueue ('client'), or as a plain enqueue ('own'). Records the
 * outcome; never throws (a failure is recorded, the handler goes on).
 */
async function spawnFollowUp(
  queue: Queue,
  rng: Rng,
  run: Run,
  parent: string,
  payload: SoakPayload,
): Promise<void> {
  const via = payload.spawn ?? 'own';
  const follow = followPayload(rng, `${payload.ref}/f${run.id}`);
  try {
    const result =
      via === 'client'
        ? await queue.transaction(async (client) => {
            const r = await queue.enqueue(TASK, follow, { dependsOn: [parent], maxAttempts: 8, client });
            await work(payload.holdMs);
            return r;
          })
        : await queue.enqueue(TASK, follow, { dependsOn: [parent], maxAttempts: 8 });
    run.spawned(via, { result: { id: result.id, created: result.created } });
  } catch (error) {
    run.spawned(via, { error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) });
  }
}

/**
 * §12 a stepped job's steps: a transactional one (a row in the step ledger, committed with its
 * checkpoint), a plain one, then a sleep (the first run suspends: JobSuspended propagates).
 */
async function steppedWork(ctx: JobContext<SoakPayload>, run: Run, sleepMs: number): Promise<string[]> {
  const s1 = await ctx.step(
    's1',
    async (client) => {
      const tag = `${run.id}:s1`;
      await client.query(`INSERT INTO ${STEP_LEDGER_TABLE} (job_id, tag) VALUES ($1, $2)`, [ctx.job.id, tag]);
      return tag;
    },
    { transaction: true },
  );
  const s2 = await ctx.step('s2', () => `${run.id}:s2`);
  await ctx.sleep('nap', sleepMs);
  return [s1, s2];
}

async function gateOpen(client: pg.PoolClient, job: string): Promise<boolean> {
  const { rows } = await client.query(`SELECT 1 FROM ${REQUEUED_TABLE} WHERE job_id = $1`, [job]);
  return rows.length > 0;
}

async function insertLedger(client: pg.PoolClient, run: Run, job: ClaimedJob): Promise<void> {
  run.note('ledger');
  try {
    await client.query(`INSERT INTO ${LEDGER_TABLE} (job_id, run_id, attempt, pid) VALUES ($1, $2, $3, $4)`, [
      job.id,
      run.id,
      job.attempt,
      process.pid,
    ]);
  } catch (error) {
    if ((error as { code?: string }).code === '23505') run.note('ledger-refused');
    throw error;
  }
}
