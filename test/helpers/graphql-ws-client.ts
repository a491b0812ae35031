// A raw graphql-transport-ws client over the `ws` library, so tests see every frame and close code (no
// client library in between that would retry, reconnect or hide a refusal).
import { randomBytes, randomUUID } from 'node:crypto';
import { SignJWT } from 'jose';
import WebSocket from 'ws';
import { loadSecrets } from '../../server/secrets.ts';
import type { SeededUser } from './fixtures.ts';
import type { RunningGateway } from './gateway.ts';

export const PROTOCOL = 'graphql-transport-ws';
/** Safety bound for anything awaited here; never an assertion on time. */
export const DEADLINE_MS = 15_000;

export interface Frame {
  type: string;
  id?: string;
  payload?: unknown;
}

/** One raw graphql-transport-ws connection: frames in arrival order and the close code. */
export class Socket {
  readonly frames: Frame[] = [];
  readonly closed: Promise<{ code: number; reason: string }>;
  private waiters: Array<() => void> = [];

  constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      this.frames.push(JSON.parse(String(data)) as Frame);
      for (const w of this.waiters.splice(0)) w();
    });
    this.closed = new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
    void this.closed.then(() => {
      for (const w of this.waiters.splice(0)) w();
    });
  }

  send(frame: Frame): void {
    this.ws.send(JSON.stringify(frame));
  }

  /** The first frame matching `pred`, or null if the socket closes first. */
  async next(pred: (f: Frame) => boolean): Promise<Frame | null> {
    for (;;) {
      const hit = this.frames.find(pred);
      if (hit) return hit;
      if (this.ws.readyState === WebSocket.CLOSED) return null;
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  /** connection_init with this Authorization; resolves to 'ack' or the close code. */
  async init(authorization?: string, extra: Record<string, unknown> = {}): Promise<'ack' | number> {
    this.send({ type: 'connection_init', payload: { ...(authorization ? { Authorization: authorization } : {}), ...extra } });
    const ack = await Promise.race([this.next((f) => f.type === 'connection_ack'), this.closed]);
    if (ack && 'type' in ack) return 'ack';
    return (await this.closed).code;
  }
}

/** Opens a socket; resolves to it, or to the HTTP status the upgrade was refused with. */
export function open(gw: RunningGateway): Promise<Socket | number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${gw.url.replace('http', 'ws')}/graphql`, PROTOCOL);
    const timer = setTimeout(() => reject(new Error('no answer to the upgrade')), DEADLINE_MS);
    ws.once('open', () => {
      clearTimeout(timer);
      resolve(new Socket(ws));
    });
    ws.once('unexpected-response', (_req, res) => {
      clearTimeout(timer);
      resolve(res.statusCode ?? 0);
      res.resume();
      ws.terminate();
    });
    ws.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

export async function connect(gw: RunningGateway): Promise<Socket> {
  const s = await open(gw);
  if (typeof s === 'number') throw new Error(`upgrade refused with ${s}`);
  return s;
}

/** Resolves to the close code, or 'open' if the socket is still open after the safety bound. */
export function closeCode(s: Socket): Promise<number | 'open'> {
  return Promise.race([s.closed.then((c) => c.code), new Promise<'open'>((r) => setTimeout(() => r('open'), DEADLINE_MS).unref())]);
}

/**
 * An access token as the issuer signs one (HS256 with the gateway's key, typ at+jwt) for a grant
 * stored the way oidc-provider stores it; the verifier under test is the real one.
 */
export async function issueAccessToken(gw: RunningGateway, u: SeededUser, expiresInS: number, apiAccess: 'none' | 'read' | 'write' = 'write'): Promise<{ token: string; grantId: string; clientId: string }> {
  const { accessTokenKey } = (await loadSecrets(gw.testDb.db, {})).secrets;
  const grantId = randomUUID().replace(/-/g, '');
  const clientId = `client-${randomBytes(4).toString('hex')}`;
  // The client as `client create --api-access <apiAccess>` registers it: only such a client's tokens reach
  // the API (docs/CONTRACTS.md "Admin CLI"). Its secret is never used here.
  await gw.testDb.raw.query(
    `insert into oauth_client (client_id, name, redirect_uris, secret_ciphertext, api_access) values ($1, 'ws test', '["https://app.example/cb"]', 'unused', $2)`,
    [clientId, apiAccess],
  );
  await gw.testDb.raw.query(
    `insert into oidc_payload (kind, id, payload, client_id, expires_at) values ('Grant', $1, $2, $3, now() + interval '1 day')`,
    [grantId, JSON.stringify({ accountId: u.userId, clientId, kind: 'Grant', jti: grantId }), clientId],
  );
  const now = Math.floor(Date.now() / 1000);
  const token = await new SignJWT({ client_id: clientId, scope: 'openid profile email', gid: grantId })
    .setProtectedHeader({ alg: 'HS256', typ: 'at+jwt' })
    .setIssuer(gw.services.config.issuerUrl)
    .setAudience(`${gw.services.config.publicUrl}/api`)
    .setSubject(u.userId)
    .setIssuedAt(now)
    .setExpirationTime(now + expiresInS)
    .setJti(randomUUID())
    .sign(accessTokenKey);
  return { token, grantId, clientId };
}

