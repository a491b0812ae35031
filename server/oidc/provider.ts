// oidc-provider 9 configured to the identity-provider document and nothing more: authorization code
// with PKCE S256 (required for every client) and refresh tokens; access tokens are HS256 JWTs for the
// API (resource indicators with the API as the one, default resource); ID tokens are HS256 under the
// client secret; every feature version 9 switches on by default that the document does not list
// (dev interactions, DPoP, PAR, RP-initiated logout) is off. Public clients (token_endpoint_auth_method
// none) authenticate with PKCE alone and get no ID token; the first-party panel is never asked for
// consent (docs/CONTRACTS.md "Identity provider").
import Provider, { errors, type Configuration, type KoaContextWithOIDC } from 'oidc-provider';
import type { Database } from '../db/database.ts';
import { postgresAdapter, PUBLIC_CLIENT_SCOPES, type ClientSource } from './adapter.ts';
import { PANEL_CLIENT_ID } from '../domain/clients.ts';
import { UserClaimsSource } from './accounts.ts';
import { renderErrorPage } from './pages.ts';

export const NOT_YOURS = 'client is not authorized to revoke the presented token';

export const OIDC_SCOPES = ['openid', 'profile', 'email'] as const;

/** Lifetimes, in seconds. Grants outlive refresh tokens, so a live refresh token always has its grant. */
export const TTL = {
  AuthorizationCode: 300,
  AccessToken: 900,
  IdToken: 900,
  RefreshToken: 14 * 24 * 3600,
  Grant: 30 * 24 * 3600,
  Session: 14 * 24 * 3600,
  Interaction: 3600,
} as const;

export const ROUTES = {
  authorization: '/oauth/authorize',
  token: '/oauth/token',
  userinfo: '/oauth/userinfo',
  revocation: '/oauth/revoke',
  jwks: '/oauth/jwks',
} as const;

/**
 * The protocol half of the issuer's configuration, what the identity-provider document fixes: claims and
 * scopes, code flow with PKCE required, client authentication, HS256 ID tokens, refresh rotation, the
 * routes, the features on and off, and the API as the one resource with HS256 JWT access tokens.
 * createProvider adds storage, accounts, cookies, lifetimes, the revocation policy and the pages;
 * bench/oidc-memory-server.ts builds its in-memory baseline from this same function, so the ceiling the
 * OIDC benchmark compares against cannot drift from the issuer it measures.
 */
export function protocolConfiguration(audience: string, accessTokenKey: Buffer) {
  return {
    claims: { openid: ['sub'], profile: ['name', 'picture'], email: ['email', 'email_verified'] },
    scopes: [...OIDC_SCOPES],
    responseTypes: ['code'],
    // `none`: public clients (PKCE only); a confidential client is registered with client_secret_basic.
    clientAuthMethods: ['client_secret_basic', 'client_secret_post', 'none'],
    clientDefaults: {
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'HS256',
    },
    enabledJWA: {
      idTokenSigningAlgValues: ['HS256'],
    },
    // ID tokens use the client secret, access tokens the server's HMAC key: nothing to publish.
    jwks: { keys: [] },
    pkce: { required: () => true },
    // The contract requires redirect_uri at the token endpoint even with one registered URI.
    allowOmittingSingleRegisteredRedirectUri: false,
    rotateRefreshToken: true,
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    // Refresh tokens live on their own lifetime, not the browser session's.
    expiresWithSession: async () => false,
    extraTokenClaims: async (_ctx, token) => (token.kind === 'AccessToken' ? { gid: token.grantId } : undefined),
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
        defaultResource: () => audience,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => {
          if (resource !== audience) throw new errors.InvalidTarget();
          return {
            scope: OIDC_SCOPES.join(' '),
            audience: audience,
            accessTokenTTL: TTL.AccessToken,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'HS256', key: accessTokenKey } },
          };
        },
      },
    },
  } satisfies Configuration;
}

export interface IssuerOptions {
  issuer: string;
  /** The access tokens' audience: the REST API and GraphQL of this gateway. */
  audience: string;
  db: Database;
  accessTokenKey: Buffer;
  cookieKeys: string[];
  /** Where oidc-provider's Client model reads clients (the oauth_client table). */
  clients: ClientSource;
  /** Path under which the login and consent pages are served (the issuer's path + /interaction). */
  interactionPath: string;
  /** avatarBase(PUBLIC_URL): the generated avatars behind `picture` (server/oidc/avatars.ts). */
  avatars: string;
}

