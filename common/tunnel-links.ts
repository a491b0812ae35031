// Whether an edge agent can make its tunnels' links on its kernel (docs/CONTRACTS.md "Edge jobs",
// "Tunnel links"): the agent finds out at start and says so in its `hello` line and in every `status`
// answer; the gateway records it per node and sells nothing from a node that cannot carry tunnels
// (a kernel without GRE fails every apply with EOPNOTSUPP). Additive to both lines: an agent from
// before it reports nothing, which the gateway takes as "not known" and treats as before. No I/O here.

/**
 * 'gre' on a real edge. 'veth-standin': the tests' and the demo's stand-in for kernels without GRE (a
 * veth pair per tunnel, agent/dataplane/links.ts), which carries tunnels over veth and so is usable.
 */
export const TUNNEL_LINK_KINDS = ['gre', 'veth-standin'] as const;
export type TunnelLinkKind = (typeof TUNNEL_LINK_KINDS)[number];

export interface TunnelLinks {
  /** The kind of link the agent makes per tunnel. A newer agent may name a kind this code does not know. */
  kind: string;
  /** true: it can make them; false: it cannot (every tunnel job would fail); null: it could not tell. */
  usable: boolean | null;
  /** Why not, or why it could not tell, in words for the operator; absent when usable. */
  reason?: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A tunnel_links value's shape. Undefined when right, else a sentence. Unknown kinds and extra keys are allowed (a newer agent). */
export function checkTunnelLinks(v: unknown, where = 'tunnel_links'): string | undefined {
  if (!isObject(v)) return `${where} must be an object`;
  if (typeof v.kind !== 'string' || v.kind === '') return `${where}.kind must be a non-empty string`;
  if (v.usable !== true && v.usable !== false && v.usable !== null) return `${where}.usable must be true, false or null`;
  if (v.reason !== undefined && typeof v.reason !== 'string') return `${where}.reason must be a string`;
  return undefined;
}
