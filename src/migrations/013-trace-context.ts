import type { Migration } from './migration.js';

/**
 * SPEC §9 OpenTelemetry: the trace context of the producer span that enqueued a job, as the
 * registered propagator wrote it (a carrier such as `{ "traceparent": "00-…", "tracestate": "…" }`),
 * so that each attempt's consumer span can link to it. NULL when nothing traced the enqueue
 * (telemetry off, `@opentelemetry/api` absent, no tracer provider or propagator registered) and
 * for jobs fired by schedules. A nullable column without a default is a catalog change only:
 * instant on a table of any size, and existing rows read as NULL.
 */
export const traceContext: Migration = {
  version: 13,
  name: 'trace-context',
  sql: (s) => `
ALTER TABLE ${s}.jobs ADD COLUMN trace_context jsonb;
`,
};
