/** Results → the Markdown report, the SVG chart and the console table. */
import { DISPLAY_NAMES, type SystemName } from '../systems/types.js';
import { type Config, FLOW_WORKLOADS, type WorkloadName } from './config.js';
import { PGBENCH_MODES, type PgbenchMode } from './pgbench.js';
import { fmt, median } from './util.js';
import { W3_SEGMENTS } from './w3-parts.js';

export interface Cell {
  /** metric → one value per repetition */
  values: Record<string, number[]>;
  failed: string | null;
}

export type Results = Partial<Record<WorkloadName, Partial<Record<SystemName, Cell>>>>;

export interface PgbenchResult {
  values: Partial<Record<PgbenchMode, number[]>>;
  note: string | null;
}

export interface Row {
  workload: WorkloadName;
  metric: string;
  label: string;
  /** For the chart. */
  short: string;
  unit: string;
  better: 'higher' | 'lower';
}

export function rows(config: Config): Row[] {
  const s = config.sizes;
  const n = (v: number) => v.toLocaleString('en-US');
  return [
    {
      workload: 'W1',
      metric: 'jobsPerSec',
      label: `W1 bulk enqueue, ${n(s.w1Jobs)} jobs, batch API (${n(s.w1Chunk)} per call)`,
      short: 'W1 bulk enqueue',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W2',
      metric: 'jobsPerSec',
      label: `W2 drain ${n(s.w2Jobs)} jobs, 1 process, concurrency ${s.w2Concurrency}`,
      short: 'W2 drain',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W2d',
      metric: 'jobsPerSec',
      label: `W2d the same, completed jobs deleted (Skiplock retention: { completed: 'delete' }; graphile-worker always deletes)`,
      short: 'W2d drain, deleted',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W3',
      metric: 'p50',
      label: `W3 wake-up p50 (${s.w3Jobs} jobs ${s.w3IntervalMs} ms apart)`,
      short: 'W3 wake-up p50',
      unit: 'ms',
      better: 'lower',
    },
    {
      workload: 'W3',
      metric: 'p95',
      label: 'W3 wake-up p95',
      short: 'W3 wake-up p95',
      unit: 'ms',
      better: 'lower',
    },
    {
      workload: 'W3',
      metric: 'p99',
      label: 'W3 wake-up p99',
      short: 'W3 wake-up p99',
      unit: 'ms',
      better: 'lower',
    },
    {
      workload: 'W4',
      metric: 'jobsPerSec',
      label: `W4 single enqueue, ${n(s.w4Calls)} calls, ${s.w4InFlight} in flight`,
      short: 'W4 single enqueue',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W4-sql',
      metric: 'jobsPerSec',
      label: `W4-sql single enqueue through the SQL function (Skiplock enqueue(), graphile-worker add_job()), ${n(s.w4Calls)} calls on ${s.w4InFlight} connections, each its own transaction`,
      short: 'W4-sql SQL enqueue',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W4-sql',
      metric: 'soloCallUs',
      label: `W4-sql the same call alone: one connection, one call after another, synchronous_commit off in that session (the call's own cost)`,
      short: 'W4-sql one call',
      unit: 'µs per call',
      better: 'lower',
    },
    {
      workload: 'W4-sql',
      metric: 'pyManyJobsPerSec',
      label: `W4-sql enqueue_many of ${n(s.w4SqlBatch)} jobs from Python (psycopg 3, one call + commit; median of ${s.w4SqlBatches})`,
      short: 'W4-sql Python enqueue_many',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W4-sql',
      metric: 'libManyJobsPerSec',
      label: `W4-sql the library's enqueueMany of ${n(s.w4SqlBatch)} jobs (one call; median of ${s.w4SqlBatches}, alternating with Python's)`,
      short: 'W4-sql library enqueueMany',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W5',
      metric: 'jobsPerSec',
      label: `W5 steady state ${s.w5Seconds} s, ${s.w5Workers} worker processes × ${s.w5Concurrency}, ${s.w5InFlight} enqueues in flight`,
      short: 'W5 steady state',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W5',
      metric: 'p50',
      label: 'W5 end-to-end latency p50',
      short: 'W5 latency p50',
      unit: 'ms',
      better: 'lower',
    },
    {
      workload: 'W5',
      metric: 'p99',
      label: 'W5 end-to-end latency p99',
      short: 'W5 latency p99',
      unit: 'ms',
      better: 'lower',
    },
    {
      workload: 'W2',
      metric: 'rssMb',
      label: `Memory: worker peak RSS during W2 (concurrency ${s.w2Concurrency})`,
      short: 'Memory (W2 peak RSS)',
      unit: 'MB',
      better: 'lower',
    },
    {
      workload: 'W8',
      metric: 'jobsPerSec',
      label: `W8 limited queue: ${n(s.w8Jobs)} jobs, global concurrency ${s.w8Limit}, ${s.w8Processes} processes × ${s.w8Concurrency}, ${s.w8HandlerMs} ms handlers (at most ${n((s.w8Limit / s.w8HandlerMs) * 1000)}/s)`,
      short: 'W8 limited queue',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W9',
      metric: 'jobsPerSec',
      label: `W9 fair groups: ${n(s.w9Jobs)} jobs over ${n(s.w9Groups)} group keys, one running job per group, ${s.w9Processes} processes × ${s.w9Concurrency}, ${s.w9HandlerMs} ms handlers (at most ${n((Math.min(s.w9Groups, s.w9Processes * s.w9Concurrency) / s.w9HandlerMs) * 1000)}/s)`,
      short: 'W9 fair groups',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W-seq',
      metric: 'jobsPerSec',
      label: `W-seq strict per-key FIFO: ${n(s.wSeqKeys)} keys × ${n(s.wSeqPerKey)} jobs, ${s.wSeqProcesses} processes × ${s.wSeqConcurrency}, no-op handlers`,
      short: 'W-seq per-key FIFO',
      unit: 'jobs/s',
      better: 'higher',
    },
    {
      workload: 'W-batch',
      metric: 'jobsPerSec',
      label: `W-batch drain ${n(s.wBatchJobs)} no-op jobs with a batch handler of ${s.wBatchSize}, ${s.wBatchInFlight} batches at once, 1 process (graphile-worker: its batch jobs, ${n(s.wBatchJobs / s.wBatchSize)} jobs of ${s.wBatchSize} items; BullMQ: Pro only)`,
      short: 'W-batch drain',
      unit: 'jobs/s',
      better: 'higher',
    },
    ...s.w7Processes.map(
      (processes): Row => ({
        workload: 'W7',
        metric: `p${processes}`,
        label: `W7 scale-out: ${n(s.w7Jobs)} jobs drained by ${processes} worker process${processes === 1 ? '' : 'es'} × ${s.w7Concurrency}`,
        short: `W7 ${processes} × ${s.w7Concurrency}`,
        unit: 'jobs/s',
        better: 'higher',
      }),
    ),
  ];
}

