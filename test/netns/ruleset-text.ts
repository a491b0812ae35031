// The agent's nftables table (agent/netlink/ruleset.ts) written as `nft -f` input: the command-line
// twin that the agent benchmark's baseline loads and that tests use to build a table by hand.
// `counters` adds named counter objects, as addTunnelgateRuleset's option of the same name does; the
// netlink fixtures (test/fixtures/netlink/capture.sh) capture this text with one counter, `tun-1`.
import { maxFlowsOf, portBlocks, sharedNeeds } from '../../agent/dataplane/policy.ts';
import { allowedSet, flowsChainName, meterChainName, synproxyName } from '../../agent/netlink/ruleset.ts';
import { flowCapShape, METER_TIMEOUT_MS } from '../../agent/netlink/ruleset-chains.ts';
import { dynamicChainOf, type DynamicChainSizes } from '../../agent/netlink/ruleset-chains.ts';
import { DEFAULT_POLICY, type TunnelPolicy } from '../../common/tunnel-policy.ts';

/**
 * `sizes` caps sets and maps by name (`size N`): a test's way to make the kernel refuse an element (ENFILE), which
 * the agent's start check does not see (it compares rules, not sets: agent/dataplane/kernel/table.ts ensureTable).
 */
export function rulesetNftText(opts: { table: string; ifnamePrefix: string; sizes?: Readonly<Record<string, number>>; counters?: readonly string[]; bogons?: readonly string[] }): string {
  let text = rulesetBody(opts);
  for (const [name, size] of Object.entries(opts.sizes ?? {})) {
    const capped = text.replace(new RegExp(`(\\n  (?:set|map) ${name} \\{\\n    type [^\\n]*)`), `$1\n    size ${size}`);
    if (capped === text) throw new Error(`no set or map ${name} in the agent's table`);
    text = capped;
  }
  return text;
}

