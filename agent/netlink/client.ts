// High-level async clients over one netlink socket each: Rtnl (links, addresses, routes, rules) and Nft
// (batches, listings). They only tie the pure encoders/decoders to the socket and turn kernel replies into
// results or typed NetlinkErrors.
import { constants as osConstants } from 'node:os';
import { NetlinkError, NETLINK_NETFILTER, NETLINK_ROUTE, errnoName, type NetlinkErrorDetails, type NlMsg } from './message.ts';
import type { NetlinkSocketOptions } from './endpoint.ts';
import { NetlinkSocket, type SeqReply } from './socket.ts';
import * as rt from './rtnetlink/index.ts';
import * as nft from './nftables/index.ts';
import { bytesToIpv4 } from './attrs.ts';

const E = osConstants.errno;
/** GETs per request in Nft.getCounters: socket.ts coalesces at most 256 messages into one sendto(). */
const GETS_PER_REQUEST = 256;

export type Dev = string | number;

function check(reply: SeqReply | undefined, operation: string, requestType: number): SeqReply {
  if (!reply) throw new NetlinkError({ errno: E.EIO, operation: `${operation}: no reply` });
  if (reply.errno !== 0) throw new NetlinkError({ errno: reply.errno, seq: reply.seq, requestType, extack: reply.extack, operation });
  // A list that changed while it was dumped: EINTR, which readers take as "read it again" (dataplane/kernel/read.ts readConsistently).
  if (reply.interrupted) throw new NetlinkError({ errno: E.EINTR, seq: reply.seq, requestType, operation: `${operation}: interrupted by a concurrent change (NLM_F_DUMP_INTR)` });
  return reply;
}

abstract class Client {
  protected readonly sock: NetlinkSocket;

  /** Over any NetlinkSocket: the kernel (open) or a test endpoint (new NetlinkSocket(endpoint)). */
  constructor(sock: NetlinkSocket) {
    this.sock = sock;
  }

  close(): void {
    this.sock.close();
  }

  /** One request message (must carry NLM_F_ACK); resolves with any data replies, throws NetlinkError on refusal. */
  protected async call(encode: (seq: number) => Buffer, operation: string, requestType: number): Promise<NlMsg[]> {
    const seq = this.sock.allocSeq();
    const res = await this.sock.request({ data: encode(seq), seqs: [seq], what: operation });
    return check(res.replies.get(seq), operation, requestType).messages;
  }

  protected async dump(encode: (seq: number) => Buffer, operation: string, requestType: number): Promise<NlMsg[]> {
    const seq = this.sock.allocSeq();
    const res = await this.sock.request({ data: encode(seq), seqs: [seq], dump: true, what: operation });
    return check(res.replies.get(seq), operation, requestType).messages;
  }

  /** A dump decoded message by message as it arrives (nothing of it is held): for dumps that grow with the tunnels. */
  protected async dumpEach(encode: (seq: number) => Buffer, operation: string, requestType: number, onMessage: (m: NlMsg) => void): Promise<void> {
    const seq = this.sock.allocSeq();
    const res = await this.sock.request({ data: encode(seq), seqs: [seq], dump: true, onMessage, what: operation });
    check(res.replies.get(seq), operation, requestType);
  }
}

export class Rtnl extends Client {
  static open(opts: NetlinkSocketOptions = {}): Rtnl {
    // Strict dumps: the addresses of one link are one link's worth of reply, not every link's.
    return new Rtnl(NetlinkSocket.open(NETLINK_ROUTE, { strictDumps: true, ...opts }));
  }

  private async index(dev: Dev): Promise<number> {
    return typeof dev === 'number' ? dev : (await this.getLink(dev)).index;
  }

  createGreLink(spec: rt.GreLinkSpec): Promise<void> {
    return this.call((s) => rt.encodeNewGreLink(spec, s), `create GRE link ${spec.name}`, rt.RTM_NEWLINK).then(() => undefined);
  }

