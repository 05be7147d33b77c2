import { quoteIdent } from '../../src/db/identifier.js';

/**
 * The schema the suite runs under. CI runs the whole suite a second time with an awkward name
 * (`SKIPLOCK_TEST_SCHEMA='Acc "Schema" ü'`) to prove that the schema is always quoted.
 */
export const TEST_SCHEMA = process.env.SKIPLOCK_TEST_SCHEMA || 'skiplock';

/** `<quoted schema>.jobs`, for statements written by tests. */
export function jobsTable(schema: string = TEST_SCHEMA): string {
  return `${quoteIdent(schema)}.jobs`;
}
