/**
 * Skiplock's benchmark (issue 5, SPEC §7): W1–W6, memory and pgbench, on Skiplock and its peers
 * in one run. Started by bench/launch.mjs (`npm run bench [-- --quick]`), which installs bench/'s
 * dependencies, bundles this file and runs it under Node 24.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { type Config, parseArgs, USAGE, UsageError, type WorkloadName } from './lib/config.js';
import { closeAdminPools } from './lib/db.js';
import { markdown, type RunInfo } from './lib/document.js';
import { type BenchServer, startBenchServer, WORKER_ROLE } from './lib/embedded-server.js';
import { wFlowChain, wFlowFanout, wFlowInsert, wFlowScan } from './lib/flows.js';
import { loadAverage, machineInfo } from './lib/machine.js';
import { REPO_DIR } from './lib/paths.js';
import { findPgbench, PGBENCH_MODES, Pgbench } from './lib/pgbench.js';
import { serverTimeUnavailable, w2Profile } from './lib/profile.js';
import {
  type Cell,
  depthTable,
  flowTable,
  type PgbenchResult,
  pgbenchTable,
  profileTable,
  type Results,
  renderSvg,
  resultsTable,
  scanTable,
  statementsTable,
  w3PartsTable,
} from './lib/report.js';
import type { StatementRow } from './lib/statements.js';
import { fmt, quietly, reason, withTimeout } from './lib/util.js';
import { w4Sql } from './lib/w4-sql.js';
import {
  type Metrics,
  type RunContext,
  w1,
  w2,
  w3,
  w4,
  w5,
  w6,
  w7,
  w8,
  w9,
  wBatch,
  wSeq,
} from './lib/workloads.js';
import type { BullMQDriver } from './systems/bullmq.js';
import { createDriver } from './systems/index.js';
import { type BenchEnv, DISPLAY_NAMES, type SystemDriver, type SystemName } from './systems/types.js';

const t0 = performance.now();
function log(message: string): void {
  const s = ((performance.now() - t0) / 1000).toFixed(1).padStart(6);
  process.stdout.write(`[${s} s] ${message}\n`);
}

const RUNNERS: Partial<Record<WorkloadName, (driver: SystemDriver, ctx: RunContext) => Promise<Metrics>>> = {
  W1: w1,
  W2: w2,
  W2d: (driver, ctx) => w2(driver, ctx, true),
  W3: w3,
  W4: w4,
  'W4-sql': w4Sql,
  W5: w5,
  W7: w7,
  W8: w8,
  W9: w9,
  'W-seq': wSeq,
  'W-batch': wBatch,
  'W-flow-fanout': wFlowFanout,
  'W-flow-chain': wFlowChain,
  'W-flow-insert': wFlowInsert,
};

/** With --profile, W2 and W2d are run by the profiling variant (lib/profile.ts). */
const PROFILE_RUNNERS: Partial<
  Record<WorkloadName, (driver: SystemDriver, ctx: RunContext) => Promise<Metrics>>
> = {
  W2: w2Profile,
  W2d: (driver, ctx) => w2Profile(driver, ctx, true),
};

/** The per-job figures of a profiled W2 run, for the progress log. */
function profileHeadline(m: Metrics): string {
  if (m.drainNodeUsPerJob === undefined) return '';
  return `; per job: Node ${fmt(m.processNodeUsPerJob ?? Number.NaN)} µs (enqueue ${fmt(m.enqueueNodeUsPerJob ?? Number.NaN)}, drain ${fmt(m.drainNodeUsPerJob)}), database ${fmt(m.drainServerUsPerJob ?? Number.NaN)} µs in the drain, WAL ${fmt(m.drainWalPerJob ?? Number.NaN)} B, GC ${fmt(m.drainGcUsPerJob ?? Number.NaN)} µs, ${fmt(m.drainAllocBytesPerJob ?? Number.NaN)} B allocated`;
}