/** The workflow workloads' rows (their own table, not in the chart). */
export function flowRows(config: Config): Row[] {
  const s = config.sizes;
  const n = (v: number) => v.toLocaleString('en-US');
  const row = (
    workload: WorkloadName,
    metric: string,
    label: string,
    unit: string,
    better: 'higher' | 'lower',
  ): Row => ({ workload, metric, label, short: label, unit, better });
  return [
    row(
      'W-flow-fanout',
      'insertNodesPerSec',
      `fan-out/fan-in: insert one flow of a root, ${n(s.flowChildren)} children, 1 fan-in (one call)`,
      'nodes/s',
      'higher',
    ),
    row('W-flow-fanout', 'insertMs', '  the same, time of that call', 'ms', 'lower'),
    row(
      'W-flow-fanout',
      'rootToChildMs',
      "  root's handler returned → first child's handler starts (all children unblocked at once)",
      'ms',
      'lower',
    ),
    row(
      'W-flow-fanout',
      'rootCommitMs',
      "  root's handler returned → its completion committed (with the unblocking of every child)",
      'ms',
      'lower',
    ),
    row(
      'W-flow-fanout',
      'drainJobsPerSec',
      `  ${n(s.flowChildren)} children drained: first child's start → last child's completion committed`,
      'jobs/s',
      'higher',
    ),
    row(
      'W-flow-fanout',
      'faninFromCommitMs',
      "  last child's completion committed → fan-in's handler starts",
      'ms',
      'lower',
    ),
    row(
      'W-flow-fanout',
      'faninFromHandlerEndMs',
      "  last child's handler returned → fan-in's handler starts",
      'ms',
      'lower',
    ),
    row(
      'W-flow-chain',
      'insertNodesPerSec',
      `chain: insert ${n(s.flowChain)} jobs, each depending on the one before (one call)`,
      'nodes/s',
      'higher',
    ),
    row('W-flow-chain', 'totalMs', "  the chain drained: first job's start → last job's end", 'ms', 'lower'),
    row(
      'W-flow-chain',
      'hopP50',
      "  per hop, a job's handler returned → the next one's starts, p50",
      'ms',
      'lower',
    ),
    row('W-flow-chain', 'hopP95', '  per hop, p95', 'ms', 'lower'),
    row(
      'W-flow-chain',
      'commitToNextP50',
      "  per hop, a job's completion committed → the next one's handler starts, p50",
      'ms',
      'lower',
    ),
    row(
      'W-flow-insert',
      'flowsPerSec',
      `insert rate: ${n(s.flowSmall)} 3-node flows (a, b; c after both), one call each, ${s.flowInFlight} in flight`,
      'flows/s',
      'higher',
    ),
    row('W-flow-insert', 'flowJobsPerSec', '  the same, in jobs', 'jobs/s', 'higher'),
    row(
      'W-flow-insert',
      'batchJobsPerSec',
      `  baseline: ${n(s.flowSmall)} batch-API calls of 3 independent jobs, ${s.flowInFlight} in flight`,
      'jobs/s',
      'higher',
    ),
    row('W-flow-insert', 'flowVsBatch', '  flows ÷ baseline (jobs/s)', '×', 'higher'),
  ];
}

