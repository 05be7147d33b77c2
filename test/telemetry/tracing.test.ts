/**
 * SPEC §9 OpenTelemetry, with the SDK's in-memory exporter: a PRODUCER span per enqueue call
 * (one per `enqueueMany` call, whatever its size) whose W3C trace context is stored with the
 * job by every enqueue statement (the automatic batch's INSERT, the single INSERT, debounce,
 * scope 'pending', throttle, inside the caller's transaction) and left alone on a dedupe hit; a
 * CONSUMER span per attempt, each a root of its own trace linked to the producer span, with the
 * messaging attributes, the attempt and its outcome (retry, done, dead, cancelled), the handler's
 * exception recorded (past a deadline, the deadline's error, once), and the
 * handler running inside it (a span the handler starts is its child) — through the plain claim
 * and the limited queue's claim; `telemetry: false` on the Queue or the Worker records no span
 * and stores no context; with no tracer provider registered nothing is stored and the
 * propagator is never called (no per-job work).
 *
 * Deliberate breaks seen failing (each made in src/, the file run, the break undone):
 *  1. insertMany binding `null` for the trace contexts ($12): "enqueue: a producer span…",
 *     "enqueueMany: one span…", "a dedupe hit…", "a job that fails once…" and "a limited
 *     queue's claim…" failed (trace_context NULL, no link).
 *  2. insertOne's `$12::jsonb` → NULL: "every enqueue statement…" and "enqueue in the caller's
 *     transaction…" failed; insertPending's → NULL: "every enqueue statement…" failed;
 *     insertDebounced's `$13::jsonb` → NULL: "every enqueue statement…" and "a dedupe hit…".
 *  3. insertDebounced's DO UPDATE also setting `trace_context = EXCLUDED.trace_context`: "a
 *     dedupe hit…" failed (the replacing call's context overwrote the creating one's).
 *  4. The claim returning `NULL::text AS trace_context` (claim.ts): "a job that fails once…"
 *     failed (no link); the same in the limited claim (queues.ts): "a limited queue's claim…".
 *  5. `root: true` removed from the consumer span (its parent then the extracted producer
 *     context): "a job that fails once…" failed (the attempts in the producer's trace).
 *  6. The consumer span's `links` left empty: "a job that fails once…" and "a limited queue's
 *     claim…" failed.
 *  7. The handler called outside `span.run` (job-executor.ts): "a span started in the handler…"
 *     failed (the user span had no parent).
 *  8. `span?.fail(outcome.error)` removed (job-executor.ts): "a job that fails once…" and "a job
 *     that runs out of attempts…" failed (no exception event, status UNSET).
 *  9. The Worker ignoring its own `telemetry` (`engine.settings.telemetry` alone): "telemetry:
 *     false on the Worker…" failed (a worker on a traced queue recorded spans); the Worker
 *     ignoring its queue's (`settings.telemetry ?? true`): "telemetry: false on the Queue…".
 * 10. `Enqueuer.enqueue` starting the write before `tracing.send` stored the context: "every
 *     enqueue statement…", "a dedupe hit…" and "enqueue in the caller's transaction…" failed.
 *     (Through the automatic batch, whose INSERT runs a tick later, the context was still in
 *     time: "enqueue: a producer span…" passed.)
 * 11. The no-op check in `Tracing.activeTracer` removed: "with no tracer provider
 *     registered…" failed (the propagator's inject and extract were called per job; nothing
 *     was stored either way — a no-op span has no valid context).
 * 12. `recordError` removed from the producer span's failure path: "an enqueue that fails…".
 * 13. The handler's error recorded past a deadline too (the `abortReason !== 'deadline'` test
 *     removed in job-executor.ts): "past its deadline…" failed (two exception events).
 */
import {
  context,
  propagation,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  type TextMapPropagator,
  trace,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ValidationError } from '../../src/errors.js';
import type { Worker } from '../../src/worker/worker.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();

/** The W3C propagator, counting its calls (the no-provider test proves they are skipped). */
const w3c = new W3CTraceContextPropagator();
const propagatorCalls = { inject: 0, extract: 0 };
const countingPropagator: TextMapPropagator = {
  inject(ctx, carrier, setter) {
    propagatorCalls.inject++;
    w3c.inject(ctx, carrier, setter);
  },
  extract(ctx, carrier, getter) {
    propagatorCalls.extract++;
    return w3c.extract(ctx, carrier, getter);
  },
  fields: () => w3c.fields(),
};

