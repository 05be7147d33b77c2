/**
 * SPEC §12 durable steps with §9 OpenTelemetry (docs/steps.md, "Tracing"), with the SDK's
 * in-memory exporter, a real Worker and PostgreSQL: each run of a job — an attempt, or a run
 * after a suspension — is its own CONSUMER span (a root of its own trace), and each step answered
 * in that run is a span event `skiplock.step` with `skiplock.step.name`, `skiplock.step.kind`
 * (`step` | `sleep` | `event`) and `skiplock.step.replayed` (answered from the job's stored steps
 * instead of by this run: a step done by an earlier run, a sleep stored by an earlier run whose
 * instant has passed, a wait the emit — or the timeout — answered while the job waited), in the
 * order the handler asked for them.
 * 1. three ctx.step then return: one span, three events in order, none replayed;
 * 2. two steps then a throw, then the retry: two spans (retry, done); the second replays the two
 *   stored steps (replayed) and runs the third (not replayed);
 * 3. ctx.sleep: the run that suspends ends its span with outcome `suspended`, status UNSET and no
 *   exception (a suspension is no failure), with no event for the sleep it suspended on (that
 *   sleep is not answered in it); the run past the instant has the sleep as a `sleep` event,
 *   replayed. A sleep already past on its first call is a `sleep` event, not replayed;
 * 4. ctx.waitForEvent: the run that waits ends `suspended` the same way; after the emit the
 *   resumed run has the wait as an `event` event, replayed (the emit stored its payload). A wait
 *   on an event already set is an `event` event, not replayed.
 *
 * Deliberate breaks seen failing (each made in src/, this file run, the break undone; the
 * messages are vitest's):
 *  1. `onStep(…, 'step', true)` removed from JobSteps.step (a replayed step not reported): tests
 *     2, 3 and 4 failed — "expected [ [ 'three', 'step', false ] ] to deeply equal
 *     [ [ 'one', 'step', true ], …(2) ]".
 *  2. `onStep(…, 'step', false)` removed (a new step not reported): all four failed — "expected []
 *     to deeply equal [ [ 'fetch', 'step', false ], …(2) ]".
 *  3. ProcessSpan.step writing `'skiplock.step.kind': 'step'` whatever the kind: tests 3 and 4
 *     failed (`'sleep'` / `'event'` expected, `'step'` received).
 *  4. ProcessSpan.step writing `'skiplock.step.replayed': false` always: tests 2, 3 and 4 failed —
 *     "expected [ [ 'one', 'step', false ], …(2) ] to deeply equal [ [ 'one', 'step', true ], …(2) ]".
 *  5. ProcessSpan.step writing the kind as the name: all four failed — "expected
 *     [ [ 'step', 'step', false ], …(2) ] to deeply equal [ [ 'fetch', 'step', false ], …(2) ]".
 *  6. `onStep(…, 'sleep', true)` removed from JobSteps.sleep: test 3 failed (the resumed run had
 *     2 events, not 4); `onStep(…, 'sleep', false)` removed: test 3 failed (the sleep already past
 *     missing from the suspending run).
 *  7. `onStep(…, 'event', true)` removed from JobSteps.waitForEvent: test 4 failed (the resumed
 *     run had no `reply` event); its `state === 'resolved'` replaced by `true`: test 4 failed (the
 *     wait on an event already set reported replayed).
 *  8. job-executor.ts afterHandler without its `run.suspended === null` test (JobSuspended then
 *     recorded as the span's error): tests 3 and 4 failed — "expected 2 to be +0" (status ERROR
 *     on the suspended run).
 *  9. job-executor.ts `end` not ending the span of a suspended run: tests 3 and 4 failed —
 *     "expected [ 'done' ] to deeply equal [ 'suspended', 'done' ]" (the poll timed out: no span
 *     for the suspending run).
 */
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { expect, test } from 'vitest';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';
import { useInMemoryTracing } from '../support/otel.js';

const db = useTestDatabase();
const exporter = useInMemoryTracing();

