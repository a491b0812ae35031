// IPv4 text rules both programs share: the one dotted-quad parser and the "address/prefix" form an
// interface address is written in. Addresses are uint32 numbers. No I/O, no dependencies.
//
// One parser, because the copies had drifted: the netlink encoder accepted leading zeros ("010.0.0.1",
// which inet_aton and so the origin's `ip` read as octal) while the job contract refused them.

/**
 * Strict dotted quad to a uint32, or null: four decimal octets 0-255, no leading zeros (so "010.0.0.1"
 * is not octal-ambiguous), no spaces, no sign. Hand-rolled rather than split/regex because the agent
 * parses tens of thousands of these per batch and split/regex dominated that.
 */
export function parseIPv4(text: unknown): number | null {
  if (typeof text !== 'string') return null;
  let n = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i <= text.length; i++) {
    const c = i < text.length ? text.charCodeAt(i) : 46; // '.' terminates the last octet
    if (c >= 48 && c <= 57) {
      if (digits === 1 && octet === 0) return null; // a leading zero
      octet = octet * 10 + (c - 48);
      if (++digits > 3 || octet > 255) return null;
    } else if (c === 46 && digits > 0) {
      n = n * 256 + octet;
      octet = 0;
      digits = 0;
      if (++dots > 4) return null;
    } else {
      return null;
    }
  }
  return dots === 4 ? n : null;
}

export function formatIPv4(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/**
 * "a.b.c.d/n", an address with its prefix length as an interface address is written (host bits may be
 * set: "100.64.0.1/30"), or null. The prefix is 0 to 32 in decimal without leading zeros.
 */
export function parseIPv4Prefix(text: unknown): { addr: number; prefix: number } | null {
  if (typeof text !== 'string') return null;
  const slash = text.indexOf('/');
  if (slash === -1 || !/^(0|[1-9][0-9]?)$/.test(text.slice(slash + 1))) return null;
  const prefix = Number(text.slice(slash + 1));
  const addr = parseIPv4(text.slice(0, slash));
  return addr === null || prefix > 32 ? null : { addr, prefix };
}
