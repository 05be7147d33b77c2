import { expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

test('enqueue, claim, complete', async () => {
  const queue = db.queue();
  const { id, created } = await queue.enqueue('hello', { n: 1 });
  expect(created).toBe(true);
  const [job] = await queue.claim('w1');
  expect(job?.id).toBe(id);
  expect(job?.attempt).toBe(1);
  expect(await queue.complete(job!, { ok: true })).toBe(true);
  const done = await queue.get(id);
  expect(done?.status).toBe('done');
  expect(done?.result).toEqual({ ok: true });
  expect(await queue.ops()).toMatchObject({ done: 1, pending: 0, estimated: [] });
});
