/**
 * The queue commands (SPEC §8, §11): `skiplock queues`, `pause QUEUE`, `resume QUEUE`, and
 * `configure-queue QUEUE` for the global limits and priority aging.
 */
import { type Command, InvalidArgumentError } from 'commander';
import { MAX_LIMIT, MAX_PERIOD_MS } from '../core/queue-args.js';
import type { QueueConfigOptions, QueueInfo } from '../types.js';
import { print, withQueue } from './context.js';
import { style, table } from './format.js';
import { duration } from './parse.js';

/** What `none` parses to (commander turns an option parser's null into ''). */
const NONE = 'none';

interface ConfigureFlags {
  concurrency?: number | typeof NONE;
  rateLimit?: { limit: number; periodMs: number } | typeof NONE;
  groupConcurrency?: number | typeof NONE;
  groupRateLimit?: { limit: number; periodMs: number } | typeof NONE;
  priorityAging?: { step: number; everyMs: number } | typeof NONE;
  agingFloor?: number;
}

export function registerQueues(program: Command): void {
  program
    .command('queues')
    .description('list queues: pause state, limits, waiting, pending and running jobs')
    .addHelpText('after', '\nExamples:\n  $ skiplock queues\n  $ skiplock queues --json')
    .action(async (_flags: unknown, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const queues = await queue.queues();
        print(options, queues, render(queues));
      });
    });

  for (const [verb, paused] of [
    ['pause', true],
    ['resume', false],
  ] as const) {
    program
      .command(verb)
      .description(
        paused
          ? 'stop starting jobs of a queue (running ones finish) until it is resumed'
          : 'start jobs of a paused queue again (workers claim them at once)',
      )
      .argument('<queue>', 'queue name')
      .addHelpText('after', `\nExamples:\n  $ skiplock ${verb} emails`)
      .action(async (name: string, _flags: unknown, command: Command) => {
        await withQueue(command, async (queue, options) => {
          if (paused) await queue.pauseQueue(name);
          else await queue.resumeQueue(name);
          print(options, { name, paused }, `${paused ? 'Paused' : 'Resumed'} queue ${name}.`);
        });
      });
  }

  program
    .command('configure-queue')
    .description(
      'set or clear the global and per-group limits of a queue (across every worker), and its priority aging',
    )
    .argument('<queue>', 'queue name')
    .option('--concurrency <n|none>', 'most jobs of the queue running at once', limitOrNone)
    .option('--rate-limit <n/duration|none>', 'most starts per period, e.g. 50/1s or 1000/1h', rateOrNone)
    .option('--group-concurrency <n|none>', 'most jobs of one group key running at once', limitOrNone)
    .option('--group-rate-limit <n/duration|none>', 'most starts of one group key per period', rateOrNone)
    .option(
      '--priority-aging <step/duration|none>',
      "a waiting job's priority number drops by STEP every DURATION it waits, e.g. 10/1s (§11)",
      agingOrNone,
    )
    .option(
      '--aging-floor <n>',
      'with --priority-aging: aging never takes a priority below this (default 0)',
      floorArg,
    )
    .addHelpText(
      'after',
      `
Examples:
  $ skiplock configure-queue webhooks --concurrency 5
  $ skiplock configure-queue emails --rate-limit 50/1s
  $ skiplock configure-queue invoices --group-concurrency 1 --group-rate-limit 10/1m
  $ skiplock configure-queue emails --concurrency none --rate-limit none
  $ skiplock configure-queue reports --priority-aging 10/1s
  $ skiplock configure-queue reports --priority-aging none`,
    )
    .action(async (name: string, flags: ConfigureFlags, command: Command) => {
      const change: QueueConfigOptions = {};
      for (const key of ['concurrency', 'rateLimit', 'groupConcurrency', 'groupRateLimit'] as const) {
        const value = flags[key];
        if (value !== undefined) Object.assign(change, { [key]: value === NONE ? null : value });
      }
      if (
        flags.agingFloor !== undefined &&
        (flags.priorityAging === undefined || flags.priorityAging === NONE)
      ) {
        command.error('configure-queue: --aging-floor goes with --priority-aging STEP/DURATION', {
          exitCode: 2,
        });
      }
      if (flags.priorityAging !== undefined) {
        change.priorityAging =
          flags.priorityAging === NONE
            ? null
            : {
                everyMs: flags.priorityAging.everyMs,
                step: flags.priorityAging.step,
                floor: flags.agingFloor ?? 0,
              };
      }
      if (Object.keys(change).length === 0) {
        command.error(
          'configure-queue: give at least one of --concurrency, --rate-limit, --group-concurrency, --group-rate-limit, --priority-aging (use pause/resume to pause a queue)',
          { exitCode: 2 },
        );
      }
      await withQueue(command, async (queue, options) => {
        const config = await queue.configureQueue(name, change);
        print(options, config, `Queue ${name}: ${limits(config)}.`);
      });
    });
}

