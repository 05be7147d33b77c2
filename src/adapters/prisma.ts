/**
 * Prisma: the `tx` of an interactive transaction, `prisma.$transaction(async (tx) => …)`, as a
 * Skiplock client. (A batch transaction, `$transaction([…])`, has no client to join.)
 */
import type { Queryable } from '../types.js';
import { hasMethod, pgRows, requireTransaction } from './shared.js';

/** What Skiplock calls on a Prisma interactive transaction (structural: Prisma is never imported). */
export interface PrismaTransaction {
  // biome-ignore lint/suspicious/noExplicitAny: Prisma's own parameter and row types are not imported.
  $queryRawUnsafe(query: string, ...values: any[]): PromiseLike<any>;
}

/**
 * A Skiplock client on a Prisma interactive transaction: the job exists if and only if `tx`
 * commits. An int8 that Prisma returns as a BigInt (a count) becomes a string, as with pg.
 *
 * @example
 * await prisma.$transaction(async (tx) => {
 *   const order = await tx.order.create({ data });
 *   await queue.enqueue(sendReceipt, { orderId: order.id }, { client: fromPrisma(tx) });
 * });
 */
export function fromPrisma(tx: PrismaTransaction): Queryable {
  // The interactive transaction's client is the one without $connect/$disconnect.
  requireTransaction(
    hasMethod(tx, '$queryRawUnsafe') && !hasMethod(tx, '$disconnect'),
    'the tx of a Prisma interactive transaction, prisma.$transaction(async (tx) => …), not the PrismaClient',
  );
  return {
    async query(text, values = []) {
      try {
        return { rows: pgRows(await tx.$queryRawUnsafe(text, ...values)) };
      } catch (error) {
        throw postgresError(error);
      }
    },
  };
}

/** PostgreSQL's error as Prisma's pg driver adapter reports it, under `meta.driverAdapterError.cause`. */
interface PrismaDriverCause {
  kind?: string;
  code?: string;
  message?: string;
  detail?: string;
  hint?: string;
  constraint?: string;
}

/**
 * A failed raw query as pg reports it: Prisma's error code (`P2010`) looks like a SQLSTATE but
 * is not one, and PostgreSQL's own (`23505`, `25P01`…) is nested in its `meta`. The Prisma
 * error is kept as `cause`; one without a PostgreSQL error under it loses only its P-code.
 */
function postgresError(error: unknown): Error {
  const prismaError = error instanceof Error ? error : new Error(String(error));
  const meta = (error as { meta?: { driverAdapterError?: { cause?: PrismaDriverCause } } } | null)?.meta;
  const cause = meta?.driverAdapterError?.cause;
  const mapped = new Error(
    cause?.kind === 'postgres' ? (cause.message ?? prismaError.message) : prismaError.message,
    {
      cause: error,
    },
  );
  if (cause?.kind === 'postgres') {
    Object.assign(mapped, {
      code: cause.code,
      detail: cause.detail,
      hint: cause.hint,
      constraint: cause.constraint,
    });
  }
  return mapped;
}
