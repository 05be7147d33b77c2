/**
 * The soak's producer process: at a steady rate, one action a tick (see workload.ts for the
 * jobs): single `enqueue` and `enqueueMany` calls, flows (`enqueueFlow`, in its own transaction
 * or inside one of ours with `client`), spawners, parents that get a dependent a moment later,
 * and the dedupe modes. Besides: now and then a `cancel` of a recent job, a `requeue` of each
 * cascade root once it is dead, a `waitFor` on some jobs (not awaited by the loop), the schedule
 * upserted again (as every deploy would) and a `prune` of old done jobs. Every call and its
 * answer — or its error — goes to the records file. A failed call is not retried: the verifier
 * finds out from the table whether its rows were committed anyway.
 *
 * Stops in two steps: SIGUSR2 stops the load (the actions in flight finish, then it records
 * `load-stopped`, and keeps waiting for the jobs it waits for); SIGTERM gives those waits
 * WAIT_GRACE_MS more, abandons the rest, closes the queue and ends the process. A SIGTERM alone
 * does both.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type JobSpec, Queue } from '../../src/index.js';
import { DEDUPE, PRUNE, SCHEDULE } from './features.js';
import { type ProducerRecord, RecordWriter } from './records.js';
import { Rng } from './rng.js';
import { REQUEUED_TABLE, work } from './tasks.js';
import {
  debounceSpec,
  type FlowShape,
  flowNodes,
  followPayload,
  nextSpec,
  oneQueuedSpec,
  parentSpec,
  scheduleOptions,
  spawnerSpec,
  TASK,
  throttleSpec,
} from './workload.js';

export interface ProducerProcessConfig {
  name: string;
  connectionString: string;
  recordsFile: string;
  seed: number;
  /** Jobs per second, on average. */
  rate: number;
}

/** How long the outstanding waitFor calls get after SIGTERM (the drain is over by then). */
const WAIT_GRACE_MS = 15_000;
/** A cascade root is looked at for its requeue once it is this old, and given up after ROOT_GIVE_UP_MS. */
const ROOT_MIN_AGE_MS = 1_500;
const ROOT_GIVE_UP_MS = 60_000;
const SCHEDULE_EVERY_MS = 20_000;
const CANCEL_EVERY_MS = 3_000;

const config = JSON.parse(process.argv[2] ?? '{}') as ProducerProcessConfig;
const out = new RecordWriter<ProducerRecord>(config.recordsFile);
process.channel?.unref();
process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));

const rng = new Rng(config.seed);
const queue = new Queue({ connectionString: config.connectionString });
const recent: string[] = [];
const roots: { id: string; at: number }[] = [];
const background = new Set<Promise<void>>();
const waits = new Map<string, AbortController>();
const debounceSeq = new Map<string, number>();
let loadStopped = false;
let terminated = false;
let refs = 0;
process.on('SIGUSR2', () => {
  loadStopped = true;
});
process.once('SIGTERM', () => {
  loadStopped = true;
  terminated = true;
});

type Action = 'single' | 'many' | FlowShape | 'spawner' | 'parent' | 'throttle' | 'debounce' | 'one-queued';

/** Each action's weight and its mean number of jobs (for the rate). */
const ACTIONS: readonly (readonly [Action, number, number])[] = [
  ['single', 40, 1],
  ['many', 16, 7.5],
  ['fan', 4, 6],
  ['chain', 4, 4.5],
  ['cascade', 3, 5],
  ['spawner', 6, 2],
  ['parent', 5, 2],
  ['throttle', 8, 0.4],
  ['debounce', 6, 0.8],
  ['one-queued', 5, 1.2],
];
const meanPerTick =
  ACTIONS.reduce((sum, [, weight, jobs]) => sum + weight * jobs, 0) /
  ACTIONS.reduce((sum, [, weight]) => sum + weight, 0);

out.write({ type: 'life', t: Date.now(), what: 'started' });
let lastCancel = Date.now();
let lastSchedule = Date.now();
let lastPrune = Date.now();
while (!loadStopped) {
  const t0 = Date.now();
  await act(rng.weighted(ACTIONS.map(([action, weight]) => [action, weight] as const)));
  if (Date.now() - lastCancel > CANCEL_EVERY_MS) {
    lastCancel = Date.now();
    await cancelOne();
  }
  await requeueRoots();
  if (Date.now() - lastSchedule > SCHEDULE_EVERY_MS) {
    lastSchedule = Date.now();
    await upsertSchedule();
  }
  if (Date.now() - lastPrune > PRUNE.everyMs) {
    lastPrune = Date.now();
    await prune();
  }
  const tickMs = (meanPerTick / config.rate) * 1_000 * (0.5 + rng.next());
  await work(Math.max(0, tickMs - (Date.now() - t0)));
}
await Promise.all(background);
out.write({ type: 'life', t: Date.now(), what: 'load-stopped' });
while (!terminated) await sleep(100);
await settleWaits();
await queue.close();
out.write({ type: 'life', t: Date.now(), what: 'stopped' });

