// Flushing a protected IP's conntrack entries over NETLINK_NETFILTER (ctnetlink), the way `conntrack -D
// -d IP` does it: dump the entries whose original destination is the IP (filtered in the kernel with
// CTA_FILTER where it can, and always again here), then IPCTNL_MSG_CT_DELETE each by its original tuple,
// sent back exactly as the kernel dumped it. No child process, no dependency on conntrack-tools, and it
// runs in whatever namespace the agent's sockets live in.
import { AttrTable, NlWriter, bytesToIpv4, ipv4ToBytes, parseAttrs } from '../netlink/attrs.ts';
import { NETLINK_NETFILTER, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkError, beginMessage, endMessage, errnoName, type NlMsg } from '../netlink/message.ts';
import { NetlinkSocket } from '../netlink/socket.ts';

// include/uapi/linux/netfilter/nfnetlink.h, nfnetlink_conntrack.h
const NFNL_SUBSYS_CTNETLINK = 1;
const IPCTNL_MSG_CT_NEW = 0;
const IPCTNL_MSG_CT_GET = 1;
const IPCTNL_MSG_CT_DELETE = 2;
const CTA_TUPLE_ORIG = 1;
const CTA_ZONE = 18;
const CTA_FILTER = 25;
const CTA_TUPLE_IP = 1;
const CTA_TUPLE_PROTO = 2;
const CTA_IP_V4_DST = 2;
const CTA_PROTO_NUM = 1;
const CTA_PROTO_DST_PORT = 3;
const CTA_FILTER_ORIG_FLAGS = 1;
const CTA_FILTER_FLAG_CTA_IP_DST = 1 << 1;
const AF_INET = 2;

const ctType = (m: number): number => (NFNL_SUBSYS_CTNETLINK << 8) | m;

/** `version` 1 makes a flush honour the family (ctnetlink_del_conntrack: version 0 flushes every family). */
function nfgenmsg(w: NlWriter, version = 0): void {
  w.u8(AF_INET).u8(version).u16be(0);
}

/** The original-destination filter: CTA_TUPLE_ORIG with only the address, and CTA_FILTER saying so. */
function dstFilter(w: NlWriter, dst: string): void {
  w.nest(CTA_TUPLE_ORIG, (t) => t.nest(CTA_TUPLE_IP, (ip) => ip.attrBytes(CTA_IP_V4_DST, ipv4ToBytes(dst))));
  w.nest(CTA_FILTER, (f) => f.attrU32(CTA_FILTER_ORIG_FLAGS, CTA_FILTER_FLAG_CTA_IP_DST));
}

/** IPCTNL_MSG_CT_GET dump; with `dst`, a kernel-side filter on the original destination. */
function encodeCtDump(seq: number, dst?: string): Buffer {
  const w = new NlWriter(128);
  const s = beginMessage(w, ctType(IPCTNL_MSG_CT_GET), NLM_F_REQUEST | NLM_F_DUMP, seq);
  nfgenmsg(w);
  if (dst !== undefined) dstFilter(w, dst);
  endMessage(w, s);
  return w.toBuffer();
}

export interface CtEntry {
  origDst: string;
  /** The original tuple's layer-4 protocol number and destination port (none for protocols without ports). */
  proto?: number;
  dstPort?: number;
  /** CTA_TUPLE_ORIG's payload as dumped (ip + proto + zone nests). */
  tuple: Buffer;
  zone?: Buffer;
}

function decodeCtEntry(m: NlMsg): CtEntry | undefined {
  if (m.type !== ctType(IPCTNL_MSG_CT_NEW) || m.payload.length < 4) return undefined;
  const t = new AttrTable(m.payload.subarray(4));
  const tuple = t.get(CTA_TUPLE_ORIG);
  if (!tuple) return undefined;
  const dst = new AttrTable(tuple).nested(CTA_TUPLE_IP)?.get(CTA_IP_V4_DST);
  if (!dst || dst.length !== 4) return undefined;
  const e: CtEntry = { origDst: bytesToIpv4(dst), tuple: Buffer.from(tuple) };
  const proto = new AttrTable(tuple).nested(CTA_TUPLE_PROTO);
  const num = proto?.get(CTA_PROTO_NUM);
  if (num && num.length === 1) e.proto = num[0]!;
  const port = proto?.get(CTA_PROTO_DST_PORT);
  if (port && port.length === 2) e.dstPort = (port[0]! << 8) | port[1]!;
  const z = t.get(CTA_ZONE);
  if (z) e.zone = Buffer.from(z);
  return e;
}

