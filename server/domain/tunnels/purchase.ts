// Buying a tunnel: one transaction that locks the account, replays or claims the Idempotency-Key, checks
// the promocode and the balance, takes a free protected IP and a GRE key, debits, writes the ledger row
// and creates the tunnel (`pending`). Also the expiry of idempotency records.
//
// An Idempotency-Key remembers purchases only. A refusal (402 insufficient_balance, 409 out_of_stock,
// 400 invalid_promocode) changed nothing and may succeed later (after a top-up, once stock is added,
// once the code exists or has uses left), so it rolls back with the claim of the key: the same request
// with the same key tries again. Remembering refusals made a fixed problem look unfixed for the whole
// life of the key (docs/CONTRACTS.md "REST shapes").
import { randomUUID } from 'node:crypto';
import type { Database, Sql } from '../../db/database.ts';
import type { Principal } from '../../auth/principal.ts';
import { requireWrite } from '../../auth/principal.ts';
import { ApiError } from '../errors.ts';
import { centsToNumber, centsToString, dbToCents, kopecksToNumber, parseRate, rubToUsdCents } from '../money.ts';
import { drawGreKey, isGreKeyCollision, pickGreKey, randomGreKey, type GreKeySource } from '../gre-keys.ts';
import { PRICE_RUB_KOPECKS, type PricingService } from '../pricing.ts';
import { discountedKopecks, normalizeCode, type PromocodeRow } from '../promocodes.ts';
import { OUR_ADDRESS_SQL, refuseIfOurs, requestHash, type PurchaseInput } from './input.ts';
import { tunnelNameFor } from './naming.ts';
import { DEFAULT_SETTINGS, settingsValues } from './settings.ts';
import { TUNNEL_COLUMNS, tunnelView, type TunnelRow, type TunnelView } from './rows.ts';

/** What was bought and charged. REST adds `next_steps` (server/http/rest/paths.ts). */
export interface Purchase {
  tunnel: TunnelView;
  charged: number;
  charged_usd: number;
  currency: 'RUB';
  balance_after: number;
}

export interface PurchaseOutcome {
  purchase: Purchase;
  /** True when an Idempotency-Key replayed an earlier purchase: nothing was charged this time. */
  replayed: boolean;
}

/** How long an Idempotency-Key is remembered (docs/API.md "Idempotency"); purgeExpiredIdempotency drops older records. */
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

/**
 * The REST status an idempotency record holds for a purchase: records hold purchases only (201 with the
 * purchase; older records' bodies also carry next_steps, which the adapters rebuild from the tunnel id to
 * the same value). Records written by earlier versions may hold a refusal's status and error body: those
 * are dropped when their key is used again, as if expired.
 */
const CREATED = 201;

/**
 * A stored purchase as it replays. A purchase recorded before tunnel settings existed has a tunnel without
 * `protection`, and one recorded before the attack settings a `protection` without `max_flows` and `alert_pps`:
 * it had the defaults, which every tunnel object shows now (docs/CONTRACTS.md "REST shapes"), so they are
 * filled in; everything recorded is kept as it was.
 */
function recorded(p: Purchase): Purchase {
  if (p.tunnel === undefined) return p;
  const { ports, protocol, protection } = DEFAULT_SETTINGS;
  const had = p.tunnel.protection as Partial<typeof protection> | undefined;
  if (had !== undefined && had.max_flows !== undefined && had.alert_pps !== undefined) return p;
  return { ...p, tunnel: { ...p.tunnel, ports: p.tunnel.ports ?? ports, protocol: p.tunnel.protocol ?? protocol, protection: { ...protection, ...had } } };
}

export interface PurchaseDeps {
  db: Database;
  pricing: PricingService;
  adminSshPort: number;
  /** Where GRE keys come from (server/domain/gre-keys.ts); tests inject one that collides. */
  greKeys?: GreKeySource;
}

/**
 * With an Idempotency-Key a purchase is stored in the same transaction and replayed for the same request
 * (`replayed`); the same key with another request is idempotency_mismatch. A refusal is thrown and
 * nothing of it is kept, the key included.
 */
export async function purchase(deps: PurchaseDeps, principal: Principal, input: PurchaseInput, idempotencyKey: string | null): Promise<PurchaseOutcome> {
  requireWrite(principal);
  const hash = requestHash(input);
  // The GRE key is drawn without reading the pair's keys in use (that read grew with the
  // tunnels to one origin). A key already taken by a live tunnel of the (node, origin) pair, or drawn by
  // a concurrent purchase (odds n/2^32), is refused by the unique index: the whole transaction rolls
  // back, nothing was charged, the Idempotency-Key was not claimed. It is then run once more, reading
  // the keys in use this time, so it picks one no committed tunnel has (two live tunnels of a pair never share a key).
  let outcome: PurchaseOutcome;
  try {
    outcome = await purchaseOnce(deps, principal, input, idempotencyKey, hash, false);
  } catch (e) {
    if (!isGreKeyCollision(e)) throw e;
    outcome = await purchaseOnce(deps, principal, input, idempotencyKey, hash, true);
  }
  deps.pricing.invalidate();
  return outcome;
}

