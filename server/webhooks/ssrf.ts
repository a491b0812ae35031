// The SSRF guard, applied when a delivery is sent (not only when the URL was registered: a name may
// resolve elsewhere later). The name is resolved then; every address must be public unicast by the
// gateway's one rule (server/domain/ip.ts isPublicUnicast: loopback, private, link-local, CGNAT,
// multicast, reserved and documentation ranges are not) and none of our own (a protected IP or an edge's
// address, server/domain/tunnels/input.ts ourAddress), unless ALLOW_PRIVATE_WEBHOOKS=true. The request
// then connects to the address that was checked (target.address), never resolving the name again, so a
// DNS answer that changes between check and connect (rebinding) cannot move it.
//
// "Our own" includes the addresses of edges whose SSH host is a DNS name: the names are resolved, with
// the resolver the delivery itself uses, each time the set is built, so a name and the edge it names
// cannot be told apart by the guard. And a URL whose port is an admin SSH port of ours (ADMIN_SSH_PORT or
// any edge's ssh_port) is refused in every setting, at registration and at delivery: no webhook receiver
// listens there, and a POST to it is a probe of the agent's SSH server (docs/SECURITY.md).
//
// Deliveries go over IPv4 only: the public-unicast rule is IPv4's, and an unchecked IPv6 path would be a
// way around the guard. A name with no IPv4 address is refused.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { Sql } from '../db/database.ts';
import { isPublicUnicast, parseIPv4 } from '../domain/ip.ts';
import { ourAddress } from '../domain/tunnels/input.ts';

/** A host name's IPv4 addresses. Injectable: tests resolve names their own way. */
export type Resolver = (host: string) => Promise<string[]>;

export const systemResolver: Resolver = async (host) => (await lookup(host, { all: true, family: 4 })).map((a) => a.address);

export type Target = { ok: true; address: string } | { ok: false; reason: string };

/** The host of a URL as a resolver takes it (IPv6 literals lose their brackets). */
function hostOf(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1');
}

/** The port a request to `url` goes to (the scheme's default when the URL names none). */
function portOf(url: URL): number {
  if (url.port) return Number(url.port);
  return url.protocol === 'http:' ? 80 : 443;
}

/**
 * Why `url`'s port may not be a webhook's, or null when it may: ADMIN_SSH_PORT and every edge's ssh_port
 * are our admin SSH ports. Needs no name resolved, so registration checks it too.
 */
export async function portRefusal(sql: Pick<Sql, 'query'>, url: URL, adminSshPort: number): Promise<string | null> {
  const port = portOf(url);
  if (port === adminSshPort) return `port ${port} is our admin SSH port`;
  const [edge] = await sql.query<{ n: number }>('select 1 as n from edge_node where ssh_port = ? limit 1', [port]);
  return edge ? `port ${port} is an edge router's SSH port` : null;
}

/**
 * The IPv4 addresses of edges whose SSH host is a DNS name, resolved now by `resolve`. A name that does
 * not resolve adds nothing: it names no address a delivery could reach either.
 */
export async function edgeSshAddresses(sql: Pick<Sql, 'query'>, resolve: Resolver): Promise<Map<string, string>> {
  const rows = await sql.query<{ ssh_host: string }>('select distinct ssh_host from edge_node');
  const names = rows.map((r) => r.ssh_host).filter((h) => isIP(h) === 0);
  const byAddress = new Map<string, string>();
  const answers = await Promise.all(names.map((name) => resolve(name).then((a) => a, () => [] as string[])));
  names.forEach((name, i) => {
    for (const ip of answers[i]!) if (!byAddress.has(ip)) byAddress.set(ip, name);
  });
  return byAddress;
}

/** Why `ip` may not be a webhook's address, or null when it may. */
async function refusal(sql: Pick<Sql, 'query'>, ip: string, edgeNames: Map<string, string>): Promise<string | null> {
  const n = parseIPv4(ip);
  if (n === null) return `${ip} is not an IPv4 address`;
  if (!isPublicUnicast(n)) return `${ip} is not a public unicast address`;
  const ours = await ourAddress(sql, ip);
  if (ours) return `${ip} is ${ours}`;
  const edge = edgeNames.get(ip);
  return edge === undefined ? null : `${ip} is an edge router's address (its SSH host ${edge})`;
}

/**
 * Where a delivery to `url` may connect: the first resolved address, once every address passed the
 * guard; or the reason it may not be sent.
 */
export async function checkTarget(sql: Pick<Sql, 'query'>, url: URL, opts: { allowPrivate: boolean; resolve: Resolver; adminSshPort: number }): Promise<Target> {
  const host = hostOf(url);
  if (isIP(host) === 6) return { ok: false, reason: `${host}: IPv6 targets are not supported` };
  // Checked again here: an edge added since registration may have brought its ssh_port.
  const port = await portRefusal(sql, url, opts.adminSshPort);
  if (port) return { ok: false, reason: port };
  let addresses: string[];
  try {
    addresses = isIP(host) === 4 ? [host] : await opts.resolve(host);
  } catch (e) {
    return { ok: false, reason: `${host} does not resolve (${(e as Error).message})` };
  }
  if (addresses.length === 0) return { ok: false, reason: `${host} has no IPv4 address` };
  if (!opts.allowPrivate) {
    const edgeNames = await edgeSshAddresses(sql, opts.resolve);
    for (const ip of addresses) {
      const why = await refusal(sql, ip, edgeNames);
      if (why) return { ok: false, reason: `${host} resolves to ${why}` };
    }
  }
  return { ok: true, address: addresses[0]! };
}

/**
 * The check a registration can make without resolving anything, or null when the URL may be stored: an
 * IPv6 literal is refused always (deliveries go over IPv4), an IPv4 literal that is not public unless
 * `allowPrivate`. A name is checked at delivery, where it counts.
 */
export function literalRefusal(url: URL, allowPrivate: boolean): string | null {
  const host = hostOf(url);
  if (isIP(host) === 6) return 'IPv6 addresses are not supported; use a host name with an IPv4 address';
  if (!allowPrivate && isIP(host) === 4 && !isPublicUnicast(parseIPv4(host)!)) return `${host} is not a public address`;
  return null;
}