function encodeCtDelete(e: CtEntry, seq: number): Buffer {
  const w = new NlWriter(256);
  const s = beginMessage(w, ctType(IPCTNL_MSG_CT_DELETE), NLM_F_REQUEST | NLM_F_ACK, seq);
  nfgenmsg(w);
  w.nest(CTA_TUPLE_ORIG, (t) => {
    for (const a of parseAttrs(e.tuple)) t.nest(a.type, (x) => x.bytes(a.data));
  });
  if (e.zone) w.attrBytes(CTA_ZONE, e.zone);
  endMessage(w, s);
  return w.toBuffer();
}

/**
 * IPCTNL_MSG_CT_DELETE without a full tuple but with CTA_FILTER: the kernel deletes every IPv4 entry of this
 * namespace whose original destination is `dst`, in one request (ctnetlink's filtered flush, Linux 6.4 and
 * later). One round trip instead of a dump of the whole table plus one delete per entry, and no dump
 * messages built; the kernel skips the walk altogether while the namespace tracks nothing.
 */
function encodeCtFlush(seq: number, dst: string): Buffer {
  const w = new NlWriter(128);
  const s = beginMessage(w, ctType(IPCTNL_MSG_CT_DELETE), NLM_F_REQUEST | NLM_F_ACK, seq);
  nfgenmsg(w, 1);
  dstFilter(w, dst);
  endMessage(w, s);
  return w.toBuffer();
}

/** Above this many IPs, one unfiltered dump is cheaper than one filtered dump per IP. */
const PER_IP_DUMP_LIMIT = 8;

export class Conntrack {
  private readonly sock: NetlinkSocket;

  private constructor(sock: NetlinkSocket) {
    this.sock = sock;
  }

  static open(netns?: string): Conntrack {
    return new Conntrack(NetlinkSocket.open(NETLINK_NETFILTER, { netns, rcvbuf: 8 * 1024 * 1024, sndbuf: 1024 * 1024 }));
  }

  /**
   * The entries (of `dst`, filtered by the kernel, or all) that `keep` picks. Streamed: each datagram is decoded
   * as it comes and only kept entries stay, so a table of a million flood entries is never held whole (an
   * agent starting under a flood dumps it all: index.ts createDataplane).
   */
  private async dump(dst: string | undefined, keep: (e: CtEntry) => boolean): Promise<CtEntry[]> {
    const seq = this.sock.allocSeq();
    const out: CtEntry[] = [];
    const onMessage = (m: NlMsg): void => {
      const e = decodeCtEntry(m);
      if (e && keep(e)) out.push(e);
    };
    const res = await this.sock.request({ data: encodeCtDump(seq, dst), seqs: [seq], dump: true, onMessage, what: `conntrack dump${dst ? ` of ${dst}` : ''}` });
    const r = res.replies.get(seq);
    if (!r) throw new NetlinkError({ errno: 5, operation: 'conntrack dump: no reply' });
    // ENOENT: nf_conntrack is not loaded in this namespace, so there is nothing to flush.
    if (r.errno !== 0 && errnoName(r.errno) !== 'ENOENT') throw new NetlinkError({ errno: r.errno, extack: r.extack, operation: 'conntrack dump' });
    return out;
  }

  /** Dumps the entries of each of `ips` (one filtered dump each while they are few, else one of all), keeping what `keep` picks. */
  private async dumpOf(ips: readonly string[], keep: (e: CtEntry) => boolean): Promise<CtEntry[]> {
    return ips.length <= PER_IP_DUMP_LIMIT ? (await Promise.all(ips.map((ip) => this.dump(ip, keep)))).flat() : this.dump(undefined, keep);
  }

