/**
 * Where the admin server's reads go when its queue has a read replica (SPEC §5, §7, issue 26):
 * to the replica while it answers, to the primary while it does not, so that a replica that is
 * down never takes the dashboard, requeue or cancel with it.
 *
 *   checking ──answers──▶ up ◀──answers── down
 *      │                   │               ▲ │
 *      └──── away ─────────┴──── away ─────┘ └─ probe every PROBE_MS
 *
 * - `checking`: from the start until the replica first answers or fails; reads go to the
 *   primary, so a silent replica (10 s to fail a connection) holds no page up.
 * - `up`: reads go to the replica. A read that fails because the replica is away (refused,
 *   timed out, shut down: {@link isReplicaOutage}) moves to `down` and is answered from the
 *   primary; any other error (a recovery conflict, a replica not migrated) is the caller's.
 * - `down`: reads go to the primary; one probe (`ops()` on the replica) at a time, every
 *   PROBE_MS, moves back to `up` when it answers.
 */
import { isReplicaOutage } from '../core/database-outage.js';
import type { Queue } from '../queue.js';

/** How often a replica that is down is asked again. */
export const PROBE_MS = 5_000;

/** The read replica as `/api/ops` reports it (`replica`; null without one). */
export interface ReplicaState {
  /** `up`: the figures come from the replica; `down` or `checking`: from the primary. */
  status: 'checking' | 'up' | 'down';
  /** When it entered this status (ISO 8601). */
  since: string;
  /** Why it is down: the error of the last read or probe that failed; null otherwise. */
  error: string | null;
}

/** The reads the admin server makes: a Queue's, or a {@link ReadRoute}'s. */
export type AdminReads = Pick<
  Queue,
  | 'ops'
  | 'counts'
  | 'liveByQueue'
  | 'listPage'
  | 'get'
  | 'dependencySummary'
  | 'flowGraph'
  | 'throughput'
  | 'queues'
  | 'schedules'
  | 'sequences'
>;

export class ReadRoute implements AdminReads {
  private status: ReplicaState['status'] = 'checking';
  private since = new Date();
  private error: string | null = null;
  private probing: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  /**
   * @param replica the queue with `readConnectionString`
   * @param primary a queue on the same primary without one
   * @param options `probeMs` (default {@link PROBE_MS}); `onChange`, told of every change of status
   */
  constructor(
    private readonly replica: Queue,
    private readonly primary: Queue,
    private readonly options: { probeMs?: number; onChange?: (state: ReplicaState) => void } = {},
  ) {}

  get state(): ReplicaState {
    return { status: this.status, since: this.since.toISOString(), error: this.error };
  }

  /** Asks the replica for the first time; resolves when it has answered or failed (the server does not wait). */
  start(): Promise<void> {
    this.stopped = false;
    return this.probe();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** Runs `fn` on the replica while it is up, else on the primary (see the header). */
  async read<T>(fn: (queue: Queue) => Promise<T>): Promise<T> {
    return (await this.readReporting(fn)).value;
  }

  /**
   * {@link read}, with the replica's state as it was for this read: `up` when the replica
   * answered, else the state that sent it to the primary (so `status` and the figures agree
   * even when a probe or another read changes the state meanwhile).
   */
  async readReporting<T>(fn: (queue: Queue) => Promise<T>): Promise<{ value: T; replica: ReplicaState }> {
    const routed = this.state;
    if (routed.status !== 'up') return { value: await fn(this.primary), replica: routed };
    try {
      return { value: await fn(this.replica), replica: routed };
    } catch (error) {
      if (!isReplicaOutage(error)) throw error;
      this.enter('down', error);
      const replica = this.state;
      return { value: await fn(this.primary), replica };
    }
  }

  ops: Queue['ops'] = () => this.read((q) => q.ops());
  counts: Queue['counts'] = () => this.read((q) => q.counts());
  liveByQueue: Queue['liveByQueue'] = () => this.read((q) => q.liveByQueue());
  listPage: Queue['listPage'] = (options) => this.read((q) => q.listPage(options));
  get: Queue['get'] = (id) => this.read((q) => q.get(id));
  dependencySummary: Queue['dependencySummary'] = (id, options) =>
    this.read((q) => q.dependencySummary(id, options));
  flowGraph: Queue['flowGraph'] = (flowId, options) => this.read((q) => q.flowGraph(flowId, options));
  throughput: Queue['throughput'] = (options) => this.read((q) => q.throughput(options));
  queues: Queue['queues'] = () => this.read((q) => q.queues());
  schedules: Queue['schedules'] = (options) => this.read((q) => q.schedules(options));
  sequences: Queue['sequences'] = (options) => this.read((q) => q.sequences(options));

  /** One probe at a time. */
  private probe(): Promise<void> {
    this.probing ??= this.replica
      .ops()
      .then(
        () => this.enter('up', null),
        // A replica that answers with an error of its own is up: the reads that get it report it.
        (error: unknown) => (isReplicaOutage(error) ? this.enter('down', error) : this.enter('up', null)),
      )
      .finally(() => {
        this.probing = null;
      });
    return this.probing;
  }

  private enter(status: ReplicaState['status'], error: unknown): void {
    if (this.stopped) return;
    const message = error === null ? null : error instanceof Error ? error.message : String(error);
    const changed = status !== this.status;
    if (changed) this.since = new Date();
    this.status = status;
    this.error = message;
    if (status === 'down' && this.timer === null) {
      this.timer = setTimeout(() => {
        this.timer = null;
        if (this.status === 'down') void this.probe();
      }, this.options.probeMs ?? PROBE_MS);
      this.timer.unref();
    }
    if (changed) this.options.onChange?.(this.state);
  }
}