/** The finished CONSUMER spans of job `id` (one per run), in the order they ended. */
function runSpans(id: string): ReadableSpan[] {
  return exporter
    .getFinishedSpans()
    .filter((span) => span.kind === SpanKind.CONSUMER && span.attributes['messaging.message.id'] === id);
}

/** The outcomes of job `id`'s runs so far (what a test polls for). */
function outcomesOf(id: string): unknown[] {
  return runSpans(id).map((span) => span.attributes['skiplock.outcome']);
}

/** A span's `skiplock.step` events as [name, kind, replayed], in the order they were added. */
function steps(span: ReadableSpan | undefined): [unknown, unknown, unknown][] {
  return (span?.events ?? [])
    .filter((event) => event.name === 'skiplock.step')
    .map((event) => [
      event.attributes?.['skiplock.step.name'],
      event.attributes?.['skiplock.step.kind'],
      event.attributes?.['skiplock.step.replayed'],
    ]);
}

/** Every span of the job a root of its own trace: one span per run, none nested in another. */
function expectOneSpanPerRun(spans: ReadableSpan[]): void {
  expect(new Set(spans.map((span) => span.spanContext().spanId)).size).toBe(spans.length);
  expect(new Set(spans.map((span) => span.spanContext().traceId)).size).toBe(spans.length);
  for (const span of spans) expect(span.parentSpanContext).toBeUndefined();
}

/** A suspension is no failure: status unset, no exception event, outcome `suspended`. */
function expectSuspended(span: ReadableSpan | undefined): void {
  expect(span?.attributes['skiplock.outcome']).toBe('suspended');
  expect(span?.status.code).toBe(SpanStatusCode.UNSET);
  expect(span?.events.filter((event) => event.name === 'exception')).toEqual([]);
}

test('three ctx.step then return: one run span, three step events in order, none replayed', async () => {
  const queue = db.queue();
  const worker = db.worker({
    queue,
    tasks: {
      'trace.three': async (_p: unknown, ctx: JobContext) => {
        const a = await ctx.step('fetch', () => 1);
        const b = await ctx.step('transform', () => a + 1);
        await ctx.step('store', () => b + 1);
        return 'ok';
      },
    },
  });
  await worker.start();
  const { id } = await queue.enqueue('trace.three', {});
  await expect.poll(() => outcomesOf(id)).toEqual(['done']);
  const [span] = runSpans(id);
  expect(span?.name).toBe('process trace.three');
  expect(span?.status.code).toBe(SpanStatusCode.UNSET);
  expect(steps(span)).toEqual([
    ['fetch', 'step', false],
    ['transform', 'step', false],
    ['store', 'step', false],
  ]);
  expect(span?.events.map((event) => event.name)).toEqual(Array(3).fill('skiplock.step'));
  await worker.stop();
});

test('two steps, a throw, the retry: one span per run; the rerun replays the two stored steps and runs the third', async () => {
  const queue = db.queue();
  let calls = 0;
  const ran: string[] = [];
  const worker = db.worker({
    queue,
    backoff: { baseMs: 10, capMs: 10 },
    tasks: {
      'trace.retry': async (_p: unknown, ctx: JobContext) => {
        calls++;
        await ctx.step('one', () => ran.push('one'));
        await ctx.step('two', () => ran.push('two'));
        if (calls === 1) throw new Error('first run fails after two steps');
        await ctx.step('three', () => ran.push('three'));
        return 'ok';
      },
    },
  });
  await worker.start();
  const { id } = await queue.enqueue('trace.retry', {});
  await expect.poll(() => outcomesOf(id)).toEqual(['retry', 'done']);
  expect(ran).toEqual(['one', 'two', 'three']); // the stored steps were not run again
  const spans = runSpans(id);
  expectOneSpanPerRun(spans);
  const [first, second] = spans;
  expect(first?.attributes['skiplock.attempt']).toBe(1);
  expect(second?.attributes['skiplock.attempt']).toBe(2);
  expect(steps(first)).toEqual([
    ['one', 'step', false],
    ['two', 'step', false],
  ]);
  expect(first?.status).toEqual({ code: SpanStatusCode.ERROR, message: 'first run fails after two steps' });
  expect(steps(second)).toEqual([
    ['one', 'step', true],
    ['two', 'step', true],
    ['three', 'step', false],
  ]);
  expect(second?.status.code).toBe(SpanStatusCode.UNSET);
  await worker.stop();
});

