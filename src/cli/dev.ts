import * as path from 'node:path';
import type { Command } from 'commander';
import { startAdminServer } from '../admin/server.js';
import { startEmbeddedPostgres } from '../embedded/embedded-postgres.js';
import { ValidationError } from '../errors.js';
import { Queue } from '../queue.js';
import { Worker } from '../worker/worker.js';
import type { GlobalOptions } from './context.js';
import { demoJob, demoTasks, startProducer } from './demo-tasks.js';
import { style } from './format.js';
import { positiveInt } from './parse.js';

interface Flags {
  port?: number;
  dataDir: string;
  rate: number;
  demo: boolean;
}

/** `skiplock dev`: embedded PostgreSQL + migrate + demo worker and producer + dashboard. */
export function registerDev(program: Command): void {
  program
    .command('dev')
    .description('zero-setup: embedded PostgreSQL, demo workers and the dashboard, in one command')
    .option('--port <port>', 'dashboard port (default 4000, or the next free one)', positiveInt)
    .option('--data-dir <dir>', 'where the embedded server keeps its data (reused next time)', '.skiplock')
    .option('--rate <n>', 'demo jobs enqueued per second', positiveInt, 5)
    .option('--no-demo', 'no demo worker or producer: just the database and the dashboard')
    .addHelpText(
      'after',
      `
It prints the dashboard URL and a DATABASE_URL for other processes (psql, skiplock worker, …).
Ctrl-C stops everything and leaves no server running; a server left by a killed earlier run is
found and stopped.

Examples:
  $ npx skiplock dev
  $ npx skiplock dev --rate 50 --port 8080
  $ DATABASE_URL=<printed url> npx skiplock worker --tasks ./tasks.js   # in another terminal`,
    )
    .action(async (flags: Flags, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & Flags>();
      await runDev(flags, options.schema);
    });
}

async function runDev(flags: Flags, schema: string): Promise<void> {
  const out = (text: string) => process.stdout.write(`${text}\n`);
  const dataDir = path.resolve(flags.dataDir, 'pgdata');
  out(style.bold('skiplock dev'));
  const started = Date.now();
  const server = await startEmbeddedPostgres({ dataDir, preferredPort: 54329 });
  const stops: (() => Promise<void> | void)[] = [() => server.stop()];
  let stopping = false;
  const stopAll = async () => {
    if (stopping) return;
    stopping = true;
    for (const stop of stops.reverse()) {
      try {
        await stop();
      } catch (error) {
        process.stderr.write(
          `skiplock dev: while stopping: ${error instanceof Error ? error.message : String(error)}\n`,
        );
      }
    }
  };
  try {
    if (server.recovered.kind === 'stopped') {
      out(
        style.yellow(`  stopped a PostgreSQL left running by an earlier run (pid ${server.recovered.pid})`),
      );
    }
    out(
      `  PostgreSQL ${server.version.split('-')[0]} (embedded), data in ${path.relative(process.cwd(), dataDir) || dataDir}, ready in ${Date.now() - started} ms`,
    );
    const queue = new Queue({ connectionString: server.connectionString, schema, poolSize: 12 });
    stops.push(() => queue.close());
    await queue.migrate();
    const workers: Worker[] = [];
    if (flags.demo) {
      const worker = new Worker({
        queue,
        tasks: demoTasks,
        concurrency: 8,
        leaseMs: 30_000,
        backoff: { baseMs: 1_000, capMs: 10_000 },
        abortGraceMs: 1_000,
      });
      workers.push(worker);
    }
    const admin = await startDashboard(queue, flags.port, workers);
    stops.push(() => admin.close());
    for (const worker of workers) {
      await worker.start();
      stops.push(() => worker.stop({ timeoutMs: 5_000 }));
      await queue.enqueueMany(Array.from({ length: 20 }, demoJob));
      const stopProducer = startProducer(queue, flags.rate, () => undefined);
      stops.push(stopProducer);
      out(
        `  worker    ${worker.workerId}: ${Object.keys(demoTasks).length} demo tasks, ~${flags.rate} jobs/s`,
      );
    }
    out(`  dashboard ${style.cyan(admin.url)}`);
    out(`  DATABASE_URL=${server.connectionString}${schema === 'skiplock' ? '' : `  (schema "${schema}")`}`);
    out(style.dim('  Ctrl-C to stop'));
  } catch (error) {
    await stopAll();
    throw error;
  }
  await new Promise<void>((resolve) => {
    const onSignal = () => {
      if (stopping) {
        process.stderr.write('skiplock dev: stopping the database now\n');
        void server.stop().then(() => process.exit(130));
        return;
      }
      process.stderr.write('skiplock dev: stopping (Ctrl-C again to hurry)\n');
      void stopAll().then(resolve);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
  out('skiplock dev: stopped; the database is shut down');
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
