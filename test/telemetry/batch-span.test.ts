/**
 * SPEC §11 with §9 OpenTelemetry, with the SDK's in-memory exporter: a batch runs in ONE
 * CONSUMER span (`process <task>`, a root of its own trace) linked to the PRODUCER span of each
 * of its jobs' enqueues, with `messaging.batch.message_count` and the batch's outcome; the
 * handler runs inside it (a span it starts is its child).
 *
 * Deliberate break seen failing (made in src/, this file run, the break undone): startBatch
 * (src/telemetry/tracing.ts) with `links: []`: the test failed (0 links instead of 3).
 */
import { trace } from '@opentelemetry/api';
import { expect, test } from 'vitest';
import type { BatchItem } from '../../src/task-types.js';
import { useTestDatabase } from '../support/database.js';
import { useInMemoryTracing } from '../support/otel.js';

const db = useTestDatabase();
const exporter = useInMemoryTracing();

test('one consumer span per batch, linked to each job’s enqueue span; the handler runs inside it', async () => {
  const queue = db.queue();
  for (let i = 0; i < 3; i++) await queue.enqueue('tel.batch', { i }, { priority: i });
  const producers = exporter.getFinishedSpans().filter((span) => span.name === 'send default');
  expect(producers).toHaveLength(3);
  let done = 0;
  const finished = new Promise<void>((resolve) => {
    const worker = db.worker({
      queue,
      tasks: {
        'tel.batch': {
          batch: { maxSize: 10 },
          handler: async (items: BatchItem[]) => {
            trace.getTracer('test').startActiveSpan('inside', (span) => span.end());
            return items.map(() => 'ok');
          },
        },
      },
    });
    worker.on('job:done', () => {
      if (++done === 3) void worker.stop().then(resolve);
    });
    void worker.start();
  });
  await finished;
  const batches = exporter.getFinishedSpans().filter((span) => span.name === 'process tel.batch');
  expect(batches).toHaveLength(1);
  const [span] = batches;
  expect(span?.attributes).toMatchObject({
    'messaging.system': 'skiplock',
    'messaging.batch.message_count': 3,
    'skiplock.task': 'tel.batch',
    'skiplock.outcome': 'done',
  });
  expect(span?.parentSpanContext).toBeUndefined();
  expect(span?.links.map((link) => link.context.spanId).sort()).toEqual(
    producers.map((p) => p.spanContext().spanId).sort(),
  );
  const inside = exporter.getFinishedSpans().find((s) => s.name === 'inside');
  expect(inside?.parentSpanContext?.spanId).toBe(span?.spanContext().spanId);
});