  /**
   * Asks the kernel whether it can make GRE links, creating nothing (rt.encodeGreSupportProbe): resolves
   * with the errno of the kernel's answer (EINVAL: it can; EOPNOTSUPP: it cannot), or 0 if a kernel ever
   * accepted the request, in which case the link `name` it made has been deleted again.
   */
  async probeGreSupport(name: string): Promise<number> {
    try {
      await this.call((s) => rt.encodeGreSupportProbe(name, s), `probe GRE support (${name})`, rt.RTM_NEWLINK);
    } catch (e) {
      if (e instanceof NetlinkError) return e.errno;
      throw e;
    }
    await this.deleteLink(name);
    return 0;
  }

  createVeth(name: string, peer: string): Promise<void> {
    return this.call((s) => rt.encodeNewVeth(name, peer, s), `create veth ${name}/${peer}`, rt.RTM_NEWLINK).then(() => undefined);
  }

  /** Throws NetlinkError ENODEV when there is no such link. */
  async getLink(dev: Dev): Promise<rt.LinkInfo> {
    const target = typeof dev === 'number' ? { index: dev } : { name: dev };
    const msgs = await this.call((s) => rt.encodeGetLink(target, s), `get link ${dev}`, rt.RTM_GETLINK);
    const m = msgs.find((x) => x.type === rt.RTM_NEWLINK);
    if (!m) throw new NetlinkError({ errno: E.ENODEV, operation: `get link ${dev}: empty reply` });
    return rt.decodeLink(m);
  }

  /** undefined instead of ENODEV. */
  async findLink(dev: Dev): Promise<rt.LinkInfo | undefined> {
    try {
      return await this.getLink(dev);
    } catch (e) {
      if (e instanceof NetlinkError && e.code === 'ENODEV') return undefined;
      throw e;
    }
  }

  /**
   * The index of the link named `name` and whether it is up, or undefined when there is no such link. One
   * RTM_GETLINK without stats, of which only the header is read. By netlink, never by an ioctl on the name: for a
   * name that does not exist, the kernel's ioctls (SIOCGIFINDEX, SIOCGIFFLAGS: dev_load) run modprobe, twice, and
   * wait for it in the calling thread (docs/CONTRACTS.md "Health and status"); rtnetlink looks the name up and answers.
   */
  async linkState(name: string): Promise<{ index: number; up: boolean } | undefined> {
    let msgs: NlMsg[];
    try {
      msgs = await this.call((s) => rt.encodeGetLink({ name }, s, { extMask: rt.RTEXT_FILTER_SKIP_STATS }), `get link ${name}`, rt.RTM_GETLINK);
    } catch (e) {
      if (e instanceof NetlinkError && e.code === 'ENODEV') return undefined;
      throw e;
    }
    const m = msgs.find((x) => x.type === rt.RTM_NEWLINK);
    if (!m) return undefined;
    const h = rt.linkHeader(m);
    return { index: h.index, up: (h.flags & rt.IFF_UP) !== 0 };
  }

  /**
   * skipStats: no stats64 in the answer (a third of the bytes of a big dump). `keep`: only links it accepts
   * are returned. `keepName`: links whose name it refuses are not even decoded (cheaper than `keep`).
   */
  async listLinks(opts: { skipStats?: boolean; keep?: (l: rt.LinkInfo) => boolean; keepName?: (name: string) => boolean } = {}): Promise<rt.LinkInfo[]> {
    const mask = opts.skipStats ? rt.RTEXT_FILTER_SKIP_STATS : undefined;
    const out: rt.LinkInfo[] = [];
    await this.dumpEach((s) => rt.encodeDumpLinks(s, mask), 'list links', rt.RTM_GETLINK, (m) => {
      if (m.type !== rt.RTM_NEWLINK) return;
      if (opts.keepName && !opts.keepName(rt.linkName(m) ?? '')) return;
      const l = rt.decodeLink(m);
      if (!opts.keep || opts.keep(l)) out.push(l);
    });
    return out;
  }

