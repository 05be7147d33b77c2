/**
 * The queue commands (SPEC §8): `skiplock queues`, `pause QUEUE`, `resume QUEUE`, and
 * `configure-queue QUEUE` for the global limits.
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
    .description('set or clear the global and per-group limits of a queue (across every worker)')
    .argument('<queue>', 'queue name')
    .option('--concurrency <n|none>', 'most jobs of the queue running at once', limitOrNone)
    .option('--rate-limit <n/duration|none>', 'most starts per period, e.g. 50/1s or 1000/1h', rateOrNone)
    .option('--group-concurrency <n|none>', 'most jobs of one group key running at once', limitOrNone)
    .option('--group-rate-limit <n/duration|none>', 'most starts of one group key per period', rateOrNone)
    .addHelpText(
      'after',
      `
Examples:
  $ skiplock configure-queue webhooks --concurrency 5
  $ skiplock configure-queue emails --rate-limit 50/1s
  $ skiplock configure-queue invoices --group-concurrency 1 --group-rate-limit 10/1m
  $ skiplock configure-queue emails --concurrency none --rate-limit none`,
    )
    .action(async (name: string, flags: ConfigureFlags, command: Command) => {
      const change: QueueConfigOptions = {};
      for (const key of ['concurrency', 'rateLimit', 'groupConcurrency', 'groupRateLimit'] as const) {
        const value = flags[key];
        if (value !== undefined) Object.assign(change, { [key]: value === NONE ? null : value });
      }
      if (Object.keys(change).length === 0) {
        command.error(
          'configure-queue: give at least one of --concurrency, --rate-limit, --group-concurrency, --group-rate-limit (use pause/resume to pause a queue)',
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

type Limits = Pick<QueueInfo, 'paused' | 'concurrency' | 'rateLimit' | 'groupConcurrency' | 'groupRateLimit'>;

function limits(q: Limits): string {
  const parts = [
    q.paused ? 'paused' : 'active',
    q.concurrency === null ? null : `concurrency ${q.concurrency}`,
    q.rateLimit === null ? null : `${rate(q.rateLimit)}`,
    q.groupConcurrency === null ? null : `group concurrency ${q.groupConcurrency}`,
    q.groupRateLimit === null ? null : `${rate(q.groupRateLimit)} per group`,
  ];
  return parts.filter((part) => part !== null).join(', ');
}

function render(queues: QueueInfo[]): string {
  if (queues.length === 0)
    return 'No queues: none is configured and none has waiting, pending or running jobs.';
  return table(
    ['QUEUE', 'STATE', 'WAITING', 'PENDING', 'RUNNING', 'CONCURRENCY', 'RATE LIMIT', 'PER GROUP'],
    queues.map((q) => [
      q.name,
      q.paused ? style.yellow('paused') : 'active',
      String(q.waiting),
      String(q.pending),
      String(q.running),
      q.concurrency === null ? '–' : String(q.concurrency),
      q.rateLimit === null ? '–' : rate(q.rateLimit),
      perGroup(q),
    ]),
  );
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