function cellOf(results: Results, row: Row, system: SystemName): Cell | undefined {
  return results[row.workload]?.[system];
}

function valuesOf(results: Results, row: Row, system: SystemName): number[] | null {
  const cell = cellOf(results, row, system);
  const values = cell?.values[row.metric];
  return values && values.length > 0 ? values : null;
}

/** "median (min–max)", or the failure. */
function formatCell(results: Results, row: Row, system: SystemName, skipped: Skipped): string {
  const cell = cellOf(results, row, system);
  if (!cell) return skipped[system] ? 'skipped' : '—';
  const values = valuesOf(results, row, system);
  // a metric the system does not have (e.g. the root of a fan-out BullMQ cannot express)
  if (!values) return cell.failed ? `failed: ${cell.failed}` : 'n/a';
  const text =
    values.length === 1
      ? fmt(values[0] as number)
      : `${fmt(median(values))} (${fmt(Math.min(...values))}–${fmt(Math.max(...values))})`;
  return cell.failed ? `${text}; then failed: ${cell.failed}` : text;
}

/** How many times better Skiplock is than `peer` on this row (> 1: Skiplock better); null if unknown. */
export function advantage(results: Results, row: Row, peer: SystemName): number | null {
  const mine = valuesOf(results, row, 'skiplock');
  const theirs = valuesOf(results, row, peer);
  if (!mine || !theirs) return null;
  const a = median(mine);
  const b = median(theirs);
  if (!(a > 0 && b > 0)) return null;
  return row.better === 'higher' ? a / b : b / a;
}

/** A chain's drain time compares only between chains of one length (pg-boss runs a shorter one). */
function comparable(results: Results, row: Row, peer: SystemName): boolean {
  if (row.metric !== 'totalMs') return true;
  const length = (system: SystemName) => median(results[row.workload]?.[system]?.values.length ?? []);
  return length('skiplock') === length(peer);
}

