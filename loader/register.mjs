// `node --import ./loader/register.mjs file.ts`: runs the TypeScript sources directly.
// Node's own type stripping cannot run type-graphql (it emits no decorator metadata), so .ts files
// are transpiled by rolldown's oxc transform (the engine vitest uses too) with legacy decorators and
// metadata, matching tsconfig.json. Type checking stays with `npm run typecheck`.
// node-version.mjs first: it stops an older Node with a message before anything here can fail on it
// (hence the default import of node:module, which links on any Node, instead of named ones).
import './node-version.mjs';
import nodeModule from 'node:module';

nodeModule.register('./hooks.mjs', import.meta.url);