async function act(action: Action): Promise<void> {
  switch (action) {
    case 'single': {
      const id = await enqueueOne(nextSpec(rng, newRef()), true);
      if (id && rng.chance(0.1)) waitOn(id);
      return;
    }
    case 'many':
      return enqueueMany(rng.int(3, 12));
    case 'fan':
    case 'chain':
    case 'cascade':
      return enqueueFlow(action);
    case 'spawner':
      await enqueueOne(spawnerSpec(rng, newRef()));
      return;
    case 'parent': {
      const id = await enqueueOne(parentSpec(rng, newRef()));
      if (id) track(followLater(id));
      return;
    }
    case 'throttle':
      await enqueueOne(throttleSpec(rng, newRef()), false, 'throttle');
      return;
    case 'debounce': {
      // A burst of 2–3 calls on one key, 0.1–0.5 s apart: later ones replace the waiting holder.
      const key = `${DEDUPE.debounce.prefix}${rng.int(0, DEDUPE.debounce.keys - 1)}`;
      for (let n = rng.int(2, 3); n > 0; n--) {
        // Increasing across the producer's restarts too (a new process starts past the old one's).
        const seq = Math.max((debounceSeq.get(key) ?? 0) + 1, Date.now());
        debounceSeq.set(key, seq);
        const id = await enqueueOne(debounceSpec(rng, newRef(), key, seq), false, 'debounce');
        if (id && rng.chance(0.1)) waitOn(id);
        if (n > 1) await work(rng.int(100, 500));
      }
      return;
    }
    case 'one-queued': {
      // A burst of 2–4 calls on one key, 0–0.4 s apart: one queued behind one running, the rest hits.
      const key = `${DEDUPE.pending.prefix}${rng.int(0, DEDUPE.pending.keys - 1)}`;
      for (let n = rng.int(2, 4); n > 0; n--) {
        await enqueueOne(oneQueuedSpec(rng, newRef(), key), false, 'pending');
        if (n > 1) await work(rng.int(0, 400));
      }
      return;
    }
  }
}

function newRef(): string {
  return `${config.name}-${++refs}`;
}

/** One enqueue; its id when created (or a debounce replaced its holder), else null. */
async function enqueueOne(
  spec: JobSpec,
  cancellable = false,
  mode?: 'throttle' | 'debounce' | 'pending',
): Promise<string | null> {
  const { task, payload, ...options } = spec;
  const seq = (payload as { seq?: number }).seq;
  const record: ProducerRecord = {
    type: 'enqueue',
    t: Date.now(),
    many: false,
    refs: [refOf(payload)],
    ...(mode && spec.dedupeKey
      ? { dedupe: { mode, key: spec.dedupeKey, ...(seq === undefined ? {} : { seq }) } }
      : {}),
  };
  let id: string | null = null;
  try {
    const result = await queue.enqueue(task, payload, options);
    record.results = [result];
    if (result.created && cancellable) remember(result.id);
    if (result.created || result.replaced) id = result.id;
  } catch (error) {
    record.error = errorLine(error);
    await work(200); // the database is away: do not spin
  }
  out.write(record);
  return id;
}

async function enqueueMany(count: number): Promise<void> {
  const specs = Array.from({ length: count }, () => nextSpec(rng, newRef()));
  const record: ProducerRecord = {
    type: 'enqueue',
    t: Date.now(),
    many: true,
    refs: specs.map((s) => refOf(s.payload)),
  };
  try {
    const results = await queue.enqueueMany(specs);
    record.results = results;
    for (const result of results) if (result.created) remember(result.id);
  } catch (error) {
    record.error = errorLine(error);
    await work(200);
  }
  out.write(record);
}

/** A flow, in its own transaction or (half the time) inside one of ours with `client`. */
async function enqueueFlow(shape: FlowShape): Promise<void> {
  const nodes = flowNodes(rng, shape, newRef);
  const record: ProducerRecord = {
    type: 'flow',
    t: Date.now(),
    shape,
    refs: nodes.map((n) => refOf(n.payload)),
  };
  try {
    const result = rng.chance(0.5)
      ? await queue.transaction((client) => queue.enqueueFlow(nodes, { client }))
      : await queue.enqueueFlow(nodes);
    record.result = result;
    if (shape === 'cascade' && result.jobs.root) {
      roots.push({ id: result.jobs.root, at: Date.now() });
      waitOn(result.jobs.root);
      if (result.jobs.f) waitOn(result.jobs.f);
    }
    if (shape === 'fan' && result.jobs.fanin && rng.chance(0.5)) waitOn(result.jobs.fanin);
  } catch (error) {
    record.error = errorLine(error);
    await work(200);
  }
  out.write(record);
}

/**
 * A moment after enqueueing `parent` (a job of 0.5–2.5 s, by then probably running), adds a
 * dependent to it: in a transaction of ours held open 100–600 ms after the enqueue (`client`),
 * or in the enqueue's own.
 */
