// Buying, listing, reading and deleting tunnels. REST, GraphQL and tests all call this service; the
// views it returns are the REST wire shapes of docs/CONTRACTS.md "REST shapes".
import { createHash, randomUUID } from 'node:crypto';
import { isCanonicalUuid, isUuid } from '../../common/names.ts';
import { Database, type Sql } from '../db/database.ts';
import type { TunnelStatus } from '../db/entities.ts';
import type { Principal } from '../auth/principal.ts';
import { requireWrite } from '../auth/principal.ts';
import { ApiError, notFound } from './errors.ts';
import { innerSubnet, IpError, isPublicUnicast, isUnicast, parseCidr, parseIPv4 } from './ip.ts';
import { centsToNumber, centsToString, dbToCents, kopecksToNumber, parseRate, rubToUsdCents } from './money.ts';
import { greMtu, isGreKeyCollision, pickGreKey, randomGreKey, type GreKeySource } from './gre-keys.ts';
import { renderOriginScripts, type OriginScripts } from './origin-scripts.ts';
import { PRICE_RUB_KOPECKS, type PricingService } from './pricing.ts';
import { discountedKopecks, normalizeCode, type PromocodeRow } from './promocodes.ts';

export interface TunnelView {
  id: string;
  name: string | null;
  protected_ip: string;
  origin_ip: string;
  ports: '*';
  protocol: 'both';
  tunnel_name: string;
  status: TunnelStatus;
  admin_ssh_port: number;
  edge_ip: string;
  created_at: string;
  updated_at: string;
}

export interface PurchaseResult {
  tunnel: TunnelView;
  charged: number;
  charged_usd: number;
  currency: 'RUB';
  balance_after: number;
  next_steps: { setup: string; provision: string };
}

export interface PurchaseInput {
  name: string | null;
  originIp: string;
  promocode: string | null;
}

export interface SetupView {
  tunnel_id: string;
  scripts: OriginScripts;
}

/** provision, activate and delete: the HTTP status (200 final, 202 still with the agent) and `{tunnel}`. */
export interface TunnelOutcome {
  status: 200 | 202;
  body: { tunnel: TunnelView };
}

/** What the tunnel service needs from provisioning (server/provisioning/service.ts). */
export interface EdgeDispatch {
  readonly bus: {
    publish(id: string, status: TunnelStatus): Promise<void>;
    on(id: string, fn: (c: { status: TunnelStatus }) => void): () => void;
    /** `fn` runs when notices may have been missed (see TunnelStatusBus.onResync). */
    onResync(fn: () => void): () => void;
    start(): Promise<void>;
  };
  readonly transitions: { move(id: string, from: readonly TunnelStatus[], to: TunnelStatus): Promise<boolean> };
  /** `change` makes the status move and says whether this call moved it (a repeat did not). */
  dispatch(tunnelId: string, nodeId: string, waitingIn: TunnelStatus, change: () => Promise<boolean>): Promise<void>;
  probe(tunnelId: string): Promise<{ reachable: boolean; rtt_ms?: number }>;
}

export interface TunnelPage {
  tunnels: TunnelView[];
  next_cursor: string | null;
}

interface TunnelRow {
  id: string;
  name: string | null;
  protected_ip: string;
  origin_ip: string;
  tunnel_name: string;
  status: TunnelStatus;
  inner_index: number;
  gre_key: string | null;
  created_at: string;
  updated_at: string;
  cursor_at: string;
  edge_ip: string;
  inner_pool: string;
  node_id: string;
}

// Times are formatted by PostgreSQL (ISO 8601, UTC, milliseconds) so the hot paths parse no dates;
// `cursor_at` keeps the full microsecond value for pagination.
const ISO = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;
const TUNNEL_COLUMNS = `t.id, t.name, t.protected_ip, t.origin_ip, t.tunnel_name, t.status, t.inner_index, t.gre_key::text as gre_key,
  to_char(t.created_at at time zone 'UTC', ${ISO}) as created_at, to_char(t.updated_at at time zone 'UTC', ${ISO}) as updated_at,
  to_json(t.created_at) #>> '{}' as cursor_at, n.public_ip as edge_ip, n.inner_pool, t.node_id`;

