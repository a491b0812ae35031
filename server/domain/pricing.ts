// The price list and live stock. Stock is cached for a moment because pricing is the hottest
// anonymous read; every purchase and release in this process drops the cache at once, and a change
// made elsewhere shows when the moment (1 s) has passed. The REST answer is served as bytes made once.
import type { Database } from '../db/database.ts';
import { centsToNumber, parseRate, rateToNumber, rubToUsdCents } from './money.ts';

export const PRICE_RUB_KOPECKS = 10_000n; // 100 RUB, one time
const INCLUDES = ['dedicated_public_ip', 'full_tcp_udp_nat', 'gre_tunnel'] as const;

export interface Pricing {
  price: number;
  currency: 'RUB';
  price_usd: number;
  usd_rub_rate: number;
  billing: 'one_time';
  includes: string[];
  admin_ssh_port: number;
  availability: { total: number; available: number; in_stock: boolean };
}

/** The price list as served: the object (GraphQL) and its JSON bytes (REST), made together, once. */
interface Served {
  at: number;
  value: Pricing;
  json: Buffer;
}

export class PricingService {
  #cache: Served | null = null;
  /** The read under way, shared by every request that found the cache empty or expired meanwhile. */
  #reading: Promise<Served> | null = null;
  /**
   * Bumped by invalidate(): a read started before a change must not answer a request that came after
   * it (a purchase shows in the very next answer), so it is only shared by requests of its generation.
   */
  #generation = 0;

  constructor(
    private readonly db: Database,
    private readonly adminSshPort: number,
    /**
     * How long a computed price list may be served again, in ms. Changes made in this process drop it
     * at once (invalidate); this bound is how a change made elsewhere (the admin CLI, another replica)
     * shows (docs/API.md "REST").
     */
    private readonly ttlMs = 1000,
  ) {}

  invalidate(): void {
    this.#cache = null;
    this.#reading = null;
    this.#generation++;
  }

  async get(): Promise<Pricing> {
    return (await this.#served()).value;
  }

  /**
   * The JSON of get(), as bytes made once per change of rate or stock: GET /api/dedicated/pricing is
   * public and the first thing hit in an attack, so a request costs no query and no serialisation
   * (the pricing route must stay cheap under load).
   */
  async json(): Promise<Buffer> {
    return (await this.#served()).json;
  }

  #served(): Promise<Served> | Served {
    const now = Date.now();
    if (this.#cache && now - this.#cache.at < this.ttlMs) return this.#cache;
    // One read for all the requests that arrive while it runs: at the end of every second a burst of
    // concurrent requests would otherwise each count the whole pool (measured: 0.03 of bare node:http).
    if (this.#reading) return this.#reading;
    const generation = this.#generation;
    const reading = this.#read(now).then(
      (served) => {
        if (this.#generation === generation) {
          this.#cache = served;
          this.#reading = null;
        }
        return served;
      },
      (e: unknown) => {
        if (this.#reading === reading) this.#reading = null;
        throw e;
      },
    );
    this.#reading = reading;
    return reading;
  }

  async #read(now: number): Promise<Served> {
    // Stock is what a purchase can take: IPs of sellable nodes with a pinned host key (the purchase's
    // own filter, server/domain/tunnels/purchase.ts; docs/NODES.md). A node that cannot sell adds nothing,
    // nor one whose agent said it cannot carry tunnels (docs/CONTRACTS.md "Tunnel links").
    const [row] = await this.db.query<{ rate: string; total: string; available: string }>(
      `select (select value from setting where key = 'usd_rub_rate') as rate,
              count(p.ip) as total, count(p.ip) filter (where p.tunnel_id is null) as available
         from protected_ip p join edge_node n on n.id = p.node_id and n.sellable and n.host_key is not null and n.tunnel_links_usable is not false`,
    );
    const rate = parseRate(row!.rate);
    const total = Number(row!.total);
    const available = Number(row!.available);
    const prev = this.#cache;
    // Unchanged rate and stock (the common case when the bound expires): the same bytes again.
    if (prev && prev.value.usd_rub_rate === rateToNumber(rate) && prev.value.availability.total === total && prev.value.availability.available === available) {
      return { at: now, value: prev.value, json: prev.json };
    }
    const value: Pricing = {
      price: centsToNumber(PRICE_RUB_KOPECKS),
      currency: 'RUB',
      price_usd: centsToNumber(rubToUsdCents(PRICE_RUB_KOPECKS, rate)),
      usd_rub_rate: rateToNumber(rate),
      billing: 'one_time',
      includes: [...INCLUDES],
      admin_ssh_port: this.adminSshPort,
      availability: { total, available, in_stock: available > 0 },
    };
    return { at: now, value, json: Buffer.from(JSON.stringify(value)) };
  }
}
