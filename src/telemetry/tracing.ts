/**
 * OpenTelemetry spans of SPEC §9, after the messaging semantic conventions:
 *
 * - a PRODUCER span per enqueue call (`send <queue>`; one for an `enqueueMany` call, however
 *   many jobs), whose trace context — injected by the globally registered propagator — is
 *   stored with each job it inserts;
 * - a CONSUMER span per attempt (`process <task>`): a root span (a new trace per attempt, as
 *   a retry may run hours later) linked to the producer span read back from the job; the
 *   handler runs with it active, so spans the handler makes are its children.
 *
 * Nothing is allocated per job while the API is absent or no tracer provider is registered
 * (the API's no-op): each call checks which provider the global proxy delegates to, and
 * returns at once when it is the no-op one.
 */
import type { Attributes, Context, Link, Span, Tracer } from '@opentelemetry/api';
import { traceContextOf } from '../core/job-row.js';
import type { NewJob } from '../core/job-spec.js';
import type { ClaimedJob, EnqueueResult } from '../types.js';
import { loadOtelApi, type OtelApi, otelApi } from './otel-api.js';

/** The instrumentation scope's name, and `messaging.system`. */
const SYSTEM = 'skiplock';

/** How an attempt ended, as `skiplock.outcome` says it. */
export type AttemptOutcome =
  | 'done'
  | 'retry'
  | 'dead'
  | 'cancelled'
  | 'released'
  | 'lease_lost'
  /** Stopped past its grace period: nothing written, the job returns when its lease expires. */
  | 'abandoned'
  /** The outcome could not be written (the database away): the reaper recovers the job. */
  | 'unwritten'
  /** §12 ctx.sleep / ctx.waitForEvent suspended the job: it runs again later (attempt not spent). */
  | 'suspended'
  /** §11 a batch whose jobs ended in different ways (each job's event says how). */
  | 'mixed';

/**
 * The spans of one process (shared by its Queues and Workers: the API's global provider,
 * propagator and context manager are per process too). Every method first checks, without
 * allocating, whether a span would be recorded at all.
 */
export class Tracing {
  /** The global provider's delegate that {@link tracer} came from. */
  private tracerOf: unknown = null;
  private tracer: Tracer | null = null;
  /** The API's no-op tracer provider (what the global proxy delegates to until one is registered). */
  private noopProvider: unknown;

  constructor() {
    void loadOtelApi();
  }

  /**
   * False when no span can be made now — the API is absent, or the global tracer provider is
   * the API's no-op one — so a caller can skip even building its arguments; true while the API
   * is still loading ({@link send} then waits for it).
   */
  mayTrace(): boolean {
    const api = otelApi();
    return api === undefined || (api !== null && this.activeTracer(api) !== null);
  }

  /** Resolves once the API was looked for; spans are only made after that. */
  async ready(): Promise<void> {
    await loadOtelApi();
  }

  /**
   * Runs an enqueue call's `write` in a PRODUCER span and stores the span's trace context in
   * `jobs` first (`traceContext`); without a registered tracer provider, just `write`.
   */
  send<T extends EnqueueResult | EnqueueResult[]>(
    jobs: readonly NewJob[],
    write: () => Promise<T>,
  ): Promise<T> {
    const api = otelApi();
    if (api === undefined) return loadOtelApi().then(() => this.send(jobs, write));
    let tracer: Tracer | null = null;
    try {
      tracer = api === null ? null : this.activeTracer(api);
    } catch (error) {
      if (api) report(api, 'finding the tracer', error);
    }
    if (api === null || tracer === null) return write();
    return traceSend(api, tracer, jobs, write);
  }

  /**
   * A CONSUMER span for this attempt of `job`, linked to the producer span stored with it; null
   * when not tracing (the API absent or not loaded yet, or no tracer provider registered).
   */
  process(job: ClaimedJob): ProcessSpan | null {
    const api = otelApi();
    if (!api) return null;
    try {
      const tracer = this.activeTracer(api);
      return tracer === null ? null : startProcess(api, tracer, job);
    } catch (error) {
      report(api, 'starting a consumer span', error);
      return null;
    }
  }

  /**
   * §11 one CONSUMER span for a batch of `jobs` (one task), linked to each job's producer span;
   * null when not tracing.
   */
  processBatch(jobs: readonly ClaimedJob[]): ProcessSpan | null {
    const api = otelApi();
    if (!api) return null;
    try {
      const tracer = this.activeTracer(api);
      return tracer === null ? null : startBatch(api, tracer, jobs);
    } catch (error) {
      report(api, 'starting a batch consumer span', error);
      return null;
    }
  }

