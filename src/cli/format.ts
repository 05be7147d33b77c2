/**
 * Output for people: aligned tables, colour only on a TTY (and never with NO_COLOR), relative
 * times, and a progress line for long operations.
 */
import { formatRelative } from '../core/duration.js';
import type { Job, JobDependencySummary, JobStatus, JobStep } from '../types.js';

const useColour = (stream: NodeJS.WriteStream) => stream.isTTY === true && !process.env.NO_COLOR;

function paint(code: number, stream: NodeJS.WriteStream = process.stdout) {
  return (text: string) => (useColour(stream) ? `\u001b[${code}m${text}\u001b[0m` : text);
}

export const style = {
  bold: paint(1),
  dim: paint(2),
  red: paint(31),
  green: paint(32),
  yellow: paint(33),
  cyan: paint(36),
};

const STATUS_STYLE: Record<JobStatus, (text: string) => string> = {
  waiting: style.dim,
  pending: style.yellow,
  running: style.cyan,
  done: style.green,
  dead: style.red,
  cancelled: style.dim,
};

export function colourStatus(status: JobStatus): string {
  return STATUS_STYLE[status](status);
}

/** Visible width of a string (ANSI colour codes do not count). */
function width(text: string): number {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips ANSI colour codes.
  return text.replace(/\u001b\[[0-9;]*m/g, '').length;
}

/** An aligned table: header, then rows; numeric-looking columns are right-aligned. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(width(h), ...rows.map((row) => width(row[i] ?? ''))));
  const numeric = header.map(
    (_, i) => rows.length > 0 && rows.every((row) => /^-?[\d.,]+$/.test(row[i] ?? '')),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => {
        const pad = ' '.repeat(Math.max(0, (widths[i] ?? 0) - width(cell)));
        return numeric[i] ? pad + cell : cell + pad;
      })
      .join('  ')
      .trimEnd();
  return [style.bold(line(header)), ...rows.map(line)].join('\n');
}

/** One line per job, for `list`. */
export function jobRows(jobs: Job[], now = new Date()): string[][] {
  return jobs.map((job) => [
    job.id,
    colourStatus(job.status),
    job.task,
    job.queue,
    String(job.priority),
    `${job.attempts}/${job.maxAttempts}`,
    formatRelative(job.status === 'pending' ? job.runAfter : job.updatedAt, now),
    (job.lastError ?? '').split('\n')[0]?.slice(0, 60) ?? '',
  ]);
}

export const JOB_HEADER = ['ID', 'STATUS', 'TASK', 'QUEUE', 'PRIO', 'TRIES', 'WHEN', 'LAST ERROR'];

/** Ids per line of a dependency list in `get`. */
const IDS_PER_LINE = 10;

/**
 * One side of a job's dependencies for people: `—`, or `2 jobs: 41, 42`, or for a bounded list
 * `250 jobs: 43, 44, … and 150 more` (`more than 10,000` when the count stopped there).
 */
export function dependencyList(ids: readonly string[], count: number, exact: boolean): string {
  if (count === 0) return '—';
  const total = `${exact ? '' : 'more than '}${count.toLocaleString('en-US')} job${count === 1 && exact ? '' : 's'}`;
  const lines: string[] = [];
  for (let i = 0; i < ids.length; i += IDS_PER_LINE) lines.push(ids.slice(i, i + IDS_PER_LINE).join(', '));
  const rest = count - ids.length;
  const more =
    rest > 0 || !exact ? ` and ${exact ? '' : 'more than '}${rest.toLocaleString('en-US')} more` : '';
  return `${total}: ${lines.join(',\n')}${more}`;
}

/** Every field of one job, for `get`; with its dependency summary, what it waits for and what waits for it. */
export function jobDetail(
  job: Job,
  dependencies?: JobDependencySummary,
  now = new Date(),
  steps?: readonly JobStep[],
): string {
  const time = (date: Date | null) => (date ? `${date.toISOString()} (${formatRelative(date, now)})` : '—');
  const fields: [string, string][] = [
    ['id', job.id],
    ['status', colourStatus(job.status)],
    ['task', job.task],
    ['queue', job.queue],
    ['priority', String(job.priority)],
    ['attempts', `${job.attempts} of ${job.maxAttempts}`],
    ['dedupe key', job.dedupeKey ?? '—'],
    ['group', job.group ?? '—'],
    [
      'flow',
      job.flowId === null ? '—' : `${job.flowId}${job.flowRef === null ? '' : ` (ref ${job.flowRef})`}`,
    ],
    ...((dependencies === undefined
      ? []
      : [
          [
            'depends on',
            dependencyList(
              dependencies.dependsOn,
              dependencies.dependsOnCount,
              dependencies.dependsOnCountExact,
            ),
          ],
          [
            'dependents',
            dependencyList(
              dependencies.dependents,
              dependencies.dependentsCount,
              dependencies.dependentsCountExact,
            ),
          ],
        ]) as [string, string][]),
    ['run after', time(job.runAfter)],
    ['worker', job.workerId ?? '—'],
    ['lease until', time(job.leaseUntil)],
    ['started', time(job.runStartedAt)],
    ['timeout', job.timeoutMs === null ? '—' : `${job.timeoutMs} ms`],
    ['created', time(job.createdAt)],
    ['updated', time(job.updatedAt)],
    ['payload', JSON.stringify(job.payload, null, 2)],
    ['result', job.result === null ? '—' : JSON.stringify(job.result, null, 2)],
    ['progress', job.progress === null || job.progress === undefined ? '—' : JSON.stringify(job.progress)],
    ['last error', job.lastError ?? '—'],
    ...((steps === undefined ? [] : [['steps', stepList(steps, now)]]) as [string, string][]),
  ];
  const pad = Math.max(...fields.map(([name]) => name.length));
  return fields
    .map(
      ([name, value]) =>
        `${style.bold(name.padEnd(pad))}  ${value.replaceAll('\n', `\n${' '.repeat(pad + 2)}`)}`,
    )
    .join('\n');
}

/**
 * A progress line on stderr: redrawn in place on a TTY; otherwise (a file, a pipe, a CI log) a
 * line at the first update and then at most one every 2 s, and at the end the final figure
 * unless it is already the last line written (a run of one batch writes one line).
 */
export function progress(label: string, total: number | null) {
  const tty = process.stderr.isTTY === true;
  let last = 0;
  let shown: string | null = null;
  const render = (n: number) => {
    if (total !== null && total > 0) {
      const ratio = Math.min(1, n / total);
      const bar = `${'█'.repeat(Math.round(ratio * 24))}${'░'.repeat(24 - Math.round(ratio * 24))}`;
      return `${label} ${bar} ${n.toLocaleString('en-US')}/${total.toLocaleString('en-US')}`;
    }
    return `${label} ${n.toLocaleString('en-US')}`;
  };
  const line = (text: string) => {
    process.stderr.write(`${text}\n`);
    shown = text;
  };
  return {
    update(n: number) {
      const now = Date.now();
      if (tty) {
        process.stderr.write(`\r${render(n)}`);
        last = now;
      } else if (now - last >= 2_000) {
        line(render(n));
        last = now;
      }
    },
    done(n: number) {
      if (tty) process.stderr.write(`\r${render(n)}\n`);
      else if (shown !== null && shown !== render(n)) line(render(n));
    },
  };
}

/** Longest value preview of a step in `get`. */
const STEP_PREVIEW = 60;

/** §12 a job's steps, one a line: name, kind, when, value preview (or what it waits for). */
function stepList(steps: readonly JobStep[], now: Date): string {
  if (steps.length === 0) return '—';
  return steps
    .map((step) => {
      const when = `${step.completedAt.toISOString()} (${formatRelative(step.completedAt, now)})`;
      if (step.pending) {
        const until = step.wakeAt ? ` until ${step.wakeAt.toISOString()}` : '';
        return `${step.name} [event] waiting for ${JSON.stringify(step.event)}${until} since ${when}`;
      }
      if (step.kind === 'sleep' && step.wakeAt && step.wakeAt > now)
        return `${step.name} [sleep] sleeping until ${step.wakeAt.toISOString()}`;
      const text = JSON.stringify(step.value) ?? 'null';
      const preview = text.length > STEP_PREVIEW ? `${text.slice(0, STEP_PREVIEW - 1)}…` : text;
      return `${step.name} [${step.kind}] ${when} ${preview}`;
    })
    .join('\n');
}
