import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { type Command, InvalidArgumentError } from 'commander';
import { errorText } from '../core/error-text.js';
import { ValidationError } from '../errors.js';
import { Queue } from '../queue.js';
import { isTask } from '../task/task.js';
import type { Task } from '../task-types.js';
import type { TaskMap, WorkerOptions } from '../worker/options.js';
import { Worker } from '../worker/worker.js';
import { type GlobalOptions, requireDatabaseUrl, SIGNAL_ECHO_MS } from './context.js';

interface WorkerFlags {
  tasks: string;
  concurrency?: number;
  prefetch?: number;
  queues?: string[];
  leaseMs?: number;
  pollIntervalMs?: number;
  listen: boolean;
  workerId?: string;
  reapIntervalMs?: number;
  stopTimeoutMs: number;
}

/** `skiplock worker --tasks ./tasks.js`: run handlers until SIGINT/SIGTERM. */
export function registerWorker(program: Command): void {
  program
    .command('worker')
    .description('run the handlers of a tasks module until SIGINT/SIGTERM (graceful stop)')
    .requiredOption(
      '--tasks <module>',
      'module exporting tasks made by defineTask, or (default export or `tasks`) a map of task names to handlers',
    )
    .option('--concurrency <n>', 'most jobs at once (default 10)', positiveInt)
    .option(
      '--prefetch <n>',
      'jobs claimed ahead of free slots, held until one frees (default: concurrency, at least 50; 0: none)',
      nonNegativeInt,
    )
    .option('--queues <a,b>', 'only these queues (default: all)', list)
    .option('--lease-ms <n>', 'lease length in ms (default 120000)', positiveInt)
    .option(
      '--poll-interval-ms <n>',
      'fallback poll in ms (default 30000; 1000 with --no-listen)',
      positiveInt,
    )
    .option(
      '--no-listen',
      'poll instead of LISTEN (behind PgBouncer in transaction mode); implies --no-prepared-statements',
    )
    .option('--worker-id <id>', 'owner name in leases (default: host-pid-random)')
    .option(
      '--reap-interval-ms <n>',
      'how often this worker reclaims expired leases (default 30000)',
      positiveInt,
    )
    .option(
      '--stop-timeout-ms <n>',
      'on SIGINT/SIGTERM, wait this long for running jobs',
      positiveInt,
      30_000,
    )
    .addHelpText(
      'after',
      `
The tasks module — tasks made by defineTask (any exports, or an array as default):
  // tasks.js
  export const sendEmail = defineTask({ name: 'email.send', schema, handler: async (payload, ctx) => … });
  export const buildReport = defineTask({ name: 'report.build', schema, handler, timeoutMs: 60_000 });
or handlers by task name:
  export default {
    'email.send': async (payload, { signal, job }) => { await send(payload, { signal }); return { sent: true }; },
    'report.build': { handler: buildReport, timeoutMs: 60_000 },
  };

Examples:
  $ skiplock worker --tasks ./tasks.js --concurrency 20
  $ skiplock worker --tasks ./dist/tasks.js --queues emails,reports --lease-ms 60000
  $ npx tsx node_modules/.bin/skiplock worker --tasks ./tasks.ts      # TypeScript tasks through tsx
  $ skiplock worker --tasks ./tasks.js --no-listen --poll-interval-ms 250  # behind PgBouncer (transaction mode)

--no-listen also turns prepared statements off (they fail behind PgBouncer in transaction
mode) unless --prepared-statements is given (PgBouncer >= 1.21 with max_prepared_statements).

One line is printed at start and one per failure; --verbose prints every job.
The first SIGINT/SIGTERM stops gracefully (running jobs finish, or are released after
--stop-timeout-ms); a second one exits at once.`,
    )
    .action(async (flags: WorkerFlags, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & WorkerFlags>();
      const tasks = await loadTasks(flags.tasks);
      // The Worker's own default: `--no-listen` means PgBouncer, so no prepared statements.
      const preparedStatements = options.preparedStatements ?? flags.listen;
      const queue = new Queue({
        connectionString: requireDatabaseUrl(options),
        schema: options.schema,
        preparedStatements,
      });
      const worker = new Worker({
        queue,
        tasks,
        ...(flags.concurrency === undefined ? {} : { concurrency: flags.concurrency }),
        ...(flags.prefetch === undefined ? {} : { prefetch: flags.prefetch }),
        ...(flags.queues === undefined ? {} : { queues: flags.queues }),
        ...(flags.leaseMs === undefined ? {} : { leaseMs: flags.leaseMs }),
        ...(flags.pollIntervalMs === undefined ? {} : { pollIntervalMs: flags.pollIntervalMs }),
        ...(flags.workerId === undefined ? {} : { workerId: flags.workerId }),
        ...(flags.reapIntervalMs === undefined ? {} : { reapIntervalMs: flags.reapIntervalMs }),
        listen: flags.listen,
      });
      report(worker, options.verbose === true);
      // Listening before start(): a signal while it starts (its first jobs may already run, or
      // it may still be waiting for the database) stops the worker gracefully at once — stop()
      // ends start()'s wait — instead of Node's default exit that leaves started jobs to their
      // leases' expiry.
      const signals = untilSignal(worker, flags.stopTimeoutMs);
      try {
        await worker.start();
      } catch (error) {
        signals.dispose();
        await queue.close();
        throw error;
      }
      if (!signals.received()) {
        const names = (Array.isArray(tasks) ? tasks.map((task) => task.name) : Object.keys(tasks)).join(', ');
        process.stdout.write(
          `skiplock worker ${worker.workerId} started: tasks ${names}; concurrency ${flags.concurrency ?? 10}; schema "${options.schema}"; ${flags.listen ? 'LISTEN' : 'polling'}${preparedStatements ? '' : '; no prepared statements'}\n`,
        );
      }
      await signals.stopped;
      await queue.close();
      const stats = worker.stats();
      process.stdout.write(
        `skiplock worker ${worker.workerId} stopped: ${stats.done} done, ${stats.retried} retried, ${stats.dead} dead, ${stats.released} released\n`,
      );
    });
}