  /**
   * Whether the kernel takes a filtered flush (encodeCtFlush); learnt from its first answer. A kernel before
   * 6.4 reads the address-only tuple as a lookup and refuses it (EINVAL: no protocol): it gets the dump and
   * the deletes, as before.
   */
  private filteredFlush: boolean | undefined;

  /**
   * Deletes every entry whose original destination is one of `ips`. Returns how many went when it deleted
   * them one by one; undefined when the kernel flushed them itself (its answer does not say how many).
   */
  async flushDestinations(ips: readonly string[]): Promise<number | undefined> {
    if (ips.length === 0) return 0;
    if (ips.length <= PER_IP_DUMP_LIMIT && this.filteredFlush !== false && (await this.flushFiltered(ips))) return undefined;
    return this.dumpAndDelete(ips);
  }

  private async flushFiltered(ips: readonly string[]): Promise<boolean> {
    const answers = await Promise.all(
      ips.map(async (ip) => {
        const seq = this.sock.allocSeq();
        const res = await this.sock.request({ data: encodeCtFlush(seq, ip), seqs: [seq], what: `conntrack flush of ${ip}` });
        return res.replies.get(seq);
      }),
    );
    for (const [i, r] of answers.entries()) {
      if (!r) throw new NetlinkError({ errno: 5, operation: 'conntrack flush: no reply' });
      const code = r.errno === 0 ? 'OK' : errnoName(r.errno);
      // ENOENT: nf_conntrack is not loaded in this namespace, so there is nothing to flush.
      if (code === 'OK' || code === 'ENOENT') continue;
      if (this.filteredFlush === undefined && (code === 'EOPNOTSUPP' || code === 'EINVAL')) {
        this.filteredFlush = false;
        return false;
      }
      throw new NetlinkError({ errno: r.errno, extack: r.extack, operation: `conntrack flush (dst ${ips[i]})` });
    }
    this.filteredFlush = true;
    return true;
  }

  private async dumpAndDelete(ips: readonly string[]): Promise<number> {
    const want = new Set(ips);
    return this.deleteEntries(await this.dumpOf(ips, (e) => want.has(e.origDst)));
  }

  /**
   * Deletes the entries of each protected IP that its `allows` no longer lets in (a policy that closed ports or a
   * protocol), keeping the rest: the allowlist judges a connection by its first packet only (agent/netlink/ruleset-table.ts:
   * the nat prerouting chain's `jump allowlist`). Returns how many went.
   */
  async flushDisallowed(tunnels: readonly { ip: string; allows: (proto: number, dstPort: number | undefined) => boolean }[]): Promise<number> {
    if (tunnels.length === 0) return 0;
    const judge = new Map(tunnels.map((t) => [t.ip, t.allows]));
    const doomed = await this.dumpOf(
      tunnels.map((t) => t.ip),
      (e) => {
        const allows = judge.get(e.origDst);
        return allows !== undefined && (e.proto === undefined || !allows(e.proto, e.dstPort));
      },
    );
    return this.deleteEntries(doomed);
  }

  private async deleteEntries(doomed: readonly CtEntry[]): Promise<number> {
    let deleted = 0;
    await Promise.all(
      doomed.map(async (e) => {
        const seq = this.sock.allocSeq();
        const res = await this.sock.request({ data: encodeCtDelete(e, seq), seqs: [seq], what: 'conntrack delete of one connection' });
        const r = res.replies.get(seq);
        if (r && r.errno !== 0) {
          if (errnoName(r.errno) === 'ENOENT') return; // gone meanwhile (timed out, or closed)
          throw new NetlinkError({ errno: r.errno, extack: r.extack, operation: `conntrack delete (dst ${e.origDst})` });
        }
        deleted++;
      }),
    );
    return deleted;
  }

  close(): void {
    this.sock.close();
  }
}
