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
import { PrismaPg } from '@prisma/adapter-pg';
import { fromPrisma, type PrismaTransaction } from '../../src/adapters/index.js';
import { adapterSuite } from './conformance.js';
import { generateClient } from './prisma-client.js';

adapterSuite('prisma', async (url) => {
  const PrismaClient = await generateClient('skiplock-prisma-test');
  const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: 2 }) });
  return {
    transaction: (fn) => prisma.$transaction((tx) => fn(fromPrisma(tx))),
    onNonTransaction: () => fromPrisma(prisma as unknown as PrismaTransaction),
    close: () => prisma.$disconnect(),
  };
});