/**
 * Imports the tasks module and finds its tasks: `export const tasks`, else the default export —
 * a defined task, an array of them or a handler map — else every export that is a defined task
 * (§9; other exports are ignored).
 */
async function loadTasks(file: string): Promise<WorkerOptions['tasks']> {
  const absolute = path.resolve(file);
  let mod: { default?: unknown; tasks?: unknown };
  try {
    mod = await import(pathToFileURL(absolute).href);
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'ERR_UNKNOWN_FILE_EXTENSION') {
      throw new ValidationError(
        '--tasks',
        `${file} is TypeScript: run through tsx, e.g. \`npx tsx node_modules/.bin/skiplock worker --tasks ${file}\``,
      );
    }
    if (code === 'ERR_MODULE_NOT_FOUND' && String((error as Error).message).includes(absolute)) {
      throw new ValidationError('--tasks', `cannot find the module ${absolute}`);
    }
    throw error;
  }
  for (const candidate of [mod.tasks, mod.default]) {
    if (isTask(candidate)) return [candidate];
    if (isTaskList(candidate) || isTaskMap(candidate)) return candidate;
  }
  // every defined task among the exports, once (an export under two names is one task)
  const defined = [...new Set(Object.values(mod).filter(isTask))];
  if (defined.length > 0) return defined;
  throw new ValidationError(
    '--tasks',
    `${file} must export its tasks: \`export const sendEmail = defineTask({ … })\`, or handlers: \`export default { taskName: async (payload, ctx) => … }\``,
  );
}

function isTaskList(value: unknown): value is Task<unknown, unknown, unknown>[] {
  return Array.isArray(value) && value.length > 0 && value.every(isTask);
}