  async setLinkUp(dev: Dev, up = true): Promise<void> {
    const index = await this.index(dev);
    await this.call((s) => rt.encodeSetLinkUp(index, up, s), `set link ${dev} ${up ? 'up' : 'down'}`, rt.RTM_NEWLINK);
  }

  async setMtu(dev: Dev, mtu: number): Promise<void> {
    const index = await this.index(dev);
    await this.call((s) => rt.encodeSetLinkMtu(index, mtu, s), `set link ${dev} mtu ${mtu}`, rt.RTM_NEWLINK);
  }

  async deleteLink(dev: Dev): Promise<void> {
    await this.call((s) => (typeof dev === 'number' ? rt.encodeDelLink(dev, s) : rt.encodeDelLinkByName(dev, s)), `delete link ${dev}`, rt.RTM_DELLINK);
  }

  /** Puts the link in device group `group` (deleteLinkGroup then takes it with the others). */
  async setLinkGroup(index: number, group: number): Promise<void> {
    await this.call((s) => rt.encodeSetLinkGroup(index, group, s), `set link ${index} group ${group}`, rt.RTM_NEWLINK);
  }

  /** Deletes every link of the namespace in device group `group`, in one unregistration (ENODEV: none is). */
  async deleteLinkGroup(group: number): Promise<void> {
    await this.call((s) => rt.encodeDelLinkGroup(group, s), `delete link group ${group}`, rt.RTM_DELLINK);
  }

  /** cidr "a.b.c.d/len" */
  async addAddress(dev: Dev, cidr: string): Promise<void> {
    const index = await this.index(dev);
    const [address, len] = cidr.split('/');
    await this.call((s) => rt.encodeNewAddress({ index, address: address!, prefixLen: Number(len ?? 32) }, s), `add address ${cidr} dev ${dev}`, rt.RTM_NEWADDR);
  }

  async deleteAddress(dev: Dev, cidr: string): Promise<void> {
    const index = await this.index(dev);
    const [address, len] = cidr.split('/');
    await this.call((s) => rt.encodeDelAddress({ index, address: address!, prefixLen: Number(len ?? 32) }, s), `delete address ${cidr} dev ${dev}`, rt.RTM_DELADDR);
  }

  /** Addresses of one link, or of all; `keepIndex`: only those of links whose index it accepts (no objects for the rest). */
  async listAddresses(dev?: Dev, opts: { keepIndex?: (index: number) => boolean } = {}): Promise<rt.AddressInfo[]> {
    const index = dev === undefined ? undefined : await this.index(dev);
    const out: rt.AddressInfo[] = [];
    await this.dumpEach((s) => rt.encodeDumpAddresses(s, undefined, index ?? 0), 'list addresses', rt.RTM_GETADDR, (m) => {
      if (m.type !== rt.RTM_NEWADDR) return;
      if (opts.keepIndex && !opts.keepIndex(rt.addressIndex(m))) return;
      const a = rt.decodeAddress(m);
      if (index === undefined || a.index === index) out.push(a);
    });
    return out;
  }

  private async routeSpec(r: RouteArgs): Promise<rt.RouteSpec> {
    const { dev, ...rest } = r;
    return dev === undefined ? rest : { ...rest, oif: await this.index(dev) };
  }

  async addRoute(r: RouteArgs): Promise<void> {
    const spec = await this.routeSpec(r);
    await this.call((s) => rt.encodeNewRoute(spec, s), `add route ${r.dst} table ${r.table}`, rt.RTM_NEWROUTE);
  }

  /** Create or replace (idempotent). */
  async replaceRoute(r: RouteArgs): Promise<void> {
    const spec = await this.routeSpec(r);
    await this.call((s) => rt.encodeReplaceRoute(spec, s), `replace route ${r.dst} table ${r.table}`, rt.RTM_NEWROUTE);
  }

  async deleteRoute(r: RouteArgs): Promise<void> {
    const spec = await this.routeSpec(r);
    await this.call((s) => rt.encodeDelRoute(spec, s), `delete route ${r.dst} table ${r.table}`, rt.RTM_DELROUTE);
  }

