// The agent's records of what it created (the state journal's entries, state.ts): one record per tunnel with
// the specs a refused change may have left in the kernel, and OwnedIndex, the records looked up by link name,
// protected IP and shared object, so a one-tunnel change never walks every record.
import { sharedNeeds } from './policy.ts';
import { sameSpec } from './spec-compare.ts';
import type { TunnelSpec } from './types.ts';

/** What the agent has recorded as its own (state file). `pending`: apply started, not confirmed. */
export interface OwnedTunnel {
  spec: TunnelSpec;
  pending?: boolean;
  /**
   * A pending change's earlier specs whose links and elements the kernel may still hold: the last confirmed one,
   * and any change to it that failed before this one (a refused batch leaves its links created). Absent once
   * confirmed. Without them a refused change would forget what it replaces: a reconcile keeping the tunnel as it
   * was would sweep the old spec's elements, and its old link would be no one's (docs/CONTRACTS.md "Dataplane").
   */
  was?: TunnelSpec[];
}

/** Every spec whose links and elements the kernel may hold for this record: its own, then what it replaces. */
export function heldSpecs(o: OwnedTunnel): TunnelSpec[] {
  return o.was?.length ? [o.spec, ...o.was] : [o.spec];
}

/**
 * Every spec the kernel may hold for these records, their earlier ones first: a map by link name built from the
 * list in order keeps the record's own spec for a name both have (a link is read against it: kernel/links.ts observeLinks).
 */
export function recordedSpecs(records: Iterable<OwnedTunnel>): TunnelSpec[] {
  const list = [...records];
  const out: TunnelSpec[] = [];
  for (const o of list) if (o.was) out.push(...o.was);
  for (const o of list) out.push(o.spec);
  return out;
}

/**
 * The intent record of a change to `next` over `prev`: pending, and keeping every spec of prev's that the kernel
 * may still hold and `next` does not describe (an apply refused again keeps what the first refusal kept).
 */
export function intentOver(prev: OwnedTunnel | undefined, next: TunnelSpec): OwnedTunnel {
  const was: TunnelSpec[] = [];
  for (const s of prev ? heldSpecs(prev) : []) if (!sameSpec(s, next) && !was.some((w) => sameSpec(w, s))) was.push(s);
  return was.length ? { spec: next, pending: true, was } : { spec: next, pending: true };
}

/**
 * The agent's records by link name and by protected IP, and how many of them need each object made by value
 * (synproxy by MSS, chain by name: a tunnel's meter, the flow caps of a max_flows value). The state store keeps one up to date with every commit, so a
 * single-tunnel change looks its neighbours up instead of walking all 10,000 records (a job must not grow with the node); the
 * diff builds one itself when it is given none (a reconcile walks every record anyway).
 */
export class OwnedIndex {
  private readonly names = new Map<string, Set<string>>();
  private readonly ips = new Map<string, Set<string>>();
  private readonly mss = new Map<number, number>();
  private readonly chains = new Map<string, number>();

  static of(owned: ReadonlyMap<string, OwnedTunnel>): OwnedIndex {
    const ix = new OwnedIndex();
    for (const o of owned.values()) ix.add(o);
    return ix;
  }

  /**
   * A record's names, protected IPs and shared objects, its earlier specs' too (OwnedTunnel.was): the agent created
   * those links and may still have those elements, which need their synproxy objects and chains.
   */
  add(o: OwnedTunnel): void {
    const id = o.spec.id;
    for (const t of heldSpecs(o)) {
      addTo(this.names, t.tunnel_name, id);
      addTo(this.ips, t.protected_ip, id);
      const n = sharedNeeds(t);
      if (n.mss !== undefined) this.mss.set(n.mss, (this.mss.get(n.mss) ?? 0) + 1);
      for (const c of n.chains) this.chains.set(c, (this.chains.get(c) ?? 0) + 1);
    }
  }

  /** Undoes add() of the same record. */
  delete(o: OwnedTunnel): void {
    const id = o.spec.id;
    for (const t of heldSpecs(o)) {
      removeFrom(this.names, t.tunnel_name, id);
      removeFrom(this.ips, t.protected_ip, id);
      const n = sharedNeeds(t);
      if (n.mss !== undefined) decrement(this.mss, n.mss);
      for (const c of n.chains) decrement(this.chains, c);
    }
  }

  /** Ids of the records with this link name, or with this protected IP (normally one at most). */
  byName(name: string): ReadonlySet<string> | undefined {
    return this.names.get(name);
  }
  byIp(ip: string): ReadonlySet<string> | undefined {
    return this.ips.get(ip);
  }
  /** How many records need each synproxy MSS and each chain made by value (only those in use). */
  mssUsers(): ReadonlyMap<number, number> {
    return this.mss;
  }
  chainUsers(): ReadonlyMap<string, number> {
    return this.chains;
  }
}

function addTo(m: Map<string, Set<string>>, key: string, id: string): void {
  let s = m.get(key);
  if (!s) m.set(key, (s = new Set()));
  s.add(id);
}

function removeFrom(m: Map<string, Set<string>>, key: string, id: string): void {
  const s = m.get(key);
  if (!s) return;
  s.delete(id);
  if (s.size === 0) m.delete(key);
}

function decrement<K>(m: Map<K, number>, key: K): void {
  const n = (m.get(key) ?? 0) - 1;
  if (n > 0) m.set(key, n);
  else m.delete(key);
}
