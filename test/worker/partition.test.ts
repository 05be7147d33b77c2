/**
 * Issue 8, defect 3: a silent network (partition) hung the worker and stop(), and a process
 * paused past its lease woke up believing it still owned its jobs.
 *
 *  - Partition: a TCP proxy between the worker and PostgreSQL starts swallowing every byte. The
 *    handler must be aborted ('lease:lost') by its own lease deadline — before another worker
 *    can reap and start the job — and stop() and close() must resolve. Before the fix the
 *    heartbeat waited forever on one renewal: the handler was never aborted, the other worker
 *    ran the job while it still ran, and stop() never resolved (the test timed out).
 *  - Pause: a worker process is SIGSTOPped past its lease; another worker reaps and runs the
 *    job; on SIGCONT the paused handler's own timer fires — and must see its signal aborted
 *    (the lease clock runs first), so a careful handler skips its side effect; its late outcome
 *    is refused. Before the fix the handler woke with `signal.aborted === false`.
 *
 * Deliberate breaks seen failing: JobRun.armLease() never arming the lease timer and
 * LeaseKeeper without its lease clock (both tests: no abort before the other worker started /
 * `aborted: false` recorded); Queue pools without `query_timeout` (the partition test: stop()
 * did not resolve).
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { LeaseLostError } from '../../src/errors.js';
import { Queue } from '../../src/queue.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { killChildren, startFixture } from '../support/spawn.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { gate, nextEvent, startWorker, within } from './helpers.js';

const db = useTestDatabase();
let proxy: TcpProxy;

beforeAll(async () => {
  proxy = await startTcpProxy(Number(new URL(db.url).port || 5432), new URL(db.url).hostname);
  await db.sql('CREATE TABLE public.pause_effects (job_id bigint, attempt int, aborted boolean)');
});
afterAll(async () => {
  await proxy?.close();
});

describe('a silent network or a paused process never lets two handlers own one job', () => {
  test('partition: the handler is aborted by its lease deadline before anyone else can take the job; stop() resolves', async () => {
    const remote = new Queue({
      connectionString: proxy.url(db.url),
      schema: TEST_SCHEMA,
      statementTimeoutMs: 1_000,
      connectTimeoutMs: 1_000,
    });
    const started = gate();
    let abortedAt = 0;
    let startedElsewhere = 0;
    const a = await startWorker(db, {
      queue: remote,
      tasks: {
        'partition.job': async (_payload: unknown, { signal }: JobContext) => {
          started.open();
          await new Promise<void>((resolve) =>
            signal.addEventListener(
              'abort',
              () => {
                abortedAt = performance.now();
                resolve();
              },
              { once: true },
            ),
          );
          throw signal.reason;
        },
      },
      leaseMs: 2_000,
      reapIntervalMs: 3_600_000,
      abortGraceMs: 200,
    });
    const lost = nextEvent(a, 'lease:lost', () => true, 10_000);
    const queue = db.queue();
    const { id } = await queue.enqueue('partition.job', {}, { maxAttempts: 3 });
    await within(started.promise, 5_000, 'worker A started the job');
    proxy.mode = 'drop'; // the partition: nothing crosses any more, nothing is closed
    const dropAt = performance.now();

    const b = await startWorker(db, {
      tasks: {
        'partition.job': () => {
          startedElsewhere = performance.now();
          return 'B';
        },
      },
      reapIntervalMs: 100,
      pollIntervalMs: 100,
    });
    const doneB = nextEvent(b, 'job:done', (e) => e.job.id === id, 15_000);
    await lost;
    await doneB;
    expect(abortedAt).toBeGreaterThan(dropAt);
    expect(abortedAt, 'A was aborted before B started the job').toBeLessThan(startedElsewhere);

    const t0 = performance.now();
    await within(a.stop({ timeoutMs: 500 }), 10_000, 'stop() under partition');
    await within(remote.close(), 10_000, 'close() under partition');
    expect(performance.now() - t0).toBeLessThan(10_000);
    expect(await queue.get(id)).toMatchObject({ status: 'done', result: 'B' });
    proxy.mode = 'pass';
  });

  test('pause: SIGSTOP past the lease, another worker runs the job; after SIGCONT the old handler sees its signal aborted', async () => {
    const fixture = startFixture('test/worker/fixtures/paused-worker.ts', {
      SKIPLOCK_FIXTURE_URL: db.url,
      SKIPLOCK_FIXTURE_SCHEMA: TEST_SCHEMA,
    });
    const { child, exited } = fixture;
    try {
      const queue = db.queue();
      const { id } = await queue.enqueue('pause.job', {}, { maxAttempts: 3 });
      const deadline = Date.now() + 20_000;
      while (!fixture.stdout().includes(`started ${id}`)) {
        if (Date.now() > deadline)
          throw new Error(`the child never started the job; stderr:\n${fixture.stderr()}`);
        await sleep(20);
      }
      child.kill('SIGSTOP');
      const stoppedAt = performance.now();
      const b = await startWorker(db, {
        tasks: { 'pause.job': () => 'B' },
        reapIntervalMs: 100,
        pollIntervalMs: 100,
      });
      await nextEvent(b, 'job:done', (e) => e.job.id === id, 15_000);
      // Resume only after the handler's own 3 s timer is overdue too: both it and the worker's
      // timers then fire at once, in due order.
      await sleep(Math.max(0, stoppedAt + 3_500 - performance.now()));
      child.kill('SIGCONT');
      expect(await within(exited, 20_000, 'the child finished'), fixture.stderr()).toBe(0);
      const report = JSON.parse(fixture.stdout().trim().split('\n').at(-1) as string) as { events: string[] };
      expect(report.events).toContain('lease:lost');
      expect(report.events).not.toContain('job:done');
      const effects = await db.sql<{ attempt: number; aborted: boolean }>(
        'SELECT attempt, aborted FROM public.pause_effects WHERE job_id = $1',
        [id],
      );
      expect(effects).toEqual([{ attempt: 1, aborted: true }]);
      expect(await queue.get(id)).toMatchObject({ status: 'done', result: 'B', attempts: 2 });
      await b.stop();
    } finally {
      child.kill('SIGCONT');
      await killChildren([child]);
    }
  });

  test('a LISTEN that is never answered (silent right after it was sent) hangs neither start() nor stop()', async () => {
    // Review finding: LISTEN was sent without a timeout; a network gone silent at that moment
    // left start() and stop() waiting forever. Before the fix neither resolved within 20 s.
    const remote = new Queue({
      connectionString: proxy.url(db.url),
      schema: TEST_SCHEMA,
      statementTimeoutMs: 1_000,
      connectTimeoutMs: 1_000,
    });
    proxy.silenceWhen = /LISTEN/;
    try {
      const worker = db.worker({
        queue: remote,
        tasks: { 'partition.listen': () => 'ok' },
        pollIntervalMs: 200,
      });
      const errors: string[] = [];
      worker.on('error', ({ during }) => errors.push(during));
      await within(worker.start(), 20_000, 'start() with LISTEN unanswered');
      const done = nextEvent(worker, 'job:done', () => true, 10_000);
      await db.queue().enqueue('partition.listen', {});
      expect((await done).result).toBe('ok'); // the fallback poll still runs jobs
      await within(worker.stop({ timeoutMs: 500 }), 10_000, 'stop() with LISTEN unanswered');
      await within(remote.close(), 10_000, 'close()');
      expect(errors.some((e) => /listening/.test(e))).toBe(true);
    } finally {
      proxy.silenceWhen = null;
    }
  });

  test('a handler that reads its signal right after a stall past its lease sees it aborted, before any timer ran', async () => {
    // The 15-minute soak found the window: after SIGCONT, a handler timer that fell due during
    // the pause before the worker's next lease-clock tick ran first, and the handler carried on
    // (its signal not yet aborted). Reading `signal.aborted` now looks at the lease deadline.
    // Before the fix this test saw `false`.
    const seen: { aborted?: boolean; reason?: unknown } = {};
    const worker = await startWorker(db, {
      tasks: {
        'pause.read': async (_payload: unknown, { signal }: JobContext) => {
          const until = performance.now() + 1_000;
          while (performance.now() < until) {
            // a stall longer than the lease: no timer and no I/O can run meanwhile
          }
          seen.aborted = signal.aborted; // read in the same turn: nothing else ran
          seen.reason = signal.reason;
          return 'carried on';
        },
      },
      leaseMs: 400,
      reapIntervalMs: 3_600_000,
    });
    const lost = nextEvent(worker, 'lease:lost', (e) => e.job.task === 'pause.read');
    const queue = db.queue();
    const { id } = await queue.enqueue('pause.read', {}, { maxAttempts: 2 });
    await lost;
    expect(seen.aborted).toBe(true);
    expect(seen.reason).toBeInstanceOf(LeaseLostError);
    await expect.poll(() => worker.stats().running).toBe(0);
    expect((await queue.get(id))?.result).toBeNull(); // its outcome was not written
    await worker.stop();
  });
});