  /** IPv4 routes, optionally of one table. */
  async listRoutes(table?: number): Promise<rt.RouteInfo[]> {
    const all = (await this.dump((s) => rt.encodeDumpRoutes(s), 'list routes', rt.RTM_GETROUTE)).filter((m) => m.type === rt.RTM_NEWROUTE).map(rt.decodeRoute);
    return table === undefined ? all : all.filter((r) => r.table === table);
  }

  async addRule(r: rt.RuleSpec): Promise<void> {
    await this.call((s) => rt.encodeNewRule(r, s), `add rule from ${r.src} lookup ${r.table}`, rt.RTM_NEWRULE);
  }

  async deleteRule(r: rt.RuleSpec): Promise<void> {
    await this.call((s) => rt.encodeDelRule(r, s), `delete rule from ${r.src} lookup ${r.table}`, rt.RTM_DELRULE);
  }

  async listRules(): Promise<rt.RuleInfo[]> {
    return (await this.dump((s) => rt.encodeDumpRules(s), 'list rules', rt.RTM_GETRULE)).filter((m) => m.type === rt.RTM_NEWRULE).map(rt.decodeRule);
  }
}

export interface RouteArgs extends Omit<rt.RouteSpec, 'oif'> {
  dev?: Dev;
}

/** A failed nft batch: the kernel rolled all of it back. `index` (and .failures) name the messages it refused. */
export class NftBatchError extends NetlinkError {
  readonly failures: { index: number; seq: number; errno: number; code: string; extackMessage?: string; extackOffset?: number; description: string }[];

  constructor(d: NetlinkErrorDetails, failures: NftBatchError['failures']) {
    super(d);
    this.name = 'NftBatchError';
    this.failures = failures;
  }
}

export interface CommitOptions {
  /** Refuse the batch (ERESTART) if the ruleset generation moved on since this id (see getGeneration). */
  genId?: number;
  timeoutMs?: number;
}

export class Nft extends Client {
  static open(opts: NetlinkSocketOptions = {}): Nft {
    return new Nft(NetlinkSocket.open(NETLINK_NETFILTER, opts));
  }

  /**
   * Sends the batch as one datagram (one kernel transaction) with an ack requested per message; resolves
   * when every message is acked. On any refusal the kernel aborts the whole batch; we throw NftBatchError
   * naming the failing message (its index in the batch and description) with the extended-ack text.
   */
  async commit(batch: nft.NftBatch, opts: CommitOptions = {}): Promise<void> {
    if (batch.messageCount === 0) return;
    const firstSeq = this.sock.allocSeq(batch.messageCount + 2);
    const enc = batch.encode({ firstSeq, ack: true, genId: opts.genId });
    const res = await this.sock.request({
      data: enc.data,
      seqs: [],
      // One ack per message, kept only when it is an error (RequestSpec.ackRange).
      ackRange: { first: enc.firstMessageSeq, count: enc.count },
      // A refusal of BATCH_BEGIN (bad genid) comes alone; nothing else of the batch is answered.
      abortSeqs: [enc.beginSeq, enc.endSeq],
      exclusive: true,
      timeoutMs: opts.timeoutMs,
      what: `nftables commit (${batch.messageCount} messages)`,
    });
    const failures: NftBatchError['failures'] = [];
    // Only errors are in the replies: in seq order, BEGIN and END named as such, the others by their index.
    for (const r of [...res.replies.values()].sort((a, b) => a.seq - b.seq)) {
      if (r.errno === 0) continue;
      const index = r.seq === enc.beginSeq || r.seq === enc.endSeq ? -1 : r.seq - enc.firstMessageSeq;
      const description = index >= 0 ? batch.describe(index) : r.seq === enc.beginSeq ? 'batch begin' : 'batch end';
      failures.push({ index, seq: r.seq, errno: r.errno, code: errnoName(r.errno), extackMessage: r.extack.message, extackOffset: r.extack.offset, description });
    }
    if (failures.length > 0) {
      const f = failures[0]!;
      throw new NftBatchError(
        {
        errno: f.errno,
        seq: f.seq,
        index: f.index >= 0 ? f.index : undefined,
        requestType: f.index >= 0 ? batch.typeOf(f.index) : undefined,
        extack: { message: f.extackMessage, offset: f.extackOffset },
        operation: f.description,
        },
        failures,
      );
    }
  }

