/**
 * The soak's result, as a plain-text table for the terminal and as Markdown for `--report`
 * (the README's reliability section shows a 15-minute run's file).
 */
import type { Fault } from './faults.js';
import type { Finding, Verdict } from './verify.js';

export interface RunInfo {
  seed: number;
  minutes: number;
  workers: number;
  concurrency: number;
  leaseMs: number;
  rate: number;
  postgres: string;
  node: string;
  startedAt: Date;
  durationS: number;
  drainS: number | null;
}

/** Findings printed per check, so one runaway defect does not drown the others. */
const FINDINGS_PER_CHECK = 8;

export function textReport(info: RunInfo, verdict: Verdict): string {
  const lines: string[] = [];
  lines.push('', `== skiplock soak: ${verdict.failed ? 'FAILED' : 'passed'} ==`, paramsLine(info), '');
  const width = Math.max(...verdict.figures.map((f) => f.label.length));
  for (const f of verdict.figures) {
    if (f.section) lines.push('', `  ${f.section}:`);
    const mark = f.mustBeZero ? (f.value === 0 ? '  ok (must be 0)' : '  FAIL (must be 0)') : '';
    lines.push(`  ${f.label.padEnd(width)}  ${String(f.value).padStart(12)}${mark}`);
  }
  lines.push('', '  recovery per fault type (ms):');
  lines.push(
    `  ${'fault'.padEnd(22)} ${'count'.padStart(5)}  ${'next completion p50/max'.padStart(24)}  ${'victims settled max'.padStart(20)}`,
  );
  for (const r of verdict.recovery) {
    lines.push(
      `  ${r.type.padEnd(22)} ${String(r.count).padStart(5)}  ${`${median(r.firstCompletionMs)} / ${max(r.firstCompletionMs)}`.padStart(24)}  ${max(r.settledMs).padStart(20)}`,
    );
  }
  const findings = limitFindings(verdict.findings);
  if (findings.length > 0) {
    lines.push('', '  findings:');
    for (const f of findings) lines.push(`  - [${f.check}]${f.job ? ` job ${f.job}:` : ''} ${f.text}`);
  }
  for (const c of verdict.crashes) {
    lines.push(
      '',
      `  crashed ×${c.procs.length}: ${c.cause}`,
      `    processes: ${c.procs.join(', ')}`,
      `    during: ${c.during.join('; ')}`,
    );
    for (const line of c.excerpt.split('\n')) lines.push(`    | ${line}`);
  }
  lines.push('');
  return lines.join('\n');
}

export function markdownReport(info: RunInfo, verdict: Verdict, faults: Fault[]): string {
  const md: string[] = [];
  md.push(`# Skiplock fault-injection soak: ${verdict.failed ? 'FAILED' : 'passed'}`, '');
  md.push(`${paramsLine(info)}`, '');
  md.push('| figure | value | must be |', '|---|---:|---|');
  for (const f of verdict.figures) {
    if (f.section) md.push(`| ***${f.section}*** | | |`);
    const must = f.mustBeZero ? (f.value === 0 ? '0 ✔' : '0 ✘') : '';
    md.push(`| ${escapeCell(f.label.trim())} | ${f.value} | ${must} |`);
  }
  md.push('', '## Faults and recovery', '');
  md.push(
    '| fault | count | next completion after the fault, p50 / max (ms) | jobs its victims held, running again or finished (max ms after the fault began) |',
    '|---|---:|---:|---:|',
  );
  for (const r of verdict.recovery) {
    md.push(
      `| ${r.type} | ${r.count} | ${median(r.firstCompletionMs)} / ${max(r.firstCompletionMs)} | ${max(r.settledMs)} |`,
    );
  }
  md.push(
    '',
    '<details><summary>Fault log</summary>',
    '',
    '| # | +s | fault | victims | what |',
    '|---:|---:|---|---|---|',
  );
  for (const f of faults) {
    md.push(
      `| ${f.n} | ${rel(info, f.start)} | ${f.type} | ${f.victims.join(', ')} | ${f.detail} (${((f.end - f.start) / 1000).toFixed(1)} s) |`,
    );
  }
  md.push('', '</details>');
  const findings = limitFindings(verdict.findings);
  if (findings.length > 0) {
    md.push('', '## Findings', '');
    for (const f of findings)
      md.push(`- **${f.check}**${f.job ? ` job ${f.job}:` : ''} ${escapeCell(f.text)}`);
  }
  if (verdict.crashes.length > 0) {
    md.push('', '## Crashes', '', '| cause | processes | during |', '|---|---|---|');
    for (const c of verdict.crashes) {
      md.push(
        `| ${escapeCell(c.cause)} | ${c.procs.length}: ${c.procs.join(', ')} | ${c.during.join('; ')} |`,
      );
    }
    for (const c of verdict.crashes) md.push('', `${escapeCell(c.cause)}:`, '', '```', c.excerpt, '```');
  }
  return `${md.join('\n')}\n`;
}

function paramsLine(info: RunInfo): string {
  return (
    `seed ${info.seed}, ${info.minutes} min of faults (ran ${info.durationS.toFixed(0)} s, drain ${info.drainS === null ? 'timed out' : `${info.drainS.toFixed(1)} s`}), ` +
    `${info.workers} workers × concurrency ${info.concurrency}, lease ${info.leaseMs} ms, ~${info.rate} jobs/s; ` +
    `PostgreSQL ${info.postgres} (embedded), Node ${info.node}, ${info.startedAt.toISOString()}`
  );
}

function limitFindings(findings: Finding[]): Finding[] {
  const seen = new Map<string, number>();
  const out: Finding[] = [];
  for (const f of findings) {
    const n = (seen.get(f.check) ?? 0) + 1;
    seen.set(f.check, n);
    if (n <= FINDINGS_PER_CHECK) out.push(f);
  }
  for (const [check, n] of seen) {
    if (n > FINDINGS_PER_CHECK) out.push({ check, text: `… and ${n - FINDINGS_PER_CHECK} more` });
  }
  return out;
}

function median(values: number[]): string {
  if (values.length === 0) return '–';
  const sorted = [...values].sort((a, b) => a - b);
  return String(Math.round(sorted[Math.floor((sorted.length - 1) / 2)]!));
}

function max(values: number[]): string {
  return values.length === 0 ? '–' : String(Math.round(Math.max(...values)));
}

function rel(info: RunInfo, t: number | null): string {
  return t === null ? '?' : ((t - info.startedAt.getTime()) / 1000).toFixed(1);
}

function escapeCell(text: string): string {
  return text.replace(/\|/g, '\\|');
}