/** An object of handlers by task name: each value a function, `{ handler }` or a defined task. */
function isTaskMap(value: unknown): value is TaskMap {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const values = Object.values(value);
  return (
    values.length > 0 &&
    values.every(
      (v) =>
        typeof v === 'function' ||
        (typeof v === 'object' && v !== null && typeof (v as { handler?: unknown }).handler === 'function'),
    )
  );
}

/** One line per failure (and per job with --verbose). */
function report(worker: Worker, verbose: boolean): void {
  const line = (text: string) => process.stderr.write(`${new Date().toISOString()} ${text}\n`);
  const firstLine = (error: unknown) => errorText(error).split('\n')[0];
  worker.on('job:retry', ({ job, error, retryInMs }) =>
    line(
      `retry  ${job.task} #${job.id} attempt ${job.attempt}/${job.maxAttempts} in ${retryInMs} ms: ${firstLine(error)}`,
    ),
  );
  worker.on('job:dead', ({ job, error }) =>
    line(`dead   ${job.task} #${job.id} after ${job.attempt} attempts: ${firstLine(error)}`),
  );
  worker.on('lease:lost', ({ job }) => line(`lost   ${job.task} #${job.id}: lease lost, outcome discarded`));
  worker.on('job:runaway', ({ job, reason, graceMs }) =>
    line(`runaway ${job.task} #${job.id}: ignored its ${reason} abort for ${graceMs} ms; slot freed`),
  );
  worker.on('job:cancelled', ({ job, reason, error }) => {
    if (reason === 'superseded') {
      line(
        `superseded ${job.task} #${job.id} attempt ${job.attempt}/${job.maxAttempts}: ${firstLine(error)}; the key's queued job takes the retry over`,
      );
    } else if (verbose) line(`cancel ${job.task} #${job.id}`);
  });
  worker.on('warning', ({ message }) => line(`warning ${message}`));
  worker.on('error', ({ error, during }) => line(`error  ${during}: ${error.message}`));
  if (!verbose) return;
  worker.on('job:start', ({ job }) => line(`start  ${job.task} #${job.id} attempt ${job.attempt}`));
  worker.on('job:done', ({ job, durationMs }) => line(`done   ${job.task} #${job.id} in ${durationMs} ms`));
  worker.on('job:released', ({ job }) => line(`release ${job.task} #${job.id}`));
  worker.on('job:suspended', ({ job, kind, until, event }) =>
    line(
      `suspend ${job.task} #${job.id}: ${kind === 'sleep' ? 'sleeping' : `waiting for event ${JSON.stringify(event)}`}${until ? ` until ${until.toISOString()}` : ''}`,
    ),
  );
}

/**
 * Stops the worker gracefully on the first SIGINT/SIGTERM (`stopped` resolves after it); a second
 * one exits at once. `dispose` removes the handlers (the worker never started).
 */
function untilSignal(
  worker: Worker,
  stopTimeoutMs: number,
): { stopped: Promise<void>; received(): boolean; dispose(): void } {
  let first = 0;
  let onSignal: (signal: NodeJS.Signals) => void = () => undefined;
  const dispose = () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
  const stopped = new Promise<void>((resolve, reject) => {
    onSignal = (signal: NodeJS.Signals) => {
      // tsx and npm relay the terminal's Ctrl-C, so one keypress can arrive twice at once.
      if (first && Date.now() - first < SIGNAL_ECHO_MS) return;
      if (first) {
        process.stderr.write(`skiplock worker: second ${signal}, exiting now\n`);
        process.exit(130);
      }
      first = Date.now();
      process.stderr.write(`skiplock worker: ${signal}, stopping (again to exit at once)\n`);
      worker.stop({ timeoutMs: stopTimeoutMs }).then(() => {
        dispose();
        resolve();
      }, reject);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
  return { stopped, received: () => first !== 0, dispose };
}

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

function nonNegativeInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('must be a whole number, 0 or more');
  return n;
}

function list(value: string): string[] {
  const names = value
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
  if (names.length === 0) throw new InvalidArgumentError('must name at least one queue');
  return names;
}
