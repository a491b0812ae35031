// What the soak runs on (docs/SOAK.md "Setup"): a PostgreSQL cluster of its own (test/helpers/private-postgres.ts,
// so restarting it hurts no one else), one fresh database migrated once, the edges' nodes registered with
// their agents' host keys, buyers with small balances and svc_ keys, a webhook per account to one verified
// receiver, and the gateway replicas as real processes. Everything is torn down by close(), whatever
// failed half-way.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Database } from '../server/db/database.ts';
import { migrate, openOrm } from '../server/db/orm.ts';
import { loadSecrets } from '../server/secrets.ts';
import { addBalance, createUser } from '../server/domain/accounts.ts';
import { createApiKey } from '../server/auth/api-keys.ts';
import { TestEdge } from '../test/helpers/edge.ts';
import { freePort } from '../test/helpers/ports.ts';
import { startPrivatePostgres, type PrivatePostgres } from '../test/helpers/private-postgres.ts';
import { RealEdge, type SoakEdge } from './edges.ts';
import { SoakGateway } from './gateways.ts';
import type { LoadAccount } from './load.ts';
import { VerifiedReceiver } from './webhooks.ts';

export interface RigOptions {
  gateways: number;
  realEdges: number;
  accounts: number;
  /** EDGE_RECONCILE_SECONDS of the gateways: the edge-state invariant's period. */
  reconcileSeconds: number;
  log: (msg: string) => void;
}

export class SoakRig {
  postgres: PrivatePostgres | null = null;
  db!: Database;
  /** The invariants' own connections, outside the code under test. */
  raw!: pg.Pool;
  readonly edges: SoakEdge[] = [];
  readonly gateways: SoakGateway[] = [];
  readonly accounts: LoadAccount[] = [];
  receiver!: VerifiedReceiver;
  priceUsd = 0;
  dbUrl = '';

  constructor(private readonly opts: RigOptions) {}

  async open(): Promise<void> {
    const { log } = this.opts;
    log('starting a private PostgreSQL cluster');
    this.postgres = await startPrivatePostgres();
    const admin = new pg.Client({ connectionString: this.postgres.url });
    await admin.connect();
    await admin.query('create database tunnelgate');
    await admin.end();
    this.dbUrl = this.postgres.urlFor('tunnelgate');
    this.db = new Database(await openOrm({ databaseUrl: this.dbUrl, dataDir: '', poolMax: 4 }));
    await migrate(this.db.orm);
    this.raw = new pg.Pool({ connectionString: this.dbUrl, max: 3 });
    // A restarting cluster ends idle connections: the pool drops them and opens new ones on the next query.
    this.raw.on('error', () => {});
    // The gateway processes load these very secrets from the database, so the agents trust them.
    const { secrets } = await loadSecrets(this.db, {});

    for (let i = 0; i < this.opts.realEdges; i++) {
      const edge = await TestEdge.create(this.db, secrets, `198.18.${i}.0/28`);
      await edge.start();
      this.edges.push(new RealEdge(edge));
      log(`edge ${edge.netns.name}: node ${edge.nodeId}, agent on 127.0.0.1:${edge.port}`);
    }

    this.receiver = await VerifiedReceiver.start();
    const common: Record<string, string> = {
      DATABASE_URL: this.dbUrl,
      HOST: '127.0.0.1',
      EDGE_WORKER: 'true',
      ALLOW_PRIVATE_WEBHOOKS: 'true',
      EDGE_RECONCILE_SECONDS: String(this.opts.reconcileSeconds),
      EDGE_STATUS_SECONDS: '15',
      EDGE_RETRY_LIMIT: '20',
      ACCESS_LOG: 'false',
      // info: the helper waits for the 'listening' line, logged at info.
      LOG_LEVEL: 'info',
      // The load's few clients are not what the rate limit guards against.
      RATE_LIMIT_PER_MINUTE: '1000000',
      RATE_LIMIT_BURST: '100000',
    };
    for (let i = 0; i < this.opts.gateways; i++) {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const gw = new SoakGateway(`gateway ${i + 1} (:${port})`, url, { ...common, PORT: String(port), PUBLIC_URL: url });
      await gw.start();
      this.gateways.push(gw);
      log(`${gw.label} listening`);
    }

    const pricing = (await (await fetch(`${this.gateways[0]!.url}/api/dedicated/pricing`)).json()) as { price_usd: number };
    this.priceUsd = pricing.price_usd;
    for (let i = 0; i < this.opts.accounts; i++) {
      const email = `soak-${i}-${randomBytes(3).toString('hex')}@example.test`;
      // A few purchases' worth, topped up now and then (load.ts); the first account has less than one
      // purchase and no top-up, so some purchases fail for lack of funds whatever the host's speed.
      const poor = i === 0;
      const balanceUsd = poor ? (this.priceUsd / 2).toFixed(2) : (this.priceUsd * 3).toFixed(2);
      const { user_id, account_id } = await createUser(this.db, { email, name: `Soak ${i}`, password: 'soak password only', balanceUsd, role: 'owner' });
      const writeKey = (await createApiKey(this.db, account_id, user_id, 'write')).key;
      this.accounts.push({ email, accountId: account_id, writeKey, topUp: !poor });
      const path = `/account-${i}`;
      const res = await fetch(`${this.gateways[0]!.url}/api/webhooks`, {
        method: 'POST',
        headers: { authorization: `Bearer ${writeKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ url: this.receiver.url(path) }),
      });
      const body = (await res.json()) as { webhook?: { id: string }; secret?: string };
      if (res.status !== 201 || !body.webhook || !body.secret) throw new Error(`webhook registration answered ${res.status}: ${JSON.stringify(body)}`);
      this.receiver.register(path, body.webhook.id, body.secret);
    }
    log(`${this.accounts.length} accounts (one with half a price and no top-ups, the others ${(this.priceUsd * 3).toFixed(2)} USD), price ${this.priceUsd} USD, one webhook each`);
  }

  topUp = async (email: string, usd: string): Promise<void> => {
    await addBalance(this.db, email, usd);
  };

  /** Runs `fn` in one read-only repeatable-read transaction: the safety checks see one instant. */
  snapshot = async <T>(fn: (db: pg.PoolClient) => Promise<T>): Promise<T> => {
    const c = await this.raw.connect();
    try {
      await c.query('begin isolation level repeatable read read only');
      const out = await fn(c);
      await c.query('commit');
      return out;
    } catch (e) {
      await c.query('rollback').catch(() => {});
      throw e;
    } finally {
      c.release();
    }
  };

  async close(): Promise<void> {
    const step = async (what: string, fn: () => Promise<unknown> | unknown) => {
      try {
        await fn();
      } catch (e) {
        this.opts.log(`teardown: ${what}: ${(e as Error).message}`);
      }
    };
    for (const g of this.gateways) await step(g.label, () => g.stop());
    for (const e of this.edges) await step(e.label, () => e.close());
    if (this.receiver) await step('webhook receiver', () => this.receiver.close());
    if (this.raw) await step('pool', () => this.raw.end());
    if (this.db) await step('orm', () => this.db.close());
    if (this.postgres) await step('postgres', () => this.postgres!.stop());
  }
}
