// The state the identity-provider client tests share: a real gateway on its own PostgreSQL database,
// an owner and a viewer who can sign in, a node to buy a tunnel on, and OAuth clients registered the
// way the admin CLI registers them. The admin CLI itself is run (as operators run it) for rotation.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createUser } from '../../server/domain/accounts.ts';
import { createClient } from '../../server/domain/clients.ts';
import type { ApiAccess } from '../../server/db/entities.ts';
import { setRate } from '../../server/domain/settings.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { seedNode } from './fixtures.ts';
import { startGateway, type RunningGateway } from './gateway.ts';
import { randomBytes } from 'node:crypto';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface TestUser {
  userId: string;
  accountId: string;
  email: string;
  password: string;
  name: string;
  picture: string;
}

export interface TestClient {
  id: string;
  secret: string;
  redirectUris: string[];
}

export interface OidcWorld {
  gw: RunningGateway;
  issuer: string;
  owner: TestUser;
  viewer: TestUser;
  newUser(role?: 'owner' | 'viewer'): Promise<TestUser>;
  /** apiAccess defaults to write here (the API tests need it); the product's default is none (docs/CONTRACTS.md "Admin CLI"). */
  newClient(redirectUris?: string[], apiAccess?: ApiAccess): Promise<TestClient>;
  /** The HS256 key of the gateway's access tokens, read from the database as the gateway reads it. */
  accessTokenKey(): Promise<Buffer>;
  close(): Promise<void>;
}

/** `gateway`: startGateway's options (configuration such as ALLOW_PRIVATE_WEBHOOKS, the request gate's clock) for a test that needs its own. */
export async function startOidcWorld(gateway: Parameters<typeof startGateway>[0] = {}): Promise<OidcWorld> {
  const gw = await startGateway(gateway);
  const db = gw.testDb.db;
  await seedNode(db, '198.18.0.0/28');
  await setRate(db, '90');
  const newUser = async (role: 'owner' | 'viewer' = 'owner'): Promise<TestUser> => {
    const email = `oidc-${randomBytes(4).toString('hex')}@example.test`;
    const password = `pw ${randomBytes(6).toString('hex')} horse staple`;
    const name = `User ${randomBytes(2).toString('hex')}`;
    const picture = `https://pictures.example.test/${randomBytes(3).toString('hex')}.png`;
    const u = await createUser(db, { email, name, password, role, picture, balanceUsd: '50.00' });
    return { userId: u.user_id, accountId: u.account_id, email, password, name, picture };
  };
  const newClient = async (redirectUris?: string[], apiAccess: ApiAccess = 'write'): Promise<TestClient> => {
    const uris = redirectUris ?? [`http://127.0.0.1:9/cb/${randomBytes(3).toString('hex')}`, `http://127.0.0.1:9/other/${randomBytes(3).toString('hex')}`];
    const { secretEncryptionKey } = (await loadSecrets(db, {})).secrets;
    const c = await createClient(db, secretEncryptionKey, { name: 'Independent client', redirectUris: uris, apiAccess });
    return { id: c.client_id, secret: c.client_secret, redirectUris: uris };
  };
  return {
    gw,
    issuer: gw.services.config.issuerUrl,
    owner: await newUser('owner'),
    viewer: await newUser('viewer'),
    newUser,
    newClient,
    accessTokenKey: async () => (await loadSecrets(db, {})).secrets.accessTokenKey,
    close: () => gw.close(),
  };
}

/** The real admin CLI against the world's database; resolves to its parsed stdout JSON. */
export function adminCli(databaseUrl: string, args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    execFile(
      path.join(ROOT, 'node_modules/.bin/node'),
      ['--import', './loader/register.mjs', 'server/cli/admin.ts', ...args],
      { cwd: ROOT, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', DATABASE_URL: databaseUrl }, timeout: 100_000 },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`admin ${args.join(' ')} failed: ${stderr || err.message}`));
        resolve(JSON.parse(stdout) as Record<string, unknown>);
      },
    );
  });
}
