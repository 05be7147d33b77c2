/**
 * SPEC §13/§7 — the SQL producer behind a real PgBouncer 1.18 in transaction mode
 * (test/support/pgbouncer.ts), with fewer server connections than clients, so transactions of
 * different clients take turns on the same server connections: `<schema>.enqueue` and
 * `enqueue_many` in transactions that commit and that roll back, autocommitted, with dedupe hits
 * across clients; every committed job is there once, no rolled-back one is, and every answer is
 * the job's. Then the Python client through it, as its README says to connect
 * (`prepare_threshold=None`).
 *
 * Deliberate break seen failing: migration 17's scope-'pending' lock taken as a session lock
 * (pg_advisory_lock instead of pg_advisory_xact_lock): the first test hung until its timeout —
 * the lock stayed with a server connection after its transaction ended, and the next client's
 * transaction on another server connection waited for it forever.
 */
import { spawn } from 'node:child_process';
import pg from 'pg';
import { afterAll, beforeAll, expect, inject, test } from 'vitest';
import { quoteIdent } from '../../src/db/identifier.js';
import { useTestDatabase } from '../support/database.js';
import { describeWithPgBouncer, type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import { describeWithPython, PYTHON, pythonEnv } from '../support/python.js';
import { TEST_SCHEMA } from '../support/schema.js';

const db = useTestDatabase();
const s = quoteIdent(TEST_SCHEMA);

describeWithPgBouncer('the SQL producer behind PgBouncer in transaction mode', () => {
  let bouncer: PgBouncer;
  let url: string;

  beforeAll(async () => {
    bouncer = await startPgBouncer(inject('adminUrl'), { defaultPoolSize: 2 });
    url = bouncer.url(db.url);
  });
  afterAll(async () => {
    await bouncer?.stop();
  });

  test('transactions of six clients on two server connections: committed jobs once, rolled-back none, answers right', async () => {
    const clients = Array.from({ length: 6 }, () => new pg.Client({ connectionString: url }));
    for (const client of clients) {
      client.on('error', () => undefined);
      await client.connect();
    }
    try {
      const committed: string[] = [];
      const sharedCreated: string[] = [];
      const rolledBack: string[] = [];
      await Promise.all(
        clients.map(async (client, c) => {
          for (let round = 0; round < 10; round++) {
            await client.query('BEGIN');
            const one = await client.query(
              `SELECT id::text, created FROM ${s}.enqueue($1, $2::jsonb, $3::jsonb)`,
              [
                'bouncer.sql',
                JSON.stringify({ c, round }),
                JSON.stringify({ dedupeKey: `bouncer-${c}-${round}`, priority: round }),
              ],
            );
            const many = await client.query(`SELECT id::text, created FROM ${s}.enqueue_many($1::jsonb)`, [
              JSON.stringify([{ task: 'bouncer.many', payload: { c, round } }]),
            ]);
            // one key of scope 'pending' shared by every client: its lock is a transaction's
            const shared = await client.query(
              `SELECT id::text, created FROM ${s}.enqueue('bouncer.pending', '{}', $1::jsonb)`,
              [JSON.stringify({ dedupeKey: 'bouncer-pending', dedupe: { scope: 'pending' } })],
            );
            if (shared.rows[0].created) sharedCreated.push(shared.rows[0].id);
            const ids = [one.rows[0].id as string, many.rows[0].id as string];
            if (round % 3 === 2) {
              await client.query('ROLLBACK');
              rolledBack.push(...ids);
            } else {
              await client.query('COMMIT');
              committed.push(...ids);
              // autocommitted, in another transaction: a hit on the job just committed
              const hit = await client.query(
                `SELECT id::text, created FROM ${s}.enqueue('bouncer.sql', '{}', $1::jsonb)`,
                [JSON.stringify({ dedupeKey: `bouncer-${c}-${round}` })],
              );
              expect(hit.rows[0]).toEqual({ id: ids[0], created: false });
            }
          }
        }),
      );
      const rows = await db.sql<{ id: string }>(
        `SELECT id::text FROM ${s}.jobs WHERE task IN ('bouncer.sql', 'bouncer.many')`,
      );
      expect(rows.map((r) => r.id).sort()).toEqual([...committed].sort());
      expect(rolledBack.length).toBe(6 * 3 * 2);
      const queued = await db.sql<{ id: string }>(
        `SELECT id::text FROM ${s}.jobs WHERE pending_key = 'bouncer-pending'`,
      );
      expect(queued).toHaveLength(1); // one queued job for the key, whoever's transactions rolled back
      expect(sharedCreated).toContain(queued[0]?.id);
    } finally {
      await Promise.all(clients.map((client) => client.end()));
    }
  });

  describeWithPython('the Python client through PgBouncer', () => {
    test('with prepare_threshold=None: 30 transactions, each job once', async () => {
      const script = `
import psycopg, skiplock, sys
conn = psycopg.connect(sys.argv[1], prepare_threshold=None)
for i in range(30):
    job = skiplock.enqueue(conn, "bouncer.py", {"i": i}, dedupe_key=f"bouncer-py-{i}", schema=sys.argv[2])
    again = skiplock.enqueue(conn, "bouncer.py", {"i": i}, dedupe_key=f"bouncer-py-{i}", schema=sys.argv[2])
    assert again == (job.id, False), (job, again)
    conn.commit()
many = skiplock.enqueue_many(conn, [("bouncer.py", {"i": 100 + i}) for i in range(5)], schema=sys.argv[2])
conn.commit()
print(len(many))
`;
      const { code, output } = await new Promise<{ code: number | null; output: string }>(
        (resolve, reject) => {
          const child = spawn(PYTHON, ['-c', script, url, TEST_SCHEMA], { env: pythonEnv() });
          let out = '';
          child.stdout.on('data', (chunk: Buffer) => {
            out += chunk.toString();
          });
          child.stderr.on('data', (chunk: Buffer) => {
            out += chunk.toString();
          });
          child.on('error', reject);
          child.on('close', (exit) => resolve({ code: exit, output: out }));
        },
      );
      expect(code, output).toBe(0);
      expect(output.trim()).toBe('5');
      const [row] = await db.sql<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${s}.jobs WHERE task = 'bouncer.py'`,
      );
      expect(row?.n).toBe(35);
    });
  });
});
