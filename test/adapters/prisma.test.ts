/**
 * `fromPrisma` (SPEC §9) through the adapter conformance suite (./conformance.ts), on Prisma 7
 * with its pg driver adapter (@prisma/adapter-pg), in interactive transactions. The client is
 * generated at the start of the file into node_modules/.cache (never committed; `prisma
 * generate` needs no engine download when told the schema engine is /bin/false).
 *
 * Deliberate breaks seen failing: the store's pg_notify columns left void (Prisma cannot read a
 * void column: every enqueue and completion failed with "Failed to deserialize column of type
 * 'void'"); BigInt left as it is (the row-shape test got 1n, not '1'); Prisma's error passed
 * through (its P2010 taken for a SQLSTATE; the SQLSTATE test failed).
 */
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { PrismaPg } from '@prisma/adapter-pg';
import { fromPrisma, type PrismaTransaction } from '../../src/adapters/index.js';
import { adapterSuite } from './conformance.js';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
const outDir = join(repoRoot, 'node_modules', '.cache', 'skiplock-prisma-test');

const SCHEMA = `
generator client {
  provider = "prisma-client"
  output   = "./client"
}
datasource db {
  provider = "postgresql"
}
`;

/** The generated client, typed by what this test uses of it. */
interface GeneratedClient {
  $transaction<T>(fn: (tx: PrismaTransaction) => Promise<T>): Promise<T>;
  $disconnect(): Promise<void>;
}

async function generateClient(): Promise<new (options: { adapter: unknown }) => GeneratedClient> {
  await mkdir(outDir, { recursive: true });
  await writeFile(join(outDir, 'schema.prisma'), SCHEMA);
  await promisify(execFile)(
    process.execPath,
    [
      join(repoRoot, 'node_modules', 'prisma', 'build', 'index.js'),
      'generate',
      '--schema',
      join(outDir, 'schema.prisma'),
    ],
    {
      cwd: outDir,
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', PRISMA_HIDE_UPDATE_MESSAGE: '1' },
    },
  );
  const generated = join(outDir, 'client', 'client.ts');
  return (
    (await import(generated)) as { PrismaClient: new (options: { adapter: unknown }) => GeneratedClient }
  ).PrismaClient;
}

adapterSuite('prisma', async (url) => {
  const PrismaClient = await generateClient();
  const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: 2 }) });
  return {
    transaction: (fn) => prisma.$transaction((tx) => fn(fromPrisma(tx))),
    onNonTransaction: () => fromPrisma(prisma as unknown as PrismaTransaction),
    close: () => prisma.$disconnect(),
  };
});
