import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Property tests run tens of thousands of cases; keep them off the clock, but bounded.
    testTimeout: 120_000,
    pool: 'forks',
  },
});
