/**
 * One soak worker process: a Queue and a Worker from the project's src/, set up as
 * `skiplock worker` sets them up (src/cli/worker.ts: SIGTERM → stop({ timeoutMs }) → close(),
 * then the process ends when nothing is left running), plus a record of every handler run and
 * every worker event in its records file.
 *
 * Why not the CLI itself: the verifier needs the worker's own events (lease:lost, job:released,
 * job:runaway, outcomes) with timestamps, tied to handler runs; the CLI prints only some of
 * them, as text meant for people. Nothing here catches errors the CLI would not: an uncaught
 * exception still kills the process, and the soak counts it as a crash.
 *
 * Usage (by the soak): node --import tsx test/soak/worker-process.ts '<json config>'
 */
import { Queue, Worker, type WorkerEvents } from '../../src/index.js';
import { RecordWriter, type WorkerRecord } from './records.js';
import { RunRecorder, soakTasks } from './tasks.js';

export interface WorkerProcessConfig {
  name: string;
  connectionString: string;
  recordsFile: string;
  leaseMs: number;
  concurrency: number;
  pollIntervalMs: number;
  reapIntervalMs: number;
  stopTimeoutMs: number;
}

const config = JSON.parse(process.argv[2] ?? '{}') as WorkerProcessConfig;
const out = new RecordWriter<WorkerRecord>(config.recordsFile);
orphanGuard();

const queue = new Queue({ connectionString: config.connectionString });
// The spawners' follow-ups go through a pool of their own (tasks.ts).
const spawnQueue = new Queue({ connectionString: config.connectionString });
const worker = new Worker({
  queue,
  tasks: soakTasks(new RunRecorder(config.name, out), spawnQueue),
  concurrency: config.concurrency,
  leaseMs: config.leaseMs,
  pollIntervalMs: config.pollIntervalMs,
  reapIntervalMs: config.reapIntervalMs,
  backoff: { baseMs: 300, capMs: 3_000 },
});
recordEvents(worker);

try {
  await worker.start();
  out.write({ type: 'life', t: Date.now(), what: 'started', detail: worker.workerId });
  process.once('SIGTERM', () => {
    out.write({ type: 'life', t: Date.now(), what: 'stopping' });
    void stop();
  });
} catch (error) {
  out.write({ type: 'life', t: Date.now(), what: 'start-failed', detail: String(error) });
  process.stderr.write(`soak worker: start() failed: ${String(error)}\n`);
  await queue.close();
  await spawnQueue.close();
  process.exitCode = 1;
}

async function stop(): Promise<void> {
  await worker.stop({ timeoutMs: config.stopTimeoutMs });
  out.write({ type: 'life', t: Date.now(), what: 'stopped' });
  await queue.close();
  await spawnQueue.close();
  out.write({ type: 'life', t: Date.now(), what: 'closed' });
}

function recordEvents(w: Worker): void {
  const onJob =
    (event: keyof WorkerEvents) =>
    ({ job }: { job: { id: string; attempt: number } }) =>
      out.write({ type: 'event', t: Date.now(), event, job: job.id, attempt: job.attempt });
  for (const event of [
    'job:done',
    'job:retry',
    'job:dead',
    'job:cancelled',
    'job:released',
    'job:runaway',
    'lease:lost',
  ] as const) {
    w.on(event, onJob(event));
  }
  w.on('reaped', ({ ids }) =>
    out.write({ type: 'event', t: Date.now(), event: 'reaped', detail: ids.join(',') }),
  );
  w.on('schedule:fired', ({ tick, jobId }) =>
    out.write({
      type: 'event',
      t: Date.now(),
      event: 'schedule:fired',
      job: jobId,
      detail: tick.toISOString(),
    }),
  );
  w.on('schedule:skipped', ({ tick, reason }) =>
    out.write({
      type: 'event',
      t: Date.now(),
      event: 'schedule:skipped',
      detail: `${reason} ${tick.toISOString()}`,
    }),
  );
  w.on('warning', ({ code }) => out.write({ type: 'event', t: Date.now(), event: 'warning', detail: code }));
  w.on('error', ({ error, during }) =>
    out.write({
      type: 'event',
      t: Date.now(),
      event: 'error',
      detail: `${during}: ${error.message.split('\n')[0]}`,
    }),
  );
}

/**
 * The soak talks to this process over an IPC channel only to notice its own death: if the soak
 * is killed, the channel closes and this process ends too, so no worker outlives a run. The
 * channel is unref'd: it never keeps the process alive by itself.
 */
function orphanGuard(): void {
  process.channel?.unref();
  process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));
}
