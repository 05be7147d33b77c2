/**
 * `npm run soak`: Skiplock's fault-injection soak (issue 8). Producers and worker processes run
 * against the soak's own embedded PostgreSQL, through a TCP proxy it controls, while it injects
 * faults at random (faults.ts); then it drains, stops the workers gracefully, and checks that no
 * job ran twice unexplained, completed twice, or was lost, and that no process crashed or hung
 * (verify.ts). Exit code 1 when a must-be-zero figure is not zero, 2 when the soak itself failed,
 * 130 when interrupted. `npm run soak -- --help` lists the options; docs/reliability.md explains
 * the table.
 *
 * Lives in test/soak/, not bench/: it checks SPEC §1's invariants, not speed; it needs only the
 * project's own dependencies and src/, while bench/ is a separate package with the peers'
 * dependencies. Only verify.test.ts is picked up by vitest (a unit test of the verdict).
 */
import { HELP, parseOptions, type SoakOptions } from './options.js';
import { SoakRun } from './soak-run.js';

let opts: SoakOptions | null;
try {
  opts = parseOptions(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`soak: ${error instanceof Error ? error.message : String(error)}\n${HELP}`);
  process.exit(2);
}
if (opts === null) {
  process.stdout.write(HELP);
  process.exit(0);
}
const t0 = Date.now();
const log = (line: string) =>
  process.stdout.write(`[+${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${line}\n`);
const soak = new SoakRun(opts, log);

// A Ctrl-C reaches this process more than once (the terminal, then npm and tsx relay it): the
// clean-up runs once, to its end, whatever arrives meanwhile — it is bounded by itself.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => {
    if (soak.cleaningUp) return;
    log(`${signal}: stopping every process of the soak and removing its folder`);
    void soak.cleanup().finally(() => process.exit(130));
  });
}

let exitCode = 2;
try {
  exitCode = await soak.run();
} catch (error) {
  process.stderr.write(`soak: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
} finally {
  await soak.cleanup();
}
process.exit(exitCode);
