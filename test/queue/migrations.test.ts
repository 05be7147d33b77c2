/**
 * SPEC §2 — migrations: forward-only, in one transaction under an advisory lock, recorded in a
 * migrations table; many processes may migrate at once; any schema name works, always quoted,
 * and keeps its jobs apart.
 *
 * Deliberate break seen failing: removing the pg_advisory_xact_lock call in
 * src/migrations/migrate.ts made "five processes migrating at once" fail (duplicate key /
 * relation already exists in some children).
 */
import { spawn } from 'node:child_process';
import { describe, expect, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { engineOf } from '../../src/engine/engine.js';
import { claimWithLimits } from '../../src/engine/queues.js';
import { NotMigratedError } from '../../src/errors.js';
import { LATEST_VERSION, MIGRATIONS } from '../../src/migrations/migrate.js';
import { useTestDatabase } from '../support/database.js';
import { jobsTable } from '../support/schema.js';
import { schemaAt as schemaAtVersion } from '../support/schema-at.js';
import { REPO_ROOT } from '../support/spawn.js';

const db = useTestDatabase();

/** A new schema `name` (quoted, returned) built by the migrations up to `version`, as that version left it. */
const schemaAt = (name: string, version: number) => schemaAtVersion(db, name, version);

describe('migrations', () => {
  test('five processes migrating one new schema at once all succeed; it is applied once', async () => {
    const schema = 'concurrent_migrate';
    const children = Array.from({ length: 5 }, () =>
      spawn(process.execPath, ['--import', 'tsx', 'test/queue/fixtures/migrate.ts'], {
        cwd: REPO_ROOT,
        env: { ...process.env, DATABASE_URL: db.url, SCHEMA: schema },
        stdio: ['pipe', 'pipe', 'pipe'],
      }),
    );
    const outputs = children.map((child) => {
      const out = { stdout: '', stderr: '', code: null as number | null };
      child.stdout.on('data', (chunk: Buffer) => {
        out.stdout += chunk.toString();
      });
      child.stderr.on('data', (chunk: Buffer) => {
        out.stderr += chunk.toString();
      });
      return out;
    });
    // Barrier: every child is connected before any of them migrates.
    await expect
      .poll(() => outputs.every((o) => o.stdout.includes('ready')), { timeout: 30_000, interval: 20 })
      .toBe(true);
    for (const child of children) child.stdin.write('go\n');
    await Promise.all(
      children.map(
        (child, i) =>
          new Promise<void>((resolve) =>
            child.once('close', (code) => {
              outputs[i]!.code = code;
              resolve();
            }),
          ),
      ),
    );
    for (const o of outputs) expect(o.code, o.stderr).toBe(0);
    const results = outputs.map(
      (o) => JSON.parse(o.stdout.split('\n')[1]!) as { applied: number[]; version: number },
    );
    expect(results.filter((r) => r.applied.length > 0)).toHaveLength(1);
    expect(results.every((r) => r.version === LATEST_VERSION)).toBe(true);
    const rows = await db.sql<{ version: number }>(
      `SELECT version FROM ${quoteIdent(schema)}.migrations ORDER BY version`,
    );
    expect(rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
  });

  test('ten queues in one process migrating one new schema at once all succeed', async () => {
    const queues = Array.from({ length: 10 }, () =>
      db.queue({ schema: 'concurrent_in_process', poolSize: 1 }),
    );
    await Promise.all(queues.map((q) => q.counts().catch(() => undefined)));
    const results = await Promise.all(queues.map((q) => q.migrate()));
    expect(results.filter((r) => r.applied.length > 0)).toHaveLength(1);
  });

  test('migrate is idempotent', async () => {
    const queue = db.queue({ schema: 'idempotent' });
    expect((await queue.migrate()).applied).toEqual(MIGRATIONS.map((m) => m.version));
    expect(await queue.migrate()).toEqual({ schema: 'idempotent', applied: [], version: LATEST_VERSION });
  });

  test('schemas that need quoting work and keep their jobs apart', async () => {
    const names = [
      'acc schema',
      'tenant_a',
      'Tenant_A',
      'we"ird; DROP TABLE x; --',
      "o'brien",
      'back\\slash',
    ];
    const queues = names.map((schema) => db.queue({ schema }));
    for (const queue of queues) await queue.migrate();
    for (const [i, queue] of queues.entries()) {
      await queue.enqueueMany(
        Array.from({ length: i + 1 }, () => ({ task: 'apart', payload: { schema: names[i] } })),
      );
    }
    for (const [i, queue] of queues.entries()) {
      expect((await queue.counts()).pending).toBe(i + 1);
      const claimed = await queue.claim('w', { limit: 100 });
      expect(claimed).toHaveLength(i + 1);
      expect(claimed.every((job) => (job.payload as { schema: string }).schema === names[i])).toBe(true);
      expect((await queue.ops()).running).toBe(i + 1);
    }
    for (const schema of names) {
      const [row] = await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${jobsTable(schema)}`);
      expect(row?.n).toBe(names.indexOf(schema) + 1);
    }
  });

  test('using a schema that was never migrated says what to do', async () => {
    const queue = db.queue({ schema: 'never_migrated' });
    const error = await queue.enqueue('x', {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotMigratedError);
    expect((error as Error).message).toMatch(/queue\.migrate\(\)|skiplock migrate/);
    await expect(queue.get('1')).rejects.toBeInstanceOf(NotMigratedError);
  });

  test('a database newer than the package is refused, not downgraded', async () => {
    const queue = db.queue({ schema: 'from_the_future' });
    await queue.migrate();
    await db.sql(`INSERT INTO from_the_future.migrations (version, name) VALUES ($1, 'future')`, [
      LATEST_VERSION + 1,
    ]);
    await expect(queue.migrate()).rejects.toMatchObject({ code: 'ERR_MIGRATION' });
  });
  test('migration 3 on a populated version-2 schema: instant, old rows read as before, new claims get tokens', async () => {
    const s = await schemaAt('from_v2', 2);
    // What version 2 left behind: worker_id kept on a finished job and on a pending retry.
    const [done] = await db.sql<{ id: string }>(
      `INSERT INTO ${s}.jobs (task, status, attempts, worker_id, result) VALUES ('v2.done', 'done', 1, 'old-worker', '1')
       RETURNING id::text AS id`,
    );
    const [retry] = await db.sql<{ id: string }>(
      `INSERT INTO ${s}.jobs (task, status, attempts, worker_id, max_attempts) VALUES ('v2.retry', 'pending', 1, 'old-worker', 3)
       RETURNING id::text AS id`,
    );
    const queue = db.queue({ schema: 'from_v2' });
    expect((await queue.migrate()).applied).toEqual(
      MIGRATIONS.filter((m) => m.version > 2).map((m) => m.version),
    );
    expect(await queue.get(done!.id)).toMatchObject({
      status: 'done',
      workerId: null,
      attemptedBy: ['old-worker'],
    });
    expect(await queue.get(retry!.id)).toMatchObject({
      status: 'pending',
      workerId: null,
      attemptedBy: ['old-worker'],
    });
    const [claimed] = await queue.claim('new-worker', { tasks: ['v2.retry'] });
    expect(claimed).toMatchObject({ id: retry!.id, attempt: 2, token: '1', workerId: 'new-worker' });
    expect(await queue.complete(claimed!, 'ok')).toBe(true);
    expect(await queue.get(retry!.id)).toMatchObject({
      status: 'done',
      workerId: null,
      attemptedBy: ['old-worker', 'new-worker'],
    });
  });

  test('migration 14 on a populated version-13 schema: old jobs unchanged and claimable, a running one completes, and flows work', async () => {
    const schema = 'from_v13';
    const s = await schemaAt(schema, 13);
    // what version 13 holds: a pending job, and one running under a lease (the package of that
    // version cannot be run here: it is written as its statements would)
    const [{ id: pending }] = (await db.sql<{ id: string }>(
      `INSERT INTO ${s}.jobs (task, payload) VALUES ('v13.pending', '{"n":1}') RETURNING id::text AS id`,
    )) as [{ id: string }];
    const [{ id: running }] = (await db.sql<{ id: string }>(
      `INSERT INTO ${s}.jobs (task, status, attempts, claims, worker_id, lease_until, run_started_at)
       VALUES ('v13.running', 'running', 1, 1, 'old-worker', now() + interval '1 minute', now())
       RETURNING id::text AS id`,
    )) as [{ id: string }];
    const lease = { id: running, workerId: 'old-worker', attempt: 1, token: '1' };
    // the status check of version 13 refuses the new status
    await expect(db.sql(`UPDATE ${s}.jobs SET status = 'waiting' WHERE id = $1`, [pending])).rejects.toThrow(
      /jobs_status_check/,
    );
    const queue = db.queue({ schema });
    expect((await queue.migrate()).applied).toEqual(
      MIGRATIONS.filter((m) => m.version > 13).map((m) => m.version),
    );
    expect(await queue.get(pending)).toMatchObject({
      status: 'pending',
      payload: { n: 1 },
      flowId: null,
      flowRef: null,
    });
    expect(await queue.complete(lease, 'finished after the migration')).toBe(true);
    expect(await queue.get(running)).toMatchObject({
      status: 'done',
      result: 'finished after the migration',
    });
    const [claimed] = await queue.claim('new-worker', { tasks: ['v13.pending'] });
    expect(claimed?.id).toBe(pending);
    // an old job can be a dependency
    const { id: child } = await queue.enqueue('v14.child', null, { dependsOn: [pending] });
    expect((await queue.get(child))?.status).toBe('waiting');
    expect(await queue.complete(claimed!, null)).toBe(true);
    expect((await queue.get(child))?.status).toBe('pending');
    await expect(db.sql(`UPDATE ${s}.jobs SET status = 'bogus' WHERE id = $1`, [child])).rejects.toThrow(
      /jobs_status_check/,
    );
  });
  test('migration 15 on a populated version-14 schema: a dependent written by version 14 is unblocked by a completion, and new dependents are decided at commit', async () => {
    const schema = 'from_v14';
    const s = await schemaAt(schema, 14);
    // what version 14 wrote: a running parent marked as having dependents, and its waiting child
    // with an exact counter
    const [{ id: parent }] = (await db.sql<{ id: string }>(
      `INSERT INTO ${s}.jobs (task, status, attempts, claims, worker_id, lease_until, run_started_at, has_dependents)
       VALUES ('v14.parent', 'running', 1, 1, 'old-worker', now() + interval '1 minute', now(), true)
       RETURNING id::text AS id`,
    )) as [{ id: string }];
    const [{ id: child }] = (await db.sql<{ id: string }>(
      `INSERT INTO ${s}.jobs (task, status, deps_left, deps_total) VALUES ('v14.child', 'waiting', 1, 1)
       RETURNING id::text AS id`,
    )) as [{ id: string }];
    await db.sql(`INSERT INTO ${s}.job_dependencies (job_id, depends_on) VALUES ($1, $2)`, [child, parent]);
    const queue = db.queue({ schema });
    expect((await queue.migrate()).applied).toEqual(
      MIGRATIONS.filter((m) => m.version >= 15).map((m) => m.version),
    );
    expect((await queue.get(child))?.status).toBe('waiting');
    // a dependent written by this version while the parent runs
    const { id: later } = await queue.enqueue('v15.child', null, { dependsOn: [parent] });
    expect((await queue.get(later))?.status).toBe('waiting');
    const lease = { id: parent, workerId: 'old-worker', attempt: 1, token: '1' };
    expect(await queue.complete(lease, 'done after the migration')).toBe(true);
    expect((await queue.get(child))?.status).toBe('pending');
    expect((await queue.get(later))?.status).toBe('pending');
  });
  test("migration 16: the claims' picks are PL/pgSQL with a generic plan, and a version-15 schema with pending and grouped jobs claims the same jobs after it", async () => {
    const schema = 'from_v15';
    const s = await schemaAt(schema, 15);
    const language = () =>
      db.sql<{ proname: string; lanname: string; config: string[] | null }>(
        `SELECT p.proname, l.lanname, p.proconfig AS config FROM pg_proc AS p
         JOIN pg_language AS l ON l.oid = p.prolang JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname = $1 AND p.proname IN ('pick_pending', 'pick_mixed', 'pick_queue') ORDER BY p.proname`,
        [schema],
      );
    expect((await language()).map((f) => [f.proname, f.lanname])).toEqual([
      ['pick_mixed', 'sql'],
      ['pick_pending', 'sql'],
      ['pick_queue', 'sql'],
    ]);
    // written by version 15: an ungrouped pending job, a grouped one, one in a limited queue
    await db.sql(
      `INSERT INTO ${s}.jobs (task, queue, group_key, priority) VALUES
         ('v15.plain', 'default', NULL, 2), ('v15.grouped', 'default', 'g1', 1), ('v15.limited', 'narrow', NULL, 0)`,
    );
    await db.sql(`INSERT INTO ${s}.queues (name, concurrency) VALUES ('narrow', 1)`);
    const queue = db.queue({ schema });
    expect((await queue.migrate()).applied).toEqual(
      MIGRATIONS.filter((m) => m.version >= 16).map((m) => m.version),
    );
    const functions = await language();
    expect(functions.map((f) => [f.proname, f.lanname])).toEqual([
      ['pick_mixed', 'plpgsql'],
      ['pick_pending', 'plpgsql'],
      ['pick_queue', 'plpgsql'],
    ]);
    for (const f of functions) {
      expect(f.config).toEqual(
        expect.arrayContaining([
          'enable_sort=off',
          'enable_bitmapscan=off',
          'jit=off',
          'plan_cache_mode=force_generic_plan',
        ]),
      );
    }
    // the grouped job first (priority 1), then the plain one: pick_mixed; the limited queue's
    // job through pick_queue (the worker's claim pass)
    const claimed = await queue.claim('w16', { limit: 5, queues: ['default'] });
    expect(claimed.map((j) => j.task)).toEqual(['v15.grouped', 'v15.plain']);
    const errors: unknown[] = [];
    const pass = await claimWithLimits(engineOf(queue), {
      workerId: 'w16',
      limit: 5,
      idle: 5,
      leaseMs: 60_000,
      tasks: null,
      queues: null,
      onError: (error) => errors.push(error),
    });
    expect(errors).toEqual([]);
    expect(pass.jobs.map((j) => j.task)).toEqual(['v15.limited']);
    expect(await queue.claim('w16', { limit: 5 })).toEqual([]);
  });
  test("migration 24 on a version-23 schema: an event waiter beside its key's holder (data of a version before 23) joins the queue; the new index holds a waiting head", async () => {
    const schema = 'from_v23';
    const s = await schemaAt(schema, 23);
    const insert = async (key: string) =>
      (
        (await db.sql<{ id: string }>(
          `INSERT INTO ${s}.jobs (task, sequence) VALUES ('v23.job', $1) RETURNING id::text AS id`,
          [key],
        )) as [{ id: string }]
      )[0].id;
    // m1: a pending head, and a job waiting for an event beside it (a late commit advanced past it)
    const head = await insert('m1');
    const beside = await insert('m1');
    // m2: two jobs of one key waiting for an event, no other holder
    const first = await insert('m2');
    const second = await insert('m2');
    const plain = await insert('m3');
    await db.sql(`DELETE FROM ${s}.sequence_arrivals`);
    await db.sql(`UPDATE ${s}.jobs SET status = 'pending' WHERE id = $1`, [head]);
    await db.sql(
      `UPDATE ${s}.jobs SET wait_event = 'ev-' || sequence, wait_timeout = now() + interval '1 hour' WHERE id = ANY ($1::bigint[])`,
      [[beside, first, second]],
    );
    const queue = db.queue({ schema });
    expect((await queue.migrate()).applied).toEqual([24]);
    const rows = await db.sql<{
      id: string;
      status: string;
      wait_event: string | null;
      wait_timeout: Date | null;
    }>(`SELECT id::text AS id, status, wait_event, wait_timeout FROM ${s}.jobs ORDER BY id`);
    expect(rows.map((r) => [r.id, r.status, r.wait_event, r.wait_timeout === null])).toEqual([
      [head, 'pending', null, true],
      [beside, 'waiting', null, true], // queued behind the head
      [first, 'waiting', 'ev-m2', false], // the key's holder
      [second, 'waiting', null, true], // queued behind it
      [plain, 'waiting', null, true], // untouched
    ]);
    expect(await queue.sequences()).toEqual([
      { key: 'm1', headId: head, headStatus: 'pending', queued: 1 },
      { key: 'm2', headId: first, headStatus: 'waiting', queued: 1 },
      { key: 'm3', headId: plain, headStatus: 'waiting', queued: 0 },
    ]);
    // the new index counts the event waiter: no second holder of m2
    await expect(db.sql(`UPDATE ${s}.jobs SET status = 'pending' WHERE id = $1`, [second])).rejects.toThrow(
      /jobs_sequence_head_idx/,
    );
    expect(await queue.emitEvent('ev-m2', null)).toBe(true);
    expect((await queue.get(first))?.status).toBe('pending');
    expect((await queue.get(second))?.status).toBe('waiting');
  });
});
