// The issuer's lifetimes compared as values, not as `> 0`: authorization code 300 s, access
// token 900 s (and `expires_in`), ID token 900 s, refresh token 14 days, grant 30 days. Read from what a
// client receives (the JWTs' exp - iat) and from the rows the adapter stored (payload exp - iat, and the
// expires_at column the purge relies on), through a raw pg pool, not the code under test.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { exchange, newClient, newUser, signIn, token } from '../helpers/oidc-login.ts';
import { jwtPayload } from '../helpers/oidc.ts';

const DAY = 24 * 3600;

let gw: RunningGateway;
beforeAll(async () => {
  gw = await startGateway();
});
afterAll(async () => gw?.close());

interface StoredRow {
  id: string;
  payload: { iat?: number; exp?: number; grantId?: string };
  expires_at: number | null;
}

async function rows(kind: string, where: string, arg: string): Promise<StoredRow[]> {
  const { rows } = await gw.testDb.raw.query<StoredRow>(
    `select id, payload, extract(epoch from expires_at)::bigint::int as expires_at from oidc_payload where kind = $1 and ${where} = $2`,
    [kind, arg],
  );
  return rows;
}

/** exp - iat of a stored row, after checking expires_at (what expiry and purging use) is its exp. */
function lifetime(row: StoredRow): number {
  expect(typeof row.payload.iat).toBe('number');
  expect(row.expires_at).toBe(row.payload.exp);
  return row.payload.exp! - row.payload.iat!;
}

it('code 300 s, access and ID token 900 s, refresh token 14 days, grant 30 days', async () => {
  const c = await newClient(gw.testDb.db);
  const user = await newUser(gw.testDb.db);
  const s = await signIn(gw.url, c, user);

  // The code, before it is redeemed: stored with its grant.
  const [code] = await rows('AuthorizationCode', 'client_id', c.id);
  expect(code).toBeDefined();
  expect(lifetime(code!)).toBe(300);
  const grantId = code!.payload.grantId!;
  const [grant] = await rows('Grant', 'id', grantId);
  expect(lifetime(grant!)).toBe(30 * DAY);

  const ex = await exchange(gw.url, c, s.code, s.verifier);
  expect(ex.status).toBe(200);
  const access = jwtPayload(ex.body.access_token!) as { iat: number; exp: number };
  expect(access.exp - access.iat).toBe(900);
  expect(Number(ex.body.expires_in)).toBe(900);
  const id = jwtPayload(ex.body.id_token!) as { iat: number; exp: number };
  expect(id.exp - id.iat).toBe(900);

  const refresh = await rows('RefreshToken', 'grant_id', grantId);
  expect(refresh).toHaveLength(1);
  expect(lifetime(refresh[0]!)).toBe(14 * DAY);

  // A rotation issues a refresh token with the same lifetime (the grant still has 30 days left).
  const rotated = await token(gw.url, c, { grant_type: 'refresh_token', refresh_token: ex.body.refresh_token! });
  expect(rotated.status).toBe(200);
  const again = jwtPayload(rotated.body.access_token!) as { iat: number; exp: number };
  expect(again.exp - again.iat).toBe(900);
  const live = (await rows('RefreshToken', 'grant_id', grantId)).filter((r) => r.id !== refresh[0]!.id);
  expect(live).toHaveLength(1);
  expect(lifetime(live[0]!)).toBe(14 * DAY);
});
