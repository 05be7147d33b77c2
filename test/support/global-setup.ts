/**
 * Once per test run: pick the server (DATABASE_URL, or an embedded PostgreSQL 18 in a temp
 * folder), then build a template database with Skiplock migrated, which each test file clones.
 */
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../../src/embedded/embedded-postgres.js';
import { Queue } from '../../src/queue.js';
import { TEST_SCHEMA } from './schema.js';
import { databaseUrl } from './urls.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** URL of a database on the test server, for administrative statements. */
    adminUrl: string;
    /** Name of the migrated template database. */
    templateDatabase: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let server: EmbeddedPostgres | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    server = await startEmbeddedPostgres({ fast: true });
    adminUrl = server.connectionString;
  }
  const templateDatabase = `skiplock_template_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  admin.on('error', () => undefined);
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${templateDatabase} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${templateDatabase}`);
  } finally {
    await admin.end();
  }
  const queue = new Queue({ connectionString: databaseUrl(adminUrl, templateDatabase), schema: TEST_SCHEMA });
  await queue.migrate();
  await queue.close();

  const { version } = await serverVersion(adminUrl);
  process.stdout.write(
    `skiplock tests: PostgreSQL ${version} (${server ? 'embedded' : 'DATABASE_URL'}), Node ${process.version}, schema ${JSON.stringify(TEST_SCHEMA)}\n`,
  );
  project.provide('adminUrl', adminUrl);
  project.provide('templateDatabase', templateDatabase);

  return async () => {
    const client = new pg.Client({ connectionString: adminUrl });
    client.on('error', () => undefined);
    await client.connect();
    await client.query(`DROP DATABASE IF EXISTS ${templateDatabase} WITH (FORCE)`);
    await client.end();
    await server?.stop();
  };
}

async function serverVersion(url: string): Promise<{ version: string }> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  const { rows } = await client.query<{ server_version: string }>('SHOW server_version');
  await client.end();
  return { version: rows[0]?.server_version ?? '?' };
}
