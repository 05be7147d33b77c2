/**
 * SPEC §12: ctx.step / ctx.sleep / ctx.waitForEvent inside the job's own open transaction
 * (ctx.transaction, or the fn of a `{ transaction: true }` step) throw a ValidationError at
 * once — their checkpoint would wait forever for the job-row lock the handler itself holds, and
 * tie up the step writer for every other job.
 *
 * Deliberate break seen failing (then restored): src/worker/steps.ts `assertNoTransaction`
 * made a no-op: failed after 10 s with "expected 'running' to be 'dead'" (each nested step hung
 * on the job-row lock its own transaction held).
 */
import { expect, test } from 'vitest';
import type { JobContext } from '../../src/worker/options.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

test("a step, sleep or wait inside the job's transaction is a ValidationError, and other jobs' steps go on", async () => {
  const queue = db.queue();
  const errors: string[] = [];
  const record = (e: unknown) => {
    errors.push(`${(e as Error).name}: ${(e as Error).message}`);
    throw e;
  };
  const worker = db.worker({
    queue,
    leaseMs: 3_000,
    concurrency: 4,
    tasks: {
      nested: async (_p: unknown, ctx: JobContext) => {
        await ctx.step(
          'outer',
          async () => {
            await ctx.step('inner', async () => 1).catch(record);
            return 2;
          },
          { transaction: true },
        );
        return 'ok';
      },
      inTx: async (_p: unknown, ctx: JobContext) =>
        ctx.transaction(async () => {
          await ctx.sleep('zz', 10).catch(record);
          return 'ok';
        }),
      waitInTx: async (_p: unknown, ctx: JobContext) =>
        ctx.transaction(async () => {
          await ctx.waitForEvent('w', 'nest.ev').catch(record);
          return 'ok';
        }),
      normal: async (_p: unknown, ctx: JobContext) => {
        await ctx.step('a', async () => 1);
        return 'ok';
      },
    },
  });
  await worker.start();
  try {
    const jobs = [
      await queue.enqueue('nested', {}, { maxAttempts: 1 }),
      await queue.enqueue('inTx', {}, { maxAttempts: 1 }),
      await queue.enqueue('waitInTx', {}, { maxAttempts: 1 }),
    ];
    const plain = await queue.enqueue('normal', {});
    const deadline = Date.now() + 10_000;
    const settled = async () => {
      for (const j of [...jobs, plain]) {
        const s = (await queue.get(j.id))?.status;
        if (s !== 'dead' && s !== 'done') return false;
      }
      return true;
    };
    while (!(await settled()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    for (const j of jobs) expect((await queue.get(j.id))?.status).toBe('dead');
    expect((await queue.get(plain.id))?.status).toBe('done');
    expect(errors).toHaveLength(3);
    for (const e of errors)
      expect(e).toMatch(/ValidationError: .*cannot run inside ctx\.transaction or a transactional step/);
  } finally {
    await worker.stop({ timeoutMs: 2_000 });
  }
}, 20_000);
