import { createHash } from 'node:crypto';
import { ValidationError } from '../errors.js';

/** PostgreSQL truncates identifiers to 63 bytes (NAMEDATALEN - 1). */
const MAX_IDENTIFIER_BYTES = 63;

/** Validates a schema name: any non-empty name PostgreSQL can hold without truncation. */
export function requireSchemaName(schema: unknown): string {
  if (typeof schema !== 'string' || schema.length === 0) {
    throw new ValidationError('schema', 'must be a non-empty string');
  }
  if (schema.includes('\u0000')) throw new ValidationError('schema', 'must not contain U+0000');
  if (Buffer.byteLength(schema) > MAX_IDENTIFIER_BYTES) {
    throw new ValidationError('schema', `must be at most ${MAX_IDENTIFIER_BYTES} bytes long`);
  }
  return schema;
}

/** Quotes an identifier for SQL: `acc schema` → `"acc schema"`, `a"b` → `"a""b"`. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * The NOTIFY channel of a schema (SPEC §1.9): one per schema so that tenants in one database
 * do not wake each other. Channels are identifiers, so long schema names are hashed to fit.
 */
export function notifyChannel(schema: string): string {
  const channel = `skiplock:${schema}`;
  if (Buffer.byteLength(channel) <= MAX_IDENTIFIER_BYTES) return channel;
  return `skiplock:${createHash('sha256').update(schema).digest('hex').slice(0, 40)}`;
}

/**
 * §9 the schema's channel for completion hints of waited-for jobs (`queue.waitFor`); the trigger
 * of migration 12 derives the same name in SQL.
 */
export function finishedChannel(schema: string): string {
  const channel = `skiplock-done:${schema}`;
  if (Buffer.byteLength(channel) <= MAX_IDENTIFIER_BYTES) return channel;
  return `skiplock-done:${createHash('sha256').update(schema).digest('hex').slice(0, 40)}`;
}

/**
 * Quotes a string literal the way PostgreSQL's quote_literal does (E'' form when it holds a
 * backslash), for the rare places SQL needs a name as text, e.g. `nextval('schema.seq')`.
 */
export function quoteLiteral(text: string): string {
  const escaped = text.replaceAll("'", "''");
  return text.includes('\\') ? `E'${escaped.replaceAll('\\', '\\\\')}'` : `'${escaped}'`;
}
