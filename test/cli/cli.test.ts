/**
 * Guards SPEC §4 end to end: the real `skiplock` command (`node --import tsx src/cli/main.ts`)
 * spawned against a real PostgreSQL database, with stdout and stderr piped (never a TTY).
 *
 * - Every data subcommand with `--json`, its one JSON line parsed and checked against the rows in
 *   the database: migrate (up to date; a fresh schema gets every migration), enqueue (created; a
 *   dedupe hit names the holder; --delay/--priority/--max-attempts/--queue/--timeout land in the
 *   row; --depends-on makes it wait), get, flow ID (layers, dependencies by ref, counts; a
 *   malformed id exits 2, an unknown flow 3), list (--status/--task/--queue, --limit, --after
 *   paging; --status waiting), requeue ID and
 *   --all-dead [--task] (counts; skips a dead job whose dedupe key is active again), cancel
 *   (pending, running, finished), prune --older-than 7d (old finished rows only), ops (each count
 *   and signal against SQL).
 * - Output for people: list's aligned table with relative times and the next-page hint, get's
 *   fields, ops's tables, and no ANSI escape when stdout is not a TTY; on a pseudo-TTY (through
 *   util-linux `script`) colour appears, and NO_COLOR removes it.
 * - Progress of long operations (requeue --all-dead with and without --task; prune of 12,000 rows,
 *   3 batches) goes to stderr, never stdout; with --json (requeue of 2,500 rows in 3 batches,
 *   prune) nothing is printed on stderr at all.
 * - `--help` of every subcommand exits 0 with examples; durations 30s, 5m, 5s, 7d are accepted.
 * - The error policy: one line on stderr starting with "skiplock: ", nothing on stdout, exit 2 for
 *   bad arguments (unknown command, malformed id, bad duration, JSON or status, no database URL),
 *   3 for no such job (or not in that state), 1 for an unreachable database, and no stack trace
 *   unless --verbose.
 *
 * Deliberate breaks seen failing (in a private copy of the tree, never here):
 * - src/cli/main.ts printing `error.stack` whatever --verbose: every one-line error failed (a
 *   stack after the line, "    at " on stderr).
 * - src/cli/context.ts `print()` ignoring --json (always the text): every JSON.parse failed.
 * - src/cli/format.ts `useColour` without the isTTY check: the piped list/get/ops output carried
 *   ANSI codes; without the NO_COLOR check: the pseudo-TTY run with NO_COLOR=1 did.
 * - src/cli/requeue.ts creating the progress bar also with --json: the --all-dead --json run
 *   printed progress lines on stderr.
 * - src/cli/list.ts dropping --after: the "second page" was the first one again.
 * - src/cli/parse.ts `duration()` returning Number(value) (no units): `enqueue --delay 30s`
 *   exited 2, and `prune --older-than 7x` was refused only later, by the Queue
 *   ("olderThanMs: must be …"), instead of as a bad value of --older-than.
 * - src/cli/flow.ts printing an empty flow instead of refusing it: `flow` of an unknown id exited
 *   0 instead of 3; src/core/flow-layers.ts placing every job in layer 0: the flow's rows
 *   came out in the wrong layers and order; src/cli/enqueue.ts
 *   dropping --depends-on: the job was pending instead of waiting.
 * - src/cli/main.ts mapping ERR_NOT_FOUND to 1: get of an unknown job, requeue of a pending one
 *   and cancel of a finished one exited 1 instead of 3.
 * - src/core/validate.ts toJsonText without its NaN/±Infinity check (before issue 21): `enqueue
 *   cli.nonfinite 1e999` printed "Enqueued job N" and exited 0, the job's payload null.
 */
import { spawn, spawnSync } from 'node:child_process';
import { beforeAll, describe, expect, test } from 'vitest';
import type { Queue } from '../../src/queue.js';
import { LIST_WINDOW } from '../../src/store/job-store.js';
import { type FlowGraph, JOB_STATUSES, type Job, type JobPage, type OpsSnapshot } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { REPO_ROOT } from '../support/spawn.js';
import {
  ANSI,
  type CliOptions,
  type CliResult,
  cliArgs,
  cliEnv,
  describeRun,
  json,
  ok,
  oneLineError,
  runCli,
} from './run-cli.js';

const db = useTestDatabase();
let queue: Queue;

beforeAll(() => {
  queue = db.queue({ poolSize: 4 });
});

/** `skiplock --schema <test schema> <args>` on this file's database. */
const run = (args: string[], options: CliOptions = {}) => runCli(args, { url: db.url, ...options });

const SUBCOMMANDS = [
  'migrate',
  'worker',
  'enqueue',
  'get',
  'flow',
  'ops',
  'list',
  'requeue',
  'cancel',
  'prune',
  'dashboard',
  'dev',
  'schedules',
  'schedule',
  'unschedule',
  'pause-schedule',
  'resume-schedule',
  'queues',
  'pause',
  'resume',
  'configure-queue',
  'sequences',
  'emit',
];

interface Seed {
  status?: 'pending' | 'running' | 'done' | 'dead' | 'cancelled';
  queue?: string;
  /** SQL interval: how long ago the row was last updated (finished). */
  age?: string;
  /** SQL interval added to now() for run_after (pending rows). */
  runIn?: string;
  lastError?: string;
  dedupeKey?: string;
}

/** Inserts `n` rows of `task` straight into the jobs table; returns their ids in ascending order. */
async function seed(task: string, n: number, s: Seed = {}): Promise<string[]> {
  const status = s.status ?? 'pending';
  const rows = await db.sql<{ id: string }>(
    `INSERT INTO ${db.jobs} (task, queue, status, attempts, max_attempts, last_error, dedupe_key,
        run_after, updated_at, created_at)
     SELECT $1, $2, $3, CASE WHEN $3 IN ('done', 'dead', 'running') THEN 3 ELSE 0 END, 3, $4, $5,
        now() + $6::interval, now() - $7::interval, now() - $7::interval
     FROM generate_series(1, $8)
     RETURNING id::text AS id`,
    [
      task,
      s.queue ?? 'default',
      status,
      s.lastError ?? (status === 'dead' ? 'Error: seeded failure' : null),
      s.dedupeKey ?? null,
      s.runIn ?? '0 s',
      s.age ?? '0 s',
      n,
    ],
  );
  return rows.map((r) => r.id).sort((a, b) => Number(a) - Number(b));
}

async function row(id: string) {
  const [found] = await db.sql<{
    task: string;
    queue: string;
    status: string;
    priority: number;
    max_attempts: number;
    attempts: number;
    timeout_ms: number | null;
    payload: unknown;
    dedupe_key: string | null;
    delay_s: number;
    cancel_requested: boolean;
  }>(
    `SELECT task, queue, status, priority, max_attempts, attempts, timeout_ms, payload, dedupe_key,
            extract(epoch FROM run_after - created_at)::float8 AS delay_s,
            cancel_requested_at IS NOT NULL AS cancel_requested
     FROM ${db.jobs} WHERE id = $1`,
    [id],
  );
  if (!found) throw new Error(`no row ${id}`);
  return found;
}

