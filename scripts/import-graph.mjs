// Reads every src/**/*.ts file and lists the imports between our own modules: `import`,
// `import type`, `export … from`, side-effect `import '…'`, and `import('…')` (a dynamic import or
// a type expression). Plain Node, no parser library: TypeScript 7's native compiler has no JS API.
// A small lexer first blanks comments and template literals and lifts every string literal out of
// the text, so an import written inside a comment, a TSDoc example or a string is never counted.

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';

/** Words after which a `/` starts a regular expression rather than a division. */
const REGEX_AFTER_WORD = new Set([
  'return',
  'typeof',
  'instanceof',
  'in',
  'of',
  'new',
  'delete',
  'void',
  'throw',
  'case',
  'do',
  'else',
  'yield',
  'await',
]);

/** `last` after a string, template or regular expression: a value ended, so a `/` divides. */
const VALUE = ')';

/**
 * Returns `{ code, strings }`: `code` is the source with comments and template literals blanked
 * (newlines kept, so offsets still map to lines) and each string literal replaced by `'#n'`, where
 * `strings[n]` is the literal's text.
 */
export function skeleton(source) {
  const strings = [];
  let code = '';
  let i = 0;
  const n = source.length;
  const blank = (text) => text.replace(/[^\n]/g, ' ');
  // The last significant character or word, to tell a regular expression from a division.
  let last = '';
  let inWord = false;
  while (i < n) {
    const c = source[i];
    const next = source[i + 1];
    inWord = inWord && /[A-Za-z0-9_$]/.test(c);
    if (c === '/' && next === '/') {
      const end = source.indexOf('\n', i);
      const stop = end === -1 ? n : end;
      code += blank(source.slice(i, stop));
      i = stop;
    } else if (c === '/' && next === '*') {
      const end = source.indexOf('*/', i + 2);
      const stop = end === -1 ? n : end + 2;
      code += blank(source.slice(i, stop));
      i = stop;
    } else if (c === "'" || c === '"') {
      let j = i + 1;
      while (j < n && source[j] !== c && source[j] !== '\n') j += source[j] === '\\' ? 2 : 1;
      strings.push(source.slice(i + 1, j));
      code += `'#${strings.length - 1}'`;
      i = j + 1;
      last = VALUE;
    } else if (c === '`') {
      const stop = skipTemplate(source, i);
      code += blank(source.slice(i, stop));
      i = stop;
      last = VALUE;
    } else if (c === '/' && startsRegex(last)) {
      const stop = skipRegex(source, i);
      code += blank(source.slice(i, stop));
      i = stop;
      last = VALUE;
    } else {
      code += c;
      if (/[A-Za-z0-9_$]/.test(c)) last = inWord ? last + c : c;
      else if (!/\s/.test(c)) last = c;
      inWord = /[A-Za-z0-9_$]/.test(c);
      i += 1;
    }
  }
  return { code, strings };
}

function startsRegex(last) {
  if (last === '') return true;
  if (/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(last)) return REGEX_AFTER_WORD.has(last);
  if (/^[0-9]/.test(last)) return false;
  return !(last === ')' || last === ']' || last === '}');
}

function skipRegex(source, start) {
  let j = start + 1;
  let inClass = false;
  while (j < source.length && source[j] !== '\n') {
    const c = source[j];
    if (c === '\\') j += 1;
    else if (c === '[') inClass = true;
    else if (c === ']') inClass = false;
    else if (c === '/' && !inClass) break;
    j += 1;
  }
  j += 1;
  while (j < source.length && /[a-z]/.test(source[j])) j += 1;
  return j;
}

/** Index just past the template literal that opens at `start`, `${…}` nesting included. */
function skipTemplate(source, start) {
  let j = start + 1;
  while (j < source.length) {
    const c = source[j];
    if (c === '\\') j += 2;
    else if (c === '`') return j + 1;
    else if (c === '$' && source[j + 1] === '{') j = skipBraces(source, j + 2);
    else j += 1;
  }
  return j;
}

function skipBraces(source, start) {
  let depth = 1;
  let j = start;
  while (j < source.length && depth > 0) {
    const c = source[j];
    if (c === "'" || c === '"') {
      j += 1;
      while (j < source.length && source[j] !== c) j += source[j] === '\\' ? 2 : 1;
    } else if (c === '`') {
      j = skipTemplate(source, j) - 1;
    } else if (c === '{') depth += 1;
    else if (c === '}') depth -= 1;
    j += 1;
  }
  return j;
}