/** One attempt of purchase(), in one transaction; `readKeys`: pick a GRE key the pair does not use (the retry). */
function purchaseOnce(deps: PurchaseDeps, principal: Principal, input: PurchaseInput, idempotencyKey: string | null, hash: string, readKeys: boolean): Promise<PurchaseOutcome> {
  return deps.db.hotTransaction(async (sql): Promise<PurchaseOutcome> => {
    // The account row is locked first: the idempotency insert below takes a FOR KEY SHARE lock on it
    // (foreign key), and two purchases that each held that and then asked for FOR UPDATE deadlocked
    // (seen with concurrent keyed retries after a PostgreSQL restart). Its balance and the rate are read
    // by the same statement: locked, the balance cannot change before buy() uses it.
    const [account] = await sql.query<AccountRow>(
      `select balance_usd, (select value from setting where key = 'usd_rub_rate') as rate
         from account where id = ? for update`,
      [principal.accountId],
    );
    // REST adds the WWW-Authenticate challenge to every invalid_token (server/http/app.ts).
    if (!account) throw new ApiError('invalid_token', 'The account of this credential no longer exists.');
    if (idempotencyKey !== null) {
      // Records are kept IDEMPOTENCY_TTL_DAYS (docs/API.md "Idempotency"): an older one is gone, and its key is new again. So is
      // a refusal an earlier version stored (see the top of this file): refusals are not kept.
      await sql.query(`delete from idempotency_record where account_id = ? and key = ? and (created_at < now() - make_interval(days => ?) or status_code <> ${CREATED})`, [
        principal.accountId,
        idempotencyKey,
        IDEMPOTENCY_TTL_DAYS,
      ]);
      // A concurrent twin blocks here until the first commits (it then replays the purchase) or rolls back
      // (a refusal: it then claims the key and tries the purchase itself).
      const claimed = await sql.query(
        `insert into idempotency_record (account_id, key, request_hash, status_code, body) values (?, ?, ?, 0, '{}')
         on conflict (account_id, key) do nothing returning key`,
        [principal.accountId, idempotencyKey, hash],
      );
      if (claimed.length === 0) {
        const [prev] = await sql.query<{ request_hash: string; body: Purchase }>('select request_hash, body from idempotency_record where account_id = ? and key = ?', [
          principal.accountId,
          idempotencyKey,
        ]);
        if (prev!.request_hash !== hash) {
          throw new ApiError('idempotency_mismatch', 'This Idempotency-Key was already used with a different request body.');
        }
        return { purchase: recorded(prev!.body), replayed: true };
      }
    }
    // A refusal is thrown from here: the transaction rolls back, the claim of the key with it.
    const bought = await buy(deps, sql, principal, input, readKeys, account);
    if (idempotencyKey !== null) {
      await sql.query('update idempotency_record set status_code = ?, body = ? where account_id = ? and key = ?', [CREATED, JSON.stringify(bought), principal.accountId, idempotencyKey]);
    }
    return { purchase: bought, replayed: false };
  });
}

interface AccountRow {
  balance_usd: string;
  rate: string;
}

/**
 * The purchase proper, on the account row locked by purchaseOnce. Refusals are thrown (ApiError) before
 * anything is written. Its statements are few on purpose (the gateway's per-statement
 * cost, not PostgreSQL, bounded purchases): the origin check rides on the IP pick, and every write is one
 * statement that also returns the tunnel.
 */
