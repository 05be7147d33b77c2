/**
 * Every statement of one schema, by name: for tests that prepare or EXPLAIN them all. The
 * statements live with their parameter binding, one module per operation family (job-store.ts).
 */
import { adminSql } from './admin.js';
import { claimSql } from './claim.js';
import { enqueueSql } from './enqueue.js';
import { leaseSql } from './lease.js';
import { neighbourSql } from './neighbours.js';
import { observeSql } from './observe.js';
import { outcomeSql } from './outcome.js';
import { queueSql } from './queues.js';
import { scheduleSql } from './schedule.js';
import { stepSql } from './steps.js';

export { COMPLETED_DELETED, JOB_COLUMNS } from './fragments.js';

/** The statements of the schema whose quoted identifier is `s`. */
export function buildStatements(s: string) {
  return {
    ...enqueueSql(s),
    ...claimSql(s),
    ...outcomeSql(s),
    ...leaseSql(s),
    ...adminSql(s),
    ...observeSql(s),
    ...scheduleSql(s),
    ...queueSql(s),
    ...neighbourSql(s),
    ...stepSql(s),
  };
}
