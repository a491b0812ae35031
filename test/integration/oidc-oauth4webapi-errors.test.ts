// The identity provider seen by an independent client library, oauth4webapi, against the real gateway on real
// PostgreSQL, continued from oidc-oauth4webapi.test.ts: every invalid_grant and invalid_client condition of the
// identity-provider document's section 7, with its exact status.
import { beforeAll, describe, expect, it } from 'vitest';
import { postForm } from '../helpers/oidc.ts';
import { A, B, ep, exchange, expectError, getCode, login, refresh, useOauthWorld, w } from './oidc-oauth4webapi-world.ts';

useOauthWorld();

describe('section 7: every invalid_grant condition', () => {
  it('1. the same code exchanged twice', async () => {
    const c = await getCode(A, w.owner);
    expect((await exchange(A, c.code, c.verifier, c.redirectUri)).status).toBe(200);
    expectError(await exchange(A, c.code, c.verifier, c.redirectUri), 400, 'invalid_grant');
  });

  it('2. a redirect_uri different from the authorize step (registered or not)', async () => {
    const c = await getCode(A, w.owner);
    expectError(await exchange(A, c.code, c.verifier, A.redirectUris[1]), 400, 'invalid_grant');
    const d = await getCode(A, w.owner);
    expectError(await exchange(A, d.code, d.verifier, `${d.redirectUri}/x`), 400, 'invalid_grant');
    const e = await getCode(A, w.owner, { redirectUri: A.redirectUris[1] });
    expectError(await exchange(A, e.code, e.verifier, A.redirectUris[0]), 400, 'invalid_grant');
    // Positive control: the same kind of code with the right URI works.
    const f = await getCode(A, w.owner, { redirectUri: A.redirectUris[1] });
    expect((await exchange(A, f.code, f.verifier, A.redirectUris[1])).status).toBe(200);
  });

  it('redirect_uri missing at the token endpoint is refused (400)', async () => {
    const c = await getCode(A, w.owner);
    const res = await exchange(A, c.code, c.verifier, undefined);
    expect(res.status).toBe(400);
    expect(['invalid_request', 'invalid_grant']).toContain(res.body.error);
  });

  it('3. a client other than the one that received the code (with its own valid credentials)', async () => {
    const c = await getCode(A, w.owner);
    expectError(await exchange(B, c.code, c.verifier, c.redirectUri), 400, 'invalid_grant');
  });

  it('4. an expired code (its stored expiry moved into the past in PostgreSQL)', async () => {
    const c = await getCode(A, w.owner);
    await expireStored(c.code);
    expectError(await exchange(A, c.code, c.verifier, c.redirectUri), 400, 'invalid_grant');
  });

  it('codes live 5 minutes', async () => {
    const c = await getCode(A, w.owner);
    const exp = await storedExpiry(c.code);
    const ttl = (exp.getTime() - Date.now()) / 1000;
    expect(ttl).toBeGreaterThan(240);
    expect(ttl).toBeLessThanOrEqual(300);
  });

  it('5. PKCE failures (see the PKCE block) and a code for another user session stay bound to their verifier', async () => {
    const a = await getCode(A, w.owner);
    const b = await getCode(A, w.viewer);
    expectError(await exchange(A, a.code, b.verifier, a.redirectUri), 400, 'invalid_grant', /PKCE verification failed/i);
  });

  it('6. a refresh token reused, expired, revoked, presented by another client, or unknown', async () => {
    const t = await login(A, w.owner);
    // expired
    const t2 = await login(A, w.owner);
    await expireStored(t2.refresh_token);
    expectError(await refresh(A, t2.refresh_token), 400, 'invalid_grant');
    // presented by another client with its own valid credentials
    expectError(await refresh(B, t.refresh_token), 400, 'invalid_grant');
    // unknown
    expectError(await refresh(A, 'rt_doesnotexist0000000000000000000000000'), 400, 'invalid_grant');
    expectError(await refresh(A, t.access_token), 400, 'invalid_grant');
    // revoked
    await postForm(ep('revoke'), { token: t.refresh_token, client_id: A.id, client_secret: A.secret });
    expectError(await refresh(A, t.refresh_token), 400, 'invalid_grant');
    // reused after rotation: the rotation test above; regenerated secret: the rotation file.
  });
});