function formatRatio(ratio: number | null): string {
  if (ratio === null) return '—';
  return `${ratio >= 10 ? ratio.toFixed(0) : ratio.toFixed(2)}×`;
}

function escapeCell(text: string): string {
  return text.replaceAll('|', '\\|');
}

/** A Markdown table with padded columns, as Biome's formatter writes it (docs/ is formatted by `npm run lint`). */
export function mdTable(header: string[], align: ('left' | 'right')[], body: string[][]): string {
  const all = [header, ...body].map((cells) => cells.map(escapeCell));
  const widths = header.map((_, c) => Math.max(3, ...all.map((cells) => [...(cells[c] ?? '')].length)));
  const pad = (text: string, c: number) => {
    const fill = ' '.repeat((widths[c] as number) - [...text].length);
    return align[c] === 'right' ? fill + text : text + fill;
  };
  const line = (cells: string[]) => `| ${cells.map((text, c) => pad(text, c)).join(' | ')} |`;
  const rule = `| ${widths.map((w, c) => (align[c] === 'right' ? `${'-'.repeat(w - 1)}:` : '-'.repeat(w))).join(' | ')} |`;
  const [head, ...rest] = all as [string[], ...string[][]];
  return [line(head), rule, ...rest.map(line)].join('\n');
}

/** Systems not run, with the reason. */
export type Skipped = Partial<Record<SystemName, string>>;

export function resultsTable(config: Config, results: Results, skipped: Skipped = {}): string | null {
  return systemsTable(config, results, skipped, rows(config));
}

/**
 * The workflow workloads' table: one row per metric; '—' where a system has no flows or a shape
 * it cannot express (see the report's notes).
 */
export function flowTable(config: Config, results: Results, skipped: Skipped = {}): string | null {
  if (!config.workloads.some((w) => w !== 'W-flow-scan' && (FLOW_WORKLOADS as readonly string[]).includes(w)))
    return null;
  return systemsTable(config, results, skipped, flowRows(config));
}

function systemsTable(config: Config, results: Results, skipped: Skipped, rowList: Row[]): string | null {
  const systems = config.systems;
  const peers = systems.filter((s) => s !== 'skiplock');
  const withRatios = systems.includes('skiplock');
  const header = [
    'Workload',
    'unit',
    ...systems.map((s) => DISPLAY_NAMES[s]),
    ...(withRatios ? peers.map((p) => `Skiplock vs ${DISPLAY_NAMES[p]}`) : []),
  ];
  const body: string[][] = [];
  for (const row of rowList) {
    if (!config.workloads.includes(row.workload)) continue;
    // a metric no system has (e.g. one only Skiplock reports, when Skiplock was not run)
    if (!systems.some((system) => valuesOf(results, row, system))) continue;
    body.push([
      row.label,
      `${row.unit}, ${row.better} is better`,
      ...systems.map((s) => formatCell(results, row, s, skipped)),
      ...(withRatios
        ? peers.map((p) => formatRatio(comparable(results, row, p) ? advantage(results, row, p) : null))
        : []),
    ]);
  }
  if (body.length === 0) return null;
  return mdTable(
    header,
    header.map((_, i) => (i < 2 ? 'left' : 'right')),
    body,
  );
}

/** W3's breakdown (lib/w3-parts.ts): p50 and p99 of each segment, per PostgreSQL system that has one. */
export function w3PartsTable(config: Config, results: Results): string | null {
  const cells = results.W3;
  if (!cells) return null;
  const systems = config.systems.filter((s) => cells[s]?.values.partsMatched?.length);
  if (systems.length === 0) return null;
  const v = (system: SystemName, metric: string) => {
    const values = cells[system]?.values[metric] ?? [];
    return values.length ? fmt(median(values)) : 'n/a';
  };
  const body = W3_SEGMENTS.map(([key, label]) => [
    label,
    ...systems.map((s) => `${v(s, `${key}P50`)} / ${v(s, `${key}P99`)}`),
  ]);
  body.push(['jobs with every timestamp found', ...systems.map((s) => v(s, 'partsMatched'))]);
  return mdTable(
    ['W3 breakdown, ms, p50 / p99 of each segment', ...systems.map((s) => DISPLAY_NAMES[s])],
    ['left', ...systems.map(() => 'right' as const)],
    body,
  );
}

