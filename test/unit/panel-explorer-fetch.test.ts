// The GraphQL explorer's request rules (panel/src/pages/developers/graphql/fetch.ts).
import { parse } from 'graphql';
import { describe, expect, it } from 'vitest';
import { isSubscription, withAuthorization } from '../../panel/src/pages/developers/graphql/fetch.ts';

describe('withAuthorization', () => {
  it("adds the session's bearer token to the user's headers", () => {
    expect(withAuthorization({ 'x-request-id': 'abc' }, 'tok')).toEqual({ 'x-request-id': 'abc', authorization: 'Bearer tok' });
    expect(withAuthorization(undefined, 'tok')).toEqual({ authorization: 'Bearer tok' });
  });

  it('keeps an Authorization the user set (any case), and drops values that are not strings', () => {
    expect(withAuthorization({ AUTHORIZATION: 'Bearer svc_key', n: 5 }, 'tok')).toEqual({ AUTHORIZATION: 'Bearer svc_key' });
  });
});

describe('isSubscription', () => {
  const doc = parse('query A { me { accountId } } subscription B($id: ID!) { tunnelStatus(id: $id) { id } }');
  it('looks at the named operation', () => {
    expect(isSubscription('B', doc)).toBe(true);
    expect(isSubscription('A', doc)).toBe(false);
    expect(isSubscription('C', doc)).toBe(false);
  });

  it('without a name, looks at the only operation, and is false when there are several or none', () => {
    expect(isSubscription(undefined, parse('subscription { tunnelStatus(id: "1") { id } }'))).toBe(true);
    expect(isSubscription(null, doc)).toBe(false);
    expect(isSubscription(undefined, undefined)).toBe(false);
  });
});
