/**
 * core/key-order.ts: code point order, the order of PostgreSQL's COLLATE "C" on UTF-8 (which
 * compares bytes — and UTF-8's byte order is code point order). JavaScript's own `<` compares
 * UTF-16 code units, which puts U+10000 and above before U+E000–U+FFFF.
 *
 * Broken on purpose: compareCodePoints as `a < b ? -1 : a > b ? 1 : 0`: both tests failed
 * ('\u{1F600}' sorted before '\uFFFF').
 */
import { describe, expect, test } from 'vitest';
import { compareCodePoints, compareKeys, smallestByCodePoint } from '../../src/core/key-order.js';

const utf8 = (a: string, b: string) => Math.sign(Buffer.compare(Buffer.from(a), Buffer.from(b)));

describe('code point order', () => {
  test('the cases where UTF-16 units and code points disagree', () => {
    expect(compareCodePoints('\uFFFF', '\u{1F600}')).toBeLessThan(0);
    expect(compareCodePoints('\uE000', '\u{10000}')).toBeLessThan(0);
    expect(compareCodePoints('\uD7FF', '\u{10000}')).toBeLessThan(0);
    expect(compareCodePoints('a\u{10FFFF}', 'a\uFFFF')).toBeGreaterThan(0);
    expect(compareCodePoints('\u{1F600}', '\u{1F600}')).toBe(0);
    expect(compareCodePoints('ab', 'a')).toBeGreaterThan(0);
    expect(compareKeys(null, '')).toBeLessThan(0);
    expect(compareKeys('a', null)).toBeGreaterThan(0);
    expect(smallestByCodePoint(['\u{1F600}', 'zz', '\uFFFF'])).toBe('zz');
    expect(smallestByCodePoint(['\u{1F600}', '\uFFFF'])).toBe('\uFFFF');
    expect(smallestByCodePoint([])).toBeUndefined();
  });

  test('agrees with UTF-8 byte order on strings of every plane', () => {
    let x = 42;
    const random = () => {
      x = (x * 1_103_515_245 + 12_345) % 2 ** 31;
      return x / 2 ** 31;
    };
    const points = [
      0x20, 0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x10ffff,
    ];
    const word = () =>
      Array.from({ length: Math.floor(random() * 4) }, () =>
        String.fromCodePoint(points[Math.floor(random() * points.length)] as number),
      ).join('');
    for (let i = 0; i < 5_000; i++) {
      const a = word();
      const b = word();
      expect(Math.sign(compareCodePoints(a, b)), JSON.stringify([a, b])).toBe(utf8(a, b));
    }
  });
});
