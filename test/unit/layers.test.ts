/**
 * The layer check of `npm run check` (scripts/check-layers.mjs, issue 22), run as `npm run check`
 * runs it, on small source trees written to a temp folder: an import that points up the layers —
 * written any way TypeScript allows, type-only included — fails it with the file, the line, the
 * import and the rule; a cycle fails it, also one of type-only imports inside one folder; an
 * import inside a comment, a string or a template literal is not an import.
 *
 * Deliberate breaks seen failing (each undone):
 *  - import-graph.mjs's STATIC pattern without its `(type\s+)?` group: no `import type` was
 *    type-only any more (five tests failed).
 *  - CALL (`import('…')`) left out of importsOf: "an import() type expression" passed.
 *  - cycleProblems() left out of the problems: "a cycle of type-only imports" passed.
 *  - template literals lexed like code: the `import` on a line of a template counted (and, with
 *    the first clause pattern, `[^;'#]*?`, the `export const t = \`` before it swallowed it —
 *    an import after a statement without a semicolon went unseen the same way).
 * On the repository itself, with src/types.ts importing `TaskConfig` from src/task/task.ts again,
 * the check named that import and the 7-file cycle it closed (see the commit that added it).
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, test } from 'vitest';

const script = fileURLToPath(new URL('../../scripts/check-layers.mjs', import.meta.url));
const roots: string[] = [];

afterAll(async () => {
  await Promise.all(roots.map((root) => rm(root, { recursive: true, force: true })));
});

/** Writes `files` (path under src/ → text) to a fresh folder and runs the check on it. */
async function check(files: Record<string, string>): Promise<{ code: number; output: string }> {
  const root = await mkdtemp(join(tmpdir(), 'skiplock-layers-'));
  roots.push(root);
  const tree = { 'types.ts': 'export type Id = string;\n', ...files };
  for (const [path, text] of Object.entries(tree)) {
    await mkdir(dirname(join(root, 'src', path)), { recursive: true });
    await writeFile(join(root, 'src', path), text);
  }
  return new Promise((resolve) => {
    execFile(process.execPath, [script, '--root', root], (error, stdout, stderr) => {
      resolve({ code: error ? Number(error.code) : 0, output: stdout + stderr });
    });
  });
}

describe('imports that point down the layers', () => {
  test('pass, however they are written', async () => {
    const { code, output } = await check({
      'core/a.ts': "import type { Id } from '../types.js';\nexport const a = (id: Id) => id;\n",
      'core/b.ts': "export * from './a.js';\n",
      'queue.ts':
        "import { a } from './core/a.js';\nexport { a };\nexport type T = typeof import('./types.js');\n",
    });
    expect(output).toContain('every one points down the layers, no cycle');
    expect(code).toBe(0);
  });

  test('an import inside a comment, a string, a template or a regular expression is not an import', async () => {
    const { code, output } = await check({
      'core/a.ts': [
        "// import { Queue } from '../queue.js';",
        "/* import type { Worker } from '../worker/worker.js'; */",
        '/**',
        " * @example import { Queue } from '../queue.js';",
        ' */',
        'export const s = "import { Queue } from \'../queue.js\'";',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the file written holds a template literal.
        "export const t = `\nimport { Queue } from '../queue.js';\n${s}`;",
        "export const r = /import\\('..\\/queue.js'\\)/;",
        '',
      ].join('\n'),
      'queue.ts': 'export const q = 1;\n',
    });
    expect(output).toContain('no cycle');
    expect(code).toBe(0);
  });
});

describe('an import that points up', () => {
  test('the ground floor importing a type from above: named with its line and the rule', async () => {
    const { code, output } = await check({
      'types.ts':
        "/** The ground. */\n\nimport type { Task } from './task/task.js';\nexport type Id = Task;\n",
      'task/task.ts': 'export interface Task { name: string }\n',
    });
    expect(code).toBe(1);
    expect(output).toContain(
      'src/types.ts:3 imports src/task/task.ts (type-only): types.ts may import nothing of ours — not task/.',
    );
  });

  test('a multi-line type import', async () => {
    const { code, output } = await check({
      'core/a.ts':
        "export const x = 1;\nimport type {\n  Row,\n  type Other,\n} from '../store/rows.js';\nexport type R = Row | Other;\n",
      'store/rows.ts': 'export type Row = 1;\nexport type Other = 2;\n',
    });
    expect(code).toBe(1);
    expect(output).toContain('src/core/a.ts:2 imports src/store/rows.ts (type-only): core/ may import');
    expect(output).toContain('— not store/.');
  });

  test('after a statement without a semicolon', async () => {
    const { code, output } = await check({
      'core/a.ts': "export const a = 1\nimport { q } from '../queue.js'\nexport { q }\n",
      'queue.ts': 'export const q = 1;\n',
    });
    expect(code).toBe(1);
    expect(output).toContain('src/core/a.ts:2 imports src/queue.ts: core/ may import');
  });

  test('a re-export', async () => {
    const { code, output } = await check({
      'store/s.ts': "export type { Engine } from '../engine/engine.js';\n",
      'engine/engine.ts': 'export class Engine {}\n',
    });
    expect(code).toBe(1);
    expect(output).toContain('src/store/s.ts:1 imports src/engine/engine.ts (type-only): store/ may import');
  });

  test('an import() type expression', async () => {
    const { code, output } = await check({
      'core/a.ts': "export type W = InstanceType<typeof import('../worker/worker.js').Worker>;\n",
      'worker/worker.ts': 'export class Worker {}\n',
    });
    expect(code).toBe(1);
    expect(output).toContain('src/core/a.ts:1 imports src/worker/worker.ts (type-only): core/ may import');
  });

  test('admin reaching worker internals (the public Worker is allowed)', async () => {
    const { code, output } = await check({
      'admin/metrics.ts':
        "import type { Worker } from '../worker/worker.js';\nimport type { JobRun } from '../worker/job-run.js';\nexport type M = [Worker, JobRun];\n",
      'worker/worker.ts': 'export class Worker {}\n',
      'worker/job-run.ts': 'export class JobRun {}\n',
    });
    expect(code).toBe(1);
    expect(output).not.toContain('src/admin/metrics.ts:1');
    expect(output).toContain('src/admin/metrics.ts:2 imports src/worker/job-run.ts (type-only)');
    expect(output).toContain('— not worker/.');
  });

  test('a folder the table does not know', async () => {
    const { code, output } = await check({ 'plugins/p.ts': 'export const p = 1;\n' });
    expect(code).toBe(1);
    expect(output).toContain('src/plugins/ is in no layer');
  });
});

describe('a cycle', () => {
  test('of type-only imports inside one folder', async () => {
    const { code, output } = await check({
      'engine/engine.ts':
        "import { Completer } from './completer.js';\nexport class Engine { c = new Completer(); }\n",
      'engine/completer.ts':
        "import type { Engine } from './engine.js';\nexport class Completer { e: Engine | null = null; }\n",
    });
    expect(code).toBe(1);
    expect(output).toContain('import cycle of 2 files (type-only imports count):');
    expect(output).toContain('src/engine/completer.ts:1 imports src/engine/engine.ts (type-only)');
    expect(output).toContain('src/engine/engine.ts:1 imports src/engine/completer.ts');
  });
});
