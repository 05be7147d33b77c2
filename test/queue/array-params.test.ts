/**
 * The batch statements bind their arrays as literals written by src/store/runner.ts, not by the
 * driver: every awkward value must reach PostgreSQL exactly as given. Each literal is parsed by
 * the real server and compared with its input; then a batch enqueue of awkward jobs is read back.
 * Deliberate break seen failing: textArray without the backslash escape (`[\\"]` → `["]`).
 */
import { describe, expect, test } from 'vitest';
import { digitsArray, jsonArray, textArray } from '../../src/store/runner.js';
import { useTestDatabase } from '../support/database.js';

const db = useTestDatabase();

const AWKWARD = [
  'plain',
  '',
  'NULL',
  'null',
  'with space',
  'a,b',
  '{braces}',
  'quote " inside',
  'back\\slash',
  '\\"both\\"',
  'trailing\\',
  'ü – 日本 🙂',
  'new\nline\ttab',
  '  leading and trailing  ',
];

describe('array literals of the batch statements', () => {
  test('text[]: every awkward value and NULL arrive as given, repeated values included', async () => {
    const values: (string | null)[] = [...AWKWARD, null, 'plain', 'plain', null, 'NULL', 'NULL'];
    const rows = await db.sql<{ v: (string | null)[] }>('SELECT $1::text[] AS v', [textArray(values)]);
    expect(rows[0]?.v).toEqual(values);
    expect((await db.sql<{ v: string[] }>('SELECT $1::text[] AS v', [textArray([])]))[0]?.v).toEqual([]);
  });

  test('int[] and float8[]: numbers and NULL arrive as given', async () => {
    const ints = [0, -1, 2_147_483_647, null, 42];
    const floats = [0.5, -1e-7, 1e21, null, 86_400_000];
    const rows = await db.sql<{ i: (number | null)[]; f: (number | null)[] }>(
      'SELECT $1::int[] AS i, $2::float8[] AS f',
      [digitsArray(ints), digitsArray(floats)],
    );
    expect(rows[0]?.i).toEqual(ints);
    expect(rows[0]?.f).toEqual(floats);
  });

  test('the payloads as one JSON array: each element in order, as the JSON it was', async () => {
    const payloads = [{ a: 1 }, null, 'text " \\ 🙂', [1, [2, { b: 'c' }]], 0, true, { '': '' }];
    const rows = await db.sql<{ p: unknown[] }>(
      `SELECT ARRAY(SELECT e FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS x(e, n) ORDER BY n) AS p`,
      [jsonArray(payloads.map((p) => JSON.stringify(p)))],
    );
    expect(rows[0]?.p).toEqual(payloads);
  });

  test('enqueueMany of awkward tasks, queues, keys and payloads: each job reads back as given', async () => {
    const queue = db.queue();
    const jobs = AWKWARD.filter((v) => v.trim() !== '' && !v.includes('\n')).map((v, i) => ({
      task: `arr.${v}`,
      queue: `arr-q.${v}`,
      payload: { v, i, nested: [v, { v }] },
      dedupeKey: `arr-key.${i}.${v}`,
      priority: i - 3,
      maxAttempts: i + 1,
      ...(i % 2 === 0 ? { delayMs: 60_000 + i } : { runAt: new Date(Date.UTC(2031, 0, 1, 0, 0, i)) }),
    }));
    const results = await queue.enqueueMany(jobs);
    expect(results.every((r) => r.created)).toBe(true);
    for (const [i, result] of results.entries()) {
      const spec = jobs[i] as (typeof jobs)[number];
      const job = await queue.get(result.id);
      expect(job).toMatchObject({
        task: spec.task,
        queue: spec.queue,
        payload: spec.payload,
        dedupeKey: spec.dedupeKey,
        priority: spec.priority,
        maxAttempts: spec.maxAttempts,
        status: 'pending',
      });
      if ('runAt' in spec) expect(job?.runAfter).toEqual(spec.runAt);
      else expect(job?.runAfter.getTime()).toBeGreaterThan(Date.now() + 50_000);
    }
    // the same keys again: dedupe hits, answered with the holders' ids
    const again = await queue.enqueueMany(jobs);
    expect(again).toEqual(results.map((r) => ({ id: r.id, created: false })));
  });
});
