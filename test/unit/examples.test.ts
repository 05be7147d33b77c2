/**
 * Each example says in its header how to run it, and that command runs it (issue 26:
 * examples/quickstart.ts said `npm install && npm start`, which starts `skiplock dev` instead).
 * Deliberate break seen failing: the header back to `npm install && npm start`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { expect, test } from 'vitest';
import { REPO_ROOT } from '../support/spawn.js';

const scripts = (
  JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
    scripts: Record<string, string>;
  }
).scripts;

test.each(readdirSync(path.join(REPO_ROOT, 'examples')).filter((name) => name.endsWith('.ts')))(
  'examples/%s: the npm command in its header runs it',
  (file) => {
    const header = readFileSync(path.join(REPO_ROOT, 'examples', file), 'utf8').split('*/')[0] ?? '';
    const commands = [...header.matchAll(/npm (?:run ([\w:-]+)|start)\b/g)].map((m) => m[1] ?? 'start');
    expect(commands, 'the header names how to run it').not.toEqual([]);
    for (const script of commands) expect(scripts[script], `npm run ${script}`).toMatch(`examples/${file}`);
  },
);
