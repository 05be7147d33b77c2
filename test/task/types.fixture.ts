/**
 * SPEC §9 at compile time: `npm run check` type-checks this file (it never runs). Each
 * `@ts-expect-error` marks a line that must NOT compile — if it ever does (a payload type that
 * stopped being checked), the directive itself becomes the error and the check fails.
 *
 * Break seen failing: `enqueue`'s payload typed `unknown` for a defined task (every
 * `@ts-expect-error` on a payload became "unused").
 */
import { type } from 'arktype';
import * as v from 'valibot';
import { z } from 'zod';
import { defineTask, type Queue, type Task, Worker } from '../../src/index.js';

declare const queue: Queue;

const sendEmail = defineTask({
  name: 'email.send',
  schema: z.object({ to: z.string().email(), cc: z.array(z.string()).optional() }),
  handler: async (payload, ctx) => {
    const to: string = payload.to; // the handler's payload is the schema's output
    const id: string = ctx.job.id;
    return { messageId: `${to}:${id}` };
  },
});

export async function zodPayloads(): Promise<void> {
  await queue.enqueue(sendEmail, { to: 'ada@example.com' });
  await queue.enqueue(sendEmail, { to: 'ada@example.com', cc: ['bob@example.com'] }, { priority: 1 });
  // @ts-expect-error `to` must be a string
  await queue.enqueue(sendEmail, { to: 42 });
  // @ts-expect-error `to` is required
  await queue.enqueue(sendEmail, { cc: [] });
  // @ts-expect-error not an object
  await queue.enqueue(sendEmail, 'ada@example.com');
  // @ts-expect-error the payload is required for a defined task
  await queue.enqueue(sendEmail);
  // A task given by name stays untyped (and unchecked).
  await queue.enqueue('email.send', { anything: true });
}

// Input and output may differ: a default makes the input optional, the output always present.
const resize = defineTask({
  name: 'image.resize',
  schema: v.object({ url: v.string(), width: v.optional(v.number(), 800) }),
  handler: (payload) => {
    const width: number = payload.width; // output: present
    return width;
  },
});

const audit = defineTask({
  name: 'audit.write',
  schema: type({ actor: 'string', 'amount?': 'number' }),
  handler: (payload) => payload.actor.length,
});

export async function otherLibraries(): Promise<void> {
  await queue.enqueue(resize, { url: 'https://example.com/a.png' });
  // @ts-expect-error width must be a number
  await queue.enqueue(resize, { url: 'x', width: '800' });
  await queue.enqueue(audit, { actor: 'ada', amount: 3 });
  // @ts-expect-error actor is required
  await queue.enqueue(audit, { amount: 3 });
}

// The result type is the handler's return type.
type ResultOf<T> = T extends Task<infer _Input, infer _Output, infer R> ? R : never;
export const messageResult: ResultOf<typeof sendEmail> = { messageId: 'm' };
// @ts-expect-error the result is { messageId: string }
export const wrongResult: ResultOf<typeof sendEmail> = 42;

defineTask({
  name: 'typed.handler',
  schema: z.object({ n: z.number() }),
  handler: (payload) => {
    // @ts-expect-error n is a number
    const s: string = payload.n;
    return s;
  },
});

export function workers(): Worker {
  return new Worker({ queue, tasks: [sendEmail, resize, audit] });
}

/** §9 waitFor's result type: unknown unless given; then `result` is typed (and nullable). */
export async function waiting(): Promise<void> {
  const untyped = await queue.waitFor('1');
  // @ts-expect-error result is unknown until typed
  untyped.result.messageId;
  const job = await queue.waitFor<{ messageId: string }>({ id: '1' }, { timeoutMs: 1_000 });
  const id: string | undefined = job.result?.messageId;
  // @ts-expect-error result may be null (not done)
  job.result.messageId;
  void id;
}

/**
 * §11 a batch task: items typed from the schema (output), enqueued like any task (input). Break
 * seen failing: BatchTaskConfig's handler typed `BatchHandler<any, any>` (the "to is a string"
 * directive became unused).
 */
const sendMany = defineTask({
  name: 'email.sendMany',
  schema: z.object({ to: z.string(), n: z.coerce.number() }),
  batch: { maxSize: 100, maxWaitMs: 20 },
  handler: async (items, ctx) => {
    const to: string = items[0]!.payload.to;
    const n: number = items[0]!.payload.n; // the schema's output
    const id: string = items[0]!.job.id;
    // @ts-expect-error to is a string
    const wrong: number = items[0]!.payload.to;
    // @ts-expect-error a batch handler has no ctx.progress (per-job tools are for single jobs)
    ctx.progress;
    void [to, n, id, wrong, ctx.signal];
    return items.map((item) => (item.payload.n > 0 ? { sent: item.payload.to } : new Error('no')));
  },
});

export async function batches(): Promise<Worker> {
  await queue.enqueue(sendMany, { to: 'ada@example.com', n: 1 });
  // @ts-expect-error `to` is required
  await queue.enqueue(sendMany, { n: 1 });
  return new Worker({
    queue,
    tasks: [sendMany, sendEmail],
  });
}

export function batchMap(): Worker {
  return new Worker({
    queue,
    tasks: {
      'email.sendMany': {
        batch: { maxSize: 10 },
        handler: async (items: { payload: unknown }[]) => void items,
      },
    },
  });
}
