/**
 * The schedule commands (SPEC §8): `skiplock schedules`, `schedule NAME CRON TASK [JSON]`,
 * `unschedule NAME`, `pause-schedule NAME`, `resume-schedule NAME`.
 */
import type { Command } from 'commander';
import { formatRelative } from '../core/duration.js';
import { NotFoundError, ValidationError } from '../errors.js';
import type { CatchUp, Schedule, ScheduleOptions } from '../types.js';
import { print, withQueue } from './context.js';
import { style, table } from './format.js';
import { duration, integer, json, positiveInt } from './parse.js';

interface ScheduleFlags {
  tz?: string;
  queue?: string;
  priority?: number;
  maxAttempts?: number;
  timeout?: number;
  overlap?: boolean;
  catchUp?: string;
}

export function registerSchedules(program: Command): void {
  program
    .command('schedules')
    .description('list the cron schedules with their next and last run')
    .addHelpText('after', '\nExamples:\n  $ skiplock schedules\n  $ skiplock schedules --json')
    .action(async (_flags: unknown, command: Command) => {
      await withQueue(command, async (queue, options) => {
        const schedules = await queue.schedules();
        print(options, schedules, render(schedules));
      });
    });

  program
    .command('schedule')
    .description('create or update a cron schedule (idempotent: safe to run at every deploy)')
    .argument('<name>', 'schedule name')
    .argument('<cron>', 'cron expression: 5 fields, or 6 with seconds first, e.g. "0 9 * * 1-5"')
    .argument('<task>', 'task of the jobs it enqueues')
    .argument('[payload]', 'JSON payload of those jobs (default: null)', json)
    .option('--tz <zone>', 'IANA time zone the cron is read in (default UTC)')
    .option('--queue <name>', "queue of its jobs (default 'default')")
    .option('--priority <n>', 'priority of its jobs (lower runs first, default 100)', integer)
    .option('--max-attempts <n>', 'attempts of its jobs (default 3)', positiveInt)
    .option('--timeout <duration>', 'deadline of one attempt, e.g. 30s', duration)
    .option('--overlap', 'fire a tick even while the previous tick’s job is still active')
    .option('--catch-up <mode>', 'ticks missed while no worker ran: latest (default), none, or a count')
    .addHelpText(
      'after',
      `
Examples:
  $ skiplock schedule daily-report "0 9 * * 1-5" report.build '{"kind":"daily"}' --tz Europe/Berlin
  $ skiplock schedule heartbeat "*/10 * * * * *" ping --catch-up none`,
    )
    .action(
      async (name: string, cron: string, task: string, payload: unknown, flags: ScheduleFlags, command) => {
        const spec: ScheduleOptions = {
          cron,
          task,
          ...(payload === undefined ? {} : { payload }),
          ...(flags.tz === undefined ? {} : { tz: flags.tz }),
          ...(flags.queue === undefined ? {} : { queue: flags.queue }),
          ...(flags.priority === undefined ? {} : { priority: flags.priority }),
          ...(flags.maxAttempts === undefined ? {} : { maxAttempts: flags.maxAttempts }),
          ...(flags.timeout === undefined ? {} : { timeoutMs: flags.timeout }),
          ...(flags.overlap === undefined ? {} : { overlap: flags.overlap }),
          ...(flags.catchUp === undefined ? {} : { catchUp: catchUpFlag(flags.catchUp) }),
        };
        await withQueue(command as Command, async (queue, options) => {
          const schedule = await queue.schedule(name, spec);
          print(options, schedule, `Schedule ${name}: next run ${when(schedule.nextRunAt)}.`);
        });
      },
    );

  program
    .command('unschedule')
    .description('remove a schedule (jobs it already enqueued stay)')
    .argument('<name>', 'schedule name')
    .addHelpText('after', '\nExamples:\n  $ skiplock unschedule daily-report')
    .action(async (name: string, _flags: unknown, command: Command) => {
      await withQueue(command, async (queue, options) => {
        if (!(await queue.unschedule(name)))
          throw new NotFoundError(`No schedule named ${JSON.stringify(name)}`);
        print(options, { name, removed: true }, `Removed schedule ${name}.`);
      });
    });

  for (const [verb, pause] of [
    ['pause', true],
    ['resume', false],
  ] as const) {
    program
      .command(`${verb}-schedule`)
      .description(
        pause
          ? 'stop firing a schedule until it is resumed'
          : 'fire a paused schedule again, from its next tick after now',
      )
      .argument('<name>', 'schedule name')
      .addHelpText('after', `\nExamples:\n  $ skiplock ${verb}-schedule daily-report`)
      .action(async (name: string, _flags: unknown, command: Command) => {
        await withQueue(command, async (queue, options) => {
          const found = pause ? await queue.pauseSchedule(name) : await queue.resumeSchedule(name);
          if (!found) throw new NotFoundError(`No schedule named ${JSON.stringify(name)}`);
          print(options, { name, paused: pause }, `${pause ? 'Paused' : 'Resumed'} schedule ${name}.`);
        });
      });
  }
}

function catchUpFlag(value: string): CatchUp {
  if (value === 'latest' || value === 'none') return value;
  if (/^\d+$/.test(value)) return Number(value);
  throw new ValidationError('--catch-up', `must be latest, none or a number of ticks, got "${value}"`);
}

function when(date: Date | null, now = new Date()): string {
  return date === null ? '–' : `${date.toISOString()} (${formatRelative(date, now)})`;
}

function render(schedules: Schedule[]): string {
  if (schedules.length === 0) return 'No schedules.';
  const now = new Date();
  return table(
    ['NAME', 'CRON', 'TZ', 'TASK', 'NEXT RUN', 'LAST RUN', 'LAST JOB', 'STATE'],
    schedules.map((s) => [
      s.name,
      s.cron,
      s.tz,
      s.task,
      s.paused ? '–' : formatRelative(s.nextRunAt, now),
      s.lastRunAt === null ? '–' : formatRelative(s.lastRunAt, now),
      s.lastJobId ?? '–',
      s.paused ? style.yellow('paused') : 'active',
    ]),
  );
}
