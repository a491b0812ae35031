// GRE keys. Linux tells GRE links apart by (local, remote, key): two unkeyed links from one
// edge to one origin are the same link to the kernel ("File exists"), so a second tunnel to an origin
// that already has one on that edge could never be provisioned. Every tunnel bought now carries a key,
// unique among the live tunnels of its (node, origin_ip) pair, which the database enforces too (the
// partial unique index `tunnel_live_gre_key_uniq`, server/db/entities.ts).
//
// Why a key on every tunnel, not only on repeats: a stray or spoofed GRE packet of one tunnel never
// enters another (the kernel delivers a keyed packet only to the link with that key), and a blind
// injector must guess 32 random bits, not just the two public addresses.
import { randomInt } from 'node:crypto';
import type { Sql } from '../db/database.ts';

/** The unique index that keeps keys distinct per (node, origin_ip) among live tunnels. */
const GRE_KEY_INDEX = 'tunnel_live_gre_key_uniq';

/** Tunnel MTU on a 1500-byte underlay: 20 bytes of outer IPv4 and the 4-byte GRE header... */
const GRE_MTU = 1476;
/** ...and 4 more bytes when the GRE header carries a key (the MSS clamps on both ends follow it). */
const GRE_KEYED_MTU = 1472;

export function greMtu(greKey: number | null): number {
  return greKey === null ? GRE_MTU : GRE_KEYED_MTU;
}

/**
 * Where keys come from: a uniformly random key from 1 to 2^32-1. Zero is left out because some tools
 * print or treat a zero key as no key at all. A seam: tests inject a source that repeats itself to force
 * collisions (it may wait, so a test can line concurrent purchases up on the same key).
 */
export type GreKeySource = () => number | Promise<number>;

export const randomGreKey: GreKeySource = () => randomInt(1, 2 ** 32);

/** Draws that may hit a key already used by the pair before giving up (a broken source, not bad luck). */
const MAX_DRAWS = 64;

/**
 * A key for a tunnel from node `nodeId` to `originIp`, not used by any live tunnel of that pair as far as
 * this transaction can see. A concurrent transaction may pick the same key unseen (odds 2^-32 per pair
 * member): the unique index then refuses the second insert, and the purchase retries once
 * (isGreKeyCollision, TunnelService.purchase).
 *
 * Changing a tunnel's origin_ip (PATCH /api/dedicated/{id}, domain/tunnels/update.ts) calls this for the
 * new (node, origin) pair, so a move onto an origin that already has tunnels on that edge keeps the
 * guarantee (two live tunnels of a pair never share a key).
 */
export async function pickGreKey(sql: Pick<Sql, 'query'>, nodeId: string, originIp: string, source: GreKeySource = randomGreKey): Promise<number> {
  const rows = await sql.query<{ gre_key: string }>(
    `select gre_key::text as gre_key from tunnel where node_id = ? and origin_ip = ? and status <> 'deleted' and gre_key is not null`,
    [nodeId, originIp],
  );
  const used = new Set(rows.map((r) => Number(r.gre_key)));
  for (let i = 0; i < MAX_DRAWS; i++) {
    const key = await drawGreKey(source);
    if (!used.has(key)) return key;
  }
  throw new Error(`no unused GRE key for node ${nodeId} and origin ${originIp} after ${MAX_DRAWS} draws: the key source is not random`);
}

/**
 * A key drawn without reading the keys in use: what a purchase does first (it must stay fast). Reading every live
 * key of the (node, origin) pair made each purchase slower as tunnels to one origin grew, to guard
 * against odds of n/2^32; the unique index catches that rare collision anyway, and the purchase's one
 * retry then reads (pickGreKey).
 */
export async function drawGreKey(source: GreKeySource = randomGreKey): Promise<number> {
  const key = await source();
  if (!Number.isInteger(key) || key < 1 || key > 0xffffffff) throw new RangeError(`GRE key source gave ${key}, not an integer from 1 to 4294967295`);
  return key;
}

/** True for the unique-index violation of two live tunnels of one (node, origin) pair drawing the same key. */
export function isGreKeyCollision(e: unknown): boolean {
  if (typeof e !== 'object' || e === null) return false;
  const { code, constraint } = e as { code?: unknown; constraint?: unknown };
  return code === '23505' && constraint === GRE_KEY_INDEX;
}
