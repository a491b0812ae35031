// GraphQL operations typed from the gateway's schema at build time: every `src/**/*.graphql` document is
// validated against ../schema/schema.graphql (an operation the schema does not accept fails the build)
// and turned into a typed document in src/graphql/generated.ts, which the panel imports. Documents are
// emitted as strings (documentMode "string"): the panel posts them as they are, no AST in the bundle.
import { fileURLToPath } from 'node:url';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

/** @type {import('@graphql-codegen/cli').CodegenConfig} */
export default {
  schema: here('../schema/schema.graphql'),
  documents: [here('src') + '/**/*.graphql'],
  silent: true,
  generates: {
    [here('src/graphql/generated.ts')]: {
      plugins: ['typescript-operations', 'typed-document-node'],
      config: {
        documentMode: 'string',
        enumsAsTypes: true,
        useTypeImports: true,
        scalars: { DateTimeISO: 'string', ID: 'string' },
        skipTypename: true,
      },
    },
  },
};