// --- input validation, shared by REST and GraphQL -------------------------------------------------

const NAME_MAX = 100;
const PROMO_MAX = 64;
/** How long an Idempotency-Key is remembered (README, "Idempotency"); purgeExpiredIdempotency drops older records. */
export const IDEMPOTENCY_TTL_DAYS = 7;

/** Deletes up to `batch` idempotency records older than IDEMPOTENCY_TTL_DAYS (by the created_at index); returns how many. */
export async function purgeExpiredIdempotency(db: Database, batch = 10_000): Promise<number> {
  const rows = await db.query(
    `delete from idempotency_record where ctid in (
       select ctid from idempotency_record where created_at < now() - make_interval(days => ?) limit ?)
     returning 1`,
    [IDEMPOTENCY_TTL_DAYS, batch],
  );
  return rows.length;
}

const IDEMPOTENCY_KEY_RE = /^[\x21-\x7e]{1,255}$/;

export function validateIdempotencyKey(key: string | null | undefined): string | null {
  if (key === undefined || key === null) return null;
  if (!IDEMPOTENCY_KEY_RE.test(key)) {
    throw new ApiError('invalid_request', 'Idempotency-Key must be 1 to 255 visible ASCII characters.');
  }
  return key;
}

export function validatePurchase(
  input: { name?: unknown; origin_ip?: unknown; promocode?: unknown },
  allowPrivateOrigins: boolean,
): PurchaseInput {
  const { name, origin_ip: originIp, promocode } = input;
  if (name !== undefined && name !== null) {
    if (typeof name !== 'string') throw new ApiError('invalid_request', 'name must be a string.');
    if (name.length > NAME_MAX) throw new ApiError('invalid_request', `name must be at most ${NAME_MAX} characters.`);
    if (/[\u0000-\u001f\u007f]/.test(name)) throw new ApiError('invalid_request', 'name must not contain control characters.');
  }
  if (originIp === undefined || originIp === null) throw new ApiError('invalid_request', 'origin_ip is required.');
  if (typeof originIp !== 'string') throw new ApiError('invalid_request', 'origin_ip must be a string.');
  const ip = parseIPv4(originIp);
  if (ip === null) throw new ApiError('invalid_origin_ip', `origin_ip must be a dotted-quad IPv4 address, got ${JSON.stringify(originIp.slice(0, 64))}.`);
  if (allowPrivateOrigins ? !isUnicast(ip) : !isPublicUnicast(ip)) {
    throw new ApiError('invalid_origin_ip', `origin_ip ${originIp} is not a public unicast address.`);
  }
  if (promocode !== undefined && promocode !== null) {
    if (typeof promocode !== 'string') throw new ApiError('invalid_request', 'promocode must be a string.');
    // Codes are [A-Z0-9_-] once normalized (createPromocode); anything else cannot exist, and a NUL
    // byte would reach PostgreSQL's text parameter as a 500 (found by test/fuzz/rest.test.ts).
    if (promocode.length === 0 || promocode.length > PROMO_MAX || !/^[A-Z0-9_-]+$/.test(normalizeCode(promocode))) {
      throw new ApiError('invalid_promocode', 'Unknown promocode.');
    }
  }
  const trimmed = typeof name === 'string' ? name.trim() : '';
  return {
    name: trimmed === '' ? null : trimmed,
    originIp,
    promocode: typeof promocode === 'string' ? promocode : null,
  };
}

/**
 * What `ip` is among our own addresses, or null: a protected IP of any pool (sold or not) or an edge's
 * public or SSH address. A tunnel to one of them loops GRE between the edge and its upstream (issue 8
 * item 7; docs/CONTRACTS.md "REST errors" `invalid_origin_ip`). Edge SSH hosts given as names are not resolved.
 */
async function ourAddress(sql: Pick<Sql, 'query'>, ip: string): Promise<string | null> {
  const [row] = await sql.query<{ what: string }>(
    `select 'a protected IP of ours' as what from protected_ip where ip = ?
     union all select 'an edge router''s address' from edge_node where public_ip = ? or ssh_host = ?
     limit 1`,
    [ip, ip, ip],
  );
  return row ? row.what : null;
}

