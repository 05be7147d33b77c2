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
import { DEDUPE, LIMITED, tickKey } from './features.js';
import type { Proc } from './fleet.js';
import type { Transition } from './history.js';
import type { ProducerRecord, WorkerRecord } from './records.js';
import { type JobRow, type LedgerRow, type VerifyInput, verify } from './verify.js';

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
    finish: 'tx',
    queue: 'default',
    group_key: null,
    dedupe_key: null,
    pending_key: null,
    run_on_failure: false,
    created_us: T * 1000,
    deleted: false,
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

// ---------------------------------------------------------------------------------------------
// The feature checks (issue 21): each on hand-made rows and records, in the shapes the soak
// produces. Every test below was seen failing with its check broken; the comment says how.

const MS = 1_000; // µs per ms

function row(id: string, status: string, extra: Partial<JobRow> = {}): JobRow {
  return { ...job(id, status, null, 'tx'), attempts: 1, ...extra };
}

/** A status change at T + `ms` (µs in the record, as the database's trigger stamps it). */
function tr(
  jobId: string,
  from: string | null,
  to: string | null,
  ms: number,
  startedMs?: number,
): Transition {
  return {
    job: jobId,
    from,
    to,
    atUs: (T + ms) * MS,
    startedUs: startedMs === undefined ? null : (T + startedMs) * MS,
  };
}

/** Inserted pending at `ms`, claimed at each of `claims`, each run lasting `runMs`, done after the last. */
function lifecycle(jobId: string, startMs: number, claims: number[], runMs: number): Transition[] {
  const out = [tr(jobId, null, 'pending', startMs)];
  claims.forEach((c, i) => {
    out.push(tr(jobId, 'pending', 'running', c, c));
    out.push(tr(jobId, 'running', i === claims.length - 1 ? 'done' : 'pending', c + runMs));
  });
  return out;
}

function producerProc(records: ProducerRecord[]): Proc {
  return { ...proc('p.1', []), role: 'producer', ...recordsOf(records) };
}

function recordsOf(records: unknown[]): { recordsFile: string } {
  const recordsFile = path.join(dir, `p-${Math.random().toString(36).slice(2)}.jsonl`);
  writeFileSync(recordsFile, records.map((r) => JSON.stringify(r)).join('\n'));
  return { recordsFile };
}

function figureOf(input: Partial<VerifyInput>, label: string) {
  const verdict = verify({ procs: [], faults: [], jobs: [], ledger: [], ...input });
  const figure = verdict.figures.find((f) => f.label.trim().startsWith(label));
  if (!figure) throw new Error(`no figure "${label}"`);
  return { value: figure.value, verdict };
}

