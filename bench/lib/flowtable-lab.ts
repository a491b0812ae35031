// bench:edge's fast-path labs (nftables flowtables), written by hand as `nft -f` text: what an established flow
// costs when the kernel forwards it from the ingress hook, skipping routing, the forward hooks and the output
// path, with the protection an offloaded packet must still meet (docs/FLOWTABLE.md) in front of it.
//
// Only a kernel with nf_flow_table can run them (Debian's 6.1 in the VM has it as modules; this host's kernel
// does not): `flowtableSupported` tries one in the lab's namespace first.
import { spawnSync } from 'node:child_process';
import { portBlocks } from '../../agent/dataplane/policy.ts';

/** Whether the kernel in `ns` can hold a flowtable (it builds one on `lo` in a scratch table and deletes it). */
export function flowtableSupported(ns: string): { ok: true } | { ok: false; why: string } {
  const text = 'table ip tg_ft_probe {\n  flowtable ft {\n    hook ingress priority 0; devices = { lo };\n  }\n}\n';
  const r = spawnSync('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], { input: text, encoding: 'utf8' });
  spawnSync('ip', ['netns', 'exec', ns, 'nft', 'delete', 'table', 'ip', 'tg_ft_probe'], { encoding: 'utf8' });
  return r.status === 0 ? { ok: true } : { ok: false, why: (r.stderr || r.error?.message || `nft exited ${r.status}`).trim().split('\n')[0]! };
}

/**
 * Bare NAT on the fast path: one DNAT rule, and every forwarded TCP/UDP connection offloaded to a flowtable on
 * both links (the fast path's ceiling: nothing else is judged).
 */
export function bareFlowtableText(opts: { upstream: string; originLink: string; protectedIp: string; originInner: string }): string {
  return `table ip natonly {
  flowtable ft {
    hook ingress priority 0; devices = { "${opts.upstream}", "${opts.originLink}" };
  }
  chain pre {
    type nat hook prerouting priority dstnat; policy accept;
    ip daddr ${opts.protectedIp} dnat to ${opts.originInner}
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    meta l4proto { tcp, udp } flow add @ft
  }
}
`;
}

/**
 * The agent's table with its established, DNAT-ed inbound connections offloaded: a flowtable on the upstream link
 * only (a tunnel's replies stay on the classic path, through the isolation in forward) and the `flow add` ahead of
 * the guard's accept of the same packets. Applied as an edit of the agent's own table.
 */
export function agentFlowtableEdit(opts: { table: string; upstream: string; tunnelPrefix: string }): string {
  return [
    `add flowtable ip ${opts.table} ft { hook ingress priority 0; devices = { "${opts.upstream}" }; }`,
    `insert rule ip ${opts.table} guard ct status & dnat != 0 iifname != "${opts.tunnelPrefix}*" meta l4proto { tcp, udp } flow add @ft`,
    '',
  ].join('\n');
}

export interface IngressTunnel {
  protectedIp: string;
  /** The allowed port ranges (both protocols), cut into the agent's own aligned blocks. */
  ports: [number, number][];
  fragments: boolean;
  /** The per-source limit, packets a second; null: none. */
  limit: number | null;
}

/**
 * The per-packet protection of the agent's `early`/`inbound`/`allowlist` and a tunnel's meter chain, as a `netdev`
 * table on the upstream link's ingress hook, ahead of the flowtable (priority -500 < 0): what an offloaded
 * packet meets instead of prerouting. A prototype for measuring: one meter chain and set for every tunnel with a
 * limit (as the agent makes them), counters by name per tunnel.
 */
export function ingressProtectionText(opts: { table: string; upstream: string; tunnels: IngressTunnel[]; ownMeters?: number }): string {
  const ts = opts.tunnels;
  const els = (xs: string[]): string => (xs.length ? `\n    elements = { ${xs.join(',\n      ')} }` : '');
  const counters = ts.map((_, i) => `  counter c${i} {\n  }\n`).join('');
  // Meter chains and sets for the first `ownMeters` tunnels with a limit; the others jump to the last of those (the
  // per-packet work is the same: one verdict-map lookup among every tunnel's elements, a jump, one set update;
  // 10,000 dynamic sets took `nft -f` 90 s on the host, far longer under emulation).
  const own = Math.min(opts.ownMeters ?? Infinity, ts.length);
  const meterOf = (i: number): number => Math.min(i, own - 1);
  const meters = ts
    .slice(0, own)
    .map((t, i) => (t.limit === null ? '' : `  set rl${i} {\n    type ipv4_addr; size 65536; flags dynamic,timeout; timeout 1s;\n  }\n  chain rl${i} {\n    update @rl${i} { ip saddr limit rate ${t.limit}/second } return\n    ip saddr != @rl${i} limit rate over ${t.limit}/second counter name ip daddr map @drop_rate_limited drop\n    ip saddr != @rl${i} return\n    counter name ip daddr map @drop_rate_limited drop\n  }\n`))
    .join('');
  const blocks = (bits: number): string[] =>
    ts.flatMap((t) => portBlocks(t.ports).filter(([b]) => b === bits).flatMap(([, p]) => [`${t.protectedIp} . tcp . ${p}`, `${t.protectedIp} . udp . ${p}`]));
  return `table netdev ${opts.table} {
${counters}  counter dropped {
  }
  set bogons {
    type ipv4_addr
    flags interval
    elements = { 0.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/3 }
  }
  map tunnel_counters {
    type ipv4_addr : counter${els(ts.map((t, i) => `${t.protectedIp} : "c${i}"`))}
  }
  map drop_rate_limited {
    type ipv4_addr : counter${els(ts.map((t) => `${t.protectedIp} : "dropped"`))}
  }
  set fragments {
    type ipv4_addr${els(ts.filter((t) => t.fragments).map((t) => t.protectedIp))}
  }
  set allowed_all {
    type ipv4_addr . inet_proto
  }
${[0, 4, 8, 12].map((b) => `  set allowed_${1 << b} {\n    type ipv4_addr . inet_proto . inet_service${els(blocks(b))}\n  }\n`).join('')}${meters}  map rate_limits {
    type ipv4_addr : verdict${els(ts.flatMap((t, i) => (t.limit === null ? [] : [`${t.protectedIp} : jump rl${meterOf(i)}`])))}
  }
  chain early {
    type filter hook ingress devices = { "${opts.upstream}" } priority -500; policy accept;
    counter name ip daddr map @tunnel_counters jump inbound
  }
  chain inbound {
    ip saddr @bogons drop
    ip frag-off & 0x3fff != 0 ip daddr @fragments drop
    ip frag-off & 0x1fff == 0 jump allowlist
    ip daddr vmap @rate_limits
  }
  chain allowlist {
    ip daddr . meta l4proto @allowed_all return
    ip daddr . meta l4proto . th dport @allowed_1 return
    ip daddr . meta l4proto . th dport & 0xfff0 @allowed_16 return
    ip daddr . meta l4proto . th dport & 0xff00 @allowed_256 return
    ip daddr . meta l4proto . th dport & 0xf000 @allowed_4096 return
    drop
  }
}
`;
}
