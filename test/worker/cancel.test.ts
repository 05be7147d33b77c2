/**
 * Cancelling running jobs (SPEC §3: "running → cancel requested, the worker aborts it"). The
 * handler's signal aborts with a JobCancelledError and the job ends `cancelled` ('job:cancelled'),
 * whatever the handler returns afterwards. The NOTIFY is only the fast path: a cancel whose
 * notification was missed is found by the next lease renewal. A handler that ignores the abort
 * loses its slot after abortGraceMs and its job still ends cancelled.
 *
 * Deliberate breaks seen failing (in a private copy of src/):
 *  - Worker.notified() ignoring `cancel:` payloads: the queue.cancel() tests timed out waiting
 *    for the abort.
 *  - LeaseKeeper.tick() ignoring `lease.cancelRequested`: the missed-NOTIFY test saw no abort
 *    after worker.tick.renewLeases().
 *  - writeOutcome() without its `abortReason === 'cancel'` branch: the first test's job (its
 *    handler returns normally after the abort) ended `done`, with no 'job:cancelled'. (Handlers
 *    that throw still end cancelled through fail(), which honours the cancel flag.)
 */
import { describe, expect, test } from 'vitest';
import { JobCancelledError } from '../../src/errors.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { aborted, gate, nextEvent, startWorker, within } from './helpers.js';

const db = useTestDatabase();

describe('cancelling a running job', () => {
  test('queue.cancel(id) aborts the handler (JobCancelledError); the job ends cancelled', async () => {
    const queue = db.queue();
    const reason = gate<unknown>();
    const worker = await startWorker(db, {
      tasks: {
        'cancel.notify': async (_payload: unknown, { signal }: JobContext) => {
          reason.open(await aborted(signal));
          return 'partial work'; // returned after the abort: not a result
        },
      },
    });
    const started = nextEvent(worker, 'job:start', (e) => e.job.task === 'cancel.notify');
    const cancelled = nextEvent(worker, 'job:cancelled', (e) => e.job.task === 'cancel.notify');
    const { id } = await queue.enqueue('cancel.notify', {});
    await started;

    expect(await queue.cancel(id)).toBe(true);
    const why = await within(reason.promise, 3_000, 'the handler was aborted');
    expect(why).toBeInstanceOf(JobCancelledError);
    expect((why as JobCancelledError).code).toBe('ERR_JOB_CANCELLED');
    expect(await cancelled).toMatchObject({ job: { id }, reason: 'cancel' });
    expect(await queue.get(id)).toMatchObject({ status: 'cancelled', result: null, leaseUntil: null });
    expect(worker.stats()).toMatchObject({ cancelled: 1, done: 0 });
    await worker.stop();
  });

  test('a missed NOTIFY: the cancel flag alone is found by the next lease renewal', async () => {
    const queue = db.queue();
    const started = gate<AbortSignal>();
    const reason = gate<unknown>();
    const worker = await startWorker(db, {
      tasks: {
        'cancel.flag': async (_payload: unknown, { signal }: JobContext) => {
          started.open(signal);
          const why = await aborted(signal);
          reason.open(why);
          throw why;
        },
      },
      leaseMs: 60_000, // the heartbeat runs every 20 s: only the explicit tick renews here
    });
    const cancelled = nextEvent(worker, 'job:cancelled', (e) => e.job.task === 'cancel.flag');
    const { id } = await queue.enqueue('cancel.flag', {});
    const signal = await within(started.promise, 5_000, 'the handler started');

    // What queue.cancel() writes, but without its NOTIFY.
    await db.sql(`UPDATE ${db.jobs} SET cancel_requested_at = now() WHERE id = $1`, [id]);
    await db.sql('SELECT 1'); // one more round trip: no notification is coming
    expect(signal.aborted).toBe(false);

    await worker.tick.renewLeases();
    expect(signal.aborted).toBe(true);
    expect(await reason.promise).toBeInstanceOf(JobCancelledError);
    await cancelled;
    expect(await queue.get(id)).toMatchObject({ status: 'cancelled', result: null });
    await worker.stop();
  });

  test('a handler that ignores the cancel loses its slot after abortGraceMs; the job still ends cancelled', async () => {
    const queue = db.queue();
    const hung = gate();
    const nextStarted = gate();
    const worker = await startWorker(db, {
      tasks: {
        'cancel.stubborn': async () => {
          await hung.promise; // never looks at its signal
          return 'too late';
        },
        'cancel.next': () => nextStarted.open(),
      },
      concurrency: 1,
      abortGraceMs: 300,
    });
    try {
      const started = nextEvent(worker, 'job:start', (e) => e.job.task === 'cancel.stubborn');
      const runaway = nextEvent(worker, 'job:runaway', (e) => e.job.task === 'cancel.stubborn');
      const cancelled = nextEvent(worker, 'job:cancelled', (e) => e.job.task === 'cancel.stubborn');
      const { id } = await queue.enqueue('cancel.stubborn', {});
      await started;
      await queue.enqueue('cancel.next', {});
      expect(await queue.cancel(id)).toBe(true);

      expect(await runaway).toMatchObject({ reason: 'cancel', graceMs: 300 });
      await cancelled;
      await within(nextStarted.promise, 3_000, 'the next job started in the freed slot');
      expect(await queue.get(id)).toMatchObject({ status: 'cancelled', result: null });
      expect(worker.stats()).toMatchObject({ runaway: 1, cancelled: 1 });
    } finally {
      hung.open();
    }
    await worker.stop();
  });
});
