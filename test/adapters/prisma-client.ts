/**
 * Prisma's generated client for the adapter tests: `prisma generate` at test start (the engines
 * download is unreachable here and not needed by the generator: PRISMA_SCHEMA_ENGINE_BINARY
 * points at a stub), into node_modules/.cache (never committed).
 */
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { PrismaTransaction } from '../../src/adapters/index.js';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

const SCHEMA = `
generator client {
  provider = "prisma-client"
  output   = "./client"
}
datasource db {
  provider = "postgresql"
}
`;

/** The generated client, typed by what the tests use of it. */
export interface GeneratedClient {
  $transaction<T>(fn: (tx: PrismaTransaction) => Promise<T>): Promise<T>;
  $disconnect(): Promise<void>;
}

/** Generates the client into node_modules/.cache/<dir> (one dir per test file) and loads it. */
export async function generateClient(
  dir: string,
): Promise<new (options: { adapter: unknown }) => GeneratedClient> {
  const outDir = join(repoRoot, 'node_modules', '.cache', dir);
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