describe('section 7: every invalid_client condition (401)', () => {
  let code: { code: string; verifier: string; redirectUri: string };
  let rt: string;
  beforeAll(async () => {
    code = await getCode(A, w.owner);
    rt = (await login(A, w.owner)).refresh_token;
  });
  const wrong: Array<[string, () => { id: string; secret: string | undefined }]> = [
    ['unknown client_id', () => ({ id: 'cl_aaaaaaaaaaaaaaaa', secret: A.secret })],
    ['malformed client_id', () => ({ id: 'nobody', secret: A.secret })],
    ['wrong secret', () => ({ id: A.id, secret: `${A.secret.slice(0, -2)}xx` })],
    ["another application's secret", () => ({ id: A.id, secret: B.secret })],
    ['no secret (confidential clients must send both)', () => ({ id: A.id, secret: undefined })],
  ];
  it.each(wrong)('%s: code exchange and refresh, in the body and as Basic', async (_label, creds) => {
    const c = creds();
    const forms = [
      { grant_type: 'authorization_code', code: code.code, code_verifier: code.verifier, redirect_uri: code.redirectUri },
      { grant_type: 'refresh_token', refresh_token: rt },
    ];
    for (const f of forms) {
      expectError(await postForm(ep('token'), { ...f, client_id: c.id, client_secret: c.secret }), 401, 'invalid_client');
      if (c.secret !== undefined) expectError(await postForm(ep('token'), f, { basic: { id: c.id, secret: c.secret } }), 401, 'invalid_client');
    }
  });

  // B2 in /work/notes/oidc-bugs.md: Basic with an empty secret answers 400 invalid_request (the body form is 401).
  // Fixed: missing credentials are now 401 invalid_client.
  it('empty secret: code exchange and refresh, in the body and as Basic (B2)', async () => {
    const forms = [
      { grant_type: 'authorization_code', code: code.code, code_verifier: code.verifier, redirect_uri: code.redirectUri },
      { grant_type: 'refresh_token', refresh_token: rt },
    ];
    for (const f of forms) {
      expectError(await postForm(ep('token'), { ...f, client_id: A.id, client_secret: '' }), 401, 'invalid_client');
      expectError(await postForm(ep('token'), f, { basic: { id: A.id, secret: '' } }), 401, 'invalid_client');
    }
  });

  // B1 in /work/notes/oidc-bugs.md: RFC 6749 5.2 names "no client authentication included" as invalid_client
  // (401); fixed in the issuer.
  it('no client authentication at all is invalid_client (401) (B1)', async () => {
    expectError(await postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: rt }), 401, 'invalid_client');
  });

  it('the code and refresh token were not spent by the refused attempts', async () => {
    expect((await exchange(A, code.code, code.verifier, code.redirectUri)).status).toBe(200);
    expect((await refresh(A, rt)).status).toBe(200);
  });
});

// --- stored-row access for expiry tests: the adapter's table, read and written with plain SQL. ---

/** Moves the stored expiry of the artifact whose value is `token` (a code or refresh token) into the past. */
async function expireStored(token: string): Promise<void> {
  const row = await findStored(token);
  await w.gw.testDb.raw.query(row.expireSql, row.params);
}

async function storedExpiry(token: string): Promise<Date> {
  return (await findStored(token)).expiresAt;
}

async function findStored(token: string): Promise<{ expiresAt: Date; expireSql: string; params: unknown[] }> {
  // oidc-provider stores opaque tokens under their value (its id); tolerate a stored id that is the
  // token without a prefix, but require exactly one match.
  const { rows } = await w.gw.testDb.raw.query(
    `select kind, id, expires_at from oidc_payload
      where kind in ('AuthorizationCode', 'RefreshToken') and (id = $1 or (length(id) >= 16 and $1 like '%' || id))`,
    [token],
  );
  expect(rows, `stored row for ${token.slice(0, 8)}...`).toHaveLength(1);
  const { kind, id, expires_at } = rows[0] as { kind: string; id: string; expires_at: Date };
  return {
    expiresAt: expires_at,
    // Both the column and the payload's own exp (seconds), which oidc-provider checks itself.
    expireSql: `update oidc_payload set expires_at = now() - interval '1 minute',
                       payload = jsonb_set(payload, '{exp}', to_jsonb(extract(epoch from now())::bigint - 60))
                 where kind = $1 and id = $2`,
    params: [kind, id],
  };
}
