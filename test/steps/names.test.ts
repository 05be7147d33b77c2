/**
 * SPEC §12 step and event names are limited in UTF-8 bytes (≤ 1,000), not characters: a long
 * non-ASCII name is a ValidationError in its own job (before any statement), so the checkpoints
 * batched with it are not failed by PostgreSQL's index-row limit (54000).
 *
 * Deliberate break seen failing (then restored): checkStepName (src/engine/step-admin.ts)
 * counting `name.length` again: both tests failed — "expected function to throw an error, but it
 * didn't" for the 334-character CJK name, and the long-name job ended 'done', not 'dead' (its
 * 3,000-byte name was accepted; this repeated one compresses under the index limit, a random
 * one fails the whole checkpoint batch with 54000, as the review showed).
 */
import { expect, test } from 'vitest';
import { checkStepName } from '../../src/engine/step-admin.js';
import { ValidationError } from '../../src/errors.js';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();
const cjk = (n: number) => '\u4e00'.repeat(n); // 3 bytes each in UTF-8

test('names are limited to 1,000 UTF-8 bytes', async () => {
  expect(() => checkStepName(cjk(333), 'step name')).not.toThrow();
  expect(() => checkStepName(cjk(334), 'step name')).toThrow(ValidationError);
  expect(() => checkStepName(cjk(1000), 'step name')).toThrow(/at most 1000 bytes/);
  expect(() => checkStepName('a'.repeat(1000), 'step name')).not.toThrow();
  const queue = db.queue();
  await expect(queue.emitEvent(cjk(1000), 1)).rejects.toBeInstanceOf(ValidationError);
});

test('a job with a long non-ASCII step name fails alone; the job checkpointed beside it is done', async () => {
  const queue = db.queue();
  const seen: string[] = [];
  const worker = db.worker({
    queue,
    concurrency: 2,
    tasks: {
      long: async (_p: unknown, ctx: JobContext) => {
        await ctx
          .step(cjk(1000), async () => 1)
          .catch((e: Error) => {
            seen.push(e.name);
            throw e;
          });
      },
      ordinary: async (_p: unknown, ctx: JobContext) => ctx.step('ordinary', async () => 2),
    },
  });
  await worker.start();
  try {
    const a = await queue.enqueue('long', {}, { maxAttempts: 1 });
    const b = await queue.enqueue('ordinary', {}, { maxAttempts: 1 });
    await expect.poll(async () => (await queue.get(b.id))?.status, { timeout: 10_000 }).toBe('done');
    await expect.poll(async () => (await queue.get(a.id))?.status, { timeout: 10_000 }).toBe('dead');
    expect(seen).toEqual(['ValidationError']);
  } finally {
    await worker.stop({ timeoutMs: 2_000 });
  }
}, 20_000);
