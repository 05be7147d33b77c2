/**
 * The read-replica option of `skiplock ops` and `skiplock dashboard` (SPEC §4/§7, issue 8
 * defect 8): `--read-database-url`, else `$DATABASE_READ_URL`, "" for none. ops shows
 * `replicaLagMs` (--json) and a "replica lag (ms)" row (text) only with a replica; a replica
 * that cannot be reached is a one-line error of ops naming it (exit 1; the dashboard starts
 * anyway: dashboard-cli.test.ts); other commands ignore the
 * variable and read the primary. A real standby behind the option: streaming-replica.test.ts.
 *
 * Deliberate break seen failing: readDatabaseUrl() without its `$DATABASE_READ_URL` fallback
 * failed "DATABASE_READ_URL is the default" (ops read the primary and exited 0).
 */
import { describe, expect, test } from 'vitest';
import type { OpsSnapshot } from '../../src/types.js';
import { useTestDatabase } from '../support/database.js';
import { type CliOptions, json, ok, oneLineError, runCli } from './run-cli.js';

const db = useTestDatabase();
const run = (args: string[], options: CliOptions = {}) => runCli(args, { url: db.url, ...options });
const DOWN = 'postgres://nobody@127.0.0.1:1/nothing'; // nothing listens on port 1
const REPLICA_ERROR = /^skiplock: Read replica \(readConnectionString\): .*ECONNREFUSED/;

describe('CLI read replica', () => {
  test('ops: replicaLagMs and the "replica lag" row only with a replica', async () => {
    const [plain, plainText, replica, replicaText] = await Promise.all([
      run(['ops', '--json'], { env: { DATABASE_READ_URL: undefined } }),
      run(['ops'], { env: { DATABASE_READ_URL: undefined, NO_COLOR: '1' } }),
      // The primary itself as the "replica": not in recovery, so its lag is 0.
      run(['ops', '--json', '--read-database-url', db.url]),
      run(['ops', '--read-database-url', db.url], { env: { NO_COLOR: '1' } }),
    ]);
    expect(json<OpsSnapshot>(plain).replicaLagMs).toBeNull();
    expect(ok(plainText)).not.toMatch(/replica lag/);
    expect(json<OpsSnapshot>(replica).replicaLagMs).toBe(0);
    expect(ok(replicaText)).toMatch(/^replica lag \(ms\) +0$/m);
  });

  test('DATABASE_READ_URL is the default; "" turns it off; other commands ignore it', async () => {
    const env = { DATABASE_READ_URL: DOWN };
    const { id } = await db.queue().enqueue('cli.replica', {});
    const [down, off, get] = await Promise.all([
      run(['ops'], { env }),
      run(['ops', '--json', '--read-database-url', ''], { env }),
      run(['get', id, '--json'], { env }),
    ]);
    oneLineError(down, 1, REPLICA_ERROR);
    expect(json<OpsSnapshot>(off).replicaLagMs).toBeNull();
    expect(json<{ id: string }>(get).id).toBe(id);
    // The dashboard no longer exits on a replica that is down (issue 26): dashboard-cli.test.ts.
  });

  test('--help of ops and dashboard documents the option and its variable', async () => {
    for (const command of ['ops', 'dashboard']) {
      const help = ok(await run([command, '--help']));
      expect(help, command).toMatch(/--read-database-url <url>/);
      expect(help, command).toMatch(/\$DATABASE_READ_URL/);
    }
  });
});
