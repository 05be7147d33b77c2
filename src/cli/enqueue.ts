import { type Command, InvalidArgumentError } from 'commander';
import type { EnqueueOptions } from '../types.js';
import { print, withQueue } from './context.js';
import { duration, integer, json, nameList, positiveInt } from './parse.js';

interface Flags {
  priority?: number;
  dedupeKey?: string;
  dedupeScope?: 'active' | 'pending';
  group?: string;
  sequence?: string;
  delay?: number;
  maxAttempts?: number;
  queue?: string;
  timeout?: number;
  dependsOn?: string[];
  onDependencyFailure?: 'cancel' | 'run';
}

/** `skiplock enqueue TASK [JSON]`. */
export function registerEnqueue(program: Command): void {
  program
    .command('enqueue')
    .description('add a job')
    .argument('<task>', 'task name')
    .argument('[payload]', 'JSON payload (default: null)', json)
    .option('--priority <n>', 'lower runs first (default 100)', integer)
    .option('--dedupe-key <key>', 'at most one active job per key; a hit prints the holder')
    .option(
      '--dedupe-scope <scope>',
      "'pending': one queued and one running job per key (default 'active': one of either)",
      dedupeScope,
    )
    .option('--group <key>', 'group key (a tenant): round-robin between groups, per-group limits')
    .option('--sequence <key>', 'sequence key: jobs sharing it run one at a time, in the order enqueued')
    .option('--delay <duration>', 'run after this delay, e.g. 30s, 5m', duration)
    .option('--max-attempts <n>', 'attempts before the job goes dead (default 3)', positiveInt)
    .option('--queue <name>', "queue name (default 'default')")
    .option('--timeout <duration>', 'deadline of one attempt, e.g. 30s', duration)
    .option(
      '--depends-on <ids>',
      'job ids it waits for, comma-separated: waiting until all are done',
      nameList,
    )
    .option(
      '--on-dependency-failure <what>',
      "'run': run even when a dependency ends dead or cancelled (default 'cancel': cancelled with it)",
      dependencyFailure,
    )
    .addHelpText(
      'after',
      `
Examples:
  $ skiplock enqueue email.send '{"to":"ada@example.com"}'
  $ skiplock enqueue report.build '{"month":"2026-11"}' --priority 10 --delay 5m --dedupe-key report:2026-11
  $ skiplock enqueue search.reindex '{"id":7}' --dedupe-key reindex:7 --dedupe-scope pending
  $ skiplock enqueue invoice.render '{"id":7}' --queue invoices --group tenant-42
  $ skiplock enqueue ledger.post '{"amount":5}' --sequence account:42   # after account:42's earlier jobs
  $ skiplock enqueue cleanup --queue maintenance --json
  $ skiplock enqueue report.merge '{"month":"2026-11"}' --depends-on 41,42   # waits for jobs 41 and 42`,
    )
    .action(async (task: string, payload: unknown, flags: Flags, command: Command) => {
      if (flags.dedupeScope !== undefined && flags.dedupeKey === undefined) {
        command.error("error: option '--dedupe-scope <scope>' needs --dedupe-key", { exitCode: 2 });
      }
      if (flags.onDependencyFailure !== undefined && flags.dependsOn === undefined) {
        command.error("error: option '--on-dependency-failure <what>' needs --depends-on", { exitCode: 2 });
      }
      await withQueue(command, async (queue, options) => {
        const jobOptions: EnqueueOptions = {
          ...(flags.priority === undefined ? {} : { priority: flags.priority }),
          ...(flags.dedupeKey === undefined ? {} : { dedupeKey: flags.dedupeKey }),
          ...(flags.dedupeScope === undefined ? {} : { dedupe: { scope: flags.dedupeScope } }),
          ...(flags.group === undefined ? {} : { group: flags.group }),
          ...(flags.sequence === undefined ? {} : { sequence: flags.sequence }),
          ...(flags.delay === undefined ? {} : { delayMs: flags.delay }),
          ...(flags.maxAttempts === undefined ? {} : { maxAttempts: flags.maxAttempts }),
          ...(flags.queue === undefined ? {} : { queue: flags.queue }),
          ...(flags.timeout === undefined ? {} : { timeoutMs: flags.timeout }),
          ...(flags.dependsOn === undefined ? {} : { dependsOn: flags.dependsOn }),
          ...(flags.onDependencyFailure === undefined
            ? {}
            : { onDependencyFailure: flags.onDependencyFailure }),
        };
        const result = await queue.enqueue(task, payload ?? null, jobOptions);
        const waitsFor =
          flags.dependsOn === undefined
            ? ''
            : `, after job${flags.dependsOn.length === 1 ? '' : 's'} ${flags.dependsOn.join(', ')}`;
        const text = result.created
          ? `Enqueued job ${result.id} (${task}${waitsFor}).`
          : flags.dedupeScope === 'pending'
            ? `Not enqueued: job ${result.id} is queued with dedupe key ${JSON.stringify(flags.dedupeKey)} (scope pending).`
            : `Not enqueued: job ${result.id} is active with dedupe key ${JSON.stringify(flags.dedupeKey)}.`;
        print(options, result, text);
      });
    });
}

/** `--dedupe-scope`: 'active' or 'pending'. */
function dedupeScope(value: string): 'active' | 'pending' {
  if (value !== 'active' && value !== 'pending')
    throw new InvalidArgumentError("must be 'active' or 'pending'");
  return value;
}

/** `--on-dependency-failure`: 'cancel' or 'run'. */
function dependencyFailure(value: string): 'cancel' | 'run' {
  if (value !== 'cancel' && value !== 'run') throw new InvalidArgumentError("must be 'cancel' or 'run'");
  return value;
}