  /**
   * Runs `fn` with no span active: work shared by many callers (the automatic enqueue batch's
   * INSERT, scheduled by whichever call came first) must not become one caller's child.
   */
  detached<T>(fn: () => T): T {
    const api = otelApi();
    return api ? runIn(api, api.ROOT_CONTEXT, fn) : fn();
  }

  /** The tracer to use now, or null while the global provider is the API's no-op one. */
  private activeTracer(api: OtelApi): Tracer | null {
    const provider = api.trace.getTracerProvider() as { getDelegate?: () => unknown };
    // The global provider is always the API's proxy; what it delegates to says whether anyone
    // registered a real one. (A proxy of another copy of the API: taken as real.)
    const delegate = typeof provider.getDelegate === 'function' ? provider.getDelegate() : provider;
    this.noopProvider ??= new api.ProxyTracerProvider().getDelegate();
    if (delegate === this.noopProvider) return null;
    if (delegate !== this.tracerOf || this.tracer === null) {
      this.tracer = api.trace.getTracer(SYSTEM);
      this.tracerOf = delegate;
    }
    return this.tracer;
  }
}

let shared: Tracing | null = null;

/** The process's Tracing (it starts looking for the API on first use). */
export function tracing(): Tracing {
  shared ??= new Tracing();
  return shared;
}

async function traceSend<T extends EnqueueResult | EnqueueResult[]>(
  api: OtelApi,
  tracer: Tracer,
  jobs: readonly NewJob[],
  write: () => Promise<T>,
): Promise<T> {
  const queue = commonValue(jobs, (job) => job.queue);
  const task = commonValue(jobs, (job) => job.task);
  const attributes: Attributes = {
    'messaging.system': SYSTEM,
    'messaging.operation.type': 'send',
    'messaging.operation.name': 'send',
  };
  if (queue !== null) attributes['messaging.destination.name'] = queue;
  if (task !== null) attributes['skiplock.task'] = task;
  let span: Span;
  let ctx: Context;
  try {
    span = tracer.startSpan(queue === null ? 'send' : `send ${queue}`, {
      kind: api.SpanKind.PRODUCER,
      attributes,
    });
    ctx = api.trace.setSpan(api.context.active(), span);
    const carrier: Record<string, string> = {};
    api.propagation.inject(ctx, carrier);
    const traceContext = Object.keys(carrier).length > 0 ? JSON.stringify(carrier) : null;
    for (const job of jobs) job.traceContext = traceContext;
  } catch (error) {
    report(api, 'starting a producer span', error);
    for (const job of jobs) job.traceContext = null;
    return write();
  }
  let result: T;
  try {
    result = await runIn(api, ctx, write);
  } catch (error) {
    guard(api, 'recording an enqueue error', () => recordError(api, span, error));
    guard(api, 'ending a producer span', () => span.end());
    throw error;
  }
  guard(api, 'ending a producer span', () => {
    if (Array.isArray(result)) {
      span.setAttribute('messaging.batch.message_count', result.length);
      span.setAttribute('skiplock.created_count', result.filter((r) => r.created).length);
    } else {
      span.setAttribute('messaging.message.id', result.id);
      span.setAttribute('skiplock.created', result.created);
    }
  });
  guard(api, 'ending a producer span', () => span.end());
  return result;
}

/** `fn` in `ctx`; if the context manager fails before calling it, `fn` as it is (never twice). */
function runIn<T>(api: OtelApi, ctx: Context, fn: () => T): T {
  let called = false;
  try {
    return api.context.with(ctx, () => {
      called = true;
      return fn();
    });
  } catch (error) {
    if (called) throw error;
    report(api, 'entering a span context', error);
    return fn();
  }
}

/** Tracing must never change a job's fate: what it throws goes to OTel's diag logger. */
function guard(api: OtelApi, during: string, fn: () => void): void {
  try {
    fn();
  } catch (error) {
    report(api, during, error);
  }
}

function report(api: OtelApi, during: string, error: unknown): void {
  try {
    api.diag.error(`skiplock: ${during} failed`, error);
  } catch {
    // nothing left to tell
  }
}

