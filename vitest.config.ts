import { createRequire } from 'node:module';
import { defineConfig } from 'vitest/config';

const require = createRequire(import.meta.url);

export default defineConfig({
  // type-graphql needs legacy decorators *with* metadata; oxc emits it only when told to.
  oxc: { decorator: { legacy: true, emitDecoratorMetadata: true } },
  resolve: {
    // One graphql realm: tests importing `graphql` must get the same file as type-graphql/Apollo.
    alias: [{ find: /^graphql$/, replacement: require.resolve('graphql') }],
  },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    // Bounds that turn a hang into a failure, never expectations: as long as the waits inside a test
    // (test/helpers/wait.ts `until`, 120 s), so a test slowed by a loaded host (the RTNL lock held by
    // another namespace test, a QEMU guest beside it) fails by naming what it waited for, or not at all.
    testTimeout: 150_000,
    hookTimeout: 150_000,
    // 2 cores: a few forks keep PostgreSQL and the test processes from starving each other.
    pool: 'forks',
    maxWorkers: 2,
  },
});