// `import … from '#n'`, `import type …`, `export … from`, `export type * from` — at statement start.
// The clause is what an import or re-export may hold between the keyword and `from`: a default
// name, `{ … }`, `* as name`, `*`, or a default name with one of the two after a comma.
const STATIC =
  /(?:^|[;\n}])\s*(import|export)\s+(type\s+)?((?:[\w$]+\s*,\s*)?(?:\{[^}]*\}|\*(?:\s+as\s+[\w$]+)?)|[\w$]+)\s*from\s*'#(\d+)'/g;
// `import '#n'` (side effect only).
const BARE = /(?:^|[;\n])\s*import\s*'#(\d+)'/g;
// `import('#n')`: a dynamic import, or a type expression such as `typeof import('…')`.
const CALL = /\bimport\s*\(\s*'#(\d+)'\s*\)/g;

/**
 * The imports of one file: `{ specifier, line, typeOnly, kind }`, `kind` one of `static`,
 * `dynamic`. A static import is type-only when written `import type`/`export type`, or when every
 * name in its braces is marked `type`.
 */
export function importsOf(source) {
  const { code, strings } = skeleton(source);
  const lineAt = (offset) => code.slice(0, offset).split('\n').length;
  const found = [];
  for (const m of code.matchAll(STATIC)) {
    const clause = m[3];
    const names = (clause.match(/^\{([\s\S]*)\}$/)?.[1] ?? '').split(',').filter((s) => s.trim() !== '');
    const allTypes = names.length > 0 && names.every((s) => /^\s*type\s/.test(s));
    const at = m.index + m[0].indexOf(m[1]);
    found.push({
      specifier: strings[Number(m[4])],
      line: lineAt(at),
      typeOnly: m[2] !== undefined || allTypes,
      kind: 'static',
    });
  }
  for (const m of code.matchAll(BARE)) {
    const at = m.index + m[0].indexOf('import');
    found.push({ specifier: strings[Number(m[1])], line: lineAt(at), typeOnly: false, kind: 'static' });
  }
  for (const m of code.matchAll(CALL)) {
    const typeOnly =
      /typeof\s*$/.test(code.slice(Math.max(0, m.index - 20), m.index)) || isTypePosition(code, m.index);
    found.push({ specifier: strings[Number(m[1])], line: lineAt(m.index), typeOnly, kind: 'dynamic' });
  }
  return found.sort((a, b) => a.line - b.line);
}

/** `x: import('…').T`: the `import(…)` is followed by `.Name` (not `.then`: a dynamic import's promise). */
function isTypePosition(code, index) {
  const close = code.indexOf(')', index);
  const member = code.slice(close, close + 40).match(/^\)\s*\.\s*([A-Za-z_$][\w$]*)/)?.[1];
  return member !== undefined && !['then', 'catch', 'finally'].includes(member);
}

/** Every `.ts` file under `dir`, as paths relative to `root` with `/` separators. */
export function sourceFiles(root, dir = 'src') {
  const out = [];
  const walk = (d) => {
    for (const name of readdirSync(join(root, d)).sort()) {
      const path = join(d, name);
      if (statSync(join(root, path)).isDirectory()) walk(path);
      else if (name.endsWith('.ts')) out.push(path.split(sep).join('/'));
    }
  };
  walk(dir);
  return out;
}

/** Our module a relative specifier names (`./x.js` → `x.ts`), or `undefined` for a package. */
export function resolveSpecifier(root, from, specifier) {
  if (!specifier.startsWith('.')) return undefined;
  const base = resolve(root, dirname(from), specifier);
  const candidates = [base.replace(/\.js$/, '.ts'), `${base}.ts`, join(base, 'index.ts'), base];
  const hit = candidates.find((c) => existsSync(c) && statSync(c).isFile()) ?? candidates[0];
  return relative(root, hit).split(sep).join('/');
}

/** The import graph of src: `{ file, target, line, typeOnly, kind, specifier }[]`, ours only. */
export function importGraph(root) {
  const edges = [];
  for (const file of sourceFiles(root)) {
    for (const imp of importsOf(readFileSync(join(root, file), 'utf8'))) {
      const target = resolveSpecifier(root, file, imp.specifier);
      if (target !== undefined) edges.push({ file, target, ...imp });
    }
  }
  return edges;
}
