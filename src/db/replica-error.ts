import { isConnectionError, READ_REPLICA } from '../core/database-outage.js';
import { DatabaseError, NotMigratedError } from '../errors.js';

export { READ_REPLICA };

/**
 * The same error, saying that it happened on the read replica: a {@link DatabaseError} keeps its
 * SQLSTATE, the server's fields and the driver's error as `cause`; a {@link NotMigratedError}
 * says the replica may not have replayed the migration yet. Other errors pass through.
 */
export function fromReadReplica(error: unknown): unknown {
  if (error instanceof NotMigratedError) {
    const renamed = new NotMigratedError(error.schema, { cause: error.cause });
    renamed.message =
      `${READ_REPLICA}: Skiplock's tables in schema "${error.schema}" do not exist there or are out of date. ` +
      'Run `queue.migrate()` or `skiplock migrate` on the primary (connectionString) and wait until the replica has replayed it; ' +
      'if it persists, readConnectionString is not a replica of that database';
    return renamed;
  }
  if (!(error instanceof DatabaseError)) return error;
  return new DatabaseError(
    `${READ_REPLICA}: ${error.message}${advice(error)}`,
    { sqlState: error.sqlState, detail: error.detail, hint: error.hint, constraint: error.constraint },
    { cause: error.cause },
  );
}

function advice(error: DatabaseError): string {
  if (error.sqlState === '40001') {
    return '. The replica cancelled the read to replay changes from the primary: retry, or raise max_standby_streaming_delay on the replica';
  }
  if (isConnectionError(error)) {
    return '. get, list, counts and ops read this server (writes and claims do not): check that it is up and reachable, or remove readConnectionString to read the primary';
  }
  return '';
}
