/**
 * The binaries package's shared-library symlinks cannot travel in an npm tarball; its install
 * script recreates them, but npm 11 skips unapproved install scripts. The launcher repairs them.
 *
 * Deliberate break seen failing: making hydrateSymlinks return at once failed both tests.
 */
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { hydrateSymlinks } from '../../src/embedded/binaries.js';

const root = await fs.mkdtemp(path.join(os.tmpdir(), 'skiplock-symlinks-'));
afterAll(() => fs.rm(root, { recursive: true, force: true }));

describe('library symlinks', () => {
  test('missing links listed in pg-symlinks.json are recreated, relative to their folder', async () => {
    await fs.mkdir(path.join(root, 'native', 'lib'), { recursive: true });
    await fs.writeFile(path.join(root, 'native', 'lib', 'libicuuc.so.60.2'), 'library');
    await fs.writeFile(
      path.join(root, 'native', 'pg-symlinks.json'),
      JSON.stringify([
        { source: 'native/lib/libicuuc.so.60.2', target: 'native/lib/libicuuc.so.60' },
        { source: 'native/lib/libicuuc.so.60.2', target: 'native/lib/libicuuc.so' },
      ]),
    );
    await hydrateSymlinks(root);
    for (const name of ['libicuuc.so.60', 'libicuuc.so']) {
      const link = path.join(root, 'native', 'lib', name);
      expect(await fs.readlink(link)).toBe('libicuuc.so.60.2');
      expect(await fs.readFile(link, 'utf8')).toBe('library');
    }
  });

  test('existing links are left alone and a missing list is not an error', async () => {
    await hydrateSymlinks(root); // second run: links exist
    await expect(hydrateSymlinks(path.join(root, 'nowhere'))).resolves.toBeUndefined();
  });
});
