#!/usr/bin/env node
// The layer check (`npm run check`): every import between our own modules in src/ — `import`,
// `import type`, `export … from`, and `import('…')` whether a dynamic import or a type — must
// point down the table below, and no set of files may import each other in a cycle (type-only
// imports count: a cycle of types is still a knot a reader must untie all at once).
//
// Each unit names what it may import besides itself. The table is ordered from the ground up,
// and a unit may only name units above it in the table, so the layers themselves cannot form a
// cycle. An entry such as 'worker/worker.ts' allows that one file of a unit, not the rest of it.
//
// `node scripts/check-layers.mjs` prints each broken rule and each cycle and exits 1;
// `--table` prints the table. Its test: test/unit/layers.test.ts. No parser library: see scripts/import-graph.mjs.

import { fileURLToPath } from 'node:url';
import { importGraph, sourceFiles } from './import-graph.mjs';

const GROUND = ['types.ts', 'task-types.ts', 'errors.ts'];

/** [unit, what it may import, why it sits there], lowest first. */
export const LAYERS = [
  ['types.ts', [], 'the public data types: nothing of ours'],
  ['task-types.ts', ['types.ts'], 'the public types of tasks and handlers'],
  ['errors.ts', ['types.ts'], 'every public error class'],
  ['core/', GROUND, 'pure logic, no I/O: validation, backoff, durations, row mapping'],
  ['db/', ['core/', ...GROUND], 'the executor seam, identifiers, the LISTEN client'],
  ['migrations/', ['db/', 'core/', ...GROUND], 'the numbered migrations and their runner'],
  ['store/', ['db/', 'core/', ...GROUND], 'the only SQL'],
  ['telemetry/', ['core/', ...GROUND], 'OpenTelemetry spans (the API loaded lazily)'],
  ['task/', ['core/', ...GROUND], 'defineTask and the payload checks'],
  [
    'engine/',
    ['store/', 'migrations/', 'telemetry/', 'db/', 'core/', ...GROUND],
    'the internal engine: pools, statements, settings, the writers',
  ],
  ['queue.ts', ['engine/', 'task/', 'migrations/', 'core/', ...GROUND], 'the Queue façade'],
  [
    'worker/',
    ['queue.ts', 'engine/', 'task/', 'telemetry/', 'db/', 'core/', ...GROUND],
    'the Worker: through its queue’s engine, and db for its LISTEN connection',
  ],
  ['adapters/', ['db/', ...GROUND], 'skiplock/adapters: ORM transactions as executors'],
  [
    'admin/',
    ['queue.ts', 'worker/worker.ts', 'core/', ...GROUND],
    'HTTP API, auth, metrics: the queue, and the public Worker only (never worker internals)',
  ],
  ['embedded/', ['core/', ...GROUND], 'embedded PostgreSQL for `dev` and tests'],
  [
    'index.ts',
    ['worker/', 'queue.ts', 'task/', 'migrations/', 'db/', 'core/', ...GROUND],
    'the public exports: not admin/ (prom-client), adapters/ (optional peers), embedded/ or cli/',
  ],
  [
    'cli/',
    ['admin/', 'embedded/', 'worker/', 'queue.ts', 'task/', 'db/', 'core/', ...GROUND],
    'the skiplock command, on top: nothing imports it',
  ],
];

