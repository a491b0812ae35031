// Tunnels, by job. TunnelService is the one object REST, GraphQL, the CLI and tests hold; each method
// hands over to the module that does it:
//   input.ts      what a buyer may send (purchase fields, Idempotency-Key), checked before any lock
//   purchase.ts   the purchase transaction: idempotency, promocode, balance, IP, GRE key, ledger
//   lifecycle.ts  provision / activate / delete: which move is allowed, handed to provisioning
//   update.ts     PATCH: name, origin_ip and the settings (settings.ts), sent to the edge like a provision;
//                 origin-changes.ts limits how often origin_ip may change
//   queries.ts    get, list, setup (origin scripts), watch (status changes)
//   rows.ts       one tunnel as stored and as shown (TunnelView)
//   spec.ts       THE tunnel spec (edge job and origin script), naming.ts, cursor.ts
// Results are domain results (a purchase and whether it was replayed; a tunnel and whether its move is
// settled); HTTP statuses and paths are the REST adapter's (server/http/rest/routes.ts).
import type { Database } from '../../db/database.ts';
import type { Principal } from '../../auth/principal.ts';
import type { GreKeySource } from '../gre-keys.ts';
import type { PricingService } from '../pricing.ts';
import type { PurchaseInput, TunnelUpdate } from './input.ts';
import { activate, provision, remove, type EdgeDispatch, type LifecycleDeps, type LifecycleResult } from './lifecycle.ts';
import { purchase, type PurchaseDeps, type PurchaseOutcome } from './purchase.ts';
import { TunnelQueries, type ListOptions, type SetupView, type TunnelPage, type TunnelWatch } from './queries.ts';
import type { TunnelView } from './rows.ts';
import { update, type UpdateDeps } from './update.ts';

export { PURCHASE_FIELDS, UPDATE_FIELDS, validateIdempotencyKey, validatePurchase, validateUpdate, type PurchaseInput, type TunnelUpdate } from './input.ts';
export type { TunnelProtection, TunnelSettings } from './settings.ts';
export { IDEMPOTENCY_TTL_DAYS, purgeExpiredIdempotency, type Purchase, type PurchaseOutcome } from './purchase.ts';
export type { EdgeDispatch, LifecycleResult } from './lifecycle.ts';
export type { ListOptions, SetupView, TunnelPage, TunnelWatch } from './queries.ts';
export { WATCH_MANY_MAX } from './queries.ts';
export type { TunnelView } from './rows.ts';
export { SETTINGS_APPLIED } from './rows.ts';
export { routeTableFor, tunnelNameFor } from './naming.ts';
export { utcText } from './cursor.ts';
export { tunnelSpecOf, type SpecSource } from './spec.ts';

export class TunnelService {
  private readonly purchaseDeps: PurchaseDeps;
  private readonly lifecycleDeps: LifecycleDeps;
  private readonly updateDeps: UpdateDeps;
  private readonly queries: TunnelQueries;

  constructor(
    db: Database,
    pricing: PricingService,
    private readonly opts: {
      adminSshPort: number;
      allowPrivateOrigins: boolean;
      /** Where GRE keys come from (server/domain/gre-keys.ts); tests inject one that collides. */
      greKeys?: GreKeySource;
      /** Milliseconds now for the origin-change limit (origin-changes.ts); Date.now unless a test moves time. */
      clock?: () => number;
    },
    edge: EdgeDispatch,
  ) {
    this.purchaseDeps = { db, pricing, adminSshPort: opts.adminSshPort, greKeys: opts.greKeys };
    this.lifecycleDeps = { db, pricing, edge, adminSshPort: opts.adminSshPort };
    this.updateDeps = { db, edge, adminSshPort: opts.adminSshPort, greKeys: opts.greKeys, clock: opts.clock ?? Date.now };
    this.queries = new TunnelQueries(db, edge, opts.adminSshPort);
  }

  /** ALLOW_PRIVATE_ORIGINS (server/config.ts): what validatePurchase and validateUpdate are told by both adapters. */
  get allowPrivateOrigins(): boolean {
    return this.opts.allowPrivateOrigins;
  }

  purchase(principal: Principal, input: PurchaseInput, idempotencyKey: string | null): Promise<PurchaseOutcome> {
    return purchase(this.purchaseDeps, principal, input, idempotencyKey);
  }

  provision(principal: Principal, id: string): Promise<LifecycleResult> {
    return provision(this.lifecycleDeps, principal, id);
  }

  activate(principal: Principal, id: string): Promise<LifecycleResult> {
    return activate(this.lifecycleDeps, principal, id);
  }

  delete(principal: Principal, id: string): Promise<LifecycleResult> {
    return remove(this.lifecycleDeps, principal, id);
  }

  /** PATCH /api/dedicated/{id}, GraphQL updateTunnel (docs/CONTRACTS.md "Tunnel settings"). */
  update(principal: Principal, id: string, change: TunnelUpdate): Promise<LifecycleResult> {
    return update(this.updateDeps, principal, id, change);
  }

  get(principal: Principal, id: string): Promise<TunnelView> {
    return this.queries.get(principal, id);
  }

  list(principal: Principal, opts: ListOptions = {}): Promise<TunnelPage> {
    return this.queries.list(principal, opts);
  }

  /** TunnelQueries.listByKey: only for a key verified as the request's credential. */
  listByKey(keyId: string, opts: ListOptions = {}): Promise<TunnelPage> {
    return this.queries.listByKey(keyId, opts);
  }

  setup(principal: Principal, id: string): Promise<SetupView> {
    return this.queries.setup(principal, id);
  }

  watch(principal: Principal, id: string): TunnelWatch {
    return this.queries.watch(principal, id);
  }

  watchMany(principal: Principal, ids: readonly string[]): Promise<TunnelWatch> {
    return this.queries.watchMany(principal, ids);
  }
}
