/**
 * The demo of `skiplock dev`: tasks that succeed, fail and retry, go dead, run past their
 * deadline, wait for a delay, or are deduplicated — and a producer feeding them at a steady rate,
 * with a small flow (SPEC §10) every few seconds: two fetches, an invoice that waits for both,
 * and its email; one fetch in ten fails for good, and cancels what depends on it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { PermanentError } from '../errors.js';
import type { Queue } from '../queue.js';
import type { EnqueueOptions, JobSpec } from '../types.js';
import type { TaskMap } from '../worker/options.js';

const between = (min: number, max: number) => min + Math.floor(Math.random() * (max - min));

export const demoTasks: TaskMap = {
  'email.send': async (payload: { to: string }, { signal }) => {
    await sleep(between(20, 120), undefined, { signal });
    return { delivered: payload.to, messageId: Math.random().toString(36).slice(2, 10) };
  },
  'image.resize': async (payload: { width: number }, { signal }) => {
    await sleep(between(100, 600), undefined, { signal });
    return { width: payload.width, height: Math.round(payload.width * 0.75) };
  },
  'payment.capture': async (payload: { amount: number }, { job, signal }) => {
    await sleep(between(50, 200), undefined, { signal });
    if (job.attempt === 1 && Math.random() < 0.5) throw new Error('card processor timeout (will retry)');
    return { captured: payload.amount };
  },
  'report.generate': async (_payload, { signal }) => {
    await sleep(between(100, 300), undefined, { signal });
    throw new Error('upstream 503: the reports service is unavailable');
  },
  'webhook.deliver': {
    timeoutMs: 1_500,
    handler: async (payload: { slow: boolean }, { signal }) => {
      await sleep(payload.slow ? 2_500 : between(50, 300), undefined, { signal });
      return { status: 200 };
    },
  },
  'reminder.send': async (payload: { user: number }, { signal }) => {
    await sleep(between(10, 50), undefined, { signal });
    return { reminded: payload.user };
  },
  'account.sync': async (payload: { account: number }, { signal }) => {
    await sleep(between(300, 900), undefined, { signal });
    return { synced: payload.account };
  },
  'order.fetch': async (payload: { order: number }, { signal }) => {
    await sleep(between(100, 400), undefined, { signal });
    if (Math.random() < 0.1) throw new PermanentError(`order ${payload.order} does not exist`);
    return { order: payload.order, total: between(10, 300) };
  },
  'invoice.merge': async (_payload, { dependencies, signal }) => {
    await sleep(between(50, 150), undefined, { signal });
    const fetched = await dependencies();
    const totals = Object.values(fetched).map((d) => (d.result as { total: number }).total);
    return { total: totals.reduce((a, b) => a + b, 0) };
  },
};

/** Enqueues one demo flow: two fetches, an invoice over both, its email. */
export function enqueueDemoFlow(queue: Queue): Promise<unknown> {
  counter++;
  return queue.enqueueFlow([
    { ref: 'fetch-a', task: 'order.fetch', payload: { order: counter * 2 } },
    { ref: 'fetch-b', task: 'order.fetch', payload: { order: counter * 2 + 1 } },
    { ref: 'invoice', task: 'invoice.merge', payload: {}, dependsOn: ['fetch-a', 'fetch-b'] },
    {
      ref: 'email',
      task: 'email.send',
      payload: { to: `customer${counter}@example.com` },
      dependsOn: ['invoice'],
    },
  ]);
}

let counter = 0;

/** How often the demo producer enqueues a flow. */
const FLOW_EVERY_MS = 4_000;

/** One random demo job. */
export function demoJob(): JobSpec {
  counter++;
  const roll = Math.random();
  if (roll < 0.3) return { task: 'email.send', payload: { to: `user${counter}@example.com` } };
  if (roll < 0.45) return { task: 'image.resize', payload: { width: between(200, 2000) }, queue: 'media' };
  if (roll < 0.6)
    return { task: 'payment.capture', payload: { amount: between(5, 500) }, queue: 'payments', priority: 10 };
  if (roll < 0.67)
    return { task: 'report.generate', payload: { month: '2026-11' }, queue: 'reports', maxAttempts: 3 };
  if (roll < 0.77) return { task: 'webhook.deliver', payload: { slow: Math.random() < 0.3 }, maxAttempts: 2 };
  if (roll < 0.87)
    return { task: 'reminder.send', payload: { user: counter }, delayMs: between(5_000, 30_000) };
  return { task: 'account.sync', payload: { account: counter % 4 }, dedupeKey: `account:${counter % 4}` };
}

/** Enqueues about `perSecond` demo jobs a second until stopped. */
export function startProducer(
  queue: Queue,
  perSecond: number,
  onError: (error: unknown) => void,
): () => void {
  const timer = setInterval(
    () => {
      queue.enqueue(...toArgs(demoJob())).catch(onError);
    },
    Math.max(10, Math.round(1000 / perSecond)),
  );
  const flows = setInterval(() => {
    enqueueDemoFlow(queue).catch(onError);
  }, FLOW_EVERY_MS);
  return () => {
    clearInterval(timer);
    clearInterval(flows);
  };
}

function toArgs(spec: JobSpec): [string, unknown, EnqueueOptions] {
  const { task, payload, ...options } = spec;
  return [task, payload, options];
}
