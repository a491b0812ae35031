// Names derived from a tunnel: its interface name on the edge and the origin (from its id), and the
// policy-routing table the origin script uses (from its inner address). Pure.
import { parseIPv4 } from '../../../common/ipv4.ts';

/** Linux interface names are at most 15 bytes; `tg-` plus 10 base-32 characters is 13. */
export function tunnelNameFor(id: string): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567';
  const bytes = Buffer.from(id.replace(/-/g, ''), 'hex');
  let bits = 0n;
  for (const b of bytes.subarray(0, 7)) bits = (bits << 8n) | BigInt(b);
  let out = '';
  // The 50 leading bits of the id, most significant first.
  for (let i = 1; i <= 10; i++) out += alphabet[Number((bits >> BigInt(56 - 5 * i)) & 31n)];
  return `tg-${out}`;
}

/**
 * A policy-routing table number on the origin, clear of the reserved 253-255: 2^20 + the origin's inner
 * address halved (its low 30 bits), so two tunnels never share a table while their inner subnets differ
 * (the inner pool is one for every node, docs/NODES.md, and never spans addresses differing in the top
 * bit), /31 subnets included. It was numbered from the id's first five hex digits, which two tunnels to
 * one origin could share (1 in 2^20 per pair): the second tunnel's route then replaced the first's, whose
 * replies left through the wrong link and the edge dropped them as spoofed. Below 2^31 (validate.ts).
 */
export function routeTableFor(originInner: string): number {
  const addr = parseIPv4(originInner.split('/')[0]);
  if (addr === null) throw new TypeError(`origin script: originInner must be an IPv4 address, got ${JSON.stringify(originInner)}`);
  return 2 ** 20 + (Math.floor(addr / 2) % 2 ** 30);
}