function rulesetBody(opts: { table: string; ifnamePrefix: string; counters?: readonly string[]; bogons?: readonly string[] }): string {
  const counters = (opts.counters ?? []).map((c) => `  counter ${c} {\n  }\n`).join('');
  const bogons = opts.bogons?.length ? `\n    elements = { ${opts.bogons.join(', ')} }` : '';
  return `table ip ${opts.table} {
  map protected {
    type ipv4_addr : ipv4_addr
  }
  map tunnel_counters {
    type ipv4_addr : counter
  }
  set replies {
    type ifname . ipv4_addr . ipv4_addr
  }
  set origins {
    type ifname . ipv4_addr
  }
  set allowed_all {
    type ipv4_addr . inet_proto
  }
  set allowed_4096 {
    type ipv4_addr . inet_proto . inet_service
  }
  set allowed_256 {
    type ipv4_addr . inet_proto . inet_service
  }
  set allowed_16 {
    type ipv4_addr . inet_proto . inet_service
  }
  set allowed_1 {
    type ipv4_addr . inet_proto . inet_service
  }
  set fragments {
    type ipv4_addr
  }
  set synproxied {
    type ipv4_addr
  }
  map syn_proxy {
    type ipv4_addr : synproxy
  }
  map rate_limits {
    type ipv4_addr : verdict
  }
  map drop_spoofed {
    type ifname : counter
  }
  map drop_not_allowed {
    type ipv4_addr : counter
  }
  map drop_rate_limited {
    type ipv4_addr : counter
  }
  map drop_invalid {
    type ipv4_addr : counter
  }
  map drop_fragment {
    type ipv4_addr : counter
  }
  map tunnel_out {
    type ifname : counter
  }
  map flow_limits {
    type ipv4_addr : verdict
  }
  map drop_spoofed_in {
    type ipv4_addr : counter
  }
  set bogons {
    type ipv4_addr
    flags interval${bogons}
  }
  set vector_watch {
    type ipv4_addr
  }
  set vector_protos {
    type ipv4_addr . inet_proto
    size 65536
    flags dynamic
  }
  set vector_ports {
    type ipv4_addr . inet_service
    size 65536
    flags dynamic
  }
${counters}  chain early {
    type filter hook prerouting priority -450; policy accept;
    counter name ip daddr map @tunnel_counters jump inbound
  }
  chain inbound {
    iifname "${opts.ifnamePrefix}*" goto tunnel_to_p
    ip daddr @vector_watch jump vector
    ip saddr @bogons counter name ip daddr map @drop_spoofed_in drop
    ip frag-off & 0x3fff != 0 ip daddr @fragments counter name ip daddr map @drop_fragment drop
    ip frag-off & 0x1fff == 0 jump allowlist
    ip daddr vmap @rate_limits
    tcp flags & (fin|syn|rst|ack) == syn ip daddr @synproxied notrack
  }
  chain vector {
    update @vector_protos { ip daddr . meta l4proto counter }
    update @vector_ports { ip daddr . tcp dport counter }
    update @vector_ports { ip daddr . udp dport counter }
  }
  chain tunnel_to_p {
    counter name iifname map @drop_spoofed drop
    drop
  }
  chain allowlist {
    ip daddr . meta l4proto @allowed_all return
    ip daddr . meta l4proto . th dport @allowed_1 return
    ip daddr . meta l4proto . th dport & 0xfff0 @allowed_16 return
    ip daddr . meta l4proto . th dport & 0xff00 @allowed_256 return
    ip daddr . meta l4proto . th dport & 0xf000 @allowed_4096 return
    counter name ip daddr map @drop_not_allowed drop
  }
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    tcp flags & (fin|syn|rst|ack) == syn ip daddr @synproxied counter name ip daddr map @drop_invalid drop
    ip daddr vmap @flow_limits
    meta l4proto { tcp, udp } counter dnat to ip daddr map @protected
  }
  chain nat_out {
    type nat hook output priority -100; policy accept;
    ip daddr vmap @flow_limits
    meta l4proto tcp dnat to ip daddr map @protected
  }
  chain guard {
    type filter hook forward priority filter; policy accept;
    tcp flags syn oifname "${opts.ifnamePrefix}*" tcp option maxseg size set rt mtu
    ct status & dnat != 0 iifname != "${opts.ifnamePrefix}*" accept
    iifname "${opts.ifnamePrefix}*" jump from_tunnel
    ct state invalid,untracked jump guard_ct
    ct status & dnat == 0 jump guard_nodnat
  }
  chain guard_ct {
    synproxy name ip daddr map @syn_proxy
    counter name ip daddr map @drop_invalid drop
    oifname "${opts.ifnamePrefix}*" drop
  }
  chain guard_nodnat {
    oifname "${opts.ifnamePrefix}*" drop
    counter name ip daddr map @drop_invalid drop
  }
  chain from_tunnel {
    ct direction reply ct status & dnat != 0 iifname . ip saddr . ct original ip daddr @replies jump tunnel_reply
    counter name iifname map @drop_spoofed drop
    drop
  }
  chain tunnel_reply {
    counter name iifname map @tunnel_out
    accept
  }
  chain local_in {
    type filter hook input priority filter; policy accept;
    iifname "${opts.ifnamePrefix}*" jump tunnel_in
    counter name ip daddr map @drop_invalid drop
  }
  chain tunnel_in {
    ct state established,related iifname . ip saddr @origins accept
    counter name iifname map @drop_spoofed drop
    drop
  }
}
`;
}

/** What the agent's table holds for one tunnel with the default policy, as `nft -f` lines (the benchmark's baseline). */
export interface TextTunnel {
  tunnel_name: string;
  protected_ip: string;
  origin_inner: string;
  /** For the SYN proxy's MSS (mtu - 40); needed only with a policy that turns the proxy on. */
  mtu?: number;
  /** The protection policy (absent: the default one, as a v1 job's tunnel gets). */
  policy?: TunnelPolicy;
}
const REASONS = ['not_allowed', 'rate_limited', 'spoofed', 'invalid', 'fragment'] as const;
const BY_P = REASONS.filter((r) => r !== 'spoofed');
const O = (t: TextTunnel): string => t.origin_inner.split('/')[0]!;
const policyOf = (t: TextTunnel): TunnelPolicy => t.policy ?? DEFAULT_POLICY;
const needs = (t: TextTunnel) => sharedNeeds({ tunnel_name: t.tunnel_name, mtu: t.mtu ?? 1476, ...(t.policy ? { policy: t.policy } : {}) });