describe('flows', () => {
  // A is done, B (waiting on A) was written while A ran and never woken: the known bug of issue 21
  // (a completion waiting on A's row lock read the edges from an older snapshot).
  const aDone = lifecycle('1', 0, [100], 500);
  test('a waiting job whose dependencies are all done is stuck', () => {
    // Broken on purpose: endState() with `deps.every(satisfied)` negated — 0 stuck.
    const { value } = figureOf(
      {
        jobs: [row('1', 'done'), row('2', 'waiting')],
        edges: [{ job_id: '2', depends_on: '1' }],
        transitions: [...aDone, tr('2', null, 'waiting', 300)],
      },
      'dependents stuck',
    );
    expect(value).toBe(1);
  });

  test('a job waiting behind an unfinished dependency is not stuck', () => {
    const { value } = figureOf(
      {
        jobs: [row('1', 'waiting'), row('2', 'waiting')],
        edges: [{ job_id: '2', depends_on: '1' }],
        transitions: [tr('1', null, 'waiting', 0), tr('2', null, 'waiting', 0)],
      },
      'dependents stuck',
    );
    expect(value).toBe(0);
  });

  test('a claim before a dependency was done violates the order', () => {
    // Broken on purpose: claimOrder() comparing `at > claim.atUs + 1e9` — 0 violations.
    const { value } = figureOf(
      {
        jobs: [row('1', 'done'), row('2', 'done')],
        edges: [{ job_id: '2', depends_on: '1' }],
        transitions: [...aDone, ...lifecycle('2', 50, [550], 100)], // 1 done at 600, 2 claimed at 550
      },
      'dependency order violated',
    );
    expect(value).toBe(1);
    const after = figureOf(
      {
        jobs: [row('1', 'done'), row('2', 'done')],
        edges: [{ job_id: '2', depends_on: '1' }],
        transitions: [...aDone, ...lifecycle('2', 50, [601], 100)],
      },
      'dependency order violated',
    );
    expect(after.value).toBe(0);
  });

  const depsRun = (deps: { id: string; status: string }[], t = T + 1_000): WorkerRecord[] => [
    { type: 'start', t, run: 'A:2:1:1', job: '2', attempt: 1, kind: 'follow' },
    { type: 'deps', t: t + 1, run: 'A:2:1:1', job: '2', deps },
    { type: 'end', t: t + 50, run: 'A:2:1:1', job: '2', outcome: 'returned', aborted: false },
  ];
  test('ctx.dependencies() missing a dependency (pruned under a live dependent) is wrong', () => {
    // Broken on purpose: dependenciesSeen() skipping `${dep} missing` — 0.
    const { value } = figureOf(
      {
        procs: [proc('A', depsRun([]))],
        jobs: [row('1', 'done', { deleted: true }), row('2', 'done')],
        edges: [{ job_id: '2', depends_on: '1' }],
        transitions: [...aDone, tr('1', 'done', null, 900), ...lifecycle('2', 50, [999], 100)],
      },
      'ctx.dependencies() wrong',
    );
    expect(value).toBe(1);
  });

  test("a 'run' dependent's retry may see its requeued dependency running again", () => {
    // What the soak met (seed 42): the cascade root died, its 'run' dependent ran, failed, and
    // its retry read the root running after the producer's requeue. Documented behaviour.
    // Broken on purpose: dependenciesSeen() requiring a final status for 'run' as well — 1.
    const rootTrail = [
      tr('1', null, 'pending', 0),
      tr('1', 'pending', 'running', 10, 10),
      tr('1', 'running', 'dead', 20),
      tr('1', 'dead', 'pending', 500),
      tr('1', 'pending', 'running', 990, 990),
    ];
    const { value } = figureOf(
      {
        procs: [proc('A', depsRun([{ id: '1', status: 'running' }]))],
        jobs: [row('1', 'done'), row('2', 'done', { run_on_failure: true })],
        edges: [{ job_id: '2', depends_on: '1' }],
        transitions: [...rootTrail, ...lifecycle('2', 0, [999], 100)],
      },
      'ctx.dependencies() wrong',
    );
    expect(value).toBe(0);
  });

  test('a dependent of a dead job that is not cancelled, or cancelled after its requeue, is a wrong cascade', () => {
    // Broken on purpose: endState() without its two cascade pushes — 0 and 0.
    const notCancelled = figureOf(
      {
        jobs: [row('1', 'dead'), row('2', 'done')],
        edges: [{ job_id: '2', depends_on: '1' }],
      },
      'cascade wrong',
    );
    expect(notCancelled.value).toBe(1);
    const notBroughtBack = figureOf(
      {
        jobs: [
          row('1', 'done'),
          row('2', 'cancelled', { last_error: 'Cancelled: job 1, which it depends on, ended dead' }),
        ],
        edges: [{ job_id: '2', depends_on: '1' }],
      },
      'cascade wrong',
    );
    expect(notBroughtBack.value).toBe(1);
    const right = figureOf(
      {
        jobs: [row('1', 'dead'), row('2', 'cancelled'), row('3', 'done', { run_on_failure: true })],
        edges: [
          { job_id: '2', depends_on: '1' },
          { job_id: '3', depends_on: '1' },
        ],
      },
      'cascade wrong',
    );
    expect(right.value).toBe(0);
  });
});

describe('the per-second schedule', () => {
  const tickJob = (id: string, tickMs: number, firingUs: number) =>
    row(id, 'done', { dedupe_key: tickKey(tickMs), created_us: firingUs });
  const window = { firstTickMs: 10_000, nextRunAtMs: 20_000 }; // ticks 10 s … 19 s

  test('a tick with two jobs is doubled', () => {
    // Broken on purpose: scheduleChecks() with `found.length > 2` — 0.
    const jobs = Array.from({ length: 10 }, (_, i) => tickJob(String(i + 1), 10_000 + i * 1_000, i));
    jobs.push(tickJob('99', 13_000, 99));
    const { value } = figureOf({ jobs, schedule: window }, 'schedule ticks doubled');
    expect(value).toBe(1);
  });

  test('ticks skipped before a catch-up firing are allowed; a gap before an ordinary firing is lost', () => {
    // Broken on purpose: scheduleChecks() excusing every missing tick (`size >= 0`) — 0 lost.
    // Ticks 10–11 fired one by one; 12–13 missing, then 14–18 in one firing of catchUp (5) ticks;
    // tick 19 missing, with no later job: lost.
    const jobs = [tickJob('1', 10_000, 1), tickJob('2', 11_000, 2)];
    for (let t = 14_000; t <= 18_000; t += 1_000) jobs.push(tickJob(String(t), t, 3));
    const caughtUp = figureOf({ jobs, schedule: window }, 'schedule ticks lost');
    expect(caughtUp.value).toBe(1);
    expect(caughtUp.verdict.findings.find((f) => f.check === 'schedule tick lost')?.text).toMatch(
      /19:?|no later/,
    );
    // the same gap before a firing of fewer ticks: 12 and 13 are lost
    const short = jobs.filter((j) => j.created_us !== 3 || j.id === '14000');
    for (let t = 15_000; t <= 19_000; t += 1_000) short.push(tickJob(String(t), t, t));
    expect(figureOf({ jobs: short, schedule: window }, 'schedule ticks lost').value).toBe(2);
  });
});

