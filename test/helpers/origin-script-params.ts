// The one tunnel the origin-script tests render (unit, file and VM tests), so a reader can hold them side by side.
import type { OriginScriptParams } from '../../server/domain/origin-scripts.ts';

export const ORIGIN_SCRIPT_PARAMS: OriginScriptParams = {
  tunnelId: '3f0c2a4e-1b2c-4d5e-8f90-123456789abc',
  tunnelName: 'tg-3k9x0a1b',
  protectedIp: '203.0.113.10',
  originIp: '192.0.2.6',
  edgeIp: '192.0.2.2',
  edgeInner: '100.64.0.1/30',
  originInner: '100.64.0.2/30',
  mtu: 1476,
  greKey: 42,
  routeTable: 1000123,
};

/**
 * One shell command printing everything the origin script may touch (links, addresses, rules, every route
 * table, rp_filter, the nftables ruleset): two equal outputs mean the same kernel state, ifindexes included.
 * The unit test runs it in a namespace, the VM test in the guest.
 */
export const ORIGIN_STATE_SNAPSHOT = [
  'ip -o link show',
  'ip -4 -o addr show',
  'ip -4 rule show',
  'ip -4 route show table all',
  'for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo "$f $(cat "$f")"; done',
  'nft list ruleset',
].join('; echo ---; ');
