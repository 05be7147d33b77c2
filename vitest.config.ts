import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    // expect.poll() waits for an async change (a job started, a page updated) for 1 s by default:
    // a loaded machine (CI, 2 cores shared) can take longer without anything being wrong. A test
    // that checks how fast something happens says so with its own timeout or a latency bound.
    expect: { poll: { timeout: 10_000 } },
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
  },
});