async function refuseOurAddress(sql: Pick<Sql, 'query'>, ip: string): Promise<void> {
  const ours = await ourAddress(sql, ip);
  if (ours) throw new ApiError('invalid_origin_ip', `origin_ip ${ip} is ${ours}, not an origin server; give your origin server's own public address.`);
}

/** Stable digest of what was asked for, so a retried key can be told apart from a reused one. */
function requestHash(input: PurchaseInput): string {
  const canonical = JSON.stringify([input.name, input.originIp, input.promocode === null ? null : normalizeCode(input.promocode)]);
  return createHash('sha256').update(canonical).digest('hex');
}

// --- the service -------------------------------------------------------------------------------------

/** Linux interface names are at most 15 bytes; `tg-` plus 10 base-32 characters is 13. */
export function tunnelNameFor(id: string): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567';
  const bytes = Buffer.from(id.replace(/-/g, ''), 'hex');
  let bits = 0n;
  for (const b of bytes.subarray(0, 7)) bits = (bits << 8n) | BigInt(b);
  let out = '';
  // The 50 leading bits of the id, most significant first.
  for (let i = 1; i <= 10; i++) out += alphabet[Number((bits >> BigInt(56 - 5 * i)) & 31n)];
  return `tg-${out}`;
}

/** A policy-routing table number on the origin, distinct per tunnel and clear of the reserved 253-255. */
export function routeTableFor(id: string): number {
  return 1_000_000 + Number.parseInt(id.replace(/-/g, '').slice(0, 5), 16);
}

interface StoredOutcome {
  status: number;
  body: PurchaseResult | { error: string; error_description: string };
}

class PurchaseRefused extends Error {
  constructor(readonly error: ApiError) {
    super(error.message);
  }
}

export class TunnelService {
  constructor(
    private readonly db: Database,
    private readonly pricing: PricingService,
    private readonly opts: {
      adminSshPort: number;
      allowPrivateOrigins: boolean;
      /** Where GRE keys come from (server/domain/gre-keys.ts); tests inject one that collides. */
      greKeys?: GreKeySource;
    },
    private readonly edge: EdgeDispatch,
  ) {}

  get allowPrivateOrigins(): boolean {
    return this.opts.allowPrivateOrigins;
  }

  private view(r: TunnelRow): TunnelView {
    return {
      id: r.id,
      name: r.name,
      protected_ip: r.protected_ip,
      origin_ip: r.origin_ip,
      ports: '*',
      protocol: 'both',
      tunnel_name: r.tunnel_name,
      status: r.status,
      admin_ssh_port: this.opts.adminSshPort,
      edge_ip: r.edge_ip,
      created_at: r.created_at,
      updated_at: r.updated_at,
    };
  }

  private async row(sql: Pick<Sql, 'query'> | Database, principal: Principal, id: string, lock = false): Promise<TunnelRow> {
    if (!isUuid(id)) throw notFound();
    const text = `select ${TUNNEL_COLUMNS} from tunnel t join edge_node n on n.id = t.node_id
        where t.id = ? and t.account_id = ?${lock ? ' for update of t' : ''}`;
    const params = [id.toLowerCase(), principal.accountId];
    // Plain reads outside a transaction take the prepared-statement path.
    const rows = sql instanceof Database && !lock ? await sql.hot<TunnelRow>('tunnel_get', text, params) : await sql.query<TunnelRow>(text, params);
    // Another account's tunnel is indistinguishable from a missing one.
    if (!rows[0]) throw notFound();
    return rows[0];
  }

  /**
   * One transaction: lock the account, check the promocode and the balance, take one free protected
   * IP with SKIP LOCKED, debit, write the ledger row, create the tunnel. With an Idempotency-Key the
   * outcome (success or refusal) is stored in the same transaction and replayed for the same request.
   */
  async purchase(principal: Principal, input: PurchaseInput, idempotencyKey: string | null): Promise<{ status: number; body: PurchaseResult }> {
    requireWrite(principal);
    const hash = requestHash(input);
    // Two concurrent purchases for one (node, origin) pair can draw the same GRE key unseen by each other
    // (2^-32); the unique index refuses the second tunnel and its whole transaction rolls back: nothing
    // was charged, the Idempotency-Key was not claimed. It is then run once more, and sees the first one's
    // key (issue 16).
    let outcome: StoredOutcome;
    try {
      outcome = await this.purchaseOnce(principal, input, idempotencyKey, hash);
    } catch (e) {
      if (!isGreKeyCollision(e)) throw e;
      outcome = await this.purchaseOnce(principal, input, idempotencyKey, hash);
    }
    if (outcome.status !== 201) {
      const body = outcome.body as { error: ConstructorParameters<typeof ApiError>[0]; error_description: string };
      throw new ApiError(body.error, body.error_description);
    }
    this.pricing.invalidate();
    return { status: 201, body: outcome.body as PurchaseResult };
  }

