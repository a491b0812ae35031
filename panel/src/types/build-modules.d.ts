// Imports that panel/build/build.mjs resolves at build time (see its header): the browser gets data and
// URLs, never a YAML parser.

/** A YAML document as the JSON data it describes; the importer gives it its type. */
declare module '*.yaml' {
  const data: unknown;
  export default data;
}

/** The absolute URL of an asset the build emitted beside the bundle (`asset:graphiql.css`). */
declare module 'asset:*' {
  const url: string;
  export default url;
}
