// The demo origin: a network namespace standing for the buyer's server. For each tunnel the demo edge
// creates, it takes the veth stand-in's far end (demo/standin-origin.ts) and sets it up as the tunnel's origin
// script would (inner address, replies from it routed back into the tunnel), so the agent's probe is answered
// through the tunnel and `activate` succeeds, exactly as with a real origin that ran its script.
import type { TunnelSpec } from '../agent/dataplane/index.ts';
import type { Logger } from '../common/log.ts';
import type { Netns } from './netns.ts';
import { attachStandinOriginRouted } from './standin-origin.ts';
import { standinPeerName } from '../agent/dataplane/index.ts';

/** The demo origin's own address (documentation range: the gateway runs with ALLOW_PRIVATE_ORIGINS=true). */
export const DEMO_ORIGIN_IP = '198.51.100.20';

export class DemoOrigin {
  /** Routing table per inner address, so a tunnel connected again reuses its own. */
  private readonly tables = new Map<string, number>();
  private nextTable = 100;

  constructor(
    private readonly edge: Netns,
    private readonly origin: Netns,
    private readonly log: Logger,
  ) {}

  /** Sets up the origin prepared in `origin` (lo up, its address). */
  static prepare(origin: Netns): void {
    origin.run('ip', 'link', 'set', 'lo', 'up');
    origin.run('ip', 'addr', 'add', `${DEMO_ORIGIN_IP}/32`, 'dev', 'lo');
  }

  /** Connects the tunnel's origin end when its stand-in peer is still on the edge (a new or recreated link); else nothing. */
  connect(t: TunnelSpec): void {
    const peer = standinPeerName(t.tunnel_name);
    const onEdge = this.edge.ipJson<{ ifname: string }[]>('link', 'show').some((l) => l.ifname === peer);
    if (!onEdge) return;
    const innerIp = t.origin_inner.split('/')[0]!;
    let table = this.tables.get(innerIp);
    if (table === undefined) {
      table = this.nextTable++;
      this.tables.set(innerIp, table);
    } else {
      // The rule of the link this one replaces: one rule per inner address.
      try {
        this.origin.run('ip', 'rule', 'del', 'from', innerIp, 'lookup', String(table));
      } catch {
        // none left
      }
    }
    attachStandinOriginRouted(this.edge, this.origin, t, table);
    this.log.info('demo origin: tunnel connected', { tunnel_id: t.id, tunnel_name: t.tunnel_name, origin_inner: t.origin_inner });
  }
}