export function depthTable(config: Config, results: Results): string | null {
  const cell = results.W6?.skiplock;
  if (!cell) return null;
  if (!cell.values.claimEmptyP50?.length) return `W6 failed: ${cell.failed ?? 'no result'}`;
  const v = (metric: string) => {
    const values = cell.values[metric] ?? [];
    return values.length ? median(values) : Number.NaN;
  };
  const deep = `${config.sizes.w6Finished.toLocaleString('en-US')} finished rows`;
  const pending = config.sizes.w6Pending.toLocaleString('en-US');
  const line = (label: string, empty: string, full: string) => [
    label,
    fmt(v(empty)),
    fmt(v(full)),
    `${fmt(v(full) / v(empty))}×`,
  ];
  return mdTable(
    [`Skiplock, ${pending} pending jobs`, 'empty table', deep, 'deep ÷ empty'],
    ['left', 'right', 'right', 'right'],
    [
      line('claim (limit 1) p50, ms', 'claimEmptyP50', 'claimDeepP50'),
      line('claim (limit 1) p95, ms', 'claimEmptyP95', 'claimDeepP95'),
      line('ops() p50, ms', 'opsEmptyP50', 'opsDeepP50'),
      line('ops() p95, ms', 'opsEmptyP95', 'opsDeepP95'),
    ],
  );
}

/** W-flow-scan: per phase and table, the deltas of pg_stat_user_tables' scan counters. */
export function scanTable(config: Config, results: Results): string | null {
  const cell = results['W-flow-scan']?.skiplock;
  if (!cell) return null;
  if (!cell.values['fanout.jobs.seq_scan']?.length)
    return `W-flow-scan failed: ${cell.failed ?? 'no result'}`;
  const v = (key: string) => {
    const values = cell.values[key] ?? [];
    return values.length ? String(Math.round(median(values))) : 'n/a';
  };
  const s = config.sizes;
  const n = (x: number) => x.toLocaleString('en-US');
  const phases: [string, string][] = [
    ['control', `control: ${n(s.flowChildren + 2)} independent jobs (enqueueMany), drained`],
    ['fanout', `fan-out/fan-in: root → ${n(s.flowChildren)} → 1, drained`],
    ['chain', `chain of ${n(s.flowChain)}, drained`],
    [
      'after',
      `control again, the flows' ${n(2 * s.flowChildren + s.flowChain - 1)} edges now in job_dependencies`,
    ],
  ];
  return mdTable(
    [
      `Skiplock, ${n(s.flowScanFinished)} unrelated done rows`,
      'jobs seq_scan',
      'jobs seq_tup_read',
      'jobs idx_scan',
      'job_dependencies seq_scan',
      'job_dependencies seq_tup_read',
      'job_dependencies idx_scan',
      'phase, s',
    ],
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    phases.map(([key, label]) => [
      label,
      v(`${key}.jobs.seq_scan`),
      v(`${key}.jobs.seq_tup_read`),
      v(`${key}.jobs.idx_scan`),
      v(`${key}.job_dependencies.seq_scan`),
      v(`${key}.job_dependencies.seq_tup_read`),
      v(`${key}.job_dependencies.idx_scan`),
      fmt((cell.values[`${key}.ms`]?.[0] ?? Number.NaN) / 1000),
    ]),
  );
}

