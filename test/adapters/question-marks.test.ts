/**
 * Knex's `?` dialect for Skiplock's `$n` statements (src/adapters/question-marks.ts): a `$n` that
 * repeats or comes out of order is bound at each place it appears; `?` already in the text is
 * escaped for Knex; nothing inside a literal, a quoted identifier, a dollar quote or a comment
 * is taken for a placeholder. Run against the statements themselves by test/adapters/knex.test.ts.
 *
 * Deliberate breaks seen failing: bindings taken as the values in their own order (the repeated
 * and out-of-order cases failed); literals not skipped (the quoted "$1" was rewritten).
 */
import { describe, expect, test } from 'vitest';
import { toQuestionMarks } from '../../src/adapters/question-marks.js';
import { ValidationError } from '../../src/errors.js';

describe('toQuestionMarks', () => {
  test('binds each placeholder where it appears, repeated and out of order', () => {
    expect(toQuestionMarks('SELECT $2, $1, $2::int, $10', [1, 'b', 3, 4, 5, 6, 7, 8, 9, 'ten'])).toEqual({
      sql: 'SELECT ?, ?, ?::int, ?',
      bindings: ['b', 1, 'b', 'ten'],
    });
  });

  test('escapes question marks and leaves quoted text, dollar quotes and comments alone', () => {
    const text = `SELECT '$1 ?' AS "a$1?", $$ $1 $$, $q$ $2 $q$, E'\\'$1', x ?| y -- $1 ?\n, /* $1 /* $2 */ */ $1`;
    expect(toQuestionMarks(text, ['v'])).toEqual({
      sql: `SELECT '$1 \\?' AS "a$1\\?", $$ $1 $$, $q$ $2 $q$, E'\\'$1', x \\?| y -- $1 \\?\n, /* $1 /* $2 */ */ ?`,
      bindings: ['v'],
    });
  });

  test('a placeholder without a value, or a backslash before a question mark, is refused', () => {
    expect(() => toQuestionMarks('SELECT $2', [1])).toThrow(ValidationError);
    expect(() => toQuestionMarks("SELECT '\\?'", [])).toThrow(ValidationError);
  });
});
