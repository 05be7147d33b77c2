/**
 * The soak's verdict on hand-made runs (no database, no processes): each case is a timeline the
 * soak has seen for real on 2026-12-01 (issue 8), and the verdict must call it what it is — so a
 * change to the classifier cannot quietly turn a defect into an "explained" overlap.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import type { Fault } from './faults.js';
import type { Proc } from './fleet.js';
import type { WorkerRecord } from './records.js';
import { type JobRow, type LedgerRow, verify } from './verify.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'skiplock-soak-verify-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const T = 1_000_000;

function proc(name: string, records: WorkerRecord[], exitedAt = T + 60_000): Proc {
  const recordsFile = path.join(dir, `${name}-${Math.random().toString(36).slice(2)}.jsonl`);
  writeFileSync(recordsFile, records.map((r) => JSON.stringify(r)).join('\n'));
  return {
    name,
    role: 'worker',
    slot: 1,
    pid: 1,
    startedAt: T,
    exitedAt,
    exit: { code: 0, signal: null },
    endedBy: 'term',
    termAt: exitedAt,
    hung: false,
    crashed: false,
    recordsFile,
    logFile: path.join(dir, 'none.log'),
    child: undefined as never,
    exited: Promise.resolve(),
  };
}

function job(id: string, status: string, resultRun: string | null, kind = 'stubborn-tx'): JobRow {
  return {
    id,
    status,
    ref: null,
    kind,
    result_run: resultRun,
    last_error: null,
    attempts: 2,
    max_attempts: 8,
    updated_ms: T + 50_000,
    lease_ms: null,
    worker_id: null,
  };
}

/** O = run 1 of job 7 in process A; N = run 2 in process B, started at T + 10 s. */
function runO(extra: WorkerRecord[], end = T + 12_000): WorkerRecord[] {
  return [
    { type: 'start', t: T, run: 'A:7:1:1', job: '7', attempt: 1, kind: 'stubborn-tx' },
    ...extra,
    { type: 'end', t: end, run: 'A:7:1:1', job: '7', outcome: 'threw', aborted: true },
  ];
}
const runN: WorkerRecord[] = [
  { type: 'start', t: T + 10_000, run: 'B:7:2:1', job: '7', attempt: 2, kind: 'stubborn-tx' },
  { type: 'ledger', t: T + 11_000, run: 'B:7:2:1', job: '7' },
  { type: 'end', t: T + 11_000, run: 'B:7:2:1', job: '7', outcome: 'returned', aborted: false },
  { type: 'event', t: T + 11_000, event: 'job:done', job: '7', attempt: 2 },
];

function verdictOf(
  oRecords: WorkerRecord[],
  faults: Fault[] = [],
  ledger: LedgerRow[] = [{ job_id: '7', run_id: 'B:7:2:1' }],
) {
  const verdict = verify({
    procs: [proc('A', oRecords), proc('B', runN)],
    faults,
    jobs: [job('7', 'done', 'B:7:2:1')],
    ledger,
  });
  const figure = (label: string) => verdict.figures.find((f) => f.label.includes(label))?.value;
  return {
    verdict,
    unexplained: figure('unexplained'),
    explained: figure('explained'),
    stale: figure('stale'),
  };
}

describe('overlapping runs of one job', () => {
  test('a runaway whose outcome was written before the restart is explained', () => {
    const { unexplained, explained } = verdictOf(
      runO([
        { type: 'abort', t: T + 1_000, run: 'A:7:1:1', reason: 'JobDeadlineExceeded' },
        { type: 'event', t: T + 6_000, event: 'job:runaway', job: '7', attempt: 1 },
        { type: 'event', t: T + 6_000, event: 'job:retry', job: '7', attempt: 1 },
      ]),
    );
    expect([unexplained, explained]).toEqual([0, 1]);
  });

  test('stop() releasing a job whose handler still runs is not (defect 2)', () => {
    const { verdict, unexplained } = verdictOf(
      runO([
        { type: 'abort', t: T + 9_000, run: 'A:7:1:1', reason: 'WorkerStoppingError' },
        { type: 'event', t: T + 9_500, event: 'job:released', job: '7', attempt: 1 },
      ]),
    );
    expect(unexplained).toBe(1);
    expect(verdict.findings.find((f) => f.check === 'unexplained overlap')?.text).toMatch(
      /released the job on stop/,
    );
  });

  test('a paused worker that runs on after SIGCONT without an abort is not (defect 3)', () => {
    const pause: Fault = {
      n: 1,
      type: 'pause-worker',
      victims: ['A'],
      start: T + 2_000,
      end: T + 11_500,
      detail: '',
    };
    const { verdict, unexplained } = verdictOf(runO([]), [pause]);
    expect(unexplained).toBe(1);
    expect(verdict.findings.find((f) => f.check === 'unexplained overlap')?.text).toMatch(
      /ran on after SIGCONT/,
    );
  });

  test('a paused worker that aborts the handler as soon as it wakes is explained', () => {
    const pause: Fault = {
      n: 1,
      type: 'pause-worker',
      victims: ['A'],
      start: T + 2_000,
      end: T + 11_500,
      detail: '',
    };
    const abort: WorkerRecord = { type: 'abort', t: T + 11_510, run: 'A:7:1:1', reason: 'LeaseLostError' };
    expect(verdictOf(runO([abort]), [pause]).unexplained).toBe(0);
  });

  test('a partitioned worker told of its lost lease only at heal is not (defect 3)', () => {
    const partition: Fault = {
      n: 2,
      type: 'partition',
      victims: ['A'],
      start: T + 1_000,
      end: T + 11_000,
      detail: '',
    };
    const abort: WorkerRecord = { type: 'abort', t: T + 11_050, run: 'A:7:1:1', reason: 'LeaseLostError' };
    const { verdict, unexplained } = verdictOf(runO([abort]), [partition]);
    expect(unexplained).toBe(1);
    expect(verdict.findings.find((f) => f.check === 'unexplained overlap')?.text).toMatch(/partition #2/);
  });

  test("a stale run's ledger insert and accepted result are counted", () => {
    const { verdict, stale } = verdictOf(
      runO([
        { type: 'ledger', t: T + 11_900, run: 'A:7:1:1', job: '7' },
        { type: 'ledger-refused', t: T + 11_900, run: 'A:7:1:1', job: '7' },
      ]),
      [],
      [{ job_id: '7', run_id: 'A:7:1:1' }],
    );
    expect(stale).toBe(1); // its ledger row is the one that committed
    expect(verdict.findings.some((f) => f.check === 'duplicate ledger insert')).toBe(true);
    expect(verdict.failed).toBe(true);
  });
});

test('jobs still active after the drain, or acknowledged and missing, are lost', () => {
  const verdict = verify({ procs: [], faults: [], jobs: [job('9', 'running', null)], ledger: [] });
  expect(verdict.figures.find((f) => f.label.startsWith('lost jobs'))?.value).toBe(1);
});
