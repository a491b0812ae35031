// CIDR lists for the agent's address settings (docs/CONTRACTS.md "Hardening of the listener"):
// AGENT_ALLOW_FROM (which sources may open a connection) and AGENT_PROTECTED_POOLS (which protected IPs a
// job may map). Parsing is strict (a bare address counts as /32 or /128) and matching goes through
// node:net's BlockList, which compares addresses as numbers, not strings.
import { BlockList, isIPv4, isIPv6 } from 'node:net';

export class CidrError extends Error {
  override name = 'CidrError';
}

export interface CidrList {
  /** The entries as given, normalised to `address/prefix` (for logs and error texts). */
  readonly entries: readonly string[];
  /** Whether `ip` (IPv4, IPv6, or IPv4-mapped IPv6 as sockets report it) lies in one of the entries. */
  contains(ip: string): boolean;
}

/** `::ffff:192.0.2.1` (what a dual-stack socket reports for an IPv4 peer) -> `192.0.2.1`. */
export function unmapIPv4(ip: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  return m ? m[1]! : ip;
}

/**
 * Parses a comma-separated list of CIDRs (`192.0.2.0/24, 2001:db8::/32, 198.51.100.7`). `ipv4Only`
 * refuses IPv6 entries (protected IPs are IPv4). Throws CidrError naming the bad entry.
 */
export function parseCidrList(text: string, opts: { ipv4Only?: boolean } = {}): CidrList {
  const list = new BlockList();
  const entries: string[] = [];
  for (const raw of text.split(',')) {
    const item = raw.trim();
    if (item === '') throw new CidrError(`empty entry in "${text}"`);
    const [addr = '', prefixText, extra] = item.split('/');
    if (extra !== undefined) throw new CidrError(`"${item}" is not a CIDR`);
    const family = isIPv4(addr) ? 'ipv4' : isIPv6(addr) ? 'ipv6' : undefined;
    if (!family) throw new CidrError(`"${item}" is not an IP address or CIDR`);
    if (family === 'ipv6' && opts.ipv4Only) throw new CidrError(`"${item}" is not IPv4`);
    const max = family === 'ipv4' ? 32 : 128;
    let prefix = max;
    if (prefixText !== undefined) {
      if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > max) throw new CidrError(`"${item}": the prefix length must be 0 to ${max}`);
      prefix = Number(prefixText);
    }
    list.addSubnet(addr, prefix, family);
    entries.push(`${addr}/${prefix}`);
  }
  return {
    entries,
    contains(ip: string): boolean {
      const a = unmapIPv4(ip);
      const family = isIPv4(a) ? 'ipv4' : isIPv6(a) ? 'ipv6' : undefined;
      return family !== undefined && list.check(a, family);
    },
  };
}
