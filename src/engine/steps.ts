/**
 * Durable steps (SPEC §12) as the engine runs them: the loads and checkpoints of every running
 * job's steps share statements — all the jobs whose first ctx.step falls in one turn of the
 * event loop are loaded by one SELECT, and every step value that is ready in one turn is written
 * by one fenced INSERT (a batch per turn, at most 1,000 rows, two in flight: the completer's
 * batching). A step still resolves only after its own row committed.
 */
import { Batcher, type Settled } from '../core/batcher.js';
import type { Executor } from '../db/executor.js';
import type { SleepState, StepRow, StepWrite, StepWritten, WaitState } from '../store/job-store.js';
import type { Lease } from '../types.js';

export {
  NOT_WRITTEN,
  type StepRow,
  type StepWritten,
  WRITTEN_RENEWED,
} from '../store/job-store.js';

import type { EngineCore as Engine } from './engine-core.js';

/** Most rows in one load or checkpoint statement. */
const MAX_BATCH = 1_000;
/** Most timed-out waits woken by one pass of the reaper. */
const WAKE_LIMIT = 1_000;

/** One job's stored steps, and the database's now() when they were read (§1.4). */
export interface LoadedSteps {
  rows: StepRow[];
  nowMs: number;
}

export class Steps {
  private readonly loader: Batcher<string, LoadedSteps>;
  private readonly writer: Batcher<StepWrite, StepWritten>;

  constructor(private readonly engine: Engine) {
    this.loader = new Batcher((ids) => this.loadMany(ids), {
      maxBatch: MAX_BATCH,
      maxConcurrent: 2,
      eager: true,
    });
    this.writer = new Batcher(
      async (items) =>
        (await engine.store.steps.write(engine.pool, items)).map((value) => ({ ok: true as const, value })),
      { maxBatch: MAX_BATCH, maxConcurrent: 2, eager: true },
    );
  }

  /** The stored steps of job `id` (shares a statement with the loads of the same turn). */
  load(id: string): Promise<LoadedSteps> {
    this.engine.assertOpen();
    return this.loader.add(id);
  }

  /** Checkpoints one step under its lease: NOT_WRITTEN when the lease no longer owns the job. */
  write(item: StepWrite): Promise<StepWritten> {
    this.engine.assertOpen();
    return this.writer.add(item);
  }

  /** As {@link write}, alone, on `db` (the step's own transaction). */
  async writeOn(db: Executor, item: StepWrite): Promise<StepWritten> {
    const [written] = await this.engine.store.steps.write(db, [item]);
    return written ?? 0;
  }

  sleep(
    lease: Lease,
    name: string,
    until: Date | null,
    ms: number | null,
  ): Promise<{ state: SleepState; wakeAt: number | null }> {
    this.engine.assertOpen();
    return this.engine.store.steps.sleep(this.engine.pool, lease, name, until, ms);
  }

  wait(
    lease: Lease,
    name: string,
    event: string,
    timeoutMs: number | null,
  ): Promise<{ state: WaitState; valueJson: string | null }> {
    this.engine.assertOpen();
    return this.engine.store.steps.wait(this.engine.pool, lease, name, event, timeoutMs);
  }

  /** §12 the reaper's pass: waits whose timeout passed become pending; their ids. */
  wakeTimedOut(): Promise<string[]> {
    this.engine.assertOpen();
    return this.engine.store.steps.wakeTimedOut(this.engine.pool, WAKE_LIMIT);
  }

  /** Resolves when no load or checkpoint is waiting or in flight. */
  async idle(): Promise<void> {
    await Promise.all([this.loader.idle(), this.writer.idle()]);
  }

  private async loadMany(ids: string[]): Promise<Settled<LoadedSteps>[]> {
    const rows = await this.engine.store.steps.load(this.engine.pool, [...new Set(ids)]);
    const byJob = new Map<string, StepRow[]>();
    let nowMs = rows[0]?.now_ms ?? Number.NaN;
    for (const row of rows) {
      nowMs = row.now_ms;
      const list = byJob.get(row.job_id);
      if (list === undefined) byJob.set(row.job_id, [row]);
      else list.push(row);
    }
    // no step stored: the database's now() is not needed (only a stored sleep is compared with it)
    return ids.map((id) => ({ ok: true as const, value: { rows: byJob.get(id) ?? [], nowMs } }));
  }
}
