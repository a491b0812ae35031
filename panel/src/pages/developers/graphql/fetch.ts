// The explorer's request rules, apart from GraphiQL so they can be tested without a browser.

/**
 * The user's own headers from GraphiQL's header editor go along; the session's token is added unless they
 * set an Authorization of their own (to try an API key, say). Header names are compared case-insensitively;
 * values that are not strings (the editor takes any JSON) are dropped, as fetch would stringify them oddly.
 */
export function withAuthorization(headers: Record<string, unknown> | undefined, token: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) if (typeof value === 'string') out[name] = value;
  if (!Object.keys(out).some((name) => name.toLowerCase() === 'authorization')) out.authorization = `Bearer ${token}`;
  return out;
}

/** The parts of a parsed GraphQL document this needs (graphql's DocumentNode has them). */
interface Definitions {
  definitions: readonly { kind: string; operation?: string; name?: { value: string } | undefined }[];
}

/**
 * Whether the operation to run is a subscription (sent over graphql-ws) rather than a query or mutation
 * (a POST): the named operation, or the document's only one when no name is given.
 */
export function isSubscription(operationName: string | null | undefined, document: Definitions | undefined): boolean {
  const operations = (document?.definitions ?? []).filter((d) => d.kind === 'OperationDefinition');
  const chosen = operationName ? operations.find((d) => d.name?.value === operationName) : operations.length === 1 ? operations[0] : undefined;
  return chosen?.operation === 'subscription';
}
