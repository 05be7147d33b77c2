/**
 * A tour of the Queue API on a throwaway embedded PostgreSQL (nothing to install):
 *   npm install && npm run example:quickstart
 * With DATABASE_URL set it uses that server instead (schema `skiplock_quickstart`).
 *
 * A handler loop is written out by hand here; the Worker class that runs handlers for you,
 * with leases, wake-up and graceful shutdown, comes next.
 */
import { startEmbeddedPostgres } from '../src/embedded/embedded-postgres.js';
import { Queue } from '../src/index.js';

const log = (text: string) => process.stdout.write(`${text}\n`);

const server = process.env.DATABASE_URL ? null : await startEmbeddedPostgres();
if (server) log(`Embedded PostgreSQL ${server.version} on ${server.connectionString}`);
const queue = new Queue({
  connectionString: server?.connectionString ?? process.env.DATABASE_URL,
  schema: 'skiplock_quickstart',
  backoff: { baseMs: 200 },
});

try {
  await queue.migrate();
  log('Migrated schema "skiplock_quickstart".');

  const { id } = await queue.enqueue('email.send', { to: 'ada@example.com' }, { dedupeKey: 'welcome:ada' });
  const again = await queue.enqueue('email.send', { to: 'ada@example.com' }, { dedupeKey: 'welcome:ada' });
  log(`Enqueued job ${id}; the same dedupe key again gave ${JSON.stringify(again)}.`);
  await queue.enqueueMany([
    { task: 'report.build', payload: { month: '2026-11' }, priority: 10 },
    { task: 'flaky.call', payload: { failTimes: 2 }, maxAttempts: 3 },
    { task: 'doomed.call', payload: {}, maxAttempts: 2 },
    { task: 'later', payload: {}, delayMs: 60_000 },
  ]);

  // A hand-written worker loop: claim in a batch, run, complete or fail.
  const failures = new Map<string, number>();
  for (let round = 0; round < 20; round++) {
    const jobs = await queue.claim('quickstart-worker', { limit: 10, leaseMs: 30_000 });
    if (jobs.length === 0) {
      if ((await queue.counts()).pending <= 1) break; // only the delayed job is left
      await new Promise((resolve) => setTimeout(resolve, 250)); // backoff pending
      continue;
    }
    for (const job of jobs) {
      const failedSoFar = failures.get(job.id) ?? 0;
      const { failTimes } = (job.payload ?? {}) as { failTimes?: number };
      if (job.task === 'doomed.call' || (failTimes !== undefined && failedSoFar < failTimes)) {
        failures.set(job.id, failedSoFar + 1);
        const outcome = await queue.fail(job, new Error(`${job.task} failed on attempt ${job.attempt}`));
        log(`  ${job.task} #${job.id} attempt ${job.attempt}: failed → ${outcome}`);
      } else {
        await queue.complete(job, { handledAt: new Date().toISOString() });
        log(`  ${job.task} #${job.id} attempt ${job.attempt}: done`);
      }
    }
  }
  log(`\nOps snapshot: ${JSON.stringify(await queue.ops())}`);
  const [dead] = await queue.list({ status: 'dead' });
  if (dead) log(`Dead job #${dead.id} kept its last error: ${dead.lastError?.split('\n')[0]}`);
} finally {
  await queue.close();
  await server?.stop();
}
