/**
 * A worker process of the benchmark (W2 drain + memory, W5 steady state, workflows). The runner forks it with
 * the same Node binary; it runs one system's consumer until told to stop, then reports:
 *   → { type: 'waiting', enqueue? }               (hold, or profile) waits for 'go'
 *   ← { type: 'go' }
 *   → { type: 'ready', startedAt, readyAt }       consumer running
 *   → { type: 'handled', at }                     (drain) the expected number of handlers ran
 *   ← { type: 'stop', windowStart?, windowEnd? }
 *   → { type: 'result', ... }                     then exits
 * It exits by itself when the runner goes away (IPC disconnect) or after its own time limit.
 */

import { type GcFigures, GcMeter } from './lib/gc.js';
import { reason, wallNow, withTimeout } from './lib/util.js';
import { createDriver } from './systems/index.js';
import type { BenchEnv, BenchPayload, Consumer, SystemName } from './systems/types.js';

export interface ChildSpec {
  system: SystemName;
  env: BenchEnv;
  /** flow: every job's handler start and end, and its completion's report, by payload i (0..expect − 1). */
  mode: 'drain' | 'steady' | 'flow';
  concurrency: number;
  /** drain: the number of jobs after which 'handled' is sent; flow: the size of the flow (i 0..expect − 1). */
  expect: number;
  /** The child exits (code 4) if still running after this long. */
  lifetimeMs: number;
  /** W2d: completed jobs deleted. */
  deleteCompleted?: boolean;
  /** W7: send 'waiting' and start the consumer only on a 'go' message (children start together). */
  hold?: boolean;
  /** W8, W9: each handler waits this long. */
  handlerMs?: number;
  /** W9: at most this many running jobs per group (systems that set it on the consumer). */
  groupConcurrency?: number;
  /** W-batch: the consumer's batch handler takes up to this many jobs per call. */
  batchSize?: number;
  /**
   * W2 --profile: the child first enqueues `jobs` jobs itself (batch API, `chunk` per call; the
   * producer stays open, idle, until the end), sends 'waiting' with that phase's figures, and
   * starts its consumer on 'go'; its result then carries {@link ChildProfile}.
   */
  profile?: { jobs: number; chunk: number };
}

/** One phase of a profiled child: Node CPU (process.cpuUsage), GC and allocation, wall time. */
export interface PhaseFigures {
  userUs: number;
  systemUs: number;
  wallMs: number;
  gc: GcFigures;
}

export interface ChildProfile {
  enqueue: PhaseFigures;
  /** From 'go' until the runner's 'stop' (consumer start included). */
  drain: PhaseFigures;
  /** CPU of the consumer's start (its constructor and start(), until 'ready'), µs. */
  startupCpuUs: number;
  /** process.cpuUsage() at 'stop': the whole process (Node's own start and module loading included). */
  processUserUs: number;
  processSystemUs: number;
  /** getrusage maxrss when the enqueue phase ended, bytes. */
  maxRssAfterEnqueueBytes: number;
}

export interface ChildResult {
  type: 'result';
  handled: number;
  firstJobAt: number;
  /** steady: handler starts inside the window, and their enqueue → start latencies (ms). */
  inWindow: number;
  latencies: Float64Array;
  /** flow: wall-clock ms of each job's handler start, handler end, completion report (0: none), by i. */
  starts?: Float64Array;
  ends?: Float64Array;
  acks?: Float64Array;
  /** Peak resident set size of this process (getrusage maxrss), in bytes. */
  maxRssBytes: number;
  /** Highest RSS seen by sampling every 20 ms, in bytes. */
  sampledPeakRssBytes: number;
  errors: string[];
  stopMs: number;
  profile?: ChildProfile;
}

