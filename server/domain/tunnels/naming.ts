// Names derived from a tunnel's id: its interface name on the edge and the origin, and the policy-routing
// table the origin script uses. Pure; the same id always gives the same names.

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

/** A policy-routing table number on the origin, distinct per tunnel and clear of the reserved 253-255. */
export function routeTableFor(id: string): number {
  return 1_000_000 + Number.parseInt(id.replace(/-/g, '').slice(0, 5), 16);
}
