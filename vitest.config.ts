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
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // 2 cores: a few forks keep PostgreSQL and the test processes from starving each other.
    pool: 'forks',
    maxWorkers: 2,
  },
});