async function statusCounts(where = 'true', values: unknown[] = []): Promise<Record<string, number>> {
  const rows = await db.sql<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM ${db.jobs} WHERE ${where} GROUP BY status`,
    values,
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

const ids = (jobs: Job[]) => jobs.map((j) => j.id);
/** A value as JSON carries it (dates as ISO strings). */
const asJsonValue = (value: unknown): unknown => JSON.parse(JSON.stringify(value));
const desc = (list: string[]) => [...list].sort((a, b) => Number(b) - Number(a));
const lines = (text: string) => text.replace(/\n$/, '').split('\n');
/** The options of a --help text, one string each: its wrapped lines joined by one space. */
function optionLines(help: string): string[] {
  const options: string[] = [];
  let inOptions = false;
  for (const line of lines(help)) {
    if (/^\S/.test(line)) inOptions = line === 'Options:';
    else if (inOptions && /^ {2}-/.test(line)) options.push(line.trim().replace(/\s{2,}/g, ' '));
    else if (inOptions && /^ {3,}\S/.test(line) && options.length > 0)
      options[options.length - 1] += ` ${line.trim()}`;
  }
  return options;
}

/** util-linux `script`, to give the CLI a pseudo-TTY (Linux only). */
const hasScript =
  process.platform === 'linux' && spawnSync('script', ['--version'], { stdio: 'ignore' }).status === 0;

/** Runs the CLI on a pseudo-TTY through `script`; returns what the terminal showed. */
async function runOnTty(args: string[], env: Record<string, string | undefined> = {}): Promise<CliResult> {
  const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;
  const command = [process.execPath, ...cliArgs(args)].map(quote).join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qec', command, '/dev/null'], {
      cwd: REPO_ROOT,
      env: cliEnv(db.url, env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    child.once('error', reject);
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

// Spawns queue up (run-cli.ts runs a few at a time), so a test's clock starts before its turn.
describe.concurrent('each subcommand, independently', { timeout: 180_000 }, () => {
  test('--help of every subcommand exits 0 with examples; the root help lists them all', async () => {
    const [root, ...helps] = await Promise.all([
      run(['--help']),
      ...SUBCOMMANDS.map((name) => run([name, '--help'])),
    ]);
    const commands = ok(root)
      .split('Commands:\n')[1]
      ?.split('\n')
      .map((line) => /^ {2}([a-z][a-z-]*)\b/.exec(line)?.[1])
      .filter((name): name is string => name !== undefined && name !== 'help');
    expect(commands?.sort()).toEqual([...SUBCOMMANDS].sort());
    helps.forEach((help, i) => {
      const text = ok(help);
      expect(text, SUBCOMMANDS[i]).toMatch(new RegExp(`^Usage: skiplock ${SUBCOMMANDS[i]}\\b`));
      expect(text, SUBCOMMANDS[i]).toMatch(/\nExamples:\n {2}\$ /);
      expect(text, SUBCOMMANDS[i]).not.toMatch(ANSI);
      // Issue 26: `(default 30000) (default: 30000)`: a default said once per option. Deliberate
      // break seen failing: worker.ts with "(default 30000)" back in --stop-timeout-ms's text.
      for (const option of optionLines(text)) {
        expect(option.match(/\(default\b/g)?.length ?? 0, option).toBeLessThanOrEqual(1);
      }
    });
    const option = (name: string, prefix: string) =>
      optionLines(ok(helps[SUBCOMMANDS.indexOf(name)] as CliResult)).find((line) => line.startsWith(prefix));
    expect(option('worker', '--stop-timeout-ms')).toBe(
      '--stop-timeout-ms <n> on SIGINT/SIGTERM, wait this long for running jobs (default: 30000)',
    );
    expect(option('ops', '--interval')).toBe(
      '--interval <duration> refresh interval with --watch (default: 2s)',
    );
    expect(option('list', '--limit')).toBe('--limit <n> how many, at most 1000 (default: 50)');
  });

  // Issue 26: a prune of one batch with stderr not a terminal left "prune 3" twice. Deliberate
  // break seen failing: format.ts progress().done() writing its line whenever one was written
  // before (the old rule): stderr was "prune 3\nprune 3\n". Its own schema: --older-than 1s
  // would take other tests' finished rows.
  test('prune in text mode with stderr not a terminal: one progress line, then the summary', async () => {
    const schema = 'cli_prune_text';
    const other = (args: string[]) => runCli(['--schema', schema, ...args], { url: db.url, schema: false });
    ok(await other(['migrate']));
    const own = db.queue({ schema });
    try {
      const made = await Promise.all([1, 2, 3].map((n) => own.enqueue('cli.prune.text', { n })));
      await db.sql(
        `UPDATE ${schema}.jobs SET status = 'done', updated_at = now() - interval '1 hour' WHERE id = ANY($1::bigint[])`,
        [made.map((r) => r.id)],
      );
    } finally {
      await own.close();
    }
    const pruned = await other(['prune', '--older-than', '1s']);
    expect(pruned.code, describeRun(pruned)).toBe(0);
    expect(pruned.stdout).toBe('Deleted 3 finished jobs older than 1 s.\n');
    expect(pruned.stderr).toBe('prune 3\n');
  });

  test('bad arguments and failures: one line on stderr, exit 2 / 1, no stack unless --verbose', async () => {
    const unreachable = 'postgres://127.0.0.1:1/x';
    const [noDatabase, unknownCommand, malformedId, badDuration, badJson, badStatus, down, downVerbose] =
      await Promise.all([
        runCli(['list']), // neither DATABASE_URL nor --database-url
        run(['frobnicate']),
        run(['get', 'abc']),
        run(['prune', '--older-than', '7x']),
        run(['enqueue', 'cli.bad', '{not json']),
        run(['list', '--status', 'finished']),
        // --database-url wins over DATABASE_URL (which points at the live test database).
        run(['list', '--database-url', unreachable]),
        run(['--verbose', 'get', '1', '--database-url', unreachable]),
      ]);
    oneLineError(noDatabase, 2, /^skiplock: --database-url: no database given: pass --database-url/);
    oneLineError(unknownCommand, 2, /^skiplock: unknown command 'frobnicate'/);
    oneLineError(malformedId, 2, /^skiplock: id: must be a job id .*"abc"/);
    oneLineError(badDuration, 2, /'7x' is invalid.*duration like 30s/);
    oneLineError(badJson, 2, /'\{not json' is invalid .*must be JSON/);
    oneLineError(badStatus, 2, /--status: .*"finished"/);
    oneLineError(down, 1, /^skiplock: .*ECONNREFUSED/);
    expect(await statusCounts('task = $1', ['cli.bad'])).toEqual({});

    // --verbose: the same first line, then the stack.
    expect(downVerbose.code, describeRun(downVerbose)).toBe(1);
    expect(downVerbose.stdout).toBe('');
    expect(lines(downVerbose.stderr)[0]).toMatch(/^skiplock: .*ECONNREFUSED/);
    expect(downVerbose.stderr).toMatch(/\n {4}at /);
  });

  test('migrate --json: up to date in the migrated schema; a new schema gets every migration', async () => {
    const fresh = `${TEST_SCHEMA} cli`;
    const [upToDate, created] = await Promise.all([
      run(['migrate', '--json']),
      run(['--schema', fresh, 'migrate', '--json'], { schema: false }),
    ]);
    const current = json<{ schema: string; applied: number[]; version: number }>(upToDate);
    expect(current).toEqual({ schema: TEST_SCHEMA, applied: [], version: expect.any(Number) });
    expect(current.version).toBeGreaterThanOrEqual(2);
    expect(json(created)).toEqual({
      schema: fresh,
      applied: Array.from({ length: current.version }, (_, i) => i + 1),
      version: current.version,
    });
    expect(await db.jobCount(fresh)).toBe(0);
  });

  test('enqueue --json: created; options land in the row; a dedupe hit names the holder', async () => {
    const key = 'cli-dedupe-key';
    const holder = await queue.enqueue('cli.dedupe', { first: true }, { dedupeKey: key });
    const [plain, delayed, tuned, human, hit] = await Promise.all([
      run(['enqueue', 'cli.enqueue', '{"to":"ada@example.com","n":[1,2]}', '--json']),
      run(['enqueue', 'cli.delay', '--delay', '30s', '--json']),
      run([
        'enqueue',
        'cli.tuned',
        'null',
        '--priority',
        '5',
        '--max-attempts',
        '2',
        '--queue',
        'cli-tuned',
        '--timeout',
        '5s',
        '--json',
      ]),
      run(['enqueue', 'cli.human', '"text"', '--delay', '5m']),
      run(['enqueue', 'cli.dedupe', '{"second":true}', '--dedupe-key', key, '--json']),
    ]);

    const created = json<{ id: string; created: boolean }>(plain);
    expect(created).toEqual({ id: expect.stringMatching(/^\d+$/), created: true });
    expect(await row(created.id)).toMatchObject({
      task: 'cli.enqueue',
      queue: 'default',
      status: 'pending',
      priority: 100,
      max_attempts: 3,
      timeout_ms: null,
      payload: { to: 'ada@example.com', n: [1, 2] },
      dedupe_key: null,
    });
    expect((await row(created.id)).delay_s).toBeLessThan(1);

    const later = json<{ id: string; created: boolean }>(delayed);
    expect(later.created).toBe(true);
    const delayedRow = await row(later.id);
    expect(delayedRow.delay_s).toBeGreaterThanOrEqual(29.5);
    expect(delayedRow.delay_s).toBeLessThanOrEqual(31);

    const tunedRow = await row(json<{ id: string }>(tuned).id);
    expect(tunedRow).toMatchObject({
      task: 'cli.tuned',
      queue: 'cli-tuned',
      priority: 5,
      max_attempts: 2,
      timeout_ms: 5_000,
      payload: null,
    });

    const humanId = /^Enqueued job (\d+) \(cli\.human\)\.\n$/.exec(ok(human))?.[1];
    expect(humanId, human.stdout).toBeDefined();
    const humanRow = await row(humanId as string);
    expect(humanRow.payload).toBe('text');
    expect(humanRow.delay_s).toBeGreaterThanOrEqual(299.5);
    expect(humanRow.delay_s).toBeLessThanOrEqual(301);

    expect(json(hit)).toEqual({ id: holder.id, created: false });
    expect(await statusCounts('dedupe_key = $1', [key])).toEqual({ pending: 1 });
  });

  test('get: --json gives the job; the text lists its fields; unknown id exits 3', async () => {
    const { id } = await queue.enqueue(
      'cli.get',
      { to: 'ada', list: [1, 2] },
      { dedupeKey: 'cli-get', priority: 7 },
    );
    const [asJson, asText, unknown] = await Promise.all([
      run(['get', id, '--json']),
      run(['get', id]),
      run(['get', '987654321']),
    ]);
    const job = json<Record<string, unknown>>(asJson);
    expect(job).toMatchObject({
      id,
      task: 'cli.get',
      queue: 'default',
      status: 'pending',
      priority: 7,
      payload: { to: 'ada', list: [1, 2] },
      result: null,
      dedupeKey: 'cli-get',
      attempts: 0,
      maxAttempts: 3,
      lastError: null,
      workerId: null,
    });
    expect(Number.isNaN(Date.parse(job.createdAt as string))).toBe(false);
    expect(job).toMatchObject({ dependsOn: [], dependsOnCount: 0, dependents: [], dependentsCount: 0 });

    const text = ok(asText);
    expect(text).not.toMatch(ANSI);
    expect(text).toMatch(new RegExp(`^id +${id}$`, 'm'));
    expect(text).toMatch(/^status +pending$/m);
    expect(text).toMatch(/^task +cli\.get$/m);
    expect(text).toMatch(/^priority +7$/m);
    expect(text).toMatch(/^attempts +0 of 3$/m);
    expect(text).toMatch(/^dedupe key +cli-get$/m);
    expect(text).toMatch(/^depends on +—$/m);
    expect(text).toMatch(/^dependents +—$/m);
    expect(text).toMatch(/^created +\d{4}-\d\d-\d\dT[\d:.]+Z \((now|\d+ (s|min) ago)\)$/m);
    expect(text).toMatch(/^ +"to": "ada",$/m); // the payload, pretty-printed and indented
    // Every field's value starts in the same column.
    const columns = new Set(
      lines(text)
        .filter((line) => /^[a-z]/.test(line))
        .map((line) => /^[a-z]+(?: [a-z]+)* {2,}/.exec(line)?.[0].length),
    );
    expect(columns.size, text).toBe(1);

    oneLineError(unknown, 3, /^skiplock: No job with id 987654321$/m);
  });

  // Issue 26: `get` of a waiting job did not say what it waits for. Deliberate break seen
  // failing: get.ts printing `jobDetail(job)` and `job` without the summary (no "depends on"
  // row, no dependsOn in --json).
  // Its own schema: 108 jobs here would give the other tests' tables three-digit ids.
  test('get of a waiting job: what it waits for and what waits for it, bounded to 100 ids with counts', async () => {
    const schema = 'cli_get_deps';
    const own = db.queue({ schema });
    await own.migrate();
    const get = (args: string[]) =>
      runCli(['--schema', schema, 'get', ...args], { url: db.url, schema: false });
    const first = await own.enqueue('cli.get.dep', null);
    const second = await own.enqueue('cli.get.dep', null);
    const waiting = await own.enqueue('cli.get.waiting', null, { dependsOn: [first.id, second.id] });
    const fanOut = await Promise.all(
      Array.from({ length: 105 }, () => own.enqueue('cli.get.fan', null, { dependsOn: [first.id] })),
    );
    const fanIds = fanOut.map((r) => r.id).sort((a, b) => Number(a) - Number(b));
    const [waitingText, waitingJson, firstText, firstJson] = await Promise.all([
      get([waiting.id]),
      get([waiting.id, '--json']),
      get([first.id]),
      get([first.id, '--json']),
    ]);
    const text = ok(waitingText);
    expect(text).toMatch(/^status +waiting$/m);
    expect(text).toMatch(new RegExp(`^depends on +2 jobs: ${first.id}, ${second.id}$`, 'm'));
    expect(text).toMatch(/^dependents +—$/m);
    expect(json(waitingJson)).toMatchObject({
      id: waiting.id,
      status: 'waiting',
      dependsOn: [first.id, second.id],
      dependsOnCount: 2,
      dependsOnCountExact: true,
      dependents: [],
      dependentsCount: 0,
    });

    // 106 dependents: the first 100, ten to a line under the value column, then "and 6 more".
    const dependents = [waiting.id, ...fanIds].sort((a, b) => Number(a) - Number(b));
    const shown = dependents.slice(0, 100);
    const rows: string[] = [];
    for (let i = 0; i < shown.length; i += 10) rows.push(shown.slice(i, i + 10).join(', '));
    const label = 'lease until'.length; // the longest field name sets the value column
    expect(ok(firstText)).toContain(
      `\n${'dependents'.padEnd(label)}  106 jobs: ${rows.join(`,\n${' '.repeat(label + 2)}`)} and 6 more\n`,
    );
    expect(ok(firstText)).toMatch(/^depends on +—$/m);
    expect(json(firstJson)).toMatchObject({
      dependsOn: [],
      dependsOnCount: 0,
      dependents: shown,
      dependentsCount: 106,
      dependentsCountExact: true,
    });
  });

  test('list: --status/--task/--queue filters, --after paging; for people an aligned table', async () => {
    // Newest first: dead, pending, done[1], done[0].
    const done = await seed('cli.list', 2, { status: 'done', queue: 'cli-list', age: '3 hours' });
    const pending = await seed('cli.list', 1, { queue: 'cli-list', runIn: '10 min' });
    const dead = await seed('cli.list', 1, {
      status: 'dead',
      queue: 'cli-list',
      age: '2 days',
      lastError: 'Error: kaput\n    at somewhere (file.js:1:1)',
    });
    const other = await seed('cli.list.other', 2, { status: 'done', queue: 'cli-list' });
    const [byTask, doneOfTask, byQueue, page2, table] = await Promise.all([
      run(['list', '--task', 'cli.list', '--json']),
      run(['list', '--status', 'done', '--task', 'cli.list', '--json']),
      run(['list', '--queue', 'cli-list', '--json']),
      run(['list', '--task', 'cli.list', '--limit', '3', '--after', done[1] as string, '--json']),
      run(['list', '--task', 'cli.list', '--limit', '3']),
    ]);
    const all = desc([...done, ...pending, ...dead]);
    expect(json<JobPage>(byTask)).toEqual({ jobs: expect.any(Array), next: null });
    expect(ids(json<JobPage>(byTask).jobs)).toEqual(all);
    const doneJobs = json<JobPage>(doneOfTask).jobs;
    expect(ids(doneJobs)).toEqual(desc(done));
    expect(doneJobs.every((j) => j.status === 'done' && j.task === 'cli.list')).toBe(true);
    expect(ids(json<JobPage>(byQueue).jobs)).toEqual(desc([...all, ...other]));
    expect(json<JobPage>(page2)).toEqual({ jobs: [expect.objectContaining({ id: done[0] })], next: null });

    // For people: the first page of 3, then the hint for the next one.
    const text = ok(table);
    expect(text).not.toMatch(ANSI);
    const [header, ...rows] = lines(text);
    expect(header).toMatch(/^ID +STATUS +TASK +QUEUE +PRIO +TRIES +WHEN +LAST ERROR$/);
    expect(rows.pop()).toBe(`next page: --after ${done[1]}`);
    const h = header as string;
    const at = (line: string, column: string) => line.slice(h.indexOf(column)).split(/ {2,}/)[0];
    const expected = [
      [dead[0], 'dead', '3/3', /^2 d ago$/, 'Error: kaput'],
      [pending[0], 'pending', '0/3', /^in \d+ min$/, ''],
      [done[1], 'done', '3/3', /^3 h ago$/, ''],
    ] as const;
    expect(rows).toHaveLength(expected.length);
    rows.forEach((line, i) => {
      const [id, status, tries, when, lastError] = expected[i] as (typeof expected)[number];
      // ID and PRIO are right-aligned under their headers; the text columns start under theirs.
      const idWidth = h.indexOf('STATUS') - 2;
      expect(line.slice(0, idWidth), line).toBe((id as string).padStart(idWidth));
      expect(at(line, 'STATUS'), line).toBe(status);
      expect(at(line, 'TASK'), line).toBe('cli.list');
      expect(at(line, 'QUEUE'), line).toBe('cli-list');
      expect(line.slice(h.indexOf('PRIO'), h.indexOf('PRIO') + 4), line).toBe(' 100');
      expect(at(line, 'TRIES'), line).toBe(tries);
      expect(at(line, 'WHEN'), line).toMatch(when);
      expect(line.slice(h.indexOf('LAST ERROR')), line).toBe(lastError);
    });
    expect(text).not.toContain('somewhere'); // only the first line of the last error
  });

  test.runIf(hasScript)('colour on a TTY only, and never with NO_COLOR', async () => {
    await seed('cli.colour', 1, { queue: 'cli-colour' });
    const [tty, ttyNoColor] = await Promise.all([
      runOnTty(['list', '--queue', 'cli-colour']),
      runOnTty(['list', '--queue', 'cli-colour'], { NO_COLOR: '1' }),
    ]);
    expect(tty.code, describeRun(tty)).toBe(0);
    expect(tty.stdout).toContain('\u001b[33mpending\u001b[0m');
    expect(ttyNoColor.code, describeRun(ttyNoColor)).toBe(0);
    expect(ttyNoColor.stdout).toMatch(/^ID +STATUS/);
    expect(ttyNoColor.stdout).not.toMatch(ANSI);
  });

  test('flow ID: the jobs layer by layer with their dependencies by ref, counts; --json; bad or unknown id', async () => {
    const plain = await queue.enqueue('cli.flow.plain', null);
    const { flowId, jobs: refs } = await queue.enqueueFlow([
      { ref: 'root', task: 'cli.flow.fetch', payload: { url: 'https://example.com' } },
      { ref: 'a', task: 'cli.flow.part', dependsOn: ['root'] },
      { ref: 'b', task: 'cli.flow.part', dependsOn: ['root'] },
      { ref: 'merge', task: 'cli.flow.merge', dependsOn: ['a', 'b'] },
      { ref: 'ext', task: 'cli.flow.ext', dependsOn: [plain.id] },
    ]);
    const [root] = await queue.claim('cli-flow-worker', { tasks: ['cli.flow.fetch'] });
    expect(root?.id).toBe(refs.root);
    expect(await queue.complete(root!, { ok: true })).toBe(true);
    // Joins the flow (its only dependency is in it), without a ref.
    const later = await queue.enqueue('cli.flow.later', null, { dependsOn: [refs.merge as string] });

    const [asText, asJson, upper, malformed, unknown, waiting, getMerge] = await Promise.all([
      run(['flow', flowId]),
      run(['flow', flowId, '--json']),
      run(['flow', flowId.toUpperCase(), '--json']),
      run(['flow', 'abc']),
      run(['flow', '0b6a3f5e-9c1d-4e2f-8a7b-000000000000']),
      run(['list', '--status', 'waiting', '--task', 'cli.flow.merge', '--json']),
      run(['get', refs.merge as string]),
    ]);
    expect(json(asJson)).toEqual(asJsonValue(await queue.flowGraph(flowId)));
    expect(json<FlowGraph>(upper).flowId).toBe(flowId);

    const text = ok(asText);
    expect(text).not.toMatch(ANSI);
    const [title, header, ...rest] = lines(text);
    expect(title).toBe(`Flow ${flowId}`);
    expect(header).toMatch(/^LAYER +REF +ID +TASK +STATUS +DEPENDS ON$/);
    const rows = rest.slice(0, -1).map((line) => line.trim().split(/ {2,}/));
    expect(rows).toEqual([
      ['0', 'root', refs.root, 'cli.flow.fetch', 'done', '–'],
      ['0', 'ext', refs.ext, 'cli.flow.ext', 'waiting', `#${plain.id}`],
      ['1', 'a', refs.a, 'cli.flow.part', 'pending', 'root'],
      ['1', 'b', refs.b, 'cli.flow.part', 'pending', 'root'],
      ['2', 'merge', refs.merge, 'cli.flow.merge', 'waiting', 'a, b'],
      ['3', '–', later.id, 'cli.flow.later', 'waiting', 'merge'],
    ]);
    expect(rest.at(-1)).toBe('6 jobs: 3 waiting, 2 pending, 1 done');

    oneLineError(
      malformed,
      2,
      /^skiplock: id: must be a flow id, a UUID like .*skiplock get JOB_ID.*"abc"$/m,
    );
    oneLineError(
      unknown,
      3,
      /^skiplock: No flow with id 0b6a3f5e-9c1d-4e2f-8a7b-000000000000: no job belongs to it/,
    );
    expect(ids(json<JobPage>(waiting).jobs)).toEqual([refs.merge]);
    expect(ok(getMerge)).toMatch(new RegExp(`^flow +${flowId} \\(ref merge\\)$`, 'm'));
  });

  test('enqueue of a number JSON cannot carry (1e999 parses as Infinity) exits 2 naming its path, nothing written', async () => {
    const [top, nested, asJson] = await Promise.all([
      run(['enqueue', 'cli.nonfinite', '1e999']),
      run(['enqueue', 'cli.nonfinite', '{"items":[1,-1e999]}']),
      run(['enqueue', 'cli.nonfinite', '{"total":1e999}', '--json']),
    ]);
    oneLineError(top, 2, /^skiplock: payload: must be a finite number, got Infinity/);
    oneLineError(nested, 2, /^skiplock: payload\.items\[1\]: must be a finite number, got -Infinity/);
    oneLineError(asJson, 2, /^skiplock: payload\.total: must be a finite number, got Infinity/);
    expect(await statusCounts('task = $1', ['cli.nonfinite'])).toEqual({});
  });

  test('enqueue --depends-on: waits for those jobs; bad ids exit 2 with nothing written', async () => {
    const first = await queue.enqueue('cli.deps.first', null);
    const second = await queue.enqueue('cli.deps.second', null);
    const [created, human, runAnyway, badId, unknownId, orphanFlag] = await Promise.all([
      run(['enqueue', 'cli.deps.after', '{"n":1}', '--depends-on', `${first.id}, ${second.id}`, '--json']),
      run(['enqueue', 'cli.deps.human', '--depends-on', first.id]),
      run(['enqueue', 'cli.deps.run', '--depends-on', first.id, '--on-dependency-failure', 'run', '--json']),
      run(['enqueue', 'cli.deps.bad', '--depends-on', 'abc']),
      run(['enqueue', 'cli.deps.bad', '--depends-on', '987654321']),
      run(['enqueue', 'cli.deps.bad', '--on-dependency-failure', 'run']),
    ]);
    const after = json<{ id: string; created: boolean }>(created);
    expect(await row(after.id)).toMatchObject({ status: 'waiting', payload: { n: 1 } });
    expect(await queue.dependenciesOf(after.id)).toEqual({
      dependsOn: [first.id, second.id],
      dependents: [],
    });
    expect(ok(human)).toMatch(
      new RegExp(`^Enqueued job \\d+ \\(cli\\.deps\\.human, after job ${first.id}\\)\\.\\n$`),
    );
    const [anyway] = await db.sql<{ run_on_dependency_failure: boolean }>(
      `SELECT run_on_dependency_failure FROM ${db.jobs} WHERE id = $1`,
      [json<{ id: string }>(runAnyway).id],
    );
    expect(anyway?.run_on_dependency_failure).toBe(true);
    oneLineError(badId, 2, /^skiplock: dependsOn\[0\]: .*"abc"/);
    oneLineError(unknownId, 2, /^skiplock: dependsOn: job 987654321 does not exist/);
    oneLineError(orphanFlag, 2, /--on-dependency-failure <what>' needs --depends-on/);
    expect(await statusCounts('task = $1', ['cli.deps.bad'])).toEqual({});
  });

  test('requeue ID: dead → pending with attempts reset; not dead, unknown or key taken exits 3', async () => {
    const [dead, deadToo] = await seed('cli.requeue', 2, { status: 'dead' });
    const [pending] = await seed('cli.requeue', 1);
    const [held] = await seed('cli.requeue', 1, { status: 'dead', dedupeKey: 'cli-requeue-held' });
    await queue.enqueue('cli.requeue.holder', null, { dedupeKey: 'cli-requeue-held' });
    const [asJson, asText, notDead, unknown, keyTaken] = await Promise.all([
      run(['requeue', dead as string, '--json']),
      run(['requeue', deadToo as string]),
      run(['requeue', pending as string]),
      run(['requeue', '987654321']),
      run(['requeue', held as string]),
    ]);
    oneLineError(unknown, 3, /^skiplock: No job with id 987654321$/m);
    oneLineError(keyTaken, 3, /another job holds its dedupe key/);
    expect((await row(held as string)).status).toBe('dead');
    expect(json(asJson)).toEqual({ id: dead, requeued: true });
    expect(ok(asText)).toBe(`Requeued job ${deadToo}.\n`);
    for (const id of [dead, deadToo]) {
      expect(await row(id as string)).toMatchObject({ status: 'pending', attempts: 0 });
    }
    // ERR_CONFLICT, the code the admin API answers 409 with; the status is read under the row lock.
    oneLineError(
      notDead,
      3,
      new RegExp(`^skiplock: Job ${pending} is pending: only dead jobs can be requeued$`, 'm'),
    );
  });

  test('requeue --all-dead --task: counts, skips a held dedupe key; progress on stderr only without --json', async () => {
    const many = await seed('cli.rq.json', 2_499, { status: 'dead' });
    const [held] = await seed('cli.rq.json', 1, { status: 'dead', dedupeKey: 'cli-rq-held' });
    await queue.enqueue('cli.rq.holder', null, { dedupeKey: 'cli-rq-held' });
    await seed('cli.rq.other', 2, { status: 'dead' });
    await seed('cli.rq.human', 30, { status: 'dead' });
    const [asJson, asText] = await Promise.all([
      run(['requeue', '--all-dead', '--task', 'cli.rq.json', '--json']),
      run(['requeue', '--all-dead', '--task', 'cli.rq.human']),
    ]);
    expect(json(asJson)).toEqual({ requeued: 2_499, skipped: 1 }); // json(): stderr is empty
    expect(await statusCounts('task = $1', ['cli.rq.json'])).toEqual({ pending: 2_499, dead: 1 });
    expect((await row(held as string)).status).toBe('dead');
    expect(await row(many[0] as string)).toMatchObject({ status: 'pending', attempts: 0 });
    expect(await statusCounts('task = $1', ['cli.rq.other'])).toEqual({ dead: 2 });

    expect(asText.code, describeRun(asText)).toBe(0);
    expect(asText.stdout).toBe('Requeued 30 dead jobs.\n');
    const progress = lines(asText.stderr);
    expect(
      progress.every((line) => /^requeue [\d,]+$/.test(line)),
      asText.stderr,
    ).toBe(true);
    expect(progress.at(-1)).toBe('requeue 30');
    expect(await statusCounts('task = $1', ['cli.rq.human'])).toEqual({ pending: 30 });
  });

  test('cancel: pending → cancelled; running → cancellation requested; finished exits 3', async () => {
    const pending = (await queue.enqueue('cli.cancel', null)).id;
    const pendingToo = (await queue.enqueue('cli.cancel', null)).id;
    const runningId = (await queue.enqueue('cli.cancel.running', null)).id;
    const [claimed] = await queue.claim('cli-test-worker', { tasks: ['cli.cancel.running'] });
    expect(claimed?.id).toBe(runningId);
    const [done] = await seed('cli.cancel', 1, { status: 'done' });
    const [asJson, asText, running, finished, unknown] = await Promise.all([
      run(['cancel', pending, '--json']),
      run(['cancel', pendingToo]),
      run(['cancel', runningId, '--json']),
      run(['cancel', done as string]),
      run(['cancel', '987654321']),
    ]);
    oneLineError(unknown, 3, /^skiplock: No job with id 987654321$/m);
    expect(json(asJson)).toEqual({ id: pending, cancelled: true, wasRunning: false });
    expect((await row(pending)).status).toBe('cancelled');
    expect(ok(asText)).toBe(`Cancelled job ${pendingToo}.\n`);
    expect((await row(pendingToo)).status).toBe('cancelled');
    expect(json(running)).toEqual({ id: runningId, cancelled: true, wasRunning: true });
    expect(await row(runningId)).toMatchObject({ status: 'running', cancel_requested: true });
    oneLineError(
      finished,
      3,
      new RegExp(
        `^skiplock: Job ${done} is done: only waiting, pending or running jobs \\(and the dead head of a sequence\\) can be cancelled$`,
        'm',
      ),
    );
    expect((await row(done as string)).status).toBe('done');
  });

  test('schedule, schedules, pause-/resume-schedule, unschedule (SPEC §8): idempotent; bad input exits 2; unknown exits 3', async () => {
    const created = json(
      await run([
        'schedule',
        'cli-daily',
        '0 9 * * 1-5',
        'cli.report',
        '{"kind":"daily"}',
        '--tz',
        'Europe/Berlin',
        '--queue',
        'reports',
        '--priority',
        '5',
        '--json',
      ]),
    );
    expect(created).toMatchObject({
      name: 'cli-daily',
      cron: '0 9 * * 1-5',
      tz: 'Europe/Berlin',
      task: 'cli.report',
      payload: { kind: 'daily' },
      queue: 'reports',
      priority: 5,
      paused: false,
    });
    const again = await run([
      'schedule',
      'cli-daily',
      '0 9 * * 1-5',
      'cli.report',
      '{"kind":"daily"}',
      '--tz',
      'Europe/Berlin',
      '--queue',
      'reports',
      '--priority',
      '5',
    ]);
    expect(ok(again)).toMatch(/^Schedule cli-daily: next run 20\d\d-.*Z \(in .*\)\.\n$/);
    const [bad, badTz, badCatchUp] = await Promise.all([
      run(['schedule', 'cli-bad', '61 * * * *', 'cli.x']),
      run(['schedule', 'cli-bad', '* * * * *', 'cli.x', '--tz', 'Atlantis/Capital']),
      run(['schedule', 'cli-bad', '* * * * *', 'cli.x', '--catch-up', 'everything']),
    ]);
    oneLineError(bad, 2, /^skiplock: cron: "61 \* \* \* \*" is not a valid cron expression/);
    oneLineError(badTz, 2, /^skiplock: tz: must be an IANA time zone/);
    oneLineError(badCatchUp, 2, /^skiplock: --catch-up: must be latest, none or a number/);
    expect((await queue.schedules()).map((s) => s.name)).not.toContain('cli-bad');

    const listed = json(await run(['schedules', '--json'])) as { name: string }[];
    expect(listed.find((s) => s.name === 'cli-daily')).toMatchObject({
      tz: 'Europe/Berlin',
      lastJobId: null,
    });
    const text = ok(await run(['schedules']));
    expect(text).toMatch(/^NAME +CRON +TZ +TASK +NEXT RUN +LAST RUN +LAST JOB +STATE\n/);
    expect(text).toMatch(/\ncli-daily +0 9 \* \* 1-5 +Europe\/Berlin +cli\.report +in .* +– +– +active/);

    expect(ok(await run(['pause-schedule', 'cli-daily']))).toBe('Paused schedule cli-daily.\n');
    expect((await queue.schedules()).find((s) => s.name === 'cli-daily')?.paused).toBe(true);
    expect(json(await run(['resume-schedule', 'cli-daily', '--json']))).toEqual({
      name: 'cli-daily',
      paused: false,
    });
    const [unknownPause, unknownRemove] = await Promise.all([
      run(['pause-schedule', 'cli-nope']),
      run(['unschedule', 'cli-nope']),
    ]);
    oneLineError(unknownPause, 3, /^skiplock: No schedule named "cli-nope"$/m);
    oneLineError(unknownRemove, 3, /^skiplock: No schedule named "cli-nope"$/m);
    expect(ok(await run(['unschedule', 'cli-daily']))).toBe('Removed schedule cli-daily.\n');
    expect((await queue.schedules()).map((s) => s.name)).not.toContain('cli-daily');
  });

  test('queues, pause, resume, configure-queue (SPEC §8): settings and counts; bad input exits 2', async () => {
    await queue.enqueue('cli.q', null, { queue: 'cli-mail' });
    expect(
      ok(await run(['configure-queue', 'cli-mail', '--concurrency', '3', '--rate-limit', '50/1s'])),
    ).toBe('Queue cli-mail: active, concurrency 3, 50 per 1 s.\n');
    expect(ok(await run(['pause', 'cli-mail']))).toBe('Paused queue cli-mail.\n');
    const listed = json(await run(['queues', '--json'])) as { name: string }[];
    expect(listed.find((q) => q.name === 'cli-mail')).toMatchObject({
      paused: true,
      concurrency: 3,
      rateLimit: { limit: 50, periodMs: 1000 },
      pending: 1,
      running: 0,
    });
    expect(ok(await run(['queues']))).toMatch(/\ncli-mail +paused +0 +1 +0 +3 +50 per 1 s +– +–\n/);
    expect(
      ok(
        await run(['configure-queue', 'cli-mail', '--group-concurrency', '1', '--group-rate-limit', '10/1m']),
      ),
    ).toBe(
      'Queue cli-mail: paused, concurrency 3, 50 per 1 s, group concurrency 1, 10 per 1 min per group.\n',
    );
    expect(ok(await run(['queues']))).toMatch(
      /\ncli-mail +paused +0 +1 +0 +3 +50 per 1 s +1 running, 10 per 1 min +–\n/,
    );
    const grouped = json(
      await run(['enqueue', 'cli.q', '--queue', 'cli-mail', '--group', 'tenant-7', '--json']),
    ) as { id: string };
    expect(ok(await run(['get', grouped.id]))).toMatch(/group +tenant-7/);
    expect(json(await run(['resume', 'cli-mail', '--json']))).toEqual({ name: 'cli-mail', paused: false });
    expect(
      json(
        await run([
          'configure-queue',
          'cli-mail',
          ...['--concurrency', 'none', '--rate-limit', 'none'],
          ...['--group-concurrency', 'none', '--group-rate-limit', 'none', '--json'],
        ]),
      ),
    ).toMatchObject({
      name: 'cli-mail',
      paused: false,
      concurrency: null,
      rateLimit: null,
      groupConcurrency: null,
      groupRateLimit: null,
    });
    const [badRate, zeroRate, zeroPeriod, badConcurrency, longPeriod, hugeGroup, nothing] = await Promise.all(
      [
        run(['configure-queue', 'cli-mail', '--rate-limit', 'fast']),
        run(['configure-queue', 'cli-mail', '--rate-limit', '0/1s']),
        run(['configure-queue', 'cli-mail', '--rate-limit', '50/0s']),
        run(['configure-queue', 'cli-mail', '--concurrency', '0']),
        run(['configure-queue', 'cli-mail', '--group-rate-limit', '3/2d']),
        run(['configure-queue', 'cli-mail', '--group-concurrency', '2000000']),
        run(['configure-queue', 'cli-mail']),
      ],
    );
    oneLineError(longPeriod, 2, /--group-rate-limit.*period must be at most 1d/);
    oneLineError(hugeGroup, 2, /--group-concurrency.*at most 1,000,000/);
    oneLineError(nothing, 2, /give at least one of --concurrency/);
    // A period is shown as set, not rounded (90 s, not "2 min").
    expect(ok(await run(['configure-queue', 'cli-mail', '--group-rate-limit', '2/90s']))).toMatch(
      /2 per 90 s per group/,
    );
    oneLineError(badRate, 2, /--rate-limit.*must be N\/DURATION/);
    oneLineError(zeroRate, 2, /--rate-limit.*N ≥ 1/);
    oneLineError(zeroPeriod, 2, /--rate-limit.*period must be at least 1 ms/);
    oneLineError(badConcurrency, 2, /--concurrency.*must be a positive integer or none/);
  });

  test('configure-queue --priority-aging (SPEC §11): set, shown, cleared; bad input exits 2 with nothing written', async () => {
    await queue.enqueue('cli.q', null, { queue: 'cli-aging' });
    expect(
      ok(await run(['configure-queue', 'cli-aging', '--priority-aging', '10/1s', '--aging-floor', '5'])),
    ).toBe('Queue cli-aging: active, priority aging 10 per 1 s, floor 5.\n');
    const listed = json(await run(['queues', '--json'])) as { name: string }[];
    expect(listed.find((q) => q.name === 'cli-aging')).toMatchObject({
      priorityAging: { everyMs: 1000, step: 10, floor: 5 },
    });
    expect(ok(await run(['queues']))).toMatch(/\ncli-aging +active +0 +1 +0 +– +– +– +10 per 1 s, floor 5\n/);
    const [badAging, zeroStep, floorAlone, badFloor] = await Promise.all([
      run(['configure-queue', 'cli-aging', '--priority-aging', 'soon']),
      run(['configure-queue', 'cli-aging', '--priority-aging', '0/1s']),
      run(['configure-queue', 'cli-aging', '--aging-floor', '3']),
      run(['configure-queue', 'cli-aging', '--priority-aging', '1/1s', '--aging-floor', 'low']),
    ]);
    oneLineError(badAging, 2, /--priority-aging.*must be STEP\/DURATION/);
    oneLineError(zeroStep, 2, /--priority-aging.*STEP ≥ 1/);
    oneLineError(floorAlone, 2, /--aging-floor goes with --priority-aging/);
    oneLineError(badFloor, 2, /--aging-floor.*must be an integer/);
    expect((await queue.queues()).find((q) => q.name === 'cli-aging')?.priorityAging).toEqual({
      everyMs: 1000,
      step: 10,
      floor: 5,
    });
    expect(
      json(await run(['configure-queue', 'cli-aging', '--priority-aging', 'none', '--json'])),
    ).toMatchObject({
      name: 'cli-aging',
      priorityAging: null,
    });
  });

  test('enqueue --dedupe-scope pending (SPEC §8): a hit names the queued job; bad input exits 2', async () => {
    const args = ['enqueue', 'cli.scoped', '--dedupe-key', 'cli-scoped', '--dedupe-scope', 'pending'];
    const first = json(await run([...args, '--json'])) as { id: string; created: boolean };
    expect(first.created).toBe(true);
    expect(ok(await run(args))).toBe(
      `Not enqueued: job ${first.id} is queued with dedupe key "cli-scoped" (scope pending).\n`,
    );
    expect(ok(await run(['get', first.id]))).toMatch(/dedupe key +cli-scoped/);
    const [noKey, badScope] = await Promise.all([
      run(['enqueue', 'cli.scoped', '--dedupe-scope', 'pending']),
      run(['enqueue', 'cli.scoped', '--dedupe-key', 'k', '--dedupe-scope', 'all']),
    ]);
    oneLineError(noKey, 2, /--dedupe-scope.*needs --dedupe-key/);
    oneLineError(badScope, 2, /--dedupe-scope.*must be 'active' or 'pending'/);
    const rows = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${db.jobs} WHERE task = 'cli.scoped'`,
    );
    expect(rows[0]?.n).toBe(1);
  });

  // SPEC §11. Deliberate break seen failing: src/cli/enqueue.ts dropping --sequence (the job was
  // pending, not waiting behind its key's head).
  test('enqueue --sequence and sequences [--blocked] (SPEC §11): the key, its head and its queue', async () => {
    const first = json(await run(['enqueue', 'cli.seq', '1', '--sequence', 'cli-acct', '--json'])) as {
      id: string;
    };
    const second = json(await run(['enqueue', 'cli.seq', '2', '--sequence', 'cli-acct', '--json'])) as {
      id: string;
    };
    expect((await row(second.id)).status).toBe('waiting');
    const listed = json(
      await run(['sequences', '--after', 'cli-acc', '--limit', '1', '--json']),
    ) as unknown[];
    // waiting until a claim's pass (another test's claim may run one) makes it pending
    expect(listed).toEqual([
      {
        key: 'cli-acct',
        headId: first.id,
        headStatus: expect.stringMatching(/^(waiting|pending)$/),
        queued: 1,
      },
    ]);
    expect(ok(await run(['sequences', '--after', 'cli-acc', '--limit', '1']))).toMatch(
      new RegExp(`^KEY +HEAD +HEAD STATUS +QUEUED\ncli-acct +${first.id} +(waiting|pending) +1\n`),
    );
    await db.sql(`UPDATE ${db.jobs} SET status = 'dead' WHERE id = $1`, [first.id]);
    const blocked = json(await run(['sequences', '--blocked', '--json'])) as { key: string }[];
    expect(blocked.filter((s) => s.key === 'cli-acct')).toEqual([
      { key: 'cli-acct', headId: first.id, headStatus: 'dead', queued: 1 },
    ]);
    oneLineError(await run(['sequences', '--limit', '0']), 2, /--limit/);
  });

  test('prune --older-than 7d --json: deletes old finished rows only, no progress on stderr', async () => {
    // The only rows older than 7 days while this group runs (the others are fresh).
    await seed('cli.prune', 4, { status: 'done', age: '10 days' });
    await seed('cli.prune', 2, { status: 'dead', age: '10 days' });
    await seed('cli.prune', 1, { status: 'cancelled', age: '10 days' });
    await seed('cli.prune', 3, { status: 'done', age: '3 days' });
    await seed('cli.prune', 2, { status: 'pending', age: '10 days' });
    await seed('cli.prune', 1, { status: 'running', age: '10 days' });
    const result = json(await run(['prune', '--older-than', '7d', '--json']));
    expect(result).toEqual({ deleted: 7, olderThanMs: 7 * 86_400_000 });
    expect(await statusCounts('task = $1', ['cli.prune'])).toEqual({ done: 3, pending: 2, running: 1 });
  });
});

describe('afterwards, on the whole table', { timeout: 120_000 }, () => {
  test('prune and requeue --all-dead on many rows print progress on stderr; ops matches the table', async () => {
    await seed('cli.prune.many', 12_000, { status: 'done', age: '30 days' });
    await seed('cli.ops.stuck', 1, { status: 'running' });
    await db.sql(
      `UPDATE ${db.jobs} SET worker_id = 'gone', lease_until = now() - interval '1 minute',
         run_started_at = now() - interval '5 minutes' WHERE task = 'cli.ops.stuck'`,
    );
    await seed('cli.ops.deadline', 1, {
      status: 'dead',
      lastError: 'JobDeadlineExceeded: ran past its 5 s deadline',
    });
    await seed('cli.ops.due', 1, { runIn: '-90 s' });
    await seed('cli.requeue.all', 3, { status: 'dead' });
    // Free the dedupe key that cli.rq.json's skipped dead job waits for: every dead job is then
    // requeued in plain batches (the one-by-one fallback for taken keys is the --task test's).
    await db.sql(
      `UPDATE ${db.jobs} SET status = 'cancelled', updated_at = now()
       WHERE status IN ('pending', 'running')
         AND dedupe_key IN (SELECT dedupe_key FROM ${db.jobs} WHERE status = 'dead')`,
    );
    const deadBefore = (await statusCounts()).dead ?? 0;
    expect(deadBefore).toBeGreaterThan(3);

    // Disjoint rows: prune takes old `done` ones, requeue the `dead` ones.
    const [pruned, requeued] = await Promise.all([
      run(['prune', '--older-than', '7d', '--status', 'done']),
      run(['requeue', '--all-dead']),
    ]);
    expect(pruned.code, describeRun(pruned)).toBe(0);
    expect(pruned.stdout).toBe('Deleted 12000 finished jobs older than 7 d.\n');
    const pruneProgress = lines(pruned.stderr);
    expect(
      pruneProgress.every((line) => /^prune [\d,]+$/.test(line)),
      pruned.stderr,
    ).toBe(true);
    expect(pruneProgress[0]).toBe('prune 5,000');
    expect(pruneProgress.at(-1)).toBe('prune 12,000');
    expect(await statusCounts('task = $1', ['cli.prune.many'])).toEqual({});

    expect(requeued.code, describeRun(requeued)).toBe(0);
    expect(requeued.stdout).toBe(`Requeued ${deadBefore} dead jobs.\n`);
    const bar = lines(requeued.stderr);
    expect(
      bar.every((line) => /^requeue [█░]{24} [\d,]+\/[\d,]+$/.test(line)),
      requeued.stderr,
    ).toBe(true);
    const total = deadBefore.toLocaleString('en-US');
    expect(bar.at(-1)).toBe(`requeue ${'█'.repeat(24)} ${total}/${total}`);
    expect((await statusCounts()).dead).toBeUndefined();

    // Nothing changes the table any more: ops must agree with it.
    const [asJson, asText] = await Promise.all([
      run(['ops', '--json']),
      run(['ops'], { env: { NO_COLOR: '1' } }),
    ]);
    const ops = json<OpsSnapshot>(asJson);
    const counts = await statusCounts();
    expect(ops.estimated).toEqual([]);
    for (const status of JOB_STATUSES) expect(ops[status], status).toBe(counts[status] ?? 0);
    expect(ops.waiting, 'the flow test leaves waiting jobs').toBeGreaterThan(0);
    const [signals] = await db.sql<Record<string, number>>(
      `SELECT
         (SELECT count(*)::int FROM ${db.jobs} WHERE status = 'dead' AND updated_at > now() - interval '1 hour') AS dead1h,
         (SELECT count(*)::int FROM ${db.jobs} WHERE status = 'running'
            AND (lease_until < now() OR run_started_at < now() - interval '10 minutes')) AS stuck,
         (SELECT floor(extract(epoch FROM now() - min(run_after)))::int FROM ${db.jobs}
            WHERE status = 'pending' AND run_after <= now()) AS oldest,
         (SELECT count(*)::int FROM ${db.jobs} WHERE last_error LIKE 'JobDeadlineExceeded%'
            AND updated_at > now() - interval '1 hour') AS deadline1h`,
    );
    expect(ops.dead1h).toBe(signals?.dead1h);
    expect(ops.stuckRunning).toBe(signals?.stuck);
    expect(ops.stuckRunning).toBeGreaterThanOrEqual(1);
    expect(ops.deadline1h).toBe(signals?.deadline1h);
    expect(ops.deadline1h).toBeGreaterThanOrEqual(1);
    expect(ops.oldestPendingSec).toBeGreaterThanOrEqual(90);
    expect(ops.oldestPendingSec).toBeLessThanOrEqual(signals?.oldest ?? 0);

    const text = ok(asText);
    expect(text).not.toMatch(ANSI);
    const [statusBlock, signalBlock] = text.replace(/\n$/, '').split('\n\n') as [string, string];
    const statusLines = lines(statusBlock);
    expect(statusLines[0]).toMatch(/^STATUS +JOBS$/);
    JOB_STATUSES.forEach((status, i) => {
      expect(statusLines[i + 1]).toMatch(new RegExp(`^${status} +${ops[status].toLocaleString('en-US')}$`));
    });
    const signalLines = lines(signalBlock);
    expect(signalLines[0]).toMatch(/^SIGNAL +VALUE$/);
    expect(signalLines.slice(1).map((line) => line.replace(/ +\d+$/, ''))).toEqual([
      'dead in the last hour',
      'stuck running',
      'oldest due pending (s)',
      'deadline exceeded, last hour',
    ]);
    expect(signalLines[1]).toMatch(new RegExp(` ${ops.dead1h}$`));
    expect(signalLines[2]).toMatch(new RegExp(` ${ops.stuckRunning}$`));
    expect(signalLines[4]).toMatch(new RegExp(` ${ops.deadline1h}$`));
    // Right-aligned numbers: every line of a table as wide as its header.
    for (const block of [statusLines, signalLines]) {
      expect(new Set(block.map((line) => line.length)).size, block.join('\n')).toBe(1);
    }
  });
});

// Last: its 10,000 rows would turn other tests' filters into windowed reads and their exact
// done counts into estimates.
describe('list on more rows than one window', { timeout: 120_000 }, () => {
  test('list reads a bounded window: a filter matching nothing recent says where it stopped', async () => {
    // Caught on the code before the fix: list walked every row for a filter that matched nothing
    // recent (no `next`, no hint), and its --json was a bare array that could not say there was more.
    const [needle] = await seed('cli.window', 1, { status: 'done' });
    await seed('cli.window.filler', LIST_WINDOW + 50, { status: 'done' });
    const [first, firstText] = await Promise.all([
      run(['list', '--status', 'done', '--task', 'cli.window', '--json']),
      run(['list', '--status', 'done', '--task', 'cli.window']),
    ]);
    const page = json<JobPage>(first);
    expect(page.jobs).toEqual([]);
    expect(page.next).not.toBeNull();
    expect(BigInt(page.next as string)).toBeGreaterThan(BigInt(needle as string));
    expect(ok(firstText)).toBe(
      `No jobs match so far.\nlooked through jobs down to id ${page.next}; older ones may match: --after ${page.next}\n`,
    );
    const second = json<JobPage>(
      await run([
        'list',
        '--status',
        'done',
        '--task',
        'cli.window',
        '--after',
        page.next as string,
        '--json',
      ]),
    );
    expect(ids(second.jobs)).toEqual([needle]);
    await db.sql(`DELETE FROM ${db.jobs} WHERE task = 'cli.window.filler'`);
  });
});
