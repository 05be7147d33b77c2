/**
 * Skiplock's `$1…$n` statements in Knex's `?` dialect: each `$n` becomes a `?` and its value is
 * bound at that position (a `$n` used twice is bound twice, out-of-order ones in the order they
 * appear), and every `?` already in the text is escaped (`\?`) so Knex leaves it alone. Only
 * placeholders outside string literals, quoted identifiers, dollar quotes and comments are
 * rewritten — a schema called `"a$1"` stays as it is.
 */
import { ValidationError } from '../errors.js';

/** A statement in Knex's dialect and its bindings, one per `?`. */
export interface PositionalStatement {
  sql: string;
  bindings: unknown[];
}

/** Where the literal, identifier or comment opening at `text[i]` ends (exclusive), or -1 if none opens there. */
function skipQuoted(text: string, i: number): number {
  const c = text[i];
  const next = text[i + 1];
  if (c === "'" || c === '"') {
    // '' and "" are the quote itself; an E'…' literal's \' is handled by its own skip below.
    const escapes = c === "'" && /[eE]/.test(text[i - 1] ?? '') && !/\w/.test(text[i - 2] ?? '');
    let j = i + 1;
    for (; j < text.length; j++) {
      if (escapes && text[j] === '\\') j++;
      else if (text[j] === c) {
        if (text[j + 1] !== c) return j + 1;
        j++;
      }
    }
    return text.length;
  }
  if (c === '-' && next === '-') {
    const end = text.indexOf('\n', i);
    return end === -1 ? text.length : end + 1;
  }
  if (c === '/' && next === '*') {
    let depth = 0;
    for (let j = i; j < text.length - 1; j++) {
      if (text[j] === '/' && text[j + 1] === '*') {
        depth++;
        j++;
      } else if (text[j] === '*' && text[j + 1] === '/') {
        j++;
        if (--depth === 0) return j + 1;
      }
    }
    return text.length;
  }
  if (c === '$') {
    const tag = /^\$(?:[A-Za-z_\u0080-\uffff][\w\u0080-\uffff]*)?\$/.exec(text.slice(i));
    if (tag === null || /[\w$]/.test(text[i - 1] ?? '')) return -1;
    const end = text.indexOf(tag[0], i + tag[0].length);
    return end === -1 ? text.length : end + tag[0].length;
  }
  return -1;
}

/** Rewrites `text` for Knex's `raw(sql, bindings)`. */
export function toQuestionMarks(text: string, values: readonly unknown[]): PositionalStatement {
  const bindings: unknown[] = [];
  let sql = '';
  let i = 0;
  while (i < text.length) {
    const end = skipQuoted(text, i);
    const placeholder = end === -1 ? /^\$(\d+)/.exec(text.slice(i, i + 12)) : null;
    if (end !== -1) {
      sql += escapeQuestionMarks(text.slice(i, end));
      i = end;
    } else if (placeholder !== null && !/[\w$]/.test(text[i - 1] ?? '')) {
      const n = Number(placeholder[1]);
      if (n < 1 || n > values.length) {
        throw new ValidationError('values', `the statement uses $${n} but has ${values.length} values`);
      }
      bindings.push(values[n - 1]);
      sql += '?';
      i += placeholder[0].length;
    } else {
      sql += escapeQuestionMarks(text[i] as string);
      i++;
    }
  }
  return { sql, bindings };
}

/**
 * `?` → `\?`. Knex drops every backslash before a `?` and reads an even number of them as no
 * escape at all, so a backslash followed by a question mark cannot be sent through Knex.
 */
function escapeQuestionMarks(chunk: string): string {
  if (chunk.includes('\\?')) {
    throw new ValidationError('client', 'Knex cannot send a statement with a backslash before a "?"');
  }
  return chunk.replaceAll('?', '\\?');
}
