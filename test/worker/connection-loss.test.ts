/**
 * Issue 8, defect 10: a worker process crashed (exit 1, unhandled 'error' event) when the
 * connection of a transaction died while no query ran on it — a handler awaiting something
 * inside ctx.transaction while the database restarts or an admin kills the backend — because
 * pg-pool removes its idle 'error' listener from a checked-out client. The same for
 * queue.transaction(), and for queue.close() racing the server's termination of its backends.
 * Each case runs in a child process (a crash must be seen as one) that loses its connection
 * for real through pg_terminate_backend.
 *
 * Before the fix the ctx-transaction and queue-transaction children died with exit code 1 and
 * "Unhandled 'error' event" / 57P01 on stderr.
 * Deliberate break seen failing: withSession() in src/db/executor.ts without
 * `session.on?.('error', markBroken)`.
 */
import { describe, expect, test } from 'vitest';
import { useTestDatabase } from '../support/database.js';
import { TEST_SCHEMA } from '../support/schema.js';
import { runFixture } from '../support/spawn.js';

const db = useTestDatabase();

async function run(mode: string): Promise<Record<string, unknown>> {
  const result = await runFixture(
    'test/worker/fixtures/connection-loss.ts',
    { SKIPLOCK_FIXTURE_URL: db.url, SKIPLOCK_FIXTURE_SCHEMA: TEST_SCHEMA, SKIPLOCK_FIXTURE_MODE: mode },
    30_000,
  );
  expect(result.stderr, 'nothing unhandled').not.toMatch(/Unhandled|uncaught|57P01/i);
  expect(result.code, `the child survived; stderr:\n${result.stderr}`).toBe(0);
  return JSON.parse(result.stdout.trim().split('\n').at(-1) as string) as Record<string, unknown>;
}

describe('a connection that dies under a transaction never crashes the process', () => {
  test('ctx.transaction: the attempt fails and is retried; the worker goes on', async () => {
    const report = await run('ctx-transaction');
    expect(report.retryError).toMatch(/terminat|Connection|closed/i);
    expect(report.result).toBe('second attempt');
  });

  test('queue.transaction: the call rejects; the pool lends a healthy connection next', async () => {
    const report = await run('queue-transaction');
    expect(report.error).toMatch(/terminat|Connection|closed/i);
    expect(report.after).toBe(42);
  });

  test('queue.close() while the server terminates its backends', async () => {
    const report = await run('close-under-termination');
    expect(report.closed).toBe(10);
  });
});