  /** The ruleset generation id, for CommitOptions.genId. */
  async getGeneration(): Promise<number> {
    const msgs = await this.call((s) => nft.encodeGetGen(s), 'get nftables generation', nft.nftType(nft.NFT_MSG_GETGEN));
    const m = msgs.find((x) => x.type === nft.nftType(nft.NFT_MSG_NEWGEN));
    if (!m) throw new NetlinkError({ errno: E.EIO, operation: 'get nftables generation: no NEWGEN' });
    return nft.decodeGen(m);
  }

  async listSetElements(table: string, set: string, family = nft.NFPROTO_IPV4): Promise<nft.DecodedElement[]> {
    const out: nft.DecodedElement[] = [];
    const type = nft.nftType(nft.NFT_MSG_NEWSETELEM);
    await this.dumpEach((s) => nft.encodeGetSetElements(table, set, s, family), `list set ${table}/${set}`, nft.nftType(nft.NFT_MSG_GETSETELEM), (m) => {
      if (m.type === type) for (const e of nft.decodeSetElements(m).elements) out.push(e);
    });
    return out;
  }

  /** An ipv4_addr : ipv4_addr map as key → value strings. */
  async listIpv4Map(table: string, map: string): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    const type = nft.nftType(nft.NFT_MSG_NEWSETELEM);
    await this.dumpEach((s) => nft.encodeGetSetElements(table, map, s), `list map ${table}/${map}`, nft.nftType(nft.NFT_MSG_GETSETELEM), (m) => {
      if (m.type === type) nft.decodeIpv4MapElements([m], out);
    });
    return out;
  }

  /** An ipv4_addr : counter map as key → counter name (elements without an object reference are left out). */
  async listIpv4ObjMap(table: string, map: string): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    const type = nft.nftType(nft.NFT_MSG_NEWSETELEM);
    await this.dumpEach((s) => nft.encodeGetSetElements(table, map, s), `list map ${table}/${map}`, nft.nftType(nft.NFT_MSG_GETSETELEM), (m) => {
      if (m.type !== type) return;
      nft.eachSetElement(m, (key, _data, objref) => {
        if (objref !== undefined) out.set(bytesToIpv4(key), objref);
      });
    });
    return out;
  }

  /** The names of a table's named counters, without their values. */
  listCounterNames(table: string, family = nft.NFPROTO_IPV4): Promise<Set<string>> {
    return this.listObjectNames(table, nft.NFT_OBJECT_COUNTER, family);
  }

  /** The names of a table's named objects of one type (the kernel sends only that type). */
  async listObjectNames(table: string, objType: number, family = nft.NFPROTO_IPV4): Promise<Set<string>> {
    const out = new Set<string>();
    const type = nft.nftType(nft.NFT_MSG_NEWOBJ);
    await this.dumpEach((s) => nft.encodeGetObjects(table, s, { type: objType, family }), `list objects ${table}`, nft.nftType(nft.NFT_MSG_GETOBJ), (m) => {
      if (m.type !== type) return;
      const o = nft.decodeObjectName(m);
      if (o.table === table) out.add(o.name);
    });
    return out;
  }

  /** Named counters of a table; reset = read and zero atomically. */
  async listCounters(table: string, opts: { reset?: boolean; family?: number } = {}): Promise<nft.DecodedCounter[]> {
    const out: nft.DecodedCounter[] = [];
    const type = nft.nftType(nft.NFT_MSG_NEWOBJ);
    await this.dumpEach((s) => nft.encodeGetObjects(table, s, { type: nft.NFT_OBJECT_COUNTER, ...opts }), `list counters ${table}`, nft.nftType(nft.NFT_MSG_GETOBJ), (m) => {
      if (m.type !== type) return;
      const o = nft.decodeObject(m);
      if (o.table === table) out.push(o);
    });
    return out;
  }

  /** One named counter (a single GET, not a dump of the table's counters); undefined when it does not exist. */
  async getCounter(table: string, name: string, family = nft.NFPROTO_IPV4): Promise<nft.DecodedCounter | undefined> {
    try {
      const msgs = await this.call((s) => nft.encodeGetObject(table, name, nft.NFT_OBJECT_COUNTER, s, family), `get counter ${table}/${name}`, nft.nftType(nft.NFT_MSG_GETOBJ));
      const m = msgs.find((x) => x.type === nft.nftType(nft.NFT_MSG_NEWOBJ));
      return m ? nft.decodeObject(m) : undefined;
    } catch (e) {
      if (e instanceof NetlinkError && e.code === 'ENOENT') return undefined;
      throw e;
    }
  }

  /**
   * Several named counters in ONE request: every GET in one sendto() (the kernel answers them in turn inside
   * it), rather than a request each. What the health checks read per tick (agent/health/scheduler.ts): the
   * `out` counters of the tunnels due, not one GET per check (10,000 tunnels make 333 checks a second).
   * By name; a counter that does not exist is absent from the answer.
   */
  async getCounters(table: string, names: readonly string[], family = nft.NFPROTO_IPV4): Promise<Map<string, nft.DecodedCounter>> {
    const out = new Map<string, nft.DecodedCounter>();
    const type = nft.nftType(nft.NFT_MSG_NEWOBJ);
    // Requests of at most GETS_PER_REQUEST GETs (the socket's own coalescing bound), so a tick with many due
    // (after a stall) neither builds one huge datagram nor queues its replies past the receive buffer.
    const chunks: (readonly string[])[] = [];
    for (let i = 0; i < names.length; i += GETS_PER_REQUEST) chunks.push(names.slice(i, i + GETS_PER_REQUEST));
    await Promise.all(
      chunks.map(async (chunk) => {
        const first = this.sock.allocSeq(chunk.length);
        const data = Buffer.concat(chunk.map((n, i) => nft.encodeGetObject(table, n, nft.NFT_OBJECT_COUNTER, first + i, family)));
        const res = await this.sock.request({ data, seqs: chunk.map((_, i) => first + i), what: `get ${chunk.length} counters of ${table}` });
        chunk.forEach((name, i) => {
          const reply = res.replies.get(first + i);
          if (reply?.errno === E.ENOENT) return;
          const m = check(reply, `get counter ${table}/${name}`, nft.nftType(nft.NFT_MSG_GETOBJ)).messages.find((x) => x.type === type);
          if (m) out.set(name, nft.decodeObject(m));
        });
      }),
    );
    return out;
  }

  /**
   * One element by key (a single GET, not a dump of the set); undefined when the set has no element with that
   * key (the kernel's ENOENT). The answer is copied out of the reply: key, interval end, value, object, verdict.
   */
  async getSetElement(table: string, set: string, key: Pick<nft.SetElement, 'key' | 'keyEnd'>, family = nft.NFPROTO_IPV4): Promise<nft.ElementView | undefined> {
    let msgs: NlMsg[];
    try {
      msgs = await this.call((s) => nft.encodeGetSetElement(table, set, key, s, family), `get element of ${table}/${set}`, nft.nftType(nft.NFT_MSG_GETSETELEM));
    } catch (e) {
      if (e instanceof NetlinkError && e.code === 'ENOENT') return undefined;
      throw e;
    }
    const type = nft.nftType(nft.NFT_MSG_NEWSETELEM);
    let out: nft.ElementView | undefined;
    for (const m of msgs) {
      if (m.type !== type) continue;
      nft.eachSetElementView(m, (e) => {
        out ??= {
          key: Buffer.from(e.key),
          ...(e.keyEnd ? { keyEnd: Buffer.from(e.keyEnd) } : {}),
          ...(e.data ? { data: Buffer.from(e.data) } : {}),
          ...(e.objref !== undefined ? { objref: e.objref } : {}),
          ...(e.verdict ? { verdict: e.verdict } : {}),
        };
      });
    }
    return out;
  }

  /** Whether the table has a named object of this type and name (a single GET by name, not a dump). */
  async hasObject(table: string, name: string, objType: number, family = nft.NFPROTO_IPV4): Promise<boolean> {
    try {
      const msgs = await this.call((s) => nft.encodeGetObject(table, name, objType, s, family), `get object ${table}/${name}`, nft.nftType(nft.NFT_MSG_GETOBJ));
      return msgs.some((x) => x.type === nft.nftType(nft.NFT_MSG_NEWOBJ));
    } catch (e) {
      if (e instanceof NetlinkError && e.code === 'ENOENT') return false;
      throw e;
    }
  }

  /** Every element of a set, each visited as a view valid only during the call (see eachSetElementView). */
  async eachSetElement(table: string, set: string, visit: (e: nft.ElementView) => void, family = nft.NFPROTO_IPV4): Promise<void> {
    const type = nft.nftType(nft.NFT_MSG_NEWSETELEM);
    await this.dumpEach((s) => nft.encodeGetSetElements(table, set, s, family), `list set ${table}/${set}`, nft.nftType(nft.NFT_MSG_GETSETELEM), (m) => {
      if (m.type === type) nft.eachSetElementView(m, visit);
    });
  }

  /** Every element's key of a set, as a byte range valid only during the call (nft.eachElementKeyRange: no allocation per element). */
  async eachSetElementKey(table: string, set: string, visit: (buf: Buffer, start: number, end: number) => void, family = nft.NFPROTO_IPV4): Promise<void> {
    const type = nft.nftType(nft.NFT_MSG_NEWSETELEM);
    await this.dumpEach((s) => nft.encodeGetSetElements(table, set, s, family), `list set ${table}/${set}`, nft.nftType(nft.NFT_MSG_GETSETELEM), (m) => {
      if (m.type === type) nft.eachElementKeyRange(m, visit);
    });
  }

  /**
   * The rules of a table, or of one of its chains (the kernel filters the dump by chain: a one-tunnel change reads its
   * own meter's four rules, not the ~40,000 of 10,000 meters). A chain that does not exist lists no rules.
   */
  async listRules(table: string, opts: { chain?: string; family?: number } = {}): Promise<nft.DecodedRule[]> {
    const where = opts.chain !== undefined ? `${table}/${opts.chain}` : table;
    const msgs = await this.dump((s) => nft.encodeGetRules(table, s, opts.family ?? nft.NFPROTO_IPV4, opts.chain), `list rules ${where}`, nft.nftType(nft.NFT_MSG_GETRULE)).catch((e: unknown) => {
      if (opts.chain !== undefined && e instanceof NetlinkError && e.code === 'ENOENT') return [];
      throw e;
    });
    return msgs.filter((m) => m.type === nft.nftType(nft.NFT_MSG_NEWRULE)).map(nft.decodeRule);
  }

  async listTables(): Promise<{ name: string; family: number }[]> {
    const msgs = await this.dump((s) => nft.encodeGetTables(s), 'list tables', nft.nftType(nft.NFT_MSG_GETTABLE));
    return msgs.filter((m) => m.type === nft.nftType(nft.NFT_MSG_NEWTABLE)).map(nft.decodeTable);
  }
}

// Re-exported so users of the client need not reach into the encoders for the everyday names.
export { NetlinkError } from './message.ts';
export { NftBatch, ipv4MapElement, ipv4ObjElement } from './nftables/index.ts';
export { addTunnelgateRuleset } from './ruleset-table.ts';