function register(): void {
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(countingPropagator);
}

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  register();
});

afterAll(async () => {
  trace.disable();
  propagation.disable();
  context.disable();
  await provider.shutdown();
});

/** Finished spans named `name`, oldest first. */
function spansNamed(name: string): ReadableSpan[] {
  return exporter.getFinishedSpans().filter((span) => span.name === name);
}

/** The finished spans whose attribute `key` is `value`. */
function spansWith(key: string, value: string): ReadableSpan[] {
  return exporter.getFinishedSpans().filter((span) => span.attributes[key] === value);
}

/** The W3C traceparent of a sampled span context. */
function traceparent(ctx: SpanContext): string {
  return `00-${ctx.traceId}-${ctx.spanId}-01`;
}

async function storedContext(id: string): Promise<Record<string, string> | null> {
  const [row] = await db.sql<{ trace_context: Record<string, string> | null }>(
    `SELECT trace_context FROM ${db.jobs} WHERE id = $1`,
    [id],
  );
  if (!row) throw new Error(`no job ${id}`);
  return row.trace_context;
}

/** Resolves when `worker` emitted `count` outcome events for jobs of `task`. */
function outcomes(worker: Worker, task: string, count: number): Promise<void> {
  return new Promise((resolve) => {
    let seen = 0;
    const heard = ({ job }: { job: { task: string } }) => {
      if (job.task === task && ++seen === count) resolve();
    };
    worker.on('job:done', heard);
    worker.on('job:dead', heard);
    worker.on('job:retry', heard);
  });
}