/** The one metric printed per run in the progress log. */
function headline(workload: WorkloadName, m: Metrics): string {
  switch (workload) {
    case 'W3':
      return `p50 ${fmt(m.p50 ?? Number.NaN)} ms, p95 ${fmt(m.p95 ?? Number.NaN)} ms, p99 ${fmt(m.p99 ?? Number.NaN)} ms`;
    case 'W2':
    case 'W2d':
      return `${fmt(m.jobsPerSec ?? Number.NaN)} jobs/s (all handlers ran after ${fmt(m.handlersDoneMs ?? Number.NaN)} ms, all finished after ${fmt(m.drainMs ?? Number.NaN)} ms; worker start ${fmt(m.startupMs ?? Number.NaN)} ms), peak RSS ${fmt(m.rssMb ?? Number.NaN)} MB${m.extraRuns ? `, ${m.extraRuns} extra handler runs` : ''}${profileHeadline(m)}`;
    case 'W7':
      return Object.entries(m)
        .filter(([key]) => key.startsWith('p'))
        .map(([key, value]) => `${key.slice(1)} processes ${fmt(value)} jobs/s`)
        .join(', ');
    case 'W8':
      return `${fmt(m.jobsPerSec ?? Number.NaN)} jobs/s (${fmt((m.ofLimit ?? Number.NaN) * 100)} % of what the limit allows)`;
    case 'W4-sql':
      return `${fmt(m.jobsPerSec ?? Number.NaN)} jobs/s through the SQL function (alone: ${fmt(m.soloCallUs ?? Number.NaN)} µs a call)${m.libManyJobsPerSec === undefined ? '' : `; batches: library enqueueMany ${fmt(m.libManyJobsPerSec)} jobs/s, Python enqueue_many ${m.pyManyJobsPerSec === undefined ? 'not run (no venv)' : `${fmt(m.pyManyJobsPerSec)} jobs/s (${fmt(m.pyVsLib ?? Number.NaN)}×)`}`}`;
    case 'W9':
      return `${fmt(m.jobsPerSec ?? Number.NaN)} jobs/s (${fmt((m.ofBound ?? Number.NaN) * 100)} % of what one running job per group allows)`;
    case 'W-seq':
      return `${fmt(m.jobsPerSec ?? Number.NaN)} jobs/s with per-key FIFO; without keys ${fmt(m.plainJobsPerSec ?? Number.NaN)} jobs/s (${fmt((m.ofPlain ?? Number.NaN) * 100)} %)`;
    case 'W-flow-fanout':
      return `insert ${fmt(m.insertNodesPerSec ?? Number.NaN)} nodes/s (${fmt(m.insertMs ?? Number.NaN)} ms)${m.rootToChildMs === undefined ? '' : `, root done → first child ${fmt(m.rootToChildMs)} ms${m.rootCommitMs === undefined ? '' : ` (root's completion committed after ${fmt(m.rootCommitMs)} ms)`}`}, children drained at ${fmt(m.drainJobsPerSec ?? Number.NaN)} jobs/s, last child committed → fan-in started ${fmt(m.faninFromCommitMs ?? Number.NaN)} ms (from its handler's end ${fmt(m.faninFromHandlerEndMs ?? Number.NaN)} ms)`;
    case 'W-flow-chain':
      return `${m.length} jobs: insert ${fmt(m.insertMs ?? Number.NaN)} ms, drained in ${fmt(m.totalMs ?? Number.NaN)} ms, hop p50 ${fmt(m.hopP50 ?? Number.NaN)} ms, p95 ${fmt(m.hopP95 ?? Number.NaN)} ms (commit → next start p50 ${fmt(m.commitToNextP50 ?? Number.NaN)} ms)`;
    case 'W-flow-insert':
      return `${fmt(m.flowsPerSec ?? Number.NaN)} flows/s, ${fmt(m.flowJobsPerSec ?? Number.NaN)} jobs/s; batch calls of 3: ${fmt(m.batchJobsPerSec ?? Number.NaN)} jobs/s (flows ${fmt(m.flowVsBatch ?? Number.NaN)}×)`;
    case 'W5':
      return `${fmt(m.jobsPerSec ?? Number.NaN)} jobs/s (enqueued ${fmt(m.enqueuedPerSec ?? Number.NaN)}/s, backlog ${m.backlogAtEnd}), p50 ${fmt(m.p50 ?? Number.NaN)} ms, p99 ${fmt(m.p99 ?? Number.NaN)} ms`;
    default:
      return `${fmt(m.jobsPerSec ?? Number.NaN)} jobs/s`;
  }
}