function limitOrNone(value: string): number | typeof NONE {
  if (value === NONE) return NONE;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer or none');
  if (n > MAX_LIMIT) throw new InvalidArgumentError(`must be at most ${MAX_LIMIT.toLocaleString('en-US')}`);
  return n;
}

/** §11 STEP/DURATION: the priority number drops by STEP for every DURATION a job has waited. */
function agingOrNone(value: string): { step: number; everyMs: number } | typeof NONE {
  if (value === NONE) return NONE;
  const match = /^(\d+)\/(.+)$/.exec(value);
  const step = Number(match?.[1]);
  if (!match || !Number.isSafeInteger(step) || step < 1) {
    throw new InvalidArgumentError('must be STEP/DURATION with STEP ≥ 1, such as 10/1s, or none');
  }
  const everyMs = duration(match[2] as string);
  if (everyMs < 1) throw new InvalidArgumentError('the duration must be at least 1 ms, e.g. 10/1s');
  if (everyMs > MAX_PERIOD_MS) throw new InvalidArgumentError('the duration must be at most 1d, e.g. 10/1h');
  return { step, everyMs };
}

function floorArg(value: string): number {
  const n = Number(value);
  if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(n))
    throw new InvalidArgumentError('must be an integer');
  return n;
}

function rateOrNone(value: string): { limit: number; periodMs: number } | typeof NONE {
  if (value === NONE) return NONE;
  const match = /^(\d+)\/(.+)$/.exec(value);
  const limit = Number(match?.[1]);
  if (!match || !Number.isInteger(limit) || limit < 1) {
    throw new InvalidArgumentError('must be N/DURATION with N ≥ 1, such as 50/1s or 1000/1h, or none');
  }
  if (limit > MAX_LIMIT)
    throw new InvalidArgumentError(`N must be at most ${MAX_LIMIT.toLocaleString('en-US')}`);
  const periodMs = duration(match[2] as string);
  if (periodMs < 1) throw new InvalidArgumentError('the period must be at least 1 ms, e.g. 50/1s');
  if (periodMs > MAX_PERIOD_MS) throw new InvalidArgumentError('the period must be at most 1d, e.g. 1000/1h');
  return { limit, periodMs };
}

type Limits = Pick<
  QueueInfo,
  'paused' | 'concurrency' | 'rateLimit' | 'groupConcurrency' | 'groupRateLimit' | 'priorityAging'
>;

function limits(q: Limits): string {
  const parts = [
    q.paused ? 'paused' : 'active',
    q.concurrency === null ? null : `concurrency ${q.concurrency}`,
    q.rateLimit === null ? null : `${rate(q.rateLimit)}`,
    q.groupConcurrency === null ? null : `group concurrency ${q.groupConcurrency}`,
    q.groupRateLimit === null ? null : `${rate(q.groupRateLimit)} per group`,
    q.priorityAging === null ? null : `priority aging ${aging(q.priorityAging)}`,
  ];
  return parts.filter((part) => part !== null).join(', ');
}

function render(queues: QueueInfo[]): string {
  if (queues.length === 0)
    return 'No queues: none is configured and none has waiting, pending or running jobs.';
  return table(
    ['QUEUE', 'STATE', 'WAITING', 'PENDING', 'RUNNING', 'CONCURRENCY', 'RATE LIMIT', 'PER GROUP', 'AGING'],
    queues.map((q) => [
      q.name,
      q.paused ? style.yellow('paused') : 'active',
      String(q.waiting),
      String(q.pending),
      String(q.running),
      q.concurrency === null ? '–' : String(q.concurrency),
      q.rateLimit === null ? '–' : rate(q.rateLimit),
      perGroup(q),
      q.priorityAging === null ? '–' : aging(q.priorityAging),
    ]),
  );
}

/** §11 `10 per 1 s, floor 0`. */
function aging(a: { everyMs: number; step: number; floor: number }): string {
  return `${a.step} per ${exactDuration(a.everyMs)}, floor ${a.floor}`;
}

function rate(limit: { limit: number; periodMs: number }): string {
  return `${limit.limit} per ${exactDuration(limit.periodMs)}`;
}

/** A period as set, never rounded (90 s stays 90 s, not "2 min"). */
function exactDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['min', 60_000],
    ['s', 1_000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size} ${unit}`;
  }
  return `${ms} ms`;
}

/** The per-group limits in one cell: `1 running, 10 per 1m`, or – when there are none. */
function perGroup(q: Limits): string {
  const parts = [
    q.groupConcurrency === null ? null : `${q.groupConcurrency} running`,
    q.groupRateLimit === null ? null : rate(q.groupRateLimit),
  ].filter((part) => part !== null);
  return parts.length === 0 ? '–' : parts.join(', ');
}