describe('producer spans', () => {
  test('enqueue: a producer span per call; the job stores its traceparent', async () => {
    const queue = db.queue();
    const first = await queue.enqueue('otel.send', { n: 1 }, { queue: 'mail' });
    const second = await queue.enqueue('otel.send', { n: 2 }, { queue: 'mail' });
    const spans = spansWith('skiplock.task', 'otel.send');
    expect(spans).toHaveLength(2);
    for (const [i, { id }] of [first, second].entries()) {
      const span = spans[i]!;
      expect(span.name).toBe('send mail');
      expect(span.kind).toBe(SpanKind.PRODUCER);
      expect(span.attributes).toMatchObject({
        'messaging.system': 'skiplock',
        'messaging.operation.type': 'send',
        'messaging.destination.name': 'mail',
        'messaging.message.id': id,
        'skiplock.created': true,
      });
      expect(await storedContext(id)).toEqual({ traceparent: traceparent(span.spanContext()) });
    }
  });

  test('enqueueMany: one span for the call; every job stores that span’s traceparent', async () => {
    const queue = db.queue();
    const results = await queue.enqueueMany([
      { task: 'otel.many', payload: 1, queue: 'bulk' },
      { task: 'otel.many', payload: 2, queue: 'bulk' },
      { task: 'otel.many', payload: 3, queue: 'bulk' },
    ]);
    const spans = spansWith('skiplock.task', 'otel.many');
    expect(spans).toHaveLength(1);
    const span = spans[0]!;
    expect(span.name).toBe('send bulk');
    expect(span.attributes).toMatchObject({
      'messaging.operation.type': 'send',
      'messaging.batch.message_count': 3,
      'messaging.destination.name': 'bulk',
    });
    for (const { id } of results) {
      expect(await storedContext(id)).toEqual({ traceparent: traceparent(span.spanContext()) });
    }
  });

  test('every enqueue statement stores the context: single INSERT, debounce, scope pending, throttle, a batch with dedupe modes', async () => {
    const queue = db.queue({ batchEnqueue: false }); // insertOne, not the automatic batch
    const cases = {
      single: await queue.enqueue('otel.stmt.single', {}),
      debounced: await queue.enqueue(
        'otel.stmt.debounced',
        {},
        { dedupeKey: 'deb', dedupe: { replace: true } },
      ),
      pending: await queue.enqueue(
        'otel.stmt.pending',
        {},
        { dedupeKey: 'pend', dedupe: { scope: 'pending' } },
      ),
      throttled: await queue.enqueue(
        'otel.stmt.throttled',
        {},
        { dedupeKey: 'thr', dedupe: { windowMs: 60_000 } },
      ),
    };
    for (const [name, { id, created }] of Object.entries(cases)) {
      expect(created).toBe(true);
      const [span] = spansWith('skiplock.task', `otel.stmt.${name}`);
      expect(await storedContext(id), name).toEqual({ traceparent: traceparent(span!.spanContext()) });
    }
    const [a, b] = await queue.enqueueMany([
      { task: 'otel.stmt.modes', payload: {}, dedupeKey: 'modes-a', dedupe: { scope: 'pending' } },
      { task: 'otel.stmt.modes', payload: {}, dedupeKey: 'modes-b', dedupe: { replace: true } },
    ]);
    const [span] = spansWith('skiplock.task', 'otel.stmt.modes');
    expect(await storedContext(a!.id)).toEqual({ traceparent: traceparent(span!.spanContext()) });
    expect(await storedContext(b!.id)).toEqual({ traceparent: traceparent(span!.spanContext()) });
  });

  test('a dedupe hit (plain, debounce) changes no stored context; its span says it created nothing', async () => {
    const queue = db.queue();
    const first = await queue.enqueue('otel.dedupe', { v: 1 }, { dedupeKey: 'otel-hit' });
    const hit = await queue.enqueue('otel.dedupe', { v: 2 }, { dedupeKey: 'otel-hit' });
    expect(hit).toEqual({ id: first.id, created: false });
    const spans = spansWith('skiplock.task', 'otel.dedupe');
    expect(spans.map((s) => s.attributes['skiplock.created'])).toEqual([true, false]);
    expect(await storedContext(first.id)).toEqual({ traceparent: traceparent(spans[0]!.spanContext()) });

    const debounced = await queue.enqueue(
      'otel.debounce',
      { v: 1 },
      { dedupeKey: 'otel-deb', dedupe: { replace: true } },
    );
    const replaced = await queue.enqueue(
      'otel.debounce',
      { v: 2 },
      { dedupeKey: 'otel-deb', dedupe: { replace: true } },
    );
    expect(replaced).toMatchObject({ id: debounced.id, created: false, replaced: true });
    const [creating] = spansWith('skiplock.task', 'otel.debounce');
    expect(await storedContext(debounced.id)).toEqual({ traceparent: traceparent(creating!.spanContext()) });
  });

  test('enqueue in the caller’s transaction records a span, a child of the caller’s active span', async () => {
    const queue = db.queue();
    const app = trace.getTracer('app');
    const id = await app.startActiveSpan('checkout', async (parent) => {
      try {
        return await queue.transaction(async (client) => (await queue.enqueue('otel.tx', {}, { client })).id);
      } finally {
        parent.end();
      }
    });
    const [span] = spansWith('skiplock.task', 'otel.tx');
    const [checkout] = spansNamed('checkout');
    expect(span?.parentSpanContext?.spanId).toBe(checkout!.spanContext().spanId);
    expect(span?.spanContext().traceId).toBe(checkout!.spanContext().traceId);
    expect(await storedContext(id)).toEqual({ traceparent: traceparent(span!.spanContext()) });
  });

  test('an enqueue that fails records its error on the span', async () => {
    const queue = db.queue({ schema: 'otel_never_migrated', batchEnqueue: false });
    await expect(queue.enqueue('otel.fails', {})).rejects.toMatchObject({ code: 'ERR_NOT_MIGRATED' });
    const [span] = spansWith('skiplock.task', 'otel.fails');
    expect(span?.status.code).toBe(SpanStatusCode.ERROR);
    expect(span?.events.map((e) => e.name)).toEqual(['exception']);
  });
});