function send(message: unknown): Promise<void> {
  return new Promise((resolve) => {
    if (!process.send) return resolve();
    process.send(message, undefined, {}, () => resolve());
  });
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? '{}') as ChildSpec;
  process.on('disconnect', () => process.exit(3));
  setTimeout(() => {
    process.stderr.write(`bench child (${spec.system}) exceeded its ${spec.lifetimeMs} ms lifetime\n`);
    process.exit(4);
  }, spec.lifetimeMs).unref();

  let sampledPeak = process.memoryUsage.rss();
  const sampler = setInterval(() => {
    sampledPeak = Math.max(sampledPeak, process.memoryUsage.rss());
  }, 20);
  sampler.unref();

  const errors: string[] = [];
  const starts: number[] = [];
  const latencies: number[] = [];
  let handled = 0;
  let firstJobAt = 0;
  const flow = spec.mode === 'flow';
  const flowStarts = new Float64Array(flow ? spec.expect : 0);
  const flowEnds = new Float64Array(flow ? spec.expect : 0);
  const flowAcks = new Float64Array(flow ? spec.expect : 0);
  const inFlow = (i: number) => Number.isInteger(i) && i >= 0 && i < flowStarts.length;
  const onJob = (payload: BenchPayload): void => {
    const now = wallNow();
    handled++;
    if (handled === 1) firstJobAt = now;
    if (flow) {
      if (inFlow(payload.i) && flowStarts[payload.i] === 0) flowStarts[payload.i] = now;
      // the last job of every flow shape is the one with the highest i
      if (payload.i === spec.expect - 1) void send({ type: 'handled', at: now });
    } else if (spec.mode === 'steady') {
      starts.push(now);
      latencies.push(now - payload.t);
    } else if (handled === spec.expect) {
      void send({ type: 'handled', at: now });
    }
  };
  const onError = (error: unknown): void => {
    if (errors.length < 5) errors.push(reason(error));
  };

  const flowHooks = flow
    ? {
        onJobEnd: (payload: BenchPayload) => {
          if (inFlow(payload.i) && flowEnds[payload.i] === 0) flowEnds[payload.i] = wallNow();
        },
        onAck: (payload: BenchPayload) => {
          if (inFlow(payload.i) && flowAcks[payload.i] === 0) flowAcks[payload.i] = wallNow();
        },
        flows: true,
      }
    : {};

  const driver = createDriver(spec.system, spec.env);
  let enqueueFigures: PhaseFigures | null = null;
  let maxRssAfterEnqueue = 0;
  const closeLater: (() => Promise<void>)[] = [];
  if (spec.profile) {
    const { jobs, chunk } = spec.profile;
    const cpu0 = process.cpuUsage();
    const wall0 = wallNow();
    const gc = new GcMeter();
    try {
      const producer = await withTimeout(driver.producer(), 30_000, `${spec.system} producer start`);
      closeLater.push(() => producer.close());
      for (let from = 0; from < jobs; from += chunk) {
        const count = Math.min(chunk, jobs - from);
        await producer.enqueueBatch(Array.from({ length: count }, (_, k) => ({ i: from + k, t: 0 })));
      }
    } catch (error) {
      await send({ type: 'error', message: `enqueue: ${reason(error)}` });
      process.exit(1);
    }
    const gcFigures = gc.stop();
    const cpu = process.cpuUsage(cpu0);
    enqueueFigures = { userUs: cpu.user, systemUs: cpu.system, wallMs: wallNow() - wall0, gc: gcFigures };
    maxRssAfterEnqueue = process.resourceUsage().maxRSS * 1024;
  }
  if (spec.hold || spec.profile) {
    const go = new Promise<void>((resolve) => {
      const onGo = (message: { type: string }) => {
        if (message.type !== 'go') return;
        process.off('message', onGo);
        resolve();
      };
      process.on('message', onGo);
    });
    await send({ type: 'waiting', ...(enqueueFigures ? { enqueue: enqueueFigures } : {}) });
    await go;
  }
  const drainCpu0 = process.cpuUsage();
  const drainWall0 = wallNow();
  const drainGc = spec.profile ? new GcMeter() : null;
  if (spec.profile) sampledPeak = process.memoryUsage.rss(); // the drain's own peak
  let consumer: Consumer;
  const startedAt = wallNow();
  try {
    consumer = await withTimeout(
      driver.consumer({
        concurrency: spec.concurrency,
        onJob,
        onError,
        ...(spec.deleteCompleted ? { deleteCompleted: true } : {}),
        ...(spec.handlerMs ? { handlerMs: spec.handlerMs } : {}),
        ...(spec.groupConcurrency ? { groupConcurrency: spec.groupConcurrency } : {}),
        ...(spec.batchSize ? { batchSize: spec.batchSize } : {}),
        ...flowHooks,
      }),
      60_000,
      `${spec.system} consumer start`,
    );
  } catch (error) {
    await send({ type: 'error', message: reason(error) });
    process.exit(1);
  }
  const startupCpu = process.cpuUsage(drainCpu0);
  await send({ type: 'ready', startedAt, readyAt: wallNow() });

  process.on('message', (message: { type: string; windowStart?: number; windowEnd?: number }) => {
    if (message.type !== 'stop') return;
    void (async () => {
      const t0 = wallNow();
      let profile: ChildProfile | undefined;
      if (drainGc && enqueueFigures) {
        const gc = drainGc.stop();
        const cpu = process.cpuUsage(drainCpu0);
        const whole = process.cpuUsage();
        profile = {
          enqueue: enqueueFigures,
          drain: { userUs: cpu.user, systemUs: cpu.system, wallMs: t0 - drainWall0, gc },
          startupCpuUs: startupCpu.user + startupCpu.system,
          processUserUs: whole.user,
          processSystemUs: whole.system,
          maxRssAfterEnqueueBytes: maxRssAfterEnqueue,
        };
      }
      try {
        await withTimeout(consumer.stop(), 30_000, `${spec.system} consumer stop`);
        for (const close of closeLater) await withTimeout(close(), 10_000, `${spec.system} producer close`);
        await withTimeout(driver.close(), 10_000, `${spec.system} driver close`);
      } catch (error) {
        onError(error);
      }
      const stopMs = wallNow() - t0;
      const from = message.windowStart ?? Number.NEGATIVE_INFINITY;
      const to = message.windowEnd ?? Number.POSITIVE_INFINITY;
      const kept: number[] = [];
      starts.forEach((at, i) => {
        if (at >= from && at <= to) kept.push(latencies[i] as number);
      });
      const result: ChildResult = {
        type: 'result',
        handled,
        firstJobAt,
        inWindow: kept.length,
        latencies: Float64Array.from(kept),
        maxRssBytes: process.resourceUsage().maxRSS * 1024,
        sampledPeakRssBytes: Math.max(sampledPeak, process.memoryUsage.rss()),
        errors,
        stopMs,
        ...(flow ? { starts: flowStarts, ends: flowEnds, acks: flowAcks } : {}),
        ...(profile ? { profile } : {}),
      };
      await send(result);
      process.exit(0);
    })();
  });
}

main().catch(async (error: unknown) => {
  await send({ type: 'error', message: reason(error) });
  process.exit(1);
});