  /** One attempt of purchase(), in one transaction. */
  private purchaseOnce(principal: Principal, input: PurchaseInput, idempotencyKey: string | null, hash: string): Promise<StoredOutcome> {
    return this.db.transaction(async (sql): Promise<StoredOutcome> => {
      // The account row is locked first: the idempotency insert below takes a FOR KEY SHARE lock on it
      // (foreign key), and two purchases that each held that and then asked for FOR UPDATE deadlocked
      // (seen with concurrent keyed retries after a PostgreSQL restart).
      await sql.query('select 1 from account where id = ? for update', [principal.accountId]);
      if (idempotencyKey !== null) {
        // Records are kept IDEMPOTENCY_TTL_DAYS (README): an older one is gone, and its key is new again.
        await sql.query(`delete from idempotency_record where account_id = ? and key = ? and created_at < now() - make_interval(days => ?)`, [
          principal.accountId,
          idempotencyKey,
          IDEMPOTENCY_TTL_DAYS,
        ]);
        // A concurrent twin blocks here until the first commits or rolls back.
        const claimed = await sql.query(
          `insert into idempotency_record (account_id, key, request_hash, status_code, body) values (?, ?, ?, 0, '{}')
           on conflict (account_id, key) do nothing returning key`,
          [principal.accountId, idempotencyKey, hash],
        );
        if (claimed.length === 0) {
          const [prev] = await sql.query<{ request_hash: string; status_code: number; body: StoredOutcome['body'] }>(
            'select request_hash, status_code, body from idempotency_record where account_id = ? and key = ?',
            [principal.accountId, idempotencyKey],
          );
          if (prev!.request_hash !== hash) {
            throw new ApiError('idempotency_mismatch', 'This Idempotency-Key was already used with a different request body.');
          }
          return { status: prev!.status_code, body: prev!.body };
        }
      }
      // After the replay lookup (a replay answers as the first time did), before anything is bought.
      // Thrown, so the transaction rolls back and the key stays unused: a refusal of the input, like
      // validatePurchase's, not a purchase outcome to replay.
      await refuseOurAddress(sql, input.originIp);
      let result: StoredOutcome;
      try {
        result = { status: 201, body: await this.buy(sql, principal, input) };
      } catch (e) {
        if (!(e instanceof PurchaseRefused)) throw e;
        result = { status: e.error.status, body: e.error.body };
      }
      if (idempotencyKey !== null) {
        await sql.query('update idempotency_record set status_code = ?, body = ? where account_id = ? and key = ?', [
          result.status,
          JSON.stringify(result.body),
          principal.accountId,
          idempotencyKey,
        ]);
      }
      return result;
    });
  }