/** oidc-provider's errors carry the detail outside error_description; clients only see error_description. */
function describe(err: { error?: string; error_description?: string; error_detail?: string; message?: string; cause?: unknown }): string | undefined {
  const cause = err.cause instanceof Error ? err.cause.message : undefined;
  if (err.error === 'invalid_grant' && cause) return `PKCE verification failed: ${cause}.`;
  return err.error_detail ?? err.error_description;
}

export function createProvider(o: IssuerOptions): Provider {
  const clients = o.clients;
  const users = new UserClaimsSource(o.db, o.avatars);
  const protocol = protocolConfiguration(o.audience, o.accessTokenKey);
  const configuration: Configuration = {
    adapter: postgresAdapter({ db: o.db, clients, users }),
    clients: [],
    async findAccount(_ctx, sub) {
      const user = await users.find(sub);
      if (!user) return undefined;
      return {
        accountId: sub,
        claims: () => user,
      };
    },
    ...protocol,
    cookies: { keys: o.cookieKeys },
    ttl: {
      ...TTL,
      // A rotated refresh token never outlives its grant: at most 14 days, and never past the grant's
      // expiry (so a chain ends when its grant does, 30 days after sign-in, with invalid_grant).
      RefreshToken: (ctx, _token, _client) => {
        const grant = (ctx?.oidc?.entities as { Grant?: { exp?: number } } | undefined)?.Grant;
        if (!grant?.exp) return TTL.RefreshToken;
        return Math.max(1, Math.min(TTL.RefreshToken, grant.exp - Math.floor(Date.now() / 1000) - 1));
      },
    },
    features: {
      ...protocol.features,
      revocation: {
        enabled: true,
        // RFC 7009 2.1: a token issued to another client is refused (the same rule as for JWTs in endpoints.ts).
        allowedPolicy: async (_ctx, client, token) => {
          if (token.clientId !== client.clientId) throw new errors.InvalidRequest(NOT_YOURS);
          return true;
        },
      },
    },
    // Browser calls to the token and userinfo endpoints only from the origins of a client's own redirect URIs.
    clientBasedCORS: (_ctx, origin, client) => (client.redirectUris ?? []).some((uri) => URL.parse(uri)?.origin === origin),
    interactions: {
      url: (_ctx, interaction) => `${o.interactionPath}/${interaction.uid}`,
    },
    // oidc-provider's own lookup (the consent given, else the session's grant for the client), plus one
    // case: the gateway's first-party panel gets its grant without a consent screen, the user's own
    // role still capping what its tokens do (server/oidc/access-tokens.ts). Every other client keeps
    // the consent page.
    loadExistingGrant: async (ctx) => {
      const client = ctx.oidc.client!;
      const session = ctx.oidc.session!;
      const grantId = ctx.oidc.result?.consent?.grantId || session.grantIdFor(client.clientId);
      const existing = grantId ? await ctx.oidc.provider.Grant.find(grantId) : undefined;
      if (existing || client.clientId !== PANEL_CLIENT_ID || !session.accountId) return existing;
      const grant = new ctx.oidc.provider.Grant({ clientId: client.clientId, accountId: session.accountId });
      grant.addOIDCScope(PUBLIC_CLIENT_SCOPES.join(' '));
      grant.addResourceScope(o.audience, PUBLIC_CLIENT_SCOPES.join(' '));
      await grant.save();
      return grant;
    },
    renderError: async (ctx, out) => {
      renderErrorPage(ctx, out);
    },
  };
  const provider = new Provider(o.issuer, configuration);

  // Refresh tokens are recognisable at a glance: `rt_` + 256 random bits.
  const rt = provider.RefreshToken.prototype as unknown as { generateTokenId(): string };
  const generate = rt.generateTokenId;
  rt.generateTokenId = function prefixed(this: unknown) {
    return `rt_${generate.call(this)}`;
  };

  // oidc-provider puts the detail of invalid_grant in error_detail, which clients never see.
  provider.on('grant.error', (ctx: KoaContextWithOIDC, err: Parameters<typeof describe>[0]) => {
    const body = ctx.body as Record<string, unknown> | undefined;
    if (!body || typeof body !== 'object') return;
    // A malformed code_verifier is still a failed PKCE verification for the client (section 7).
    if (err.error === 'invalid_request' && /code_verifier/.test(err.error_description ?? '')) {
      body.error = 'invalid_grant';
      body.error_description = `PKCE verification failed: ${err.error_description}.`;
      return;
    }
    const description = describe(err);
    if (description) body.error_description = description;
  });
  return provider;
}
