/**
 * The life of a worker fixture process (see startReadyFixture): starts the worker, prints
 * `ready`, stops gracefully on SIGTERM, and exits 1 with the stack if start() fails.
 */
import type { Worker } from '../../src/worker/worker.js';

export function runWorkerFixture(worker: Worker): void {
  process.on('SIGTERM', () => {
    void worker.stop({ timeoutMs: 2_000 }).then(() => process.exit(0));
  });
  worker.start().then(
    () => process.stdout.write('ready\n'),
    (error: unknown) => {
      process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
      process.exit(1);
    },
  );
}
