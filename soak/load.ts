// The soak's continuous load (docs/SOAK.md "Load"): one client loop per account, over the REST API with the
// account's svc_ key, against whichever gateway replica answers (a load balancer's view: a refused
// connection goes to the other replica). Purchases carry an Idempotency-Key, and some are sent twice on
// purpose (the replay must be the same tunnel); a purchase whose answer was lost (a killed gateway, a
// restarting database) is retried with the same key, which must not buy twice. Provisions, settings
// changes (PATCH ports) and deletes follow; balances are small and topped up now and then, so some
// purchases fail for lack of funds. It records every answer by action and status, and every tunnel the API
// answered 201 for (the invariants check each exists once).
import { randomUUID } from 'node:crypto';
import type { SoakGateway } from './gateways.ts';
import type { Rng } from './random.ts';

export interface LoadAccount {
  email: string;
  accountId: string;
  writeKey: string;
  /** Whether the load tops its balance up now and then. */
  topUp: boolean;
}

interface Answer {
  status: number;
  headers: Headers | null;
  body: Record<string, unknown>;
}

interface TunnelView {
  id: string;
  status: string;
  protected_ip: string;
}

type Action = 'purchase' | 'purchase-replay' | 'purchase-retry' | 'provision' | 'patch' | 'delete' | 'topup';

const PORT_SETS = ['*', '80,443', '22,80,443,25565-25575', '1000-2000', '53'];
/** A request's bound: a hang becomes a counted error, never the load's end. */
const REQUEST_TIMEOUT_MS = 60_000;

export class Load {
  /** Answers by action, then by status (0: no answer at all: connection refused or cut, timeout). */
  readonly answers: Record<string, Record<string, number>> = {};
  /** Tunnel ids the API answered 201 for. */
  readonly bought = new Set<string>();
  /** Things a client saw that break the contract on their own (a replay that bought another tunnel...). */
  readonly violations: string[] = [];
  /** The first answers 500 (the contract allows none), with their body and when: what the report shows of them. */
  readonly serverErrorSamples: string[] = [];
  private readonly startedAt = Date.now();
  /** IPs sold again after the tunnel that held them was deleted (freed IPs are reusable). */
  ipsReused = 0;
  private readonly freedIps = new Set<string>();
  private readonly tunnels = new Map<string, Map<string, TunnelView>>();
  private stopping = false;
  private wake: () => void = () => {};
  private readonly stopped = new Promise<void>((r) => (this.wake = r));
  private loops: Promise<void>[] = [];

  constructor(
    private readonly gateways: readonly SoakGateway[],
    private readonly accounts: readonly LoadAccount[],
    private readonly rng: Rng,
    /** Adds `usd` to an account's balance (the operator's `balance add`). */
    private readonly topUp: (email: string, usd: string) => Promise<void>,
    private readonly priceUsd: number,
  ) {
    for (const a of accounts) this.tunnels.set(a.accountId, new Map());
  }

  private count(action: Action, status: number, body?: Record<string, unknown>): void {
    if (status === 500 && this.serverErrorSamples.length < 10) {
      this.serverErrorSamples.push(`${action} at +${((Date.now() - this.startedAt) / 1000).toFixed(0)} s of the load: ${JSON.stringify(body ?? {}).slice(0, 300)}`);
    }
    const a = (this.answers[action] ??= {});
    a[String(status)] = (a[String(status)] ?? 0) + 1;
  }