  /** The purchase proper. Refusals are thrown as PurchaseRefused before anything is written. */
  private async buy(sql: Sql, principal: Principal, input: PurchaseInput): Promise<PurchaseResult> {
    const [account] = await sql.query<{ balance_usd: string; rate: string }>(
      `select balance_usd, (select value from setting where key = 'usd_rub_rate') as rate
         from account where id = ? for update`,
      [principal.accountId],
    );
    if (!account) throw new ApiError('invalid_token', 'The account of this credential no longer exists.', { 'WWW-Authenticate': 'Bearer error="invalid_token"' });
    const rate = parseRate(account.rate);

    let kopecks = PRICE_RUB_KOPECKS;
    let promo: string | null = null;
    if (input.promocode !== null) {
      promo = normalizeCode(input.promocode);
      const [row] = await sql.query<PromocodeRow>(
        `select code, percent, amount_rub, max_uses, uses, expires_at < now() as expired
           from promocode where code = ? for update`,
        [promo],
      );
      if (!row) throw new PurchaseRefused(new ApiError('invalid_promocode', `Unknown promocode ${JSON.stringify(input.promocode)}.`));
      if (row.expired) throw new PurchaseRefused(new ApiError('invalid_promocode', `Promocode ${row.code} has expired.`));
      if (row.max_uses !== null && row.uses >= row.max_uses) {
        throw new PurchaseRefused(new ApiError('invalid_promocode', `Promocode ${row.code} has been used up.`));
      }
      kopecks = discountedKopecks(PRICE_RUB_KOPECKS, row);
    }
    const charge = rubToUsdCents(kopecks, rate);
    const balance = dbToCents(account.balance_usd);
    if (balance < charge) {
      throw new PurchaseRefused(
        new ApiError('insufficient_balance', `The price is ${centsToString(charge)} USD and the balance is ${centsToString(balance)} USD; nothing was charged.`),
      );
    }
    // Only nodes the gateway can provision: sellable, with a pinned host key (an IP on a node that is
    // never contacted would end `failed`; issue 8 item 5). The IP brings its inner /30 number, unique
    // across nodes since node add (issue 8 item 6), so the row lock covers that allocation too.
    const [ipRow] = await sql.query<{ ip: string; node_id: string; inner_index: number }>(
      `select p.ip, p.node_id, p.inner_index from protected_ip p join edge_node n on n.id = p.node_id
        where p.tunnel_id is null and n.sellable and n.host_key is not null
        order by p.position, p.ip limit 1 for update of p skip locked`,
    );
    if (!ipRow) throw new PurchaseRefused(new ApiError('out_of_stock', 'No protected IP is free right now; nothing was charged.'));

    // A key unused by this node's live tunnels to the same origin: GRE links are unique by local,
    // remote and key, so it is what lets any number of tunnels share an origin on one edge.
    const greKey = await pickGreKey(sql, ipRow.node_id, input.originIp, this.opts.greKeys ?? randomGreKey);

    const id = randomUUID();
    const tunnelName = tunnelNameFor(id);
    await sql.query('update protected_ip set tunnel_id = ? where ip = ?', [id, ipRow.ip]);
    const [after] = await sql.query<{ balance_usd: string }>(
      'update account set balance_usd = balance_usd - ? where id = ? returning balance_usd',
      [centsToString(charge), principal.accountId],
    );
    await sql.query(
      `insert into ledger_entry (account_id, amount_usd, balance_after, kind, tunnel_id, promocode) values (?, ?, ?, 'purchase', ?, ?)`,
      [principal.accountId, centsToString(-charge), after!.balance_usd, id, promo],
    );
    if (promo !== null) await sql.query('update promocode set uses = uses + 1 where code = ?', [promo]);
    await sql.query(
      `insert into tunnel (id, account_id, node_id, name, protected_ip, origin_ip, tunnel_name, inner_index, gre_key, status, charged_usd, charged_rub)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)`,
      [id, principal.accountId, ipRow.node_id, input.name, ipRow.ip, input.originIp, tunnelName, ipRow.inner_index, greKey, centsToString(charge), centsToString(kopecks)],
    );
    const row = await this.row(sql, principal, id);
    return {
      tunnel: this.view(row),
      charged: kopecksToNumber(kopecks),
      charged_usd: centsToNumber(charge),
      currency: 'RUB',
      balance_after: centsToNumber(dbToCents(after!.balance_usd)),
      next_steps: { setup: `/api/dedicated/${id}/setup`, provision: `/api/dedicated/${id}/provision` },
    };
  }

  async get(principal: Principal, id: string): Promise<TunnelView> {
    return this.view(await this.row(this.db, principal, id));
  }

