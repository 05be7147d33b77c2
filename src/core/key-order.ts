/**
 * The one order of keys (dedupe keys, pending keys, group keys, option names) shared by the
 * library and the SQL functions: Unicode code point order. In SQL that is `COLLATE "C"` on
 * UTF-8 text (byte order of UTF-8 is code point order); JavaScript's `<` compares UTF-16 code
 * units instead, which puts a character beyond U+FFFF (a surrogate pair, 0xD800–0xDBFF first)
 * before U+E000–U+FFFF. Two callers that lock keys in different orders can deadlock (§3), and
 * two producers that name "the smallest unknown key" must name the same one (SPEC §13).
 */

/** Compares two strings by code point: negative, 0 or positive. */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    // Both at or above the surrogates: a surrogate (a character beyond U+FFFF) sorts above
    // U+E000–U+FFFF. Below 0xD800 code units and code points agree.
    if (x >= 0xd800 && y >= 0xd800) {
      x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
      y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
    }
    return x - y;
  }
  return a.length - b.length;
}

/** Keys in one total order: null (no key) first, then by code point. */
export function compareKeys(a: string | null, b: string | null): number {
  if (a === b) return 0;
  if (a === null) return -1;
  if (b === null) return 1;
  return compareCodePoints(a, b);
}

/** The smallest of some strings by code point (undefined for none). */
export function smallestByCodePoint(items: Iterable<string>): string | undefined {
  let least: string | undefined;
  for (const item of items) if (least === undefined || compareCodePoints(item, least) < 0) least = item;
  return least;
}