function record(cell: Cell, metrics: Metrics): void {
  for (const [key, value] of Object.entries(metrics)) {
    const values = cell.values[key] ?? [];
    values.push(value);
    cell.values[key] = values;
  }
}

/** Per-run time limit on top of each workload's own limits. */
function runLimitMs(config: Config, workload: WorkloadName): number {
  const s = config.sizes;
  switch (workload) {
    case 'W5':
      return s.w5Seconds * 1000 + 240_000;
    case 'W6':
      return Math.max(600_000, s.w6Finished);
    default:
      return config.quick ? 180_000 : 900_000;
  }
}

async function runWorkloads(
  config: Config,
  ctx: RunContext,
  drivers: SystemDriver[],
  results: Results,
): Promise<void> {
  for (const workload of config.workloads) {
    const run = (config.profile ? PROFILE_RUNNERS[workload] : undefined) ?? RUNNERS[workload];
    if (!run) continue;
    const byName: Partial<Record<SystemName, Cell>> = {};
    results[workload] = byName;
    for (let rep = 0; rep < config.sizes.reps; rep++) {
      const order = rep % 2 === 0 ? drivers : [...drivers].reverse();
      for (const driver of order) {
        if (workload === 'W2d' && driver.deletesCompleted === 'no') continue; // keeps every job
        if (workload === 'W8' && !driver.limitConcurrency) continue; // no global concurrency limit
        if (workload === 'W9' && !driver.limitGroups) continue; // no group keys
        if (workload === 'W-seq' && !driver.strictFifo) continue; // no per-key FIFO
        if (workload === 'W4-sql' && !driver.sqlEnqueue) continue; // no SQL enqueue function
        if (workload === 'W-batch' && !driver.batching) continue; // no batch handler (BullMQ: Pro only)
        if (workload.startsWith('W-flow') && !driver.flowProducer) continue; // no job dependencies
        const cell = byName[driver.name] ?? { values: {}, failed: null };
        byName[driver.name] = cell;
        if (cell.failed) continue;
        const what = `${workload} ${DISPLAY_NAMES[driver.name]} (${rep + 1}/${config.sizes.reps})`;
        try {
          const metrics = await withTimeout(run(driver, ctx), runLimitMs(config, workload), what);
          record(cell, metrics);
          log(`${what}: ${headline(workload, metrics)}`);
        } catch (error) {
          cell.failed = reason(error);
          log(`${what}: FAILED: ${cell.failed}`);
        }
      }
    }
  }
}

async function runDepth(
  config: Config,
  ctx: RunContext,
  drivers: SystemDriver[],
  results: Results,
): Promise<void> {
  if (!config.workloads.includes('W6') || !drivers.some((d) => d.name === 'skiplock')) return;
  const cell: Cell = { values: {}, failed: null };
  results.W6 = { skiplock: cell };
  log(
    `W6 Skiplock: ${config.sizes.w6Pending.toLocaleString('en-US')} pending, empty vs ${config.sizes.w6Finished.toLocaleString('en-US')} finished rows`,
  );
  try {
    const m = await withTimeout(w6(ctx), runLimitMs(config, 'W6'), 'W6');
    record(cell, m);
    log(
      `W6 Skiplock: claim p50 ${fmt(m.claimEmptyP50 ?? Number.NaN)} → ${fmt(m.claimDeepP50 ?? Number.NaN)} ms, ops() p50 ${fmt(m.opsEmptyP50 ?? Number.NaN)} → ${fmt(m.opsDeepP50 ?? Number.NaN)} ms`,
    );
  } catch (error) {
    cell.failed = reason(error);
    log(`W6 Skiplock: FAILED: ${cell.failed}`);
  }
}