async function followLater(parent: string): Promise<void> {
  await sleep(rng.int(200, 1_500));
  const via = rng.chance(0.5) ? 'client' : 'own';
  const payload = followPayload(rng, newRef());
  const holdMs = rng.int(100, 600);
  const record: ProducerRecord = { type: 'follow', t: Date.now(), parent, via, ref: payload.ref };
  try {
    const options = { dependsOn: [parent], maxAttempts: 8 };
    const result =
      via === 'client'
        ? await queue.transaction(async (client) => {
            const r = await queue.enqueue(TASK, payload, { ...options, client });
            await work(holdMs);
            return r;
          })
        : await queue.enqueue(TASK, payload, options);
    record.result = { id: result.id, created: result.created };
    if (rng.chance(0.3)) waitOn(result.id);
  } catch (error) {
    record.error = errorLine(error);
  }
  out.write(record);
}

/**
 * Requeues each cascade root once it is dead: marks it first (its handler then succeeds), so
 * the requeue must bring its cancelled dependents back to waiting and the root's completion
 * must then run them.
 */
async function requeueRoots(): Promise<void> {
  const now = Date.now();
  for (const root of roots.filter((r) => now - r.at > ROOT_MIN_AGE_MS).slice(0, 3)) {
    try {
      const job = await queue.get(root.id);
      if (job?.status === 'dead') {
        await queue.transaction((client) =>
          client.query(`INSERT INTO ${REQUEUED_TABLE} (job_id) VALUES ($1) ON CONFLICT DO NOTHING`, [
            root.id,
          ]),
        );
        const record: ProducerRecord = { type: 'requeue', t: Date.now(), id: root.id };
        try {
          record.ok = await queue.requeue(root.id);
        } catch (error) {
          record.error = errorLine(error);
        }
        out.write(record);
        if (record.ok) forget(root);
      } else if (job === null || job.status === 'done' || job.status === 'cancelled') {
        forget(root);
      }
    } catch {
      // the database is away: look again next tick
    }
    if (now - root.at > ROOT_GIVE_UP_MS) forget(root);
  }
}

function forget(root: { id: string }): void {
  const i = roots.indexOf(root as (typeof roots)[number]);
  if (i >= 0) roots.splice(i, 1);
}

/** Waits for a job without holding up the loop; records how it settled. */
function waitOn(id: string): void {
  if (waits.has(id)) return;
  const abort = new AbortController();
  waits.set(id, abort);
  out.write({ type: 'wait', t: Date.now(), id });
  queue
    .waitFor<{ run?: string }>(id, { signal: abort.signal })
    .then(
      (job) =>
        out.write({
          type: 'waited',
          t: Date.now(),
          id,
          status: job.status,
          resultRun: job.result?.run ?? null,
        }),
      (error: unknown) =>
        out.write({
          type: 'waited',
          t: Date.now(),
          id,
          error: errorLine(error),
          ...(abort.signal.aborted ? { abandoned: true } : {}),
        }),
    )
    .finally(() => waits.delete(id));
}

/** After SIGTERM: the outstanding waits get WAIT_GRACE_MS, then are abandoned (and recorded). */
async function settleWaits(): Promise<void> {
  const deadline = Date.now() + WAIT_GRACE_MS;
  while (waits.size > 0 && Date.now() < deadline) await sleep(100);
  for (const abort of waits.values()) abort.abort(new Error('soak: producer stopping'));
  while (waits.size > 0) await sleep(20);
}

async function cancelOne(): Promise<void> {
  const id = recent.length > 0 ? rng.pick(recent) : undefined;
  if (!id) return;
  const record: ProducerRecord = { type: 'cancel', t: Date.now(), id };
  try {
    record.ok = await queue.cancel(id);
  } catch (error) {
    record.error = errorLine(error);
  }
  out.write(record);
}

/** The schedule again, as every deploy would: an unchanged cron must keep its next run. */
async function upsertSchedule(): Promise<void> {
  const record: ProducerRecord = { type: 'schedule', t: Date.now() };
  try {
    const schedule = await queue.schedule(SCHEDULE.name, scheduleOptions());
    if (schedule.nextRunAt) record.nextRunAt = schedule.nextRunAt.getTime();
  } catch (error) {
    record.error = errorLine(error);
  }
  out.write(record);
}

async function prune(): Promise<void> {
  const record: ProducerRecord = { type: 'prune', t: Date.now() };
  try {
    record.deleted = await queue.prune({ olderThanMs: PRUNE.olderThanMs, statuses: ['done'] });
  } catch (error) {
    record.error = errorLine(error);
  }
  out.write(record);
}

function track(task: Promise<void>): void {
  background.add(task);
  void task.finally(() => background.delete(task));
}

function remember(id: string): void {
  recent.push(id);
  if (recent.length > 50) recent.shift();
}

function refOf(payload: unknown): string {
  return (payload as { ref: string }).ref;
}

function errorLine(error: unknown): string {
  return (error instanceof Error ? `${error.name}: ${error.message}` : String(error)).split('\n')[0] ?? '';
}