export function pgbenchTable(config: Config, result: PgbenchResult | null): string | null {
  if (!result) return null;
  const body = PGBENCH_MODES.map((mode) => {
    const values = result.values[mode.key] ?? [];
    const text = values.length
      ? values.length === 1
        ? fmt(values[0] as number)
        : `${fmt(median(values))} (${fmt(Math.min(...values))}–${fmt(Math.max(...values))})`
      : `not run${result.note ? `: ${result.note}` : ''}`;
    return [mode.label, text];
  });
  return mdTable(
    [
      `pgbench: one-row UPDATE per transaction, ${config.sizes.pgbenchClients} clients, ${config.sizes.pgbenchSeconds} s per run`,
      'tps, median (min–max)',
    ],
    ['left', 'right'],
    body,
  );
}

// ---------------------------------------------------------------- SVG chart

const PEER_COLOURS: Record<SystemName, string> = {
  skiplock: '#2f855a',
  'graphile-worker': '#4e79a7',
  'pg-boss': '#f28e2b',
  bullmq: '#e15759',
  'bullmq-pg': '#b07aa1',
};

function xml(text: string): string {
  return text
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;');
}

/** Grouped horizontal bars: Skiplock's advantage over each peer per workload, on a log scale. */
export function renderSvg(config: Config, results: Results, subtitle: string): string {
  const peers = config.systems.filter((s) => s !== 'skiplock');
  const chartRows = rows(config).filter(
    (r) =>
      config.workloads.includes(r.workload) &&
      !(r.workload === 'W3' && r.metric === 'p95') &&
      !(r.workload === 'W5' && r.metric === 'p50'),
  );
  const ratios = chartRows
    .flatMap((row) => peers.map((p) => advantage(results, row, p)))
    .filter((r): r is number => r !== null);
  const ticks = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000,
  ];
  const lo = Math.min(0.5, ...ratios.map((r) => r / 1.3));
  const hi = Math.max(2, ...ratios.map((r) => r * 1.3));
  const min = [...ticks].reverse().find((t) => t <= lo) ?? 0.001;
  const max = ticks.find((t) => t >= hi) ?? 1000;
  const width = 960;
  const left = 290;
  const right = width - 70;
  const barH = 13;
  const groupH = peers.length * (barH + 3) + 14;
  const top = 92;
  const height = top + chartRows.length * groupH + 50;
  const x = (v: number) =>
    left +
    ((Math.log10(Math.min(max, Math.max(min, v))) - Math.log10(min)) / (Math.log10(max) - Math.log10(min))) *
      (right - left);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="20" y="28" font-size="17" font-weight="600" fill="#1a202c">Skiplock vs. each peer: how many times better (log scale; right of 1× = Skiplock better)</text>`,
    `<text x="20" y="48" fill="#4a5568">${xml(subtitle)}</text>`,
  ];
  // legend
  peers.forEach((peer, i) => {
    const lx = left - 150 + i * 180;
    out.push(
      `<rect x="${lx}" y="60" width="12" height="12" fill="${PEER_COLOURS[peer]}"/>`,
      `<text x="${lx + 18}" y="70" fill="#2d3748">vs ${xml(DISPLAY_NAMES[peer])}</text>`,
    );
  });
  // grid
  for (const t of ticks.filter((t) => t >= min && t <= max)) {
    const gx = x(t).toFixed(1);
    out.push(
      `<line x1="${gx}" y1="${top - 6}" x2="${gx}" y2="${height - 40}" stroke="${t === 1 ? '#1a202c' : '#e2e8f0'}" stroke-width="${t === 1 ? 1.5 : 1}"/>`,
      `<text x="${gx}" y="${height - 24}" text-anchor="middle" fill="#4a5568">${t}×</text>`,
    );
  }
  chartRows.forEach((row, gi) => {
    const gy = top + gi * groupH;
    const mine = valuesOf(results, row, 'skiplock');
    const cy = gy + (peers.length * (barH + 3)) / 2;
    out.push(
      `<text x="${left - 12}" y="${cy - 2}" text-anchor="end" fill="#1a202c" font-weight="600">${xml(row.short)}</text>`,
      `<text x="${left - 12}" y="${cy + 12}" text-anchor="end" fill="#4a5568">Skiplock ${mine ? `${fmt(median(mine))} ${row.unit}` : 'n/a'}, ${row.better} is better</text>`,
    );
    peers.forEach((peer, pi) => {
      const by = gy + pi * (barH + 3);
      const ratio = advantage(results, row, peer);
      if (ratio === null) {
        const cell = results[row.workload]?.[peer];
        const why = cell?.failed ? 'failed' : cell ? 'n/a' : 'not run (see the report)';
        out.push(
          `<text x="${x(1) + 6}" y="${by + barH - 2}" fill="#a0aec0" font-style="italic">${why}</text>`,
        );
        return;
      }
      const x0 = Math.min(x(1), x(ratio));
      const w = Math.max(1, Math.abs(x(ratio) - x(1)));
      out.push(
        `<rect x="${x0.toFixed(1)}" y="${by}" width="${w.toFixed(1)}" height="${barH}" fill="${PEER_COLOURS[peer]}"/>`,
      );
      const tx = ratio >= 1 ? x(ratio) + 4 : x(ratio) - 4;
      out.push(
        `<text x="${tx.toFixed(1)}" y="${by + barH - 2}" text-anchor="${ratio >= 1 ? 'start' : 'end'}" fill="#2d3748">${formatRatio(ratio)}</text>`,
      );
    });
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

// ---------------------------------------------------------------- --profile

/** A count (a median of counts may be a half). */
function count(value: number): string {
  return Number.isFinite(value) ? String(Math.round(value * 2) / 2) : 'n/a';
}

/** One row of the per-job budget: a label and how to show a system's cell from its medians. */
interface ProfileRow {
  label: string;
  cell: (v: (metric: string) => number) => string;
}

const PROFILE_ROWS: ProfileRow[] = [
  { label: 'drain rate, jobs/s (timed as W2)', cell: (v) => fmt(v('jobsPerSec')) },
  {
    label: 'Node CPU of the whole worker process, µs/job (its start, enqueue and drain)',
    cell: (v) => fmt(v('processNodeUsPerJob')),
  },
  {
    label: 'Node CPU, enqueue phase, µs/job (user + system)',
    cell: (v) =>
      `${fmt(v('enqueueNodeUsPerJob'))} (${fmt(v('enqueueNodeUserUsPerJob'))} + ${fmt(v('enqueueNodeSystemUsPerJob'))})`,
  },
  {
    label: 'Node CPU, drain phase, µs/job (user + system; consumer start included)',
    cell: (v) =>
      `${fmt(v('drainNodeUsPerJob'))} (${fmt(v('drainNodeUserUsPerJob'))} + ${fmt(v('drainNodeSystemUsPerJob'))})`,
  },
  { label: "  of which the consumer's start, ms", cell: (v) => fmt(v('startupCpuMs')) },
  {
    label: 'GC, drain phase: µs/job (collections)',
    cell: (v) => `${fmt(v('drainGcUsPerJob'))} (${count(v('drainGcCount'))})`,
  },
  {
    label: 'JS heap allocated, bytes/job: enqueue / drain',
    cell: (v) => `${fmt(v('enqueueAllocBytesPerJob'))} / ${fmt(v('drainAllocBytesPerJob'))}`,
  },
  {
    label: "PostgreSQL CPU of the process's backends, µs/job: enqueue / drain (Redis: the server's)",
    cell: (v) => `${fmt(v('enqueueServerUsPerJob'))} / ${fmt(v('drainServerUsPerJob'))}`,
  },
  {
    label: 'Node + database CPU, drain phase, µs/job',
    cell: (v) => fmt(v('drainNodeUsPerJob') + v('drainServerUsPerJob')),
  },
  { label: 'backends opened for the drain', cell: (v) => count(v('drainBackends')) },
  {
    label:
      "server's background processes during the drain, µs/job (WAL writer, checkpointer, autovacuum…; whole server)",
    cell: (v) => fmt(v('drainBackgroundUsPerJob')),
  },
  {
    label: 'WAL, bytes/job: enqueue / drain (whole server, LSN difference)',
    cell: (v) => `${fmt(v('enqueueWalPerJob'))} / ${fmt(v('drainWalPerJob'))}`,
  },
  {
    label: "pg_stat_statements: the process's statements per job, enqueue / drain",
    cell: (v) => `${fmt(v('enqueueStatementsPerJob'))} / ${fmt(v('drainStatementsPerJob'))}`,
  },
  {
    label: '  their execution time, µs/job, enqueue / drain',
    cell: (v) => `${fmt(v('enqueueExecUsPerJob'))} / ${fmt(v('drainExecUsPerJob'))}`,
  },
  {
    label: '  their WAL, bytes/job, enqueue / drain',
    cell: (v) => `${fmt(v('enqueueStatementWalPerJob'))} / ${fmt(v('drainStatementWalPerJob'))}`,
  },
  {
    label: 'peak RSS, MB: after the enqueue / whole process / highest sampled in the drain',
    cell: (v) => `${fmt(v('rssAfterEnqueueMb'))} / ${fmt(v('rssMb'))} / ${fmt(v('drainSampledRssMb'))}`,
  },
];

/** The per-job budget of `--profile` for W2 or W2d: one column per system, medians over the repetitions. */
export function profileTable(config: Config, results: Results, workload: 'W2' | 'W2d'): string | null {
  const cells = results[workload];
  if (!cells) return null;
  const systems = config.systems.filter((s) => cells[s]?.values.drainNodeUsPerJob?.length);
  if (systems.length === 0) return null;
  const body = PROFILE_ROWS.map((row) => [
    row.label,
    ...systems.map((s) => {
      const values = cells[s]?.values ?? {};
      const text = row.cell((metric) => {
        const list = values[metric] ?? [];
        return list.length ? median(list) : Number.NaN;
      });
      return text.replace(/n\/a( \/ n\/a)+/, 'n/a').replace(/^n\/a \(n\/a \+ n\/a\)$/, 'n/a');
    }),
  ]).filter((cells) => cells.slice(1).some((cell) => cell !== 'n/a')); // a figure no system has here
  const s = config.sizes;
  return mdTable(
    [
      `${workload} per-job budget: ${s.w2Jobs.toLocaleString('en-US')} jobs, 1 process, concurrency ${s.w2Concurrency}`,
      ...systems.map((name) => DISPLAY_NAMES[name]),
    ],
    ['left', ...systems.map(() => 'right' as const)],
    body,
  );
}

/** One phase's statements from pg_stat_statements (the first repetition), the costliest first. */
export function statementsTable(
  rows: readonly { query: string; calls: number; totalMs: number; rows: number; walBytes: number }[],
  jobs: number,
  limit = 12,
): string {
  const shown = rows.slice(0, limit);
  const rest = rows.slice(limit);
  const body = shown.map((r) => [
    r.query.length > 110 ? `${r.query.slice(0, 107)}...` : r.query,
    r.calls.toLocaleString('en-US'),
    fmt(r.calls / jobs),
    fmt((r.totalMs * 1000) / jobs),
    fmt((r.totalMs * 1000) / Math.max(1, r.calls)),
    fmt(r.rows / Math.max(1, r.calls)),
    fmt(r.walBytes / jobs),
  ]);
  if (rest.length > 0) {
    const sum = (f: (r: (typeof rows)[number]) => number) => rest.reduce((t, r) => t + f(r), 0);
    body.push([
      `(${rest.length} more statements)`,
      sum((r) => r.calls).toLocaleString('en-US'),
      fmt(sum((r) => r.calls) / jobs),
      fmt((sum((r) => r.totalMs) * 1000) / jobs),
      '',
      '',
      fmt(sum((r) => r.walBytes) / jobs),
    ]);
  }
  return mdTable(
    ['statement', 'calls', 'calls/job', 'exec µs/job', 'µs/call', 'rows/call', 'WAL B/job'],
    ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
    body,
  );
}
