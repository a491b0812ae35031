// `node --import ./loader/register.mjs file.ts`: runs the TypeScript sources directly.
// Node's own type stripping cannot run type-graphql (it emits no decorator metadata), so .ts files
// are transpiled by rolldown's oxc transform (the engine vitest uses too) with legacy decorators and
// metadata, matching tsconfig.json. Type checking stays with `npm run typecheck`.
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
