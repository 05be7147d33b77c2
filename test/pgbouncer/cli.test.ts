/**
 * Guards SPEC §4 (every command that connects takes `--no-prepared-statements`) and §7 (behind
 * PgBouncer in transaction mode everything works) with a real PgBouncer 1.18 in transaction mode
 * (test/support/pgbouncer.ts) and the real CLI: migrate (3 at once on a fresh schema: the
 * advisory lock is transaction-scoped, so it holds through PgBouncer), enqueue, get, list, ops,
 * cancel, requeue (one id and --all-dead), prune and dashboard, each through PgBouncer with
 * `--no-prepared-statements` (given before or after the subcommand), each checked against the
 * rows in the database.
 *
 * Caught on the code before the fix (issue 8, defect 7): the CLI had no
 * `--no-prepared-statements`: every command exited 2 ("unknown option").
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, inject, test } from 'vitest';
import { type CliOptions, describeRun, json, runCli, spawnCli } from '../cli/run-cli.js';
import { useTestDatabase } from '../support/database.js';
import { describeWithPgBouncer, type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import { killChildren } from '../support/spawn.js';

describeWithPgBouncer('the CLI behind PgBouncer in transaction mode, --no-prepared-statements', () => {
  const db = useTestDatabase();
  let bouncer: PgBouncer;

  beforeAll(async () => {
    bouncer = await startPgBouncer(inject('adminUrl'), { defaultPoolSize: 2 });
  });

  afterAll(async () => {
    await bouncer?.stop();
  });

  /** `skiplock --no-prepared-statements <args>` through PgBouncer. */
  const run = (args: string[], options: CliOptions = {}) =>
    runCli(['--no-prepared-statements', ...args], { url: bouncer.url(db.url), ...options });

  async function status(id: string): Promise<string | undefined> {
    return (await db.sql<{ status: string }>(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id]))[0]?.status;
  }

  async function seed(task: string, status: string, age = '0 s'): Promise<string> {
    const [row] = await db.sql<{ id: string }>(
      `INSERT INTO ${db.jobs} (task, status, attempts, last_error, updated_at, created_at)
       VALUES ($1, $2, 3, CASE WHEN $2 = 'dead' THEN 'Error: seeded' END, now() - $3::interval, now() - $3::interval)
       RETURNING id::text AS id`,
      [task, status, age],
    );
    return row!.id;
  }

  test('migrate: three at once on a fresh schema, through PgBouncer', async () => {
    const schema = 'skiplock_bouncer_migrate';
    const runs = await Promise.all(
      [0, 1, 2].map(() => run(['migrate', '--schema', schema, '--json'], { schema: false })),
    );
    const results = runs.map((r) => json<{ applied: number[]; version: number }>(r));
    expect(results.filter((r) => r.applied.length > 0)).toHaveLength(1);
    expect(new Set(results.map((r) => r.version)).size).toBe(1);
  });

  test('enqueue, get, list, ops, cancel, requeue, prune', async () => {
    const enqueued = json<{ id: string; created: boolean }>(
      await run(['enqueue', 'bouncer.cli', '{"a":1}', '--dedupe-key', 'bouncer-1', '--json']),
    );
    expect(enqueued.created).toBe(true);
    const { id } = enqueued;
    // The flag after the subcommand works too.
    const again = await runCli(
      ['enqueue', 'bouncer.cli', '{}', '--dedupe-key', 'bouncer-1', '--json', '--no-prepared-statements'],
      {
        url: bouncer.url(db.url),
      },
    );
    expect(json(again)).toEqual({ id, created: false });

    const dead = await seed('bouncer.dead', 'dead');
    const deadMore = [await seed('bouncer.dead.all', 'dead'), await seed('bouncer.dead.all', 'dead')];
    const old = await seed('bouncer.old', 'done', '10 days');
    const [got, listed, ops] = await Promise.all([
      run(['get', id, '--json']),
      run(['list', '--task', 'bouncer.cli', '--json']),
      run(['ops', '--json']),
    ]);
    expect(json(got)).toMatchObject({ id, task: 'bouncer.cli', status: 'pending', payload: { a: 1 } });
    expect(json<{ jobs: { id: string }[] }>(listed).jobs.map((job) => job.id)).toEqual([id]);
    expect(json(ops)).toMatchObject({ pending: 1, dead: 3 });

    const [cancelled, requeued, requeuedAll, pruned] = await Promise.all([
      run(['cancel', id, '--json']),
      run(['requeue', dead, '--json']),
      run(['requeue', '--all-dead', '--task', 'bouncer.dead.all', '--json']),
      run(['prune', '--older-than', '7d', '--json']),
    ]);
    expect(json(cancelled)).toEqual({ id, cancelled: true, wasRunning: false });
    expect(json(requeued)).toEqual({ id: dead, requeued: true });
    expect(json(requeuedAll)).toEqual({ requeued: 2, skipped: 0 });
    expect(json(pruned)).toEqual({ deleted: 1, olderThanMs: 7 * 86_400_000 });
    expect(await status(id)).toBe('cancelled');
    expect(await Promise.all([dead, ...deadMore].map(status))).toEqual(['pending', 'pending', 'pending']);
    expect(await status(old)).toBeUndefined();
  });

  test('dashboard: serves /api/ops through PgBouncer', async () => {
    const child = spawnCli(['--no-prepared-statements', 'dashboard', '--port', '0'], {
      url: bouncer.url(db.url),
    });
    let out = '';
    let err = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
    });
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      err += chunk;
    });
    try {
      const deadline = Date.now() + 30_000;
      const started = () => /^skiplock dashboard on (\S+) /m.exec(out)?.[1];
      while (!started()) {
        if (child.exitCode !== null || Date.now() > deadline) {
          throw new Error(`the dashboard did not start: exit ${child.exitCode}\n${out}${err}`);
        }
        await sleep(50);
      }
      const url = started() as string;
      const response = await fetch(new URL('api/ops', url));
      expect(response.status, describeRun({ code: null, signal: null, stdout: out, stderr: err })).toBe(200);
      expect(await response.json()).toHaveProperty('pending');
    } finally {
      await killChildren([child]);
    }
  });
});