/** The sizes the twin writes into the chains made by value (the agent's own come from dataplane/sizing.ts). */
export const TEXT_CHAIN_SIZES: DynamicChainSizes = { meterSources: 65_536, flowEntries: 262_144 };

/**
 * A chain made by value (agent/netlink/ruleset.ts addDynamicChain) as `nft -f` lines: a tunnel's meter, or the flow
 * caps of one max_flows value, with its sets.
 */
export function dynamicChainNftText(table: string, name: string, sizes: DynamicChainSizes = TEXT_CHAIN_SIZES): string[] {
  const c = dynamicChainOf(name);
  if (!c) throw new Error(`not a chain made by value: ${name}`);
  const drop = 'counter name ip daddr map @drop_rate_limited drop';
  const rule = (r: string): string => `add rule ip ${table} ${name} ${r}`;
  if (c.kind === 'meter')
    return [
      `add set ip ${table} ${name} { type ipv4_addr; size ${sizes.meterSources}; flags dynamic,timeout; timeout ${METER_TIMEOUT_MS / 1000}s; }`,
      `add chain ip ${table} ${name}`,
      rule(`update @${name} { ip saddr limit rate ${c.pps}/second } return`),
      rule(`ip saddr != @${name} limit rate over ${c.pps}/second ${drop}`),
      rule(`ip saddr != @${name} return`),
      rule(drop),
    ];
  const s = flowCapShape(c.maxFlows);
  return [
    `add set ip ${table} ${name} { type ipv4_addr . mark; size ${sizes.flowEntries}; flags dynamic; }`,
    `add set ip ${table} new${name} { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 1s; }`,
    `add chain ip ${table} ${name}`,
    rule(`update @new${name} { ip daddr limit rate over ${s.newPerSecond}/second burst ${s.newPerSecond} packets } ${drop}`),
    rule(`add @${name} { ip daddr . jhash ip saddr . th sport mod ${s.buckets} ct count over ${s.perBucket} } ${drop}`),
  ];
}

/** The same chain deleted, with its sets. */
export function dynamicChainDeleteNftText(table: string, name: string): string[] {
  const c = dynamicChainOf(name);
  return [`flush chain ip ${table} ${name}`, `delete chain ip ${table} ${name}`, `delete set ip ${table} ${name}`, ...(c?.kind === 'flows' ? [`delete set ip ${table} new${name}`] : [])];
}

/**
 * Each tunnel's policy elements, by set, as `nft -f` writes them: the allowlist cut into the agent's own port
 * blocks (agent/dataplane/policy.ts portBlocks, so the per-packet work is the same), fragments, SYN proxy and
 * rate limit.
 */