async function runFlowScan(
  config: Config,
  ctx: RunContext,
  drivers: SystemDriver[],
  results: Results,
): Promise<string[] | null> {
  if (!config.workloads.includes('W-flow-scan') || !drivers.some((d) => d.name === 'skiplock')) return null;
  const cell: Cell = { values: {}, failed: null };
  results['W-flow-scan'] = { skiplock: cell };
  log(
    `W-flow-scan Skiplock: fan-out/fan-in and chain next to ${config.sizes.flowScanFinished.toLocaleString('en-US')} done rows`,
  );
  try {
    const { metrics, plans } = await withTimeout(wFlowScan(ctx), 900_000, 'W-flow-scan');
    record(cell, metrics);
    return plans;
  } catch (error) {
    cell.failed = reason(error);
    log(`W-flow-scan Skiplock: FAILED: ${cell.failed}`);
    return null;
  }
}

async function runPgbench(config: Config): Promise<PgbenchResult | null> {
  if (!config.workloads.includes('pgbench')) return null;
  const result: PgbenchResult = { values: {}, note: null };
  const binary = findPgbench();
  if (!binary) {
    result.note = 'pgbench not found (set PGBENCH=/path/to/pgbench)';
    log(`pgbench: skipped, ${result.note}`);
    return result;
  }
  const bench = new Pgbench(config.databaseUrl, binary, config.sizes.pgbenchClients);
  try {
    await withTimeout(bench.setup(), 60_000, 'pgbench setup');
    for (let rep = 0; rep < config.sizes.reps; rep++) {
      const modes = rep % 2 === 0 ? PGBENCH_MODES : [...PGBENCH_MODES].reverse();
      for (const mode of modes) {
        const tps = await bench.run(mode.key, config.sizes.pgbenchSeconds);
        result.values[mode.key] = [...(result.values[mode.key] ?? []), tps];
        log(`pgbench ${mode.label} (${rep + 1}/${config.sizes.reps}): ${fmt(tps)} tps`);
      }
    }
  } catch (error) {
    result.note = reason(error);
    log(`pgbench: FAILED: ${result.note}`);
  } finally {
    const error = await quietly(() => bench.cleanup(), 60_000, 'pgbench cleanup');
    if (error) log(`pgbench cleanup: ${error.message}`);
  }
  return result;
}

function reportDir(config: Config): string {
  if (config.outDir) return config.outDir;
  if (config.write) return join(REPO_DIR, 'docs');
  return mkdtempSync(join(tmpdir(), 'skiplock-bench-'));
}