async function buy(deps: PurchaseDeps, sql: Sql, principal: Principal, input: PurchaseInput, readKeys: boolean, account: AccountRow): Promise<Purchase> {
  const rate = parseRate(account.rate);
  // Only nodes the gateway can provision: sellable, with a pinned host key (an IP on a node that is
  // never contacted would end `failed`; docs/NODES.md). The IP brings its inner /30 number, unique
  // across nodes since node add (docs/NODES.md), so the row lock covers that allocation too. Beside it,
  // whether the origin is an address of ours (docs/NODES.md), checked first below. Nor a node whose
  // agent said it cannot make the tunnels' links (docs/CONTRACTS.md "Tunnel links"): the tunnel would fail.
  const [pick] = await sql.query<{ ours: string | null; ip: string | null; node_id: string; inner_index: number }>(
    `with ours as (${OUR_ADDRESS_SQL}),
          free as (select p.ip, p.node_id, p.inner_index from protected_ip p join edge_node n on n.id = p.node_id
                    where p.tunnel_id is null and n.sellable and n.host_key is not null and n.tunnel_links_usable is not false
                    order by p.position, p.ip limit 1 for update of p skip locked)
     select (select what from ours) as ours, free.ip, free.node_id, free.inner_index from (select 1) as one left join free on true`,
    [input.originIp, input.originIp, input.originIp],
  );
  // After the replay lookup (a replay answers as the first time did), before anything is bought.
  // Thrown, like every refusal here: the transaction rolls back and the key stays unused.
  refuseIfOurs(input.originIp, pick!.ours);

  let kopecks = PRICE_RUB_KOPECKS;
  let promo: string | null = null;
  if (input.promocode !== null) {
    promo = normalizeCode(input.promocode);
    const [row] = await sql.query<PromocodeRow>(
      `select code, percent, amount_rub, max_uses, uses, expires_at < now() as expired
         from promocode where code = ? for update`,
      [promo],
    );
    if (!row) throw new ApiError('invalid_promocode', `Unknown promocode ${JSON.stringify(input.promocode)}.`);
    if (row.expired) throw new ApiError('invalid_promocode', `Promocode ${row.code} has expired.`);
    if (row.max_uses !== null && row.uses >= row.max_uses) {
      throw new ApiError('invalid_promocode', `Promocode ${row.code} has been used up.`);
    }
    kopecks = discountedKopecks(PRICE_RUB_KOPECKS, row);
  }
  const charge = rubToUsdCents(kopecks, rate);
  const balance = dbToCents(account.balance_usd);
  if (balance < charge) {
    throw new ApiError('insufficient_balance', `The price is ${centsToString(charge)} USD and the balance is ${centsToString(balance)} USD; nothing was charged.`);
  }
  const ipRow = pick!.ip === null ? null : { ip: pick!.ip, node_id: pick!.node_id, inner_index: pick!.inner_index };
  if (!ipRow) throw new ApiError('out_of_stock', 'No protected IP is free right now; nothing was charged.');

  // A key unused by this node's live tunnels to the same origin: GRE links are unique by local,
  // remote and key, so it is what lets any number of tunnels share an origin on one edge. Drawn blind
  // first; the unique index guards it, and the retry after a collision reads (purchase() above).
  const source = deps.greKeys ?? randomGreKey;
  const greKey = readKeys ? await pickGreKey(sql, ipRow.node_id, input.originIp, source) : await drawGreKey(source);

  const id = randomUUID();
  const tunnelName = tunnelNameFor(id);
  if (promo !== null) await sql.query('update promocode set uses = uses + 1 where code = ?', [promo]);
  // The IP taken, the debit, its ledger row and the tunnel, in one statement that returns the tunnel as
  // readTunnel would and the balance after the debit (the ledger row carries it too).
  const [row] = await sql.query<TunnelRow & { balance_after: string }>(
    `with debit as (update account set balance_usd = balance_usd - ? where id = ? returning balance_usd),
          taken as (update protected_ip set tunnel_id = ? where ip = ?),
          ledger as (insert into ledger_entry (account_id, amount_usd, balance_after, kind, tunnel_id, promocode)
                     select ?, ?, debit.balance_usd, 'purchase', ?, ? from debit),
          t as (insert into tunnel (id, account_id, node_id, name, protected_ip, origin_ip, tunnel_name, inner_index, gre_key, status, charged_usd, charged_rub,
                                    ports, protocol, syn_proxy, source_pps_limit, drop_fragments, max_flows, alert_pps)
                values (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?) returning *)
     select ${TUNNEL_COLUMNS}, (select balance_usd from debit)::text as balance_after from t join edge_node n on n.id = t.node_id`,
    [
      centsToString(charge),
      principal.accountId,
      id,
      ipRow.ip,
      principal.accountId,
      centsToString(-charge),
      id,
      promo,
      id,
      principal.accountId,
      ipRow.node_id,
      input.name,
      ipRow.ip,
      input.originIp,
      tunnelName,
      ipRow.inner_index,
      greKey,
      centsToString(charge),
      centsToString(kopecks),
      ...settingsValues(input.settings),
    ],
  );
  return {
    tunnel: tunnelView(row!, deps.adminSshPort),
    charged: kopecksToNumber(kopecks),
    charged_usd: centsToNumber(charge),
    currency: 'RUB',
    balance_after: centsToNumber(dbToCents(row!.balance_after)),
  };
}