describe('consumer spans', () => {
  test('a job that fails once, then succeeds: two consumer spans in two new traces, each linked to the producer span', async () => {
    const queue = db.queue();
    const { id } = await queue.enqueue('otel.flaky', { n: 1 }, { queue: 'work' });
    const [producer] = spansWith('skiplock.task', 'otel.flaky');
    let calls = 0;
    const worker = db.worker({
      tasks: {
        'otel.flaky': () => {
          if (++calls === 1) throw new Error('first attempt fails');
          return { ok: true };
        },
      },
      backoff: { baseMs: 10, capMs: 10 },
      queues: ['work'],
    });
    const finished = outcomes(worker, 'otel.flaky', 2);
    await worker.start();
    await finished;
    await expect.poll(() => spansNamed('process otel.flaky').length).toBe(2);
    const [first, second] = spansNamed('process otel.flaky');
    const producerContext = producer!.spanContext();
    for (const [i, span] of [first!, second!].entries()) {
      expect(span.kind).toBe(SpanKind.CONSUMER);
      expect(span.parentSpanContext).toBeUndefined(); // a root: a new trace per attempt
      expect(span.spanContext().traceId).not.toBe(producerContext.traceId);
      expect(span.links.map((link) => [link.context.traceId, link.context.spanId])).toEqual([
        [producerContext.traceId, producerContext.spanId],
      ]);
      expect(span.attributes).toMatchObject({
        'messaging.system': 'skiplock',
        'messaging.operation.type': 'process',
        'messaging.destination.name': 'work',
        'messaging.message.id': id,
        'skiplock.task': 'otel.flaky',
        'skiplock.attempt': i + 1,
        'skiplock.outcome': i === 0 ? 'retry' : 'done',
      });
    }
    expect(first!.spanContext().traceId).not.toBe(second!.spanContext().traceId);
    expect(first!.status).toEqual({ code: SpanStatusCode.ERROR, message: 'first attempt fails' });
    expect(first!.events.map((e) => [e.name, e.attributes?.['exception.message']])).toEqual([
      ['exception', 'first attempt fails'],
    ]);
    expect(second!.status.code).toBe(SpanStatusCode.UNSET);
    expect(second!.events).toEqual([]);
    await worker.stop();
  });

  test('a span started in the handler (after an await) is a child of the consumer span', async () => {
    const queue = db.queue();
    await queue.enqueue('otel.nested', {});
    const worker = db.worker({
      tasks: {
        'otel.nested': async () => {
          await new Promise((resolve) => setTimeout(resolve, 5));
          trace.getTracer('app').startActiveSpan('user.work', (span) => span.end());
        },
      },
    });
    const finished = outcomes(worker, 'otel.nested', 1);
    await worker.start();
    await finished;
    await expect.poll(() => spansNamed('process otel.nested').length).toBe(1);
    const [consumer] = spansNamed('process otel.nested');
    const [user] = spansNamed('user.work');
    expect(user?.parentSpanContext?.spanId).toBe(consumer!.spanContext().spanId);
    expect(user?.spanContext().traceId).toBe(consumer!.spanContext().traceId);
    await worker.stop();
  });

  test('a job that runs out of attempts ends its span dead, with the exception', async () => {
    const queue = db.queue();
    await queue.enqueue('otel.dead', {}, { maxAttempts: 1 });
    const worker = db.worker({
      tasks: {
        'otel.dead': () => {
          throw new TypeError('no way');
        },
      },
    });
    const finished = outcomes(worker, 'otel.dead', 1);
    await worker.start();
    await finished;
    await expect.poll(() => spansNamed('process otel.dead').length).toBe(1);
    const [span] = spansNamed('process otel.dead');
    expect(span?.attributes['skiplock.outcome']).toBe('dead');
    expect(span?.events[0]?.attributes).toMatchObject({
      'exception.type': 'TypeError',
      'exception.message': 'no way',
    });
    await worker.stop();
  });

  test('past its deadline: the JobDeadlineExceeded is the one exception; a cancelled job ends cancelled', async () => {
    const queue = db.queue();
    await queue.enqueue('otel.deadline', {}, { maxAttempts: 1, timeoutMs: 50 });
    const { id } = await queue.enqueue('otel.cancel', {});
    const untilAborted = (_: unknown, { signal }: { signal: AbortSignal }) =>
      new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
    const worker = db.worker({ tasks: { 'otel.deadline': untilAborted, 'otel.cancel': untilAborted } });
    const finished = Promise.all([
      outcomes(worker, 'otel.deadline', 1),
      new Promise((resolve) => worker.on('job:cancelled', resolve)),
    ]);
    worker.on('job:start', ({ job }) => {
      if (job.id === id) void queue.cancel(id);
    });
    await worker.start();
    await finished;
    await worker.stop();
    await expect.poll(() => spansNamed('process otel.cancel').length).toBe(1);
    const [deadline] = spansNamed('process otel.deadline');
    expect(deadline?.attributes['skiplock.outcome']).toBe('dead');
    expect(deadline?.status.code).toBe(SpanStatusCode.ERROR);
    expect(deadline?.events.map((e) => String(e.attributes?.['exception.message']))).toEqual([
      expect.stringMatching(/^JobDeadlineExceeded/),
    ]);
    const [cancelled] = spansNamed('process otel.cancel');
    expect(cancelled?.attributes['skiplock.outcome']).toBe('cancelled');
  });

  test('a limited queue’s claim returns the stored context too (its own claim statement)', async () => {
    const queue = db.queue();
    await queue.configureQueue('otel-limited', { concurrency: 1 });
    await queue.enqueue('otel.limited', {}, { queue: 'otel-limited' });
    const [producer] = spansWith('skiplock.task', 'otel.limited');
    const worker = db.worker({ tasks: { 'otel.limited': () => 'ok' }, queues: ['otel-limited'] });
    const finished = outcomes(worker, 'otel.limited', 1);
    await worker.start();
    await finished;
    await expect.poll(() => spansNamed('process otel.limited').length).toBe(1);
    const [span] = spansNamed('process otel.limited');
    expect(span?.links.map((link) => link.context.spanId)).toEqual([producer!.spanContext().spanId]);
    await worker.stop();
  });
});