async function main(): Promise<number> {
  let config: Config;
  try {
    config = parseArgs(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    if (error.message) process.stderr.write(`bench: ${error.message}\n\n`);
    process.stderr.write(`${USAGE}\n`);
    return error.message ? 2 : 0;
  }
  const limitMin = config.quick ? 10 : 240;
  setTimeout(() => {
    process.stderr.write(`bench: still running after ${limitMin} min: giving up\n`);
    void (benchServer?.stop() ?? Promise.resolve()).finally(() => process.exit(1));
  }, limitMin * 60_000).unref();
  if (config.embedded) {
    log('starting an embedded PostgreSQL (--pg embedded)');
    benchServer = await startBenchServer();
    config.databaseUrl = benchServer.url;
  }
  try {
    return await runBench(config);
  } finally {
    await closeAdminPools();
    await benchServer?.stop().catch(() => {});
  }
}

/** A server started for this run (--pg embedded), stopped at its end. */
let benchServer: BenchServer | null = null;

async function runBench(config: Config): Promise<number> {
  const startedAt = new Date();
  const loadStart = loadAverage();
  const env: BenchEnv = { databaseUrl: config.databaseUrl, redis: config.redis };
  const statements = new Map<string, StatementRow[]>();
  const ctx: RunContext = {
    sizes: config.sizes,
    env,
    log,
    ...(config.profile && config.embedded ? { statements: { role: WORKER_ROLE, sink: statements } } : {}),
  };
  log(
    `Skiplock benchmark${config.quick ? ' (--quick smoke run)' : ''} on Node ${process.version}; load average ${loadStart}`,
  );
  const machine = await machineInfo(config.databaseUrl);
  if (machine.postgres.startsWith('unreachable')) {
    process.stderr.write(`bench: PostgreSQL at DATABASE_URL is ${machine.postgres}\n`);
    return 1;
  }
  log(`${machine.postgres}; ${machine.cores} cores, ${machine.cpu}`);

  const info: RunInfo = {
    config,
    machine,
    startedAt,
    minutes: 0,
    loadStart,
    loadEnd: '',
    versions: {},
    settings: {},
    skipped: {},
    redisVersion: null,
    pgbench: null,
    flowPlans: null,
    flows: {},
    notes: [],
  };
  const drivers: SystemDriver[] = [];
  for (const name of config.systems) {
    const driver = createDriver(name, env);
    const why = await withTimeout(driver.unavailable(), 20_000, `${name} check`).catch(reason);
    if (name === 'bullmq') info.redisVersion = await (driver as BullMQDriver).redisVersion();
    if (why) {
      info.skipped[name] = why;
      log(`NOTE: ${DISPLAY_NAMES[name]} skipped: ${why}`);
      continue;
    }
    info.versions[name] = await driver.version();
    info.settings[name] = driver.settings(config.sizes.w2Concurrency);
    info.flows[name] = driver.flowShapes ?? { none: driver.noFlows ?? 'no job dependencies' };
    log(`${DISPLAY_NAMES[name]} ${info.versions[name]}`);
    drivers.push(driver);
  }

  const results: Results = {};
  await runWorkloads(config, ctx, drivers, results);
  await runDepth(config, ctx, drivers, results);
  info.flowPlans = await runFlowScan(config, ctx, drivers, results);
  info.pgbench = await runPgbench(config);

  for (const driver of drivers) {
    const error = await quietly(
      async () => {
        await driver.drop();
        await driver.close();
      },
      60_000,
      `cleaning up ${driver.name}`,
    );
    if (error) log(`cleaning up ${DISPLAY_NAMES[driver.name]}: ${error.message}`);
  }
  await closeAdminPools();

  info.minutes = (performance.now() - t0) / 60_000;
  info.loadEnd = loadAverage();
  if (config.profile) {
    const why = await serverTimeUnavailable(config.databaseUrl).catch((error: unknown) => reason(error));
    if (why) info.notes.push(`--profile: no PostgreSQL CPU per backend: ${why}.`);
    if (!config.embedded)
      info.notes.push(
        '--profile: no per-statement figures (pg_stat_statements is not preloaded on this server; `--pg embedded` runs on a server that has it).',
      );
  }
  const busy = Number(loadStart.split(' / ')[0]) > machine.cores * 0.5;
  if (busy) {
    info.notes.push(
      `The machine was busy when the run started (load average ${loadStart} on ${machine.cores} cores): other processes competed for the CPU, so these figures are noisy.`,
    );
  }
  const dir = reportDir(config);
  mkdirSync(dir, { recursive: true });
  const subtitle = `${config.quick ? 'Smoke run (--quick), not a measurement' : `Medians of ${config.sizes.reps} runs`} · ${machine.cores} cores, ${machine.postgres} · ${startedAt.toISOString().slice(0, 10)}`;
  writeFileSync(join(dir, 'benchmarks.md'), markdown(info, results));
  writeFileSync(join(dir, 'benchmarks.svg'), renderSvg(config, results, subtitle));
  const profile = config.profile ? profileReport(config, info, results, statements) : null;
  if (profile) {
    writeFileSync(join(dir, 'profile.md'), profile);
    writeFileSync(
      join(dir, 'profile.json'),
      `${JSON.stringify({ W2: results.W2 ?? null, W2d: results.W2d ?? null, statements: Object.fromEntries(statements) }, null, 2)}\n`,
    );
  }

  const table = resultsTable(config, results, info.skipped);
  if (table) process.stdout.write(`\n${table}\n`);
  for (const workload of ['W2', 'W2d'] as const) {
    const budget = config.profile ? profileTable(config, results, workload) : null;
    if (budget) process.stdout.write(`\n${budget}\n`);
  }
  const parts = w3PartsTable(config, results);
  if (parts) process.stdout.write(`\n${parts}\n`);
  const depth = depthTable(config, results);
  if (depth) process.stdout.write(`\n${depth}\n`);
  const flows = flowTable(config, results, info.skipped);
  if (flows) process.stdout.write(`\n${flows}\n`);
  const scan = scanTable(config, results);
  if (scan) process.stdout.write(`\n${scan}\n`);
  const pg = pgbenchTable(config, info.pgbench);
  if (pg) process.stdout.write(`\n${pg}\n`);
  for (const [name, why] of Object.entries(info.skipped)) {
    process.stdout.write(`\nNOTE: ${DISPLAY_NAMES[name as SystemName]} skipped: ${why}\n`);
  }
  process.stdout.write(
    `\nReport: ${join(dir, 'benchmarks.md')}${profile ? ', profile.md, profile.json' : ''} and benchmarks.svg (${info.minutes.toFixed(1)} min)${config.write || config.outDir ? '' : '; docs/ left unchanged (--write to update it)'}\n`,
  );

  // The harness's own system must run every workload: a failure there fails the run.
  const skiplockFailures = Object.entries(results)
    .map(([workload, cells]) => [workload, cells?.skiplock?.failed] as const)
    .filter(([, failed]) => failed);
  if (skiplockFailures.length > 0) {
    process.stderr.write(
      `bench: Skiplock failed ${skiplockFailures.map(([w, f]) => `${w} (${f})`).join(', ')}\n`,
    );
    return 1;
  }
  return 0;
}

/** profile.md: the per-job budget tables, then the statements of each system and phase. */
function profileReport(
  config: Config,
  info: RunInfo,
  results: Results,
  statements: Map<string, StatementRow[]>,
): string | null {
  const tables = (['W2', 'W2d'] as const)
    .map((workload) => profileTable(config, results, workload))
    .filter((t): t is string => t !== null);
  if (tables.length === 0) return null;
  const out = [
    '# Per-job budget (npm run bench -- --profile)',
    '',
    `Written by \`npm run bench -- ${config.argv.join(' ')}\` on ${info.startedAt.toISOString().slice(0, 16).replace('T', ' ')} UTC; ${info.machine.postgres}, ${info.machine.cores} cores; load average ${info.loadStart} at the start, ${info.loadEnd} at the end. Medians over ${config.sizes.reps} repetition${config.sizes.reps === 1 ? '' : 's'}. The columns are explained in docs/performance.md ("The per-job budget").`,
    ...info.notes.map((note) => `\n> ${note}`),
  ];
  for (const table of tables) out.push('', table);
  for (const [key, rows] of statements) {
    out.push(
      '',
      `## pg_stat_statements: ${key} (first repetition)`,
      '',
      statementsTable(rows, config.sizes.w2Jobs),
    );
  }
  return `${out.join('\n')}\n`;
}

process.on('unhandledRejection', (error) => {
  process.stderr.write(`bench: unhandled rejection (ignored): ${reason(error)}\n`);
});
process.on('uncaughtException', (error) => {
  process.stderr.write(`bench: uncaught exception (ignored): ${reason(error)}\n`);
});

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(
      `bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  },
);