describe('queue limits, on the database view', () => {
  const inQueue = (id: string, queue: string, group: string | null = null) =>
    row(id, 'done', { queue, group_key: group });

  test('three jobs running at once in a queue of concurrency 2 exceed it; a hand-over at one instant does not', () => {
    // Broken on purpose: limitChecks() passing `concurrency + 1` to excesses() — 0.
    const q = LIMITED.concurrency.queue;
    const jobs = ['1', '2', '3'].map((id) => inQueue(id, q));
    const over = figureOf(
      {
        jobs,
        transitions: [
          ...lifecycle('1', 0, [10], 100),
          ...lifecycle('2', 0, [20], 100),
          ...lifecycle('3', 0, [30], 100),
        ],
      },
      'queue concurrency exceeded',
    );
    expect(over.value).toBe(1);
    const handOver = figureOf(
      {
        jobs,
        transitions: [
          ...lifecycle('1', 0, [10], 100),
          ...lifecycle('2', 0, [20], 100),
          ...lifecycle('3', 0, [110], 100),
        ],
      },
      'queue concurrency exceeded',
    );
    expect(handOver.value).toBe(0);
  });

  test('two jobs of one group running at once exceed groupConcurrency 1; of two groups they do not', () => {
    // Broken on purpose: limitChecks() keying the intervals by queue instead of group — 0 and 1.
    const q = LIMITED.groups.queue;
    const transitions = [...lifecycle('1', 0, [10], 100), ...lifecycle('2', 0, [50], 100)];
    const same = figureOf(
      { jobs: [inQueue('1', q, 'g0'), inQueue('2', q, 'g0')], transitions },
      'group concurrency exceeded',
    );
    expect(same.value).toBe(1);
    const two = figureOf(
      { jobs: [inQueue('1', q, 'g0'), inQueue('2', q, 'g1')], transitions },
      'group concurrency exceeded',
    );
    expect(two.value).toBe(0);
  });

  test('five claims within one period exceed a rate limit of 4; a claim one period later has left the window', () => {
    // Broken on purpose: rateFindings() with `inWindow > limit + 1` — 0.
    const q = LIMITED.rate.queue;
    const jobs = ['1', '2', '3', '4', '5'].map((id) => inQueue(id, q));
    const at = (claims: number[]) => jobs.flatMap((j, i) => lifecycle(j.id, 0, [claims[i]!], 5));
    expect(figureOf({ jobs, transitions: at([0, 100, 200, 300, 999]) }, 'rate limit exceeded').value).toBe(1);
    expect(figureOf({ jobs, transitions: at([0, 100, 200, 300, 1_000]) }, 'rate limit exceeded').value).toBe(
      0,
    );
  });
});

