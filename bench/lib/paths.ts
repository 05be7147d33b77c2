/** Where the benchmark and the repository are; the launcher passes both (the runner runs from a bundle). */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** bench/ (the bundle lives in bench/node_modules/.skiplock-bench/). */
export const BENCH_DIR =
  process.env.SKIPLOCK_BENCH_DIR ?? resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const REPO_DIR = process.env.SKIPLOCK_REPO_DIR ?? resolve(BENCH_DIR, '..');

/** The version of a package installed in bench/node_modules, or 'not installed'. */
export function peerVersion(name: string): string {
  try {
    const text = readFileSync(join(BENCH_DIR, 'node_modules', name, 'package.json'), 'utf8');
    return (JSON.parse(text) as { version: string }).version;
  } catch {
    return 'not installed';
  }
}