  /** Newest first; deleted tunnels are left out. The cursor is opaque to clients. */
  async list(principal: Principal, opts: { limit?: number; cursor?: string | null } = {}): Promise<TunnelPage> {
    const limit = opts.limit ?? 20;
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new ApiError('invalid_request', 'limit must be an integer from 1 to 100.');
    const params: unknown[] = [principal.accountId];
    let after = '';
    if (opts.cursor) {
      const c = decodeCursor(opts.cursor);
      after = ' and (t.created_at, t.id) < (?::timestamptz, ?::uuid)';
      params.push(c.createdAt, c.id);
    }
    params.push(limit + 1);
    // Only the columns a view shows, each row as an array, times as PostgreSQL's plain text output:
    // to_char() cost the database more than the rest of this query (measured), so the reshaping to
    // ISO 8601 happens here (utcText), with the same millisecond truncation as TUNNEL_COLUMNS.
    // Shared with identical list requests still waiting for a connection (see hotRowsShared): each
    // caller is authenticated and rate-limited on its own, and still reads a snapshot from after it asked.
    const rows = (await this.db.hotRowsShared(
      after ? 'tunnel_list_rows_after' : 'tunnel_list_rows',
      `select t.id, t.name, t.protected_ip, t.origin_ip, t.tunnel_name, t.status,
              (t.created_at at time zone 'UTC')::text, (t.updated_at at time zone 'UTC')::text, n.public_ip
         from tunnel t join edge_node n on n.id = t.node_id
        where t.account_id = ? and t.status <> 'deleted'${after}
        order by t.created_at desc, t.id desc limit ?`,
      params,
    )) as ListRow[];
    // Callers that shared the rows share the page built from them too (callers must not modify it).
    let page = this.pages.get(rows);
    if (!page) this.pages.set(rows, (page = this.listPage(rows, limit)));
    return page;
  }

  private readonly pages = new WeakMap<ListRow[], TunnelPage>();

  private listPage(rows: ListRow[], limit: number): TunnelPage {
    const n = Math.min(rows.length, limit);
    const tunnels: TunnelView[] = new Array(n);
    for (let i = 0; i < n; i++) {
      const r = rows[i]!;
      tunnels[i] = {
        id: r[0],
        name: r[1],
        protected_ip: r[2],
        origin_ip: r[3],
        ports: '*',
        protocol: 'both',
        tunnel_name: r[4],
        status: r[5],
        admin_ssh_port: this.opts.adminSshPort,
        edge_ip: r[8],
        created_at: utcText(r[6]).millis,
        updated_at: utcText(r[7]).millis,
      };
    }
    const last = rows.length > limit ? rows[limit - 1] : undefined;
    return { tunnels, next_cursor: last ? encodeCursor(utcText(last[6]).micros, last[0]) : null };
  }

  async setup(principal: Principal, id: string): Promise<SetupView> {
    const r = await this.row(this.db, principal, id);
    if (r.status === 'deleted' || r.status === 'deleting') {
      throw new ApiError('invalid_state', `Tunnel ${id} is ${r.status}; it has no setup scripts.`);
    }
    // Stored data from before these checks existed (an origin that is one of our addresses, an inner
    // number outside the pool) is the tunnel's state, not a server fault: 409 with what to do, never 500.
    const ours = await ourAddress(this.db, r.origin_ip);
    if (ours) {
      throw new ApiError('invalid_state', `Tunnel ${r.id}: its origin_ip ${r.origin_ip} is ${ours}, not an origin server; delete this tunnel and buy one with your origin's address.`);
    }
    let scripts: OriginScripts;
    try {
      const inner = innerSubnet(parseCidr(r.inner_pool), r.inner_index);
      scripts = renderOriginScripts({
        tunnelId: r.id,
        tunnelName: r.tunnel_name,
        protectedIp: r.protected_ip,
        originIp: r.origin_ip,
        edgeIp: r.edge_ip,
        edgeInner: inner.edgeInner,
        originInner: inner.originInner,
        mtu: greMtu(r.gre_key === null ? null : Number(r.gre_key)),
        greKey: r.gre_key === null ? null : Number(r.gre_key),
        routeTable: routeTableFor(r.id),
      });
    } catch (e) {
      // renderOriginScripts refuses bad values with a TypeError naming the field ("origin script: ...").
      if (!(e instanceof IpError || (e instanceof TypeError && e.message.startsWith('origin script:')))) throw e;
      throw new ApiError('invalid_state', `Tunnel ${r.id} cannot have origin scripts as stored (${e.message}); delete it and buy another.`);
    }
    return { tunnel_id: r.id, scripts };
  }

