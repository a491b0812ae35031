// The agent's nftables table (agent/netlink/ruleset.ts) written as `nft -f` input: the command-line
// twin that the agent benchmark's baseline loads and that tests use to build a table by hand.
export function rulesetNftText(opts: { table: string; ifnamePrefix: string; mapSize?: number }): string {
  return `table ip ${opts.table} {
  map protected {
    type ipv4_addr : ipv4_addr${opts.mapSize ? `\n    size ${opts.mapSize}` : ''}
  }
  map tunnel_counters {
    type ipv4_addr : counter
  }
  chain count {
    type filter hook prerouting priority mangle; policy accept;
    counter name ip daddr map @tunnel_counters
  }
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    meta l4proto { tcp, udp } counter dnat to ip daddr map @protected
  }
  chain forward {
    type filter hook forward priority mangle; policy accept;
    oifname "${opts.ifnamePrefix}*" tcp flags syn tcp option maxseg size set rt mtu
  }
}
`;
}
