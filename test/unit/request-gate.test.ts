// RequestGate.trustsApiKey: the page of a list may be read before the gate checks the key
// (server/http/rest/routes.ts prefetchList) only for a key that authenticated here recently and has
// budget left, so guesses and throttled callers start no reads.
import { describe, expect, it } from 'vitest';
import type { Authenticator } from '../../server/auth/authenticate.ts';
import type { Principal } from '../../server/auth/principal.ts';
import { ApiError } from '../../server/domain/errors.ts';
import { RequestGate } from '../../server/http/middleware/request-gate.ts';

const KEY_ID = '0123abcd-0000-4000-8000-000000000001';
const HEADER = 'Bearer svc_0123abcd000040008000000000000001_secret';

/** An Authenticator that accepts HEADER while `valid` says so (no database). */
function gateWith(valid: { now: boolean }, now: { ms: number }) {
  const principal: Principal = { accountId: 'a', userId: null, permission: 'read', credential: { kind: 'api_key', id: KEY_ID } };
  const auth = {
    authenticate: async (h: string | undefined) => {
      if (h === HEADER && valid.now) return principal;
      throw new ApiError('invalid_token', 'no');
    },
  } as unknown as Authenticator;
  return new RequestGate(auth, { perMinute: 60, burst: 2, clock: () => now.ms });
}

describe('RequestGate.trustsApiKey', () => {
  it('holds only after the key authenticated here, while its budget lasts, and not after it failed', async () => {
    const valid = { now: true };
    const now = { ms: 1_000_000 };
    const gate = gateWith(valid, now);
    expect(gate.trustsApiKey(HEADER, KEY_ID)).toBe(false);
    expect((await gate.admit('192.0.2.1', HEADER)).principal).not.toBeNull();
    expect(gate.trustsApiKey(HEADER, KEY_ID)).toBe(true);
    // Another spelling of the header is another credential string: not trusted on this one's account.
    expect(gate.trustsApiKey(`${HEADER} `, KEY_ID)).toBe(false);
    // The burst (2) is spent: a throttled key starts nothing until a request's worth has refilled.
    await gate.admit('192.0.2.1', HEADER);
    expect(gate.trustsApiKey(HEADER, KEY_ID)).toBe(false);
    now.ms += 1000;
    expect(gate.trustsApiKey(HEADER, KEY_ID)).toBe(true);
    // Revoked: the next admission fails, and from then on nothing is started for it.
    valid.now = false;
    expect((await gate.admit('192.0.2.1', HEADER)).error?.code).toBe('invalid_token');
    expect(gate.trustsApiKey(HEADER, KEY_ID)).toBe(false);
  });
});