  /**
   * pending or failed -> provisioning, then the edge job is queued; waits a few seconds for the agent.
   * 200 with the final status when it answered in time, 202 with `provisioning` while the job keeps
   * retrying. A repeated call on a tunnel still provisioning queues nothing while its job is live and
   * answers the current state (docs/CONTRACTS.md "Tunnel lifecycle"); any other status is 409.
   */
  async provision(principal: Principal, id: string): Promise<TunnelOutcome> {
    requireWrite(principal);
    const r = await this.row(this.db, principal, id);
    if (!['pending', 'failed', 'provisioning'].includes(r.status)) {
      throw new ApiError('invalid_state', `Tunnel ${r.id} is ${r.status}; only a pending or failed tunnel can be provisioned.`);
    }
    await this.edge.dispatch(r.id, r.node_id, 'provisioning', async () => {
      if (r.status === 'provisioning') return false;
      const moved = await this.edge.transitions.move(r.id, ['pending', 'failed'], 'provisioning');
      if (!moved) {
        // Someone else moved it first (a concurrent provision or delete): answer from what it is now.
        const now = await this.row(this.db, principal, id);
        if (now.status !== 'provisioning') throw new ApiError('invalid_state', `Tunnel ${r.id} is ${now.status}; only a pending or failed tunnel can be provisioned.`);
      }
      return moved;
    });
    return this.outcome(principal, id, 'provisioning');
  }

  /**
   * provisioned -> active when the agent's probe sees the origin answer through the tunnel. No answer:
   * 409 invalid_state telling the buyer to run the origin script. The agent unreachable: 503.
   */
  async activate(principal: Principal, id: string): Promise<TunnelOutcome> {
    requireWrite(principal);
    const r = await this.row(this.db, principal, id);
    if (r.status !== 'provisioned') {
      throw new ApiError(
        'invalid_state',
        r.status === 'active' ? `Tunnel ${r.id} is already active.` : `Tunnel ${r.id} is ${r.status}; only a provisioned tunnel can be activated (provision it first).`,
      );
    }
    const probe = await this.edge.probe(r.id);
    if (!probe.reachable) {
      throw new ApiError(
        'invalid_state',
        `Tunnel ${r.id}: the origin ${r.origin_ip} did not answer through the tunnel. Run the origin script (GET /api/dedicated/${r.id}/setup, scripts.origin) on the origin server as root, then activate again.`,
      );
    }
    const moved = await this.edge.transitions.move(r.id, ['provisioned'], 'active');
    const now = await this.row(this.db, principal, id);
    if (!moved && now.status !== 'active') throw new ApiError('invalid_state', `Tunnel ${r.id} is ${now.status}; only a provisioned tunnel can be activated.`);
    return { status: 200, body: { tunnel: this.view(now) } };
  }

  /**
   * A tunnel that never reached the edge (pending) is deleted at once and its IP returns to the pool.
   * Any other live tunnel goes to `deleting` and the agent removes it; the IP returns to the pool only
   * once the agent confirmed (200 `deleted` in time, else 202 `deleting`). The purchase is one-time
   * and not refunded.
   */
  async delete(principal: Principal, id: string): Promise<TunnelOutcome> {
    requireWrite(principal);
    const immediate = await this.db.transaction(async (sql) => {
      const r = await this.row(sql, principal, id, true);
      if (r.status === 'deleted') throw new ApiError('invalid_state', `Tunnel ${r.id} is already deleted.`);
      if (r.status !== 'pending') return { row: r, done: false };
      await sql.query(`update tunnel set status = 'deleted', updated_at = now() where id = ?`, [r.id]);
      await sql.query('update protected_ip set tunnel_id = null where tunnel_id = ?', [r.id]);
      return { row: await this.row(sql, principal, id), done: true };
    });
    if (immediate.done) {
      this.pricing.invalidate();
      await this.edge.bus.publish(immediate.row.id, 'deleted');
      return { status: 200, body: { tunnel: this.view(immediate.row) } };
    }
    const r = immediate.row;
    await this.edge.dispatch(r.id, r.node_id, 'deleting', async () => {
      if (r.status === 'deleting') return false;
      const moved = await this.edge.transitions.move(r.id, ['provisioning', 'provisioned', 'active', 'failed'], 'deleting');
      if (!moved) {
        const now = await this.row(this.db, principal, id);
        if (now.status !== 'deleting') throw new ApiError('invalid_state', `Tunnel ${r.id} is ${now.status}; try again.`);
      }
      return moved;
    });
    return this.outcome(principal, id, 'deleting');
  }

