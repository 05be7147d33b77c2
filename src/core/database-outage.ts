/**
 * Which errors mean "the database is away" (pure logic over the error classes): the engine's
 * retries use it, and so does the admin server's read route, to tell a read replica that is
 * down from one that answered with an error (issue 26).
 */
import { DatabaseError, SkiplockError } from '../errors.js';

/** How every error of a read on the replica begins, so that nobody hunts for it on the primary. */
export const READ_REPLICA = 'Read replica (readConnectionString)';

/**
 * Errors that mean "the database is away", worth retrying: a driver error without SQLSTATE
 * (connection refused or reset), or SQLSTATE classes 08 (connection), 57P (shutdown) and 53
 * (insufficient resources).
 */
export function isConnectionError(error: unknown): boolean {
  if (error instanceof DatabaseError)
    return error.sqlState === undefined || /^(08|57P|53)/.test(error.sqlState);
  return !(error instanceof SkiplockError);
}

/**
 * True for an error that says the read replica is away — refused, timed out, shut down, out of
 * connections — rather than an answer from it (a recovery conflict, a missing table) or an error
 * of the primary (`ops()` reads the primary's WAL position first).
 */
export function isReplicaOutage(error: unknown): boolean {
  return error instanceof DatabaseError && error.message.startsWith(READ_REPLICA) && isConnectionError(error);
}
