// The link layer, pluggable: production creates GRE links; this machine's kernel has no GRE, so tests
// and the benchmark here use a veth pair as a clearly named stand-in (the tunnel end carries the tunnel's
// name and address, the peer end is where the "origin" would be). The real GRE path runs in the VM.
import { createHash } from 'node:crypto';
import { GRE_KEY, type LinkInfo } from '../netlink/rtnetlink/index.ts';
import type { Rtnl } from '../netlink/client.ts';
import type { LinkParams } from './plan.ts';
import { GRE_TTL } from './link-steps.ts';
import type { TunnelSpec } from './types.ts';
import type { TunnelLinks } from '../../common/tunnel-links.ts';
import { probeGreSupport } from './link-support.ts';

export type LinkKind = 'gre' | 'veth-standin';

export interface LinkDriver {
  readonly kind: LinkKind;
  /** Creates the link (down, with its MTU when the request can carry it). */
  create(rtnl: Rtnl, t: TunnelSpec): Promise<void>;
  /** Whether create() already set the MTU. */
  readonly mtuAtCreate: boolean;
  /** The link's identity as the kernel reports it; `recorded` is the agent's own record of this link. */
  params(link: LinkInfo, recorded: TunnelSpec | undefined): LinkParams | undefined;
  /** Whether this kernel can make these links (link-support.ts), asked without making one. */
  support(rtnl: Rtnl): Promise<TunnelLinks>;
}

const greDriver: LinkDriver = {
  kind: 'gre',
  mtuAtCreate: true,
  create: (rtnl, t) => rtnl.createGreLink({ name: t.tunnel_name, local: t.edge_ip, remote: t.origin_ip, ttl: GRE_TTL, key: t.gre_key, mtu: t.mtu }),
  params(link) {
    if (link.kind !== 'gre' || !link.gre) return undefined;
    const g = link.gre;
    const inKey = ((g.iflags ?? 0) & GRE_KEY) !== 0;
    const outKey = ((g.oflags ?? 0) & GRE_KEY) !== 0;
    let key: number | undefined;
    if (inKey && outKey && g.ikey === g.okey) key = g.ikey;
    else if (inKey || outKey) key = Number.NaN;
    return { local: g.local ?? '', remote: g.remote ?? '', ttl: g.ttl ?? 0, key };
  },
  support: (rtnl) => probeGreSupport(rtnl),
};

/** The veth peer's name: derived from the tunnel name, never starting with the tunnel prefix. */
export function standinPeerName(name: string): string {
  return `tgp${createHash('sha1').update(name).digest('hex').slice(0, 12)}`;
}

/**
 * STAND-IN, NOT GRE: a veth pair cannot carry local/remote/ttl/key, so those are taken from the agent's
 * own record of the link; a changed origin still recreates the link, as it would for GRE.
 */
export const vethStandinDriver: LinkDriver = {
  kind: 'veth-standin',
  mtuAtCreate: false,
  create: (rtnl, t) => rtnl.createVeth(t.tunnel_name, standinPeerName(t.tunnel_name)),
  params(link, recorded) {
    if (link.kind !== 'veth' || !recorded) return undefined;
    return { local: recorded.edge_ip, remote: recorded.origin_ip, ttl: GRE_TTL, key: recorded.gre_key };
  },
  // veth is in every kernel this runs on, and the stand-in does carry its tunnels (over veth): usable,
  // and named for what it is wherever it is reported.
  support: () => Promise.resolve({ kind: 'veth-standin', usable: true }),
};

export function linkDriver(kind: LinkKind): LinkDriver {
  return kind === 'gre' ? greDriver : vethStandinDriver;
}
