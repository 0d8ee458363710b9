import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // Property tests run tens of thousands of cases and integration tests start real servers:
    // keep them off the clock, but bounded.
    testTimeout: 180_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
    // `npm run test:unit` (part of `npm test`) measures the pure layers with the tests that need
    // no server, and fails under these floors: the rules core and the protocol are what every
    // other part trusts, and their unit tests are where their cases are meant to be covered.
    coverage: {
      provider: 'v8',
      include: ['rules/**/*.ts', 'protocol/**/*.ts'],
      reporter: ['text-summary'],
      thresholds: {
        'rules/**/*.ts': { statements: 90, branches: 85, functions: 95, lines: 90 },
        'protocol/**/*.ts': { statements: 95, branches: 90, functions: 100, lines: 95 },
      },
    },
  },
});