/** `src/core/cron.ts` → `core/`; `src/queue.ts` → `queue.ts`. */
export function unitOf(file) {
  const rest = file.replace(/^src\//, '');
  const slash = rest.indexOf('/');
  return slash === -1 ? rest : rest.slice(0, slash + 1);
}

/** Problems of the table itself: a unit that names one not below it. */
function tableProblems() {
  const problems = [];
  const seen = new Set();
  for (const [unit, allowed] of LAYERS) {
    for (const entry of allowed) {
      if (!seen.has(unitOf(`src/${entry}`))) {
        problems.push(`layer table: ${unit} may import ${entry}, which is not below it in the table`);
      }
    }
    seen.add(unit);
  }
  return problems;
}

/** Imports that break the table: `{ edge, rule }`. */
export function layerViolations(edges, files) {
  const table = new Map(LAYERS.map(([unit, allowed]) => [unit, allowed]));
  const problems = [];
  for (const unit of new Set(files.map(unitOf))) {
    if (!table.has(unit)) {
      problems.push(`src/${unit} is in no layer: add it to the table in scripts/check-layers.mjs`);
    }
  }
  for (const edge of edges) {
    const from = unitOf(edge.file);
    const to = unitOf(edge.target);
    const allowed = table.get(from);
    if (from === to || allowed === undefined) continue;
    const file = edge.target.replace(/^src\//, '');
    if (allowed.includes(to) || allowed.includes(file)) continue;
    const what = allowed.length === 0 ? 'nothing of ours' : allowed.join(', ');
    problems.push(
      `${edge.file}:${edge.line} imports ${edge.target}${edge.typeOnly ? ' (type-only)' : ''}: ` +
        `${from} may import ${what} — not ${to === file ? file : to}. ` +
        'Move what it needs down to a lower layer (or the importing code up).',
    );
  }
  return problems;
}

/** The strongly connected components of more than one file (or a file importing itself). */
export function cycles(edges) {
  const next = new Map();
  for (const { file, target } of edges) {
    if (!next.has(file)) next.set(file, new Set());
    if (!next.has(target)) next.set(target, new Set());
    next.get(file).add(target);
  }
  // Tarjan's algorithm, iterative (no recursion limit on a long chain).
  let counter = 0;
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const found = [];
  for (const root of next.keys()) {
    if (index.has(root)) continue;
    const work = [[root, [...next.get(root)], 0]];
    index.set(root, counter);
    low.set(root, counter++);
    stack.push(root);
    onStack.add(root);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      const [node, targets] = frame;
      if (frame[2] < targets.length) {
        const target = targets[frame[2]++];
        if (!index.has(target)) {
          index.set(target, counter);
          low.set(target, counter++);
          stack.push(target);
          onStack.add(target);
          work.push([target, [...next.get(target)], 0]);
        } else if (onStack.has(target)) {
          low.set(node, Math.min(low.get(node), index.get(target)));
        }
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1][0];
        low.set(parent, Math.min(low.get(parent), low.get(node)));
      }
      if (low.get(node) !== index.get(node)) continue;
      const component = [];
      let member;
      do {
        member = stack.pop();
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1 || next.get(node).has(node)) found.push(component.sort());
    }
  }
  return found;
}

/** One shortest cycle through the first file of `component`, as its imports. */
function oneCycle(component, edges) {
  const members = new Set(component);
  const start = component[0];
  const via = new Map();
  const queue = [start];
  const inner = edges.filter((e) => members.has(e.file) && members.has(e.target));
  while (queue.length > 0) {
    const node = queue.shift();
    for (const edge of inner.filter((e) => e.file === node)) {
      if (edge.target === start) {
        const path = [edge];
        for (let at = node; at !== start; at = via.get(at).file) path.unshift(via.get(at));
        return path;
      }
      if (!via.has(edge.target)) {
        via.set(edge.target, edge);
        queue.push(edge.target);
      }
    }
  }
  return [];
}

export function cycleProblems(edges) {
  return cycles(edges).map((component) => {
    const steps = oneCycle(component, edges)
      .map((e) => `  ${e.file}:${e.line} imports ${e.target}${e.typeOnly ? ' (type-only)' : ''}`)
      .join('\n');
    const all = component.length > 2 ? `\n  (${component.length} files: ${component.join(', ')})` : '';
    return `import cycle of ${component.length} files (type-only imports count):\n${steps}${all}`;
  });
}

function main() {
  // `--root <dir>`: check another tree laid out like this one (the check's own test does).
  const at = process.argv.indexOf('--root');
  const root = at === -1 ? fileURLToPath(new URL('..', import.meta.url)) : process.argv[at + 1];
  if (process.argv.includes('--table')) {
    for (const [unit, allowed, why] of LAYERS) {
      console.log(`${unit.padEnd(14)} ${(allowed.join(', ') || '—').padEnd(72)} ${why}`);
    }
    return;
  }
  const files = sourceFiles(root);
  const edges = importGraph(root);
  const problems = [...tableProblems(), ...layerViolations(edges, files), ...cycleProblems(edges)];
  if (problems.length > 0) {
    console.error(`layer check: ${problems.length} problem(s)\n\n${problems.join('\n\n')}\n`);
    console.error('The layers and what each may import: scripts/check-layers.mjs (--table prints them).');
    process.exitCode = 1;
    return;
  }
  const typeOnly = edges.filter((e) => e.typeOnly).length;
  console.log(
    `layer check: ${files.length} files, ${edges.length} imports between them (${typeOnly} type-only): ` +
      'every one points down the layers, no cycle.',
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