  /**
   * The tunnel now, then again each time its status changes (from any replica), until it is deleted or
   * the consumer stops. Access is checked once, up front, like get().
   */
  async *watch(principal: Principal, id: string): AsyncGenerator<TunnelView> {
    await this.edge.bus.start();
    const pending: TunnelStatus[] = [];
    let resync = false;
    let wake: (() => void) | null = null;
    // Subscribe before the first read, so a change between the two is not lost.
    const off = this.edge.bus.on(id.toLowerCase(), (c) => {
      pending.push(c.status);
      wake?.();
    });
    // Notices may have been missed (this replica's LISTEN connection dropped): read the row again.
    const offResync = this.edge.bus.onResync(() => {
      resync = true;
      wake?.();
    });
    try {
      let last = this.view(await this.row(this.db, principal, id));
      yield last;
      while (last.status !== 'deleted') {
        if (pending.length === 0 && !resync) await new Promise<void>((r) => (wake = r));
        wake = null;
        // Every change in the order it happened, even when two came before this loop woke up: the row
        // is read fresh for the other fields, the status is the one each notice announced. After a
        // resync the row's own status comes last: it is at least as new as any notice.
        const fresh = this.view(await this.row(this.db, principal, id));
        if (resync) {
          resync = false;
          pending.push(fresh.status);
        }
        for (const status of pending.splice(0)) {
          if (status === last.status) continue;
          last = { ...fresh, status };
          yield last;
        }
      }
    } finally {
      off();
      offResync();
    }
  }

  /** 202 while the tunnel is still in `waiting` (the job keeps retrying), 200 with its status otherwise. */
  private async outcome(principal: Principal, id: string, waiting: TunnelStatus): Promise<TunnelOutcome> {
    const now = await this.row(this.db, principal, id);
    return { status: now.status === waiting ? 202 : 200, body: { tunnel: this.view(now) } };
  }
}

/** A list row: id, name, protected_ip, origin_ip, tunnel_name, status, created_at, updated_at (UTC text), edge_ip. */
type ListRow = [string, string | null, string, string, string, TunnelStatus, string, string, string];

const UTC_TEXT = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?$/;

/**
 * `timestamp::text` in DateStyle ISO ("2026-11-21 02:25:01.1234", fraction trimmed) as ISO 8601 UTC:
 * milliseconds (truncated, as to_char's MS) for views, microseconds for cursors.
 */
export function utcText(text: string): { millis: string; micros: string } {
  const m = UTC_TEXT.exec(text);
  if (!m) throw new Error(`unexpected timestamp text from the database: ${text}`);
  const frac = (m[3] ?? '').padEnd(6, '0');
  const head = `${m[1]}T${m[2]}.`;
  return { millis: `${head}${frac.slice(0, 3)}Z`, micros: `${head}${frac}Z` };
}

function encodeCursor(createdAt: string, id: string): string {
  return Buffer.from(JSON.stringify([createdAt, id])).toString('base64url');
}

/**
 * Only the shape encodeCursor writes, and a real instant PostgreSQL accepts: Date.parse also takes
 * 2026-02-30 (as March 2) or year 0, which the `::timestamptz` cast refuses with a 500 (found by
 * test/fuzz/rest.test.ts; regression in test/fuzz/regressions.test.ts).
 */
function issuedCursorTime(text: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/.test(text) || text.startsWith('0000')) return false;
  const d = new Date(text);
  return !Number.isNaN(d.getTime()) && d.toISOString().slice(0, 19) === text.slice(0, 19);
}

function decodeCursor(cursor: string): { createdAt: string; id: string } {
  try {
    const [createdAt, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown[];
    if (typeof createdAt === 'string' && typeof id === 'string' && issuedCursorTime(createdAt) && isCanonicalUuid(id)) {
      return { createdAt, id };
    }
  } catch {
    // fall through
  }
  throw new ApiError('invalid_request', 'cursor is not one this API issued.');
}
