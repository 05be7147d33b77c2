/**
 * SPEC §11 "a queue with no sequenced job pays nothing": a listening worker leaves the sequence
 * pass out of its claims once a pass found no key noted, until a 'sequence' hint (every note
 * announces itself, migration 22), a reconnection of its LISTEN, or half its fallback poll; and
 * a sequenced job enqueued into an idle worker still starts at once (its hint).
 *
 * Deliberate breaks seen failing (in this tree, each restored after its run):
 *  - SequenceGate.ticket() always returning a ticket (the pass on every claim): "20 plain jobs"
 *    counted a pass per claim (20 > 1).
 *  - the arrival's `pg_notify(…, 'sequence')` left out of migration 22's sequence_arrived: the
 *    sequenced job enqueued into the idle worker did not start within 3 s (fallback poll 60 s).
 *  - the worker ignoring the hint (no `dirty()` in notified): the same.
 *  - clean() not checking the generation (a hint during a pass forgotten): the unit test below.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { engineOf } from '../../src/engine/engine.js';
import { SequenceGate } from '../../src/engine/sequence-gate.js';
import type { Worker } from '../../src/worker/worker.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('SequenceGate', () => {
  test('open until a pass finds nothing; a hint, even during a pass, or the fresh time opens it again', async () => {
    const gate = new SequenceGate(200);
    const first = gate.ticket();
    expect(first).not.toBeNull();
    gate.clean(first as NonNullable<typeof first>);
    expect(gate.ticket()).toBeNull();
    // a hint while a pass is in flight: that pass's answer does not close the gate
    const inFlight = gate.ticket() ?? { generation: -2, at: 0 };
    gate.dirty();
    const during = gate.ticket();
    expect(during).not.toBeNull();
    gate.clean({ generation: (during as NonNullable<typeof during>).generation - 1, at: performance.now() });
    expect(gate.ticket()).not.toBeNull();
    gate.clean(gate.ticket() as NonNullable<ReturnType<SequenceGate['ticket']>>);
    expect(gate.ticket()).toBeNull();
    // a late answer of an older pass changes nothing
    gate.clean(inFlight);
    expect(gate.ticket()).toBeNull();
    await sleep(250);
    expect(gate.ticket()).not.toBeNull(); // fresh time over: the fallback
  });
});

describe('a listening worker', () => {
  let worker: Worker | undefined;
  afterEach(async () => {
    await worker?.stop();
    worker = undefined;
  });

  test('20 plain jobs, one at a time: the pass runs on the first claims only; a sequenced job still starts at once', async () => {
    const queue = db.queue();
    const store = engineOf(queue).store;
    const real = store.claim.sequencePass.bind(store.claim);
    let passes = 0;
    store.claim.sequencePass = (executor) => {
      passes++;
      return real(executor);
    };
    const done: string[] = [];
    worker = db.worker({
      queue,
      concurrency: 4,
      pollIntervalMs: 60_000,
      tasks: { 'gate.plain': () => null, 'gate.seq': () => null },
    });
    worker.on('job:done', ({ job }) => done.push(job.id));
    const connected = new Promise<void>((resolve) => worker?.once('listen:connected', () => resolve()));
    await worker.start();
    await connected;
    await expect.poll(() => passes, { timeout: 5_000 }).toBeGreaterThan(0);
    await sleep(100);
    const before = passes;
    let claimsAfter = 0;
    for (let i = 0; i < 20; i++) {
      const { id } = await queue.enqueue('gate.plain', { i });
      await expect.poll(() => done.includes(id), { timeout: 5_000 }).toBe(true);
      claimsAfter++;
    }
    expect(claimsAfter).toBe(20);
    expect(passes - before).toBeLessThanOrEqual(1);
    // an arrival announces its note: the idle worker's next claim runs the pass and takes it
    const seq = await queue.enqueue('gate.seq', null, { sequence: 'gate-key' });
    await expect.poll(() => done.includes(seq.id), { timeout: 3_000 }).toBe(true);
    expect(passes).toBeGreaterThan(before);
  });
});
