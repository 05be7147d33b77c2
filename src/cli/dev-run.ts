/** What `skiplock dev` runs, loaded only by that command. */
import * as path from 'node:path';
import { startAdminServer } from '../admin/server.js';
import { startEmbeddedPostgres } from '../embedded/embedded-postgres.js';
import { ValidationError } from '../errors.js';
import { Queue } from '../queue.js';
import { Worker } from '../worker/worker.js';
import { SIGNAL_ECHO_MS } from './context.js';
import { demoJob, demoTasks, enqueueDemoFlow, startProducer } from './demo-tasks.js';
import type { DevFlags } from './dev-flags.js';
import { style } from './format.js';

export async function runDev(flags: DevFlags, schema: string): Promise<void> {
  const out = (text: string) => process.stdout.write(`${text}\n`);
  const dataDir = path.resolve(flags.dataDir, 'pgdata');
  const stops: (() => Promise<void> | void)[] = [];
  let stopping: Promise<void> | null = null;
  const stopAll = () => {
    stopping ??= (async () => {
      for (const stop of [...stops].reverse()) {
        try {
          await stop();
        } catch (error) {
          process.stderr.write(
            `skiplock dev: while stopping: ${error instanceof Error ? error.message : String(error)}\n`,
          );
        }
      }
    })();
    return stopping;
  };
  // Installed first: a Ctrl-C during start-up still stops whatever was started.
  let interrupted = 0;
  let stopDatabase: () => Promise<void> = async () => undefined;
  let wake: () => void = () => undefined;
  const onSignal = () => {
    // tsx and npm relay the terminal's Ctrl-C, so one keypress can arrive twice at once.
    if (interrupted && Date.now() - interrupted < SIGNAL_ECHO_MS) return;
    if (interrupted) {
      process.stderr.write('skiplock dev: stopping the database now\n');
      void stopDatabase().then(() => process.exit(130));
      return;
    }
    interrupted = Date.now();
    process.stderr.write('skiplock dev: stopping (Ctrl-C again to hurry)\n');
    wake();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    out(style.bold('skiplock dev'));
    const started = Date.now();
    const server = await startEmbeddedPostgres({ dataDir, preferredPort: 54329, ownProcessGroup: true });
    stopDatabase = () => server.stop();
    stops.push(stopDatabase);
    if (server.recovered.kind === 'stopped') {
      out(
        style.yellow(`  stopped a PostgreSQL left running by an earlier run (pid ${server.recovered.pid})`),
      );
    }
    const shown = path.relative(process.cwd(), dataDir) || dataDir;
    out(
      `  PostgreSQL ${server.version.split('-')[0]} (embedded), data in ${shown}, ready in ${Date.now() - started} ms`,
    );
    if (!interrupted) await startServices(server.connectionString, flags, schema, stops, out);
    if (!interrupted) {
      out(
        `  DATABASE_URL=${server.connectionString}${schema === 'skiplock' ? '' : `  (schema "${schema}")`}`,
      );
      out(style.dim('  Ctrl-C to stop'));
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
  } finally {
    await stopAll();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  out('skiplock dev: stopped; the database is shut down');
}

/** Migrates, then starts the demo worker and producer (unless --no-demo) and the dashboard. */
async function startServices(
  connectionString: string,
  flags: DevFlags,
  schema: string,
  stops: (() => Promise<void> | void)[],
  out: (text: string) => void,
): Promise<void> {
  const queue = new Queue({ connectionString, schema, poolSize: 12 });
  stops.push(() => queue.close());
  await queue.migrate();
  const worker = flags.demo
    ? new Worker({
        queue,
        tasks: demoTasks,
        concurrency: 8,
        leaseMs: 30_000,
        backoff: { baseMs: 1_000, capMs: 10_000 },
        abortGraceMs: 1_000,
      })
    : null;
  const admin = await startDashboard(queue, flags.port, worker ? [worker] : []);
  stops.push(() => admin.close());
  if (worker) {
    await worker.start();
    stops.push(() => worker.stop({ timeoutMs: 5_000 }));
    await queue.enqueueMany(Array.from({ length: 20 }, demoJob));
    await enqueueDemoFlow(queue); // SPEC §10: a flow to open from a job, drawn as a graph
    stops.push(startProducer(queue, flags.rate, () => undefined));
    // SPEC §8 on show: a schedule (fired by the worker) and a queue with a global limit.
    await queue.schedule('demo-digest', {
      cron: '*/15 * * * * *',
      task: 'email.send',
      payload: { to: 'digest@example.com' },
    });
    await queue.configureQueue('media', { concurrency: 2 });
    out(`  worker    ${worker.workerId}: ${Object.keys(demoTasks).length} demo tasks, ~${flags.rate} jobs/s`);
    out('  demo      schedule demo-digest every 15 s; queue media: at most 2 running');
  }
  out(`  dashboard ${style.cyan(admin.url)}`);
}

/** The dashboard on the asked port, or on the first free one from 4000 when none was asked. */
async function startDashboard(queue: Queue, port: number | undefined, workers: Worker[]) {
  const candidates = port === undefined ? Array.from({ length: 20 }, (_, i) => 4000 + i) : [port];
  for (const candidate of candidates) {
    try {
      return await startAdminServer({ queue, port: candidate, workers, sampleIntervalMs: 5_000 });
    } catch (error) {
      if (!(error instanceof ValidationError && error.field === 'port') || candidate === candidates.at(-1))
        throw error;
    }
  }
  throw new ValidationError('port', 'no free port from 4000 to 4019: pass --port');
}