describe('turning it off', () => {
  test('telemetry: false on the Queue: no span, no stored context; a Worker on it records none either', async () => {
    const queue = db.queue({ telemetry: false });
    const { id } = await queue.enqueue('otel.off', {});
    const [many] = await queue.enqueueMany([{ task: 'otel.off', payload: {} }]);
    expect(spansWith('skiplock.task', 'otel.off')).toEqual([]);
    expect(await storedContext(id)).toBeNull();
    expect(await storedContext(many!.id)).toBeNull();
    const worker = db.worker({ queue, tasks: { 'otel.off': () => 'ok' } });
    const finished = outcomes(worker, 'otel.off', 2);
    await worker.start();
    await finished;
    await worker.stop();
    expect(spansNamed('process otel.off')).toEqual([]);
  });

  test('telemetry: false on the Worker (on a traced queue, or with its own): traced jobs run without consumer spans', async () => {
    const queue = db.queue();
    await queue.enqueue('otel.worker-off', {});
    await queue.enqueue('otel.worker-off-own', {});
    expect(spansWith('skiplock.task', 'otel.worker-off')).toHaveLength(1);
    const onQueue = db.worker({ queue, tasks: { 'otel.worker-off': () => 'ok' }, telemetry: false });
    const own = db.worker({ tasks: { 'otel.worker-off-own': () => 'ok' }, telemetry: false });
    const finished = [outcomes(onQueue, 'otel.worker-off', 1), outcomes(own, 'otel.worker-off-own', 1)];
    await Promise.all([onQueue.start(), own.start()]);
    await Promise.all(finished);
    await Promise.all([onQueue.stop(), own.stop()]);
    expect(spansNamed('process otel.worker-off')).toEqual([]);
    expect(spansNamed('process otel.worker-off-own')).toEqual([]);
  });

  test('telemetry must be true or false (a ValidationError, nothing created)', () => {
    expect(() => db.queue({ telemetry: 'off' as unknown as boolean })).toThrow(ValidationError);
    expect(() => db.worker({ tasks: { x: () => 1 }, telemetry: 0 as unknown as boolean })).toThrow(
      ValidationError,
    );
  });

  test('a job stored without a context still gets a consumer span, without a link', async () => {
    const { id } = await db.queue({ telemetry: false }).enqueue('otel.unlinked', {});
    const worker = db.worker({ tasks: { 'otel.unlinked': () => 'ok' } });
    const finished = outcomes(worker, 'otel.unlinked', 1);
    await worker.start();
    await finished;
    await worker.stop();
    await expect.poll(() => spansNamed('process otel.unlinked').length).toBe(1);
    const [span] = spansNamed('process otel.unlinked');
    expect(span?.links).toEqual([]);
    expect(span?.attributes['messaging.message.id']).toBe(id);
  });

  test('with no tracer provider registered: no span, nothing stored, the propagator never called', async () => {
    const queue = db.queue();
    const traced = await queue.enqueue('otel.noop.consume', {});
    expect(await storedContext(traced.id)).not.toBeNull();
    trace.disable(); // back to the API's no-op provider
    propagatorCalls.inject = 0;
    propagatorCalls.extract = 0;
    try {
      const { id } = await queue.enqueue('otel.noop', {});
      await queue.enqueueMany([{ task: 'otel.noop', payload: {} }]);
      expect(await storedContext(id)).toBeNull();
      const worker = db.worker({ tasks: { 'otel.noop.consume': () => 'ok' } });
      const finished = outcomes(worker, 'otel.noop.consume', 1);
      await worker.start();
      await finished;
      await worker.stop();
      expect(propagatorCalls).toEqual({ inject: 0, extract: 0 }); // no per-job work at all
    } finally {
      trace.setGlobalTracerProvider(provider);
    }
    expect(spansWith('skiplock.task', 'otel.noop')).toEqual([]);
    expect(spansNamed('process otel.noop.consume')).toEqual([]);
  });
});
