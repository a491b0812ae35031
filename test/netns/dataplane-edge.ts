// The edge side of the dataplane's kernel tests: a fresh namespace with the edge address on lo, a state
// directory of its own, and the production dataplane opened in it (veth stand-in for GRE: this kernel has
// none, docs/CONTRACTS.md "Dataplane"). `ip -j` and `nft -j` read what the dataplane did.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDataplane, type DataplaneHandle, type TunnelSpec } from '../../agent/dataplane/index.ts';
import { TestNetns } from './netns.ts';

export const NFT_TABLE = 'tunnelgate';
export const EDGE_IP = '192.0.2.2';

/**
 * Numbered test tunnels named `${prefix}${i}`: protected 203.0.(`protectedNet` + i/256).(i%256), origin
 * 198.18.(i/256).(i%256), inner /30 number i of 100.64.0.0/10. Distinct i never collide.
 */
export function numberedTunnels(prefix: string, protectedNet = 113): (i: number, over?: Partial<TunnelSpec>) => TunnelSpec {
  return (i, over = {}) => {
    const base = 4 * i;
    const inner = (off: number): string => `100.${64 + (base >> 16)}.${(base >> 8) & 255}.${(base & 255) + off}/30`;
    return {
      id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      tunnel_name: `${prefix}${i}`,
      protected_ip: `203.0.${protectedNet + (i >> 8)}.${i & 255}`,
      origin_ip: `198.18.${i >> 8}.${i & 255}`,
      edge_ip: EDGE_IP,
      edge_inner: inner(1),
      origin_inner: inner(2),
      mtu: 1476,
      ...over,
    };
  };
}

export class DataplaneEdge extends TestNetns {
  readonly stateDir: string;

  /** `tag` names the state directory (under the system temp directory), to tell the tests' apart. */
  constructor(tag: string) {
    super();
    this.run('ip', 'link', 'set', 'lo', 'up');
    this.run('ip', 'addr', 'add', `${EDGE_IP}/32`, 'dev', 'lo');
    this.stateDir = mkdtempSync(join(tmpdir(), `${tag}-`));
  }

  /** The production dataplane on this namespace and state directory; the caller closes it. */
  openDataplane(): Promise<DataplaneHandle> {
    return createDataplane({ edgeIp: EDGE_IP, nftTable: NFT_TABLE, stateDir: this.stateDir, netns: this.name, linkKind: 'veth-standin' });
  }

  /** Every link in the namespace, name to ifindex (a recreated link gets a new index). */
  linkIndexes(): Map<string, number> {
    return new Map(this.ipJson<{ ifname: string; ifindex: number }[]>('link', 'show').map((l) => [l.ifname, l.ifindex]));
  }

  /** The elements of the agent's `protected` map (protected IP to origin inner address), in kernel order. */
  protectedMap(): [string, string][] {
    const j = JSON.parse(this.run('nft', '-j', 'list', 'map', 'ip', NFT_TABLE, 'protected')) as { nftables: { map?: { elem?: [string, string][] } }[] };
    return j.nftables.find((o) => o.map)!.map!.elem ?? [];
  }

  override delete(): void {
    super.delete();
    rmSync(this.stateDir, { recursive: true, force: true });
  }
}
