// The baseline of `npm run bench:oidc`: a bare oidc-provider 9 with its default in-memory adapter,
// configured like the gateway's issuer (server/oidc/provider.ts): the same routes and lifetimes, PKCE
// S256 required, refresh rotation, HS256 JWT access tokens for one resource, HS256 ID tokens under the
// client secret, the same single client (BENCH_CLIENT_ID / BENCH_CLIENT_SECRET / BENCH_REDIRECT_URI).
// The only difference in behaviour: its interaction signs the bench user in and consents at once
// (no pages), which only matters for minting codes, not for the token endpoint being measured.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider, { type Configuration } from 'oidc-provider';
import { OIDC_SCOPES, protocolConfiguration, TTL } from '../server/oidc/provider.ts';

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

// The issuer's own protocol configuration (server/oidc/provider.ts), so this baseline cannot drift from it.
const protocol = protocolConfiguration(AUDIENCE, ACCESS_TOKEN_KEY);

const configuration: Configuration = {
  clients: [
    {
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      redirect_uris: [REDIRECT_URI],
      ...protocol.clientDefaults,
    },
  ],
  async findAccount(_ctx, sub) {
    return { accountId: sub, claims: () => ({ sub, name: 'Bench', picture: null, email: 'bench@example.test', email_verified: false }) };
  },
  ...protocol,
  cookies: { keys: ['bench-cookie-key-0123456789abcdef'] },
  ttl: { ...TTL },
  features: { ...protocol.features, revocation: { enabled: true } },
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
