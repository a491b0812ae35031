// The baseline of `npm run bench:oidc`: a bare oidc-provider 9 with its default in-memory adapter,
// configured like the gateway's issuer (server/oidc/provider.ts): the same routes and lifetimes, PKCE
// S256 required, refresh rotation, HS256 JWT access tokens for one resource, HS256 ID tokens under the
// client secret, the same single client (BENCH_CLIENT_ID / BENCH_CLIENT_SECRET / BENCH_REDIRECT_URI).
// The only difference in behaviour: its interaction signs the bench user in and consents at once
// (no pages), which only matters for minting codes, not for the token endpoint being measured.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider, { errors, type Configuration } from 'oidc-provider';
import { OIDC_SCOPES, ROUTES, TTL } from '../server/oidc/provider.ts';

const env = (k: string) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is required`);
  return v;
};
const CLIENT_ID = env('BENCH_CLIENT_ID');
const CLIENT_SECRET = env('BENCH_CLIENT_SECRET');
const REDIRECT_URI = env('BENCH_REDIRECT_URI');
const ACCESS_TOKEN_KEY = Buffer.from(env('BENCH_ACCESS_TOKEN_KEY'), 'base64url');
const PORT = Number(env('BENCH_PORT'));
const ISSUER = `http://127.0.0.1:${PORT}`;
const AUDIENCE = ISSUER;
const ACCOUNT = '00000000-0000-4000-8000-000000000001';
const SCOPE = OIDC_SCOPES.join(' ');

const configuration: Configuration = {
  clients: [
    {
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      redirect_uris: [REDIRECT_URI],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'HS256',
    },
  ],
  async findAccount(_ctx, sub) {
    return { accountId: sub, claims: () => ({ sub, name: 'Bench', picture: null, email: 'bench@example.test', email_verified: false }) };
  },
  claims: { openid: ['sub'], profile: ['name', 'picture'], email: ['email', 'email_verified'] },
  scopes: [...OIDC_SCOPES],
  responseTypes: ['code'],
  clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
  enabledJWA: { idTokenSigningAlgValues: ['HS256'] },
  jwks: { keys: [] },
  cookies: { keys: ['bench-cookie-key-0123456789abcdef'] },
  pkce: { required: () => true },
  allowOmittingSingleRegisteredRedirectUri: false,
  rotateRefreshToken: true,
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  expiresWithSession: async () => false,
  extraTokenClaims: async (_ctx, token) => (token.kind === 'AccessToken' ? { gid: token.grantId } : undefined),
  ttl: { ...TTL },
  routes: { ...ROUTES },
  features: {
    devInteractions: { enabled: false },
    dPoP: { enabled: false },
    pushedAuthorizationRequests: { enabled: false },
    rpInitiatedLogout: { enabled: false },
    revocation: { enabled: true },
    userinfo: { enabled: true },
    claimsParameter: { enabled: false },
    introspection: { enabled: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => AUDIENCE,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource) => {
        if (resource !== AUDIENCE) throw new errors.InvalidTarget();
        return { scope: SCOPE, audience: AUDIENCE, accessTokenTTL: TTL.AccessToken, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'HS256', key: ACCESS_TOKEN_KEY } } };
      },
    },
  },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
};

const provider = new Provider(ISSUER, configuration);
const rt = provider.RefreshToken.prototype as unknown as { generateTokenId(): string };
const generate = rt.generateTokenId;
rt.generateTokenId = function prefixed(this: unknown) {
  return `rt_${generate.call(this)}`;
};
const callback = provider.callback();

const server = http.createServer((req, res) => {
  if (req.url?.startsWith('/interaction/')) {
    void (async () => {
      const details = await provider.interactionDetails(req, res);
      const grant = new provider.Grant({ accountId: ACCOUNT, clientId: String(details.params.client_id) });
      grant.addOIDCScope(SCOPE);
      grant.addResourceScope(AUDIENCE, SCOPE);
      const grantId = await grant.save();
      await provider.interactionFinished(req, res, { login: { accountId: ACCOUNT }, consent: { grantId } }, { mergeWithLastSubmission: false });
    })().catch((e: unknown) => {
      res.statusCode = 500;
      res.end(String(e));
    });
    return;
  }
  callback(req, res);
});
server.listen(PORT, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`${JSON.stringify({ msg: 'listening', url: `http://127.0.0.1:${port}` })}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