function policyElements(ts: readonly TextTunnel[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const add = (set: string, e: string): void => void (out.get(set) ?? out.set(set, []).get(set)!).push(e);
  for (const t of ts) {
    const p = policyOf(t);
    const P = t.protected_ip;
    for (const proto of p.protocol === 'both' ? ['tcp', 'udp'] : [p.protocol]) {
      if (p.ports === '*') add('allowed_all', `${P} . ${proto}`);
      else for (const [bits, port] of portBlocks(p.ports)) add(allowedSet(bits), bits === 16 ? `${P} . ${proto}` : `${P} . ${proto} . ${port}`);
    }
    if (p.drop_fragments) add('fragments', P);
    const n = needs(t);
    if (n.mss !== undefined) {
      add('synproxied', P);
      add('syn_proxy', `${P} : "${synproxyName(n.mss)}"`);
    }
    if (p.source_pps_limit !== null) add('rate_limits', `${P} : jump ${meterChainName(t.tunnel_name, p.source_pps_limit)}`);
    add('flow_limits', `${P} : jump ${flowsChainName(maxFlowsOf(t))}`);
  }
  return out;
}

/** The synproxy objects (one per MSS) and the chains made by value (meters and flow caps) the tunnels need. */
function sharedObjects(ts: readonly TextTunnel[]): { mss: number[]; chains: string[] } {
  const mss = new Set<number>();
  const chains = new Set<string>();
  for (const t of ts) {
    const n = needs(t);
    if (n.mss !== undefined) mss.add(n.mss);
    for (const c of n.chains) chains.add(c);
  }
  return { mss: [...mss], chains: [...chains] };
}

/** Adds: the seven counters of each tunnel, then the dnat and counter maps, isolation sets, allowlist and drop maps. */
export function tunnelsAddNftText(table: string, ts: readonly TextTunnel[]): string[] {
  const el = (set: string, f: (t: TextTunnel) => string): string => `add element ip ${table} ${set} { ${ts.map(f).join(', ')} }`;
  const shared = sharedObjects(ts);
  return [
    ...ts.flatMap((t) => [t.tunnel_name, ...REASONS.map((r) => `${t.tunnel_name}.${r}`), `${t.tunnel_name}.out`].map((c) => `add counter ip ${table} ${c}`)),
    ...shared.mss.map((m) => `add synproxy ip ${table} ${synproxyName(m)} { mss ${m}; wscale 7; timestamp sack-perm; }`),
    ...shared.chains.flatMap((c) => dynamicChainNftText(table, c)),
    el('protected', (t) => `${t.protected_ip} : ${O(t)}`),
    el('tunnel_counters', (t) => `${t.protected_ip} : "${t.tunnel_name}"`),
    el('replies', (t) => `"${t.tunnel_name}" . ${O(t)} . ${t.protected_ip}`),
    el('origins', (t) => `"${t.tunnel_name}" . ${O(t)}`),
    ...[...policyElements(ts)].map(([set, els]) => `add element ip ${table} ${set} { ${els.join(', ')} }`),
    el('drop_spoofed', (t) => `"${t.tunnel_name}" : "${t.tunnel_name}.spoofed"`),
    el('tunnel_out', (t) => `"${t.tunnel_name}" : "${t.tunnel_name}.out"`),
    ...BY_P.map((r) => el(`drop_${r}`, (t) => `${t.protected_ip} : "${t.tunnel_name}.${r}"`)),
    el('drop_spoofed_in', (t) => `${t.protected_ip} : "${t.tunnel_name}.spoofed"`),
  ];
}

/** The same, deleted: elements first, then the counters and shared objects they referred to. */
export function tunnelsDeleteNftText(table: string, ts: readonly TextTunnel[]): string[] {
  const el = (set: string, f: (t: TextTunnel) => string): string => `delete element ip ${table} ${set} { ${ts.map(f).join(', ')} }`;
  const shared = sharedObjects(ts);
  return [
    el('tunnel_counters', (t) => t.protected_ip),
    el('protected', (t) => t.protected_ip),
    el('replies', (t) => `"${t.tunnel_name}" . ${O(t)} . ${t.protected_ip}`),
    el('origins', (t) => `"${t.tunnel_name}" . ${O(t)}`),
    // A map element is deleted by its key alone.
    ...[...policyElements(ts)].map(([set, els]) => `delete element ip ${table} ${set} { ${els.map((e) => e.split(' : ')[0]).join(', ')} }`),
    el('drop_spoofed', (t) => `"${t.tunnel_name}"`),
    el('tunnel_out', (t) => `"${t.tunnel_name}"`),
    ...BY_P.map((r) => el(`drop_${r}`, (t) => t.protected_ip)),
    el('drop_spoofed_in', (t) => t.protected_ip),
    ...ts.flatMap((t) => [t.tunnel_name, ...REASONS.map((r) => `${t.tunnel_name}.${r}`), `${t.tunnel_name}.out`].map((c) => `delete counter ip ${table} ${c}`)),
    ...shared.chains.flatMap((c) => dynamicChainDeleteNftText(table, c)),
    ...shared.mss.map((m) => `delete synproxy ip ${table} ${synproxyName(m)}`),
  ];
}