  /** One request to a replica, the other one if the first refuses the connection. */
  private async request(key: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
    const order = this.rng.shuffle(this.gateways);
    let last: Answer = { status: 0, headers: null, body: {} };
    for (const gw of order) {
      try {
        const res = await fetch(gw.url + path, {
          method,
          headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        const text = await res.text();
        let parsed: Record<string, unknown> = {};
        try {
          parsed = text ? (JSON.parse(text) as Record<string, unknown>) : {};
        } catch {
          parsed = { text };
        }
        return { status: res.status, headers: res.headers, body: parsed };
      } catch (e) {
        last = { status: 0, headers: null, body: { error: (e as Error).message } };
        // Refused (the replica is down): try the other. A timeout or a cut mid-request is an answer lost.
        const code = (e as { cause?: { code?: string } }).cause?.code;
        if (code !== 'ECONNREFUSED') return last;
      }
    }
    return last;
  }

  private mine(a: LoadAccount): Map<string, TunnelView> {
    return this.tunnels.get(a.accountId)!;
  }

  private remember(a: LoadAccount, t: TunnelView | undefined): void {
    if (!t?.id) return;
    if (t.status === 'deleted') this.freedIps.add(t.protected_ip);
    this.mine(a).set(t.id, t);
  }

  private originIp(): string {
    // Public unicast and not one of ours; random, so two tunnels of one node rarely share an origin.
    return `8.8.${this.rng.int(0, 255)}.${this.rng.int(1, 254)}`;
  }

  private async purchase(a: LoadAccount): Promise<void> {
    const idem = randomUUID();
    const body = { origin_ip: this.originIp(), name: `soak-${idem.slice(0, 8)}` };
    let r = await this.request(a.writeKey, 'POST', '/api/dedicated', body, { 'idempotency-key': idem });
    this.count('purchase', r.status, r.body);
    // An answer lost (no answer, or the replica's database gone): the client retries with the same key.
    for (let i = 0; i < 5 && (r.status === 0 || r.status === 503 || r.status === 500); i++) {
      await sleep(2000);
      r = await this.request(a.writeKey, 'POST', '/api/dedicated', body, { 'idempotency-key': idem });
      this.count('purchase-retry', r.status, r.body);
    }
    if (r.status !== 201) return;
    const t = (r.body as { tunnel: TunnelView }).tunnel;
    this.bought.add(t.id);
    if (this.freedIps.delete(t.protected_ip)) this.ipsReused++;
    this.remember(a, t);
    if (this.rng.next() < 0.3) {
      const again = await this.request(a.writeKey, 'POST', '/api/dedicated', body, { 'idempotency-key': idem });
      this.count('purchase-replay', again.status, again.body);
      if (again.status === 201) {
        const id = (again.body as { tunnel: TunnelView }).tunnel.id;
        if (id !== t.id) this.violations.push(`purchase replay with key ${idem} answered tunnel ${id}, the first answer was ${t.id}`);
        if (again.headers?.get('idempotent-replayed') !== 'true') this.violations.push(`purchase replay with key ${idem} lacks Idempotent-Replayed: true`);
      }
    }
  }

  private async onTunnel(a: LoadAccount, action: 'provision' | 'patch' | 'delete', want: (t: TunnelView) => boolean): Promise<void> {
    const candidates = [...this.mine(a).values()].filter(want);
    // Nothing to act on: this step does nothing (an account out of funds does not turn into a stream of purchases).
    if (!candidates.length) return;
    const t = this.rng.pick(candidates);
    const r =
      action === 'provision'
        ? await this.request(a.writeKey, 'POST', `/api/dedicated/${t.id}/provision`)
        : action === 'patch'
          ? await this.request(a.writeKey, 'PATCH', `/api/dedicated/${t.id}`, { ports: this.rng.pick(PORT_SETS) })
          : await this.request(a.writeKey, 'DELETE', `/api/dedicated/${t.id}`);
    this.count(action, r.status, r.body);
    if (r.status === 200 || r.status === 202) this.remember(a, (r.body as { tunnel?: TunnelView }).tunnel);
    else if (r.status === 404) this.mine(a).delete(t.id);
    else if (r.status === 409) await this.refresh(a, t.id);
  }

  private async refresh(a: LoadAccount, id: string): Promise<void> {
    const r = await this.request(a.writeKey, 'GET', `/api/dedicated/${id}`);
    if (r.status === 200) this.remember(a, (r.body as { tunnel: TunnelView }).tunnel);
  }

  private async step(a: LoadAccount): Promise<void> {
    const live = [...this.mine(a).values()].filter((t) => t.status !== 'deleted');
    // Keep each account's live tunnels few, so the pools (and balances) turn over rather than fill up.
    const roll = this.rng.next();
    if (roll < 0.25 && live.length < 6) return this.purchase(a);
    if (roll < 0.55) return this.onTunnel(a, 'provision', (t) => t.status === 'pending' || t.status === 'failed');
    // Deletes only above a few live tunnels, so each account keeps some on the edges for the faults to hit.
    if (roll < 0.85 || live.length < 3) return this.onTunnel(a, 'patch', (t) => t.status === 'provisioned' || t.status === 'active');
    // Deleting whatever is not yet deleted (a provisioning one too): deletes race jobs on purpose.
    return this.onTunnel(a, 'delete', (t) => t.status !== 'deleted' && t.status !== 'deleting');
  }

  private async loop(a: LoadAccount): Promise<void> {
    while (!this.stopping) {
      try {
        await this.step(a);
      } catch (e) {
        this.violations.push(`load client crashed on a step: ${(e as Error).message}`);
      }
      await sleep(this.rng.int(200, 800));
    }
  }

  private async topUps(): Promise<void> {
    while (!this.stopping) {
      await Promise.race([sleep(30_000), this.stopped]);
      if (this.stopping) break;
      const a = this.rng.pick(this.accounts.filter((x) => x.topUp));
      try {
        await this.topUp(a.email, (this.priceUsd * 2).toFixed(2));
        this.count('topup', 200);
      } catch {
        // The database restarting: the next round tops up.
        this.count('topup', 0);
      }
    }
  }

  start(): void {
    this.loops = [...this.accounts.map((a) => this.loop(a)), this.topUps()];
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.wake();
    await Promise.all(this.loops);
  }

  /** Answers with status 500: the contract never allows one (a database away is 503 `unavailable`). */
  serverErrors(): number {
    return Object.values(this.answers).reduce((n, by) => n + (by['500'] ?? 0), 0);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