function startProcess(api: OtelApi, tracer: Tracer, job: ClaimedJob): ProcessSpan {
  let parent: Context = api.ROOT_CONTEXT;
  const stored = traceContextOf(job);
  const carrier = stored === null ? null : parseCarrier(stored);
  // The producer's context, extracted by the registered propagator (with any baggage it carries)
  if (carrier !== null) parent = api.propagation.extract(api.ROOT_CONTEXT, carrier);
  const producer = api.trace.getSpanContext(parent);
  const span = tracer.startSpan(
    `process ${job.task}`,
    {
      kind: api.SpanKind.CONSUMER,
      root: true, // a new trace per attempt, linked to the producer's
      links: producer && api.isSpanContextValid(producer) ? [{ context: producer }] : [],
      attributes: {
        'messaging.system': SYSTEM,
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'process',
        'messaging.destination.name': job.queue,
        'messaging.message.id': job.id,
        'skiplock.task': job.task,
        'skiplock.attempt': job.attempt,
        'skiplock.worker.id': job.workerId,
      },
    },
    parent,
  );
  return new ProcessSpan(api, span, api.trace.setSpan(parent, span));
}

function startBatch(api: OtelApi, tracer: Tracer, jobs: readonly ClaimedJob[]): ProcessSpan {
  const links: Link[] = [];
  for (const job of jobs) {
    const stored = traceContextOf(job);
    const carrier = stored === null ? null : parseCarrier(stored);
    if (carrier === null) continue;
    const producer = api.trace.getSpanContext(api.propagation.extract(api.ROOT_CONTEXT, carrier));
    if (producer && api.isSpanContextValid(producer))
      links.push({ context: producer, attributes: { 'messaging.message.id': job.id } });
  }
  const first = jobs[0] as ClaimedJob;
  const span = tracer.startSpan(
    `process ${first.task}`,
    {
      kind: api.SpanKind.CONSUMER,
      root: true, // a new trace per batch, linked to each job's producer span
      links,
      attributes: {
        'messaging.system': SYSTEM,
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'process',
        'messaging.destination.name': first.queue,
        'messaging.batch.message_count': jobs.length,
        'skiplock.task': first.task,
        'skiplock.worker.id': first.workerId,
      },
    },
    api.ROOT_CONTEXT,
  );
  return new ProcessSpan(api, span, api.trace.setSpan(api.ROOT_CONTEXT, span));
}

/** One attempt's CONSUMER span: the handler runs inside it; the outcome ends it. */
export class ProcessSpan {
  constructor(
    private readonly api: OtelApi,
    private readonly span: Span,
    /** The context the handler runs in: this span active. */
    private readonly context: Context,
  ) {}

  /** Calls `fn` with this span active (spans `fn` starts are its children). */
  run<T>(fn: () => T): T {
    return runIn(this.api, this.context, fn);
  }

  /** The attempt failed with `error` (thrown by the handler, or its deadline). */
  fail(error: unknown): void {
    guard(this.api, 'recording an attempt error', () => recordError(this.api, this.span, error));
  }

  /** §12 one event per step answered in this attempt (`replayed`: from its stored value). */
  step(name: string, kind: 'step' | 'sleep' | 'event', replayed: boolean): void {
    guard(this.api, 'recording a step', () => {
      this.span.addEvent('skiplock.step', {
        'skiplock.step.name': name,
        'skiplock.step.kind': kind,
        'skiplock.step.replayed': replayed,
      });
    });
  }

  end(outcome: AttemptOutcome): void {
    guard(this.api, 'ending a consumer span', () => {
      this.span.setAttribute('skiplock.outcome', outcome);
      this.span.end();
    });
  }
}

function recordError(api: OtelApi, span: Span, error: unknown): void {
  const exception = error instanceof Error ? error : String(error);
  span.recordException(exception);
  span.setStatus({
    code: api.SpanStatusCode.ERROR,
    message: error instanceof Error ? error.message : String(error),
  });
}

/** The stored carrier, or null when it is not a JSON object of strings. */
function parseCarrier(text: string): Record<string, string> | null {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, string>)
      : null;
  } catch {
    return null;
  }
}

/** The value every job has for `pick`, or null when they differ. */
function commonValue(jobs: readonly NewJob[], pick: (job: NewJob) => string): string | null {
  const first = jobs[0];
  if (first === undefined) return null;
  const value = pick(first);
  return jobs.every((job) => pick(job) === value) ? value : null;
}