describe('dedupe modes', () => {
  test('two jobs of one key active at once violate dedupe; a retry of one job does not', () => {
    // Broken on purpose: dedupeChecks() with excesses(…, 2) — 0; without mergeAdjacent() — 1 for
    // the retry (its running → pending → running looked like two jobs).
    const jobs = [row('1', 'done', { dedupe_key: 'dk-1' }), row('2', 'done', { dedupe_key: 'dk-1' })];
    const over = figureOf(
      { jobs, transitions: [...lifecycle('1', 0, [10, 200], 100), ...lifecycle('2', 250, [260], 10)] },
      'dedupe violated: two active',
    );
    expect(over.value).toBe(1);
    const apart = figureOf(
      { jobs, transitions: [...lifecycle('1', 0, [10, 200], 100), ...lifecycle('2', 300, [310], 10)] },
      'dedupe violated: two active',
    );
    expect(apart.value).toBe(0);
  });

  test("two queued jobs of one 'pending'-scope key violate it; one queued behind one running does not", () => {
    // Broken on purpose: dedupeChecks() checking only the running intervals — 0.
    const jobs = [row('1', 'done', { pending_key: 'one-0' }), row('2', 'done', { pending_key: 'one-0' })];
    const twoQueued = figureOf(
      { jobs, transitions: [...lifecycle('1', 0, [100], 100), ...lifecycle('2', 50, [300], 100)] },
      'dedupe violated: two queued',
    );
    expect(twoQueued.value).toBe(1);
    const behind = figureOf(
      { jobs, transitions: [...lifecycle('1', 0, [100], 300), ...lifecycle('2', 150, [400], 100)] },
      'dedupe violated: two queued',
    );
    expect(behind.value).toBe(0);
  });

  test('two jobs of a throttled key inside its window violate it', () => {
    // Broken on purpose: throttleFindings() comparing against windowMs µs instead of ms — 0.
    const key = `${DEDUPE.throttle.prefix}0`;
    const jobs = [row('1', 'done', { dedupe_key: key }), row('2', 'done', { dedupe_key: key })];
    const w = DEDUPE.throttle.windowMs;
    const inside = figureOf(
      { jobs, transitions: [...lifecycle('1', 0, [10], 10), ...lifecycle('2', w - 1, [w], 10)] },
      'dedupe violated: two jobs within',
    );
    expect(inside.value).toBe(1);
    const outside = figureOf(
      { jobs, transitions: [...lifecycle('1', 0, [10], 10), ...lifecycle('2', w + 1, [w + 10], 10)] },
      'dedupe violated: two jobs within',
    );
    expect(outside.value).toBe(0);
  });

  test('a debounced job that ran an older payload than the last one written into it violates it', () => {
    // Broken on purpose: debounceFindings() without `run.seq < last` — 0.
    const call = (
      seq: number,
      result: { id: string; created: boolean; replaced?: boolean },
    ): ProducerRecord => ({
      type: 'enqueue',
      t: T + seq,
      many: false,
      refs: [`r${seq}`],
      results: [result],
      dedupe: { mode: 'debounce', key: 'deb-0', seq },
    });
    const producer = producerProc([
      call(1, { id: '5', created: true }),
      call(2, { id: '5', created: false, replaced: true }),
    ]);
    const ran = (seq: number): WorkerRecord[] => [
      { type: 'start', t: T + 5_000, run: 'A:5:1:1', job: '5', attempt: 1, kind: 'debounce', seq },
      { type: 'end', t: T + 5_100, run: 'A:5:1:1', job: '5', outcome: 'returned', aborted: false },
    ];
    const jobs = [row('5', 'done', { kind: 'debounce', dedupe_key: 'deb-0' })];
    expect(
      figureOf({ procs: [producer, proc('A', ran(1))], jobs }, 'dedupe violated: a debounced').value,
    ).toBe(1);
    expect(
      figureOf({ procs: [producer, proc('A', ran(2))], jobs }, 'dedupe violated: a debounced').value,
    ).toBe(0);
  });
});

describe('waitFor', () => {
  const waited = (extra: Partial<Extract<ProducerRecord, { type: 'waited' }>>): ProducerRecord => ({
    type: 'waited',
    t: T + 30_000,
    id: '1',
    ...extra,
  });
  const done = [row('1', 'done', { result_run: 'A:1:1:1' })];
  const trail = lifecycle('1', 0, [10], 100);

  test('a wait resolved with a status that is not final, or with another run, is wrong', () => {
    // Broken on purpose: waitChecks() without its FINAL and result checks — 0 and 0.
    const running = figureOf(
      { procs: [producerProc([waited({ status: 'running' })])], jobs: done, transitions: trail },
      'waitFor wrong',
    );
    expect(running.value).toBe(1);
    const otherRun = figureOf(
      {
        procs: [producerProc([waited({ status: 'done', resultRun: 'B:1:1:1' })])],
        jobs: done,
        transitions: trail,
      },
      'waitFor wrong',
    );
    expect(otherRun.value).toBe(1);
    const right = figureOf(
      {
        procs: [producerProc([waited({ status: 'done', resultRun: 'A:1:1:1' })])],
        jobs: done,
        transitions: trail,
      },
      'waitFor wrong',
    );
    expect(right.value).toBe(0);
  });

  test('a wait abandoned at shutdown long after its job finished never resolved', () => {
    // Broken on purpose: waitChecks() ignoring abandoned waits — 0.
    const abandoned = waited({ error: 'Error: soak: producer stopping', abandoned: true });
    const missed = figureOf(
      { procs: [producerProc([abandoned])], jobs: done, transitions: trail },
      'waitFor wrong',
    );
    expect(missed.value).toBe(1);
    // a wait on a stuck dependent is abandoned too, but its job never finished: not waitFor's fault
    const stuck = figureOf(
      {
        procs: [producerProc([abandoned])],
        jobs: [row('1', 'waiting')],
        transitions: [tr('1', null, 'waiting', 0)],
      },
      'waitFor wrong',
    );
    expect(stuck.value).toBe(0);
  });
});
