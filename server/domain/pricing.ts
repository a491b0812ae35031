// The price list and live stock. Stock is cached for a moment because pricing is the hottest
// anonymous read; every purchase and release in this process drops the cache at once.
import type { Database } from '../db/database.ts';
import { centsToNumber, parseRate, rateToNumber, rubToUsdCents } from './money.ts';

export const PRICE_RUB_KOPECKS = 10_000n; // 100 RUB, one time
export const INCLUDES = ['dedicated_public_ip', 'full_tcp_udp_nat', 'gre_tunnel'] as const;

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

export class PricingService {
  #cache: { at: number; value: Pricing } | null = null;

  constructor(
    private readonly db: Database,
    private readonly adminSshPort: number,
    /** How long a computed price list may be served again, in ms. */
    private readonly ttlMs = 1000,
  ) {}

  invalidate(): void {
    this.#cache = null;
  }

  async get(): Promise<Pricing> {
    const now = Date.now();
    if (this.#cache && now - this.#cache.at < this.ttlMs) return this.#cache.value;
    // Stock is what a purchase can take: IPs of sellable nodes with a pinned host key (the purchase's
    // own filter, server/domain/tunnels/purchase.ts; issue 8 item 5). A node that cannot sell adds nothing.
    const [row] = await this.db.query<{ rate: string; total: string; available: string }>(
      `select (select value from setting where key = 'usd_rub_rate') as rate,
              count(p.ip) as total, count(p.ip) filter (where p.tunnel_id is null) as available
         from protected_ip p join edge_node n on n.id = p.node_id and n.sellable and n.host_key is not null`,
    );
    const rate = parseRate(row!.rate);
    const total = Number(row!.total);
    const available = Number(row!.available);
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
    this.#cache = { at: now, value };
    return value;
  }
}