test('ctx.sleep: the suspending run ends its span as suspended, no error; the run past the instant has the sleep, replayed', async () => {
  const queue = db.queue();
  const suspended: string[] = [];
  const worker = db.worker({
    queue,
    tasks: {
      'trace.sleep': async (_p: unknown, ctx: JobContext) => {
        await ctx.step('before', () => 'b');
        await ctx.sleep('past', 0); // its instant passed already: answered in this run
        await ctx.sleep('nap', 200); // suspends the first run
        await ctx.step('after', () => 'a');
        return 'rested';
      },
    },
  });
  worker.on('job:suspended', ({ job, kind }) => suspended.push(`${job.id}:${kind}`));
  await worker.start();
  const { id } = await queue.enqueue('trace.sleep', {});
  await expect.poll(() => outcomesOf(id)).toEqual(['suspended', 'done']);
  expect(suspended).toEqual([`${id}:sleep`]);
  const spans = runSpans(id);
  expectOneSpanPerRun(spans);
  const [asleep, resumed] = spans;
  expectSuspended(asleep);
  // the sleep that suspended the run is not answered in it: no event for 'nap' here
  expect(steps(asleep)).toEqual([
    ['before', 'step', false],
    ['past', 'sleep', false],
  ]);
  // a suspension gives the attempt back: the resumed run is the same attempt
  expect(asleep?.attributes['skiplock.attempt']).toBe(1);
  expect(resumed?.attributes['skiplock.attempt']).toBe(1);
  expect(resumed?.status.code).toBe(SpanStatusCode.UNSET);
  expect(steps(resumed)).toEqual([
    ['before', 'step', true],
    ['past', 'sleep', true],
    ['nap', 'sleep', true],
    ['after', 'step', false],
  ]);
  await worker.stop();
});

test('ctx.waitForEvent answered by an emit: the resumed run has the wait as an event step, replayed; one already set is not', async () => {
  const queue = db.queue();
  const suspended: string[] = [];
  const worker = db.worker({
    queue,
    tasks: {
      'trace.wait': async (payload: { event: string }, ctx: JobContext) => {
        await ctx.step('ask', () => 'asked');
        const reply = await ctx.waitForEvent('reply', payload.event);
        return reply;
      },
    },
  });
  worker.on('job:suspended', ({ job, kind, event }) => suspended.push(`${job.id}:${kind}:${event}`));
  await worker.start();
  const { id } = await queue.enqueue('trace.wait', { event: 'trace.answer' });
  await expect.poll(() => outcomesOf(id)).toEqual(['suspended']);
  expect(suspended).toEqual([`${id}:event:trace.answer`]);
  expect(await queue.emitEvent('trace.answer', { yes: true })).toBe(true);
  await expect.poll(() => outcomesOf(id)).toEqual(['suspended', 'done']);
  expect((await queue.get(id))?.result).toEqual({ payload: { yes: true } });
  const spans = runSpans(id);
  expectOneSpanPerRun(spans);
  const [waiting, resumed] = spans;
  expectSuspended(waiting);
  expect(steps(waiting)).toEqual([['ask', 'step', false]]);
  expect(resumed?.status.code).toBe(SpanStatusCode.UNSET);
  expect(steps(resumed)).toEqual([
    ['ask', 'step', true],
    ['reply', 'event', true],
  ]);

  // an event set before the wait: answered in the run itself, not replayed, no suspension
  await queue.emitEvent('trace.early', 'ready');
  const early = await queue.enqueue('trace.wait', { event: 'trace.early' });
  await expect.poll(() => outcomesOf(early.id)).toEqual(['done']);
  expect(steps(runSpans(early.id)[0])).toEqual([
    ['ask', 'step', false],
    ['reply', 'event', false],
  ]);
  await worker.stop();
});
