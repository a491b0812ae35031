// Checks on a tunnel before anything touches the kernel. The spec's rules are the wire contract's, checked
// by its one validator (common/tunnel-spec.ts); this adds what only the agent knows: a tunnel's link must
// carry the agent's link prefix, so it never takes over a link it did not create.
import { checkTunnel, normaliseSpec } from '../../common/tunnel-spec.ts';
import type { TunnelRef, TunnelSpec } from './types.ts';

export class InvalidTunnel extends Error {
  override name = 'InvalidTunnel';
}

function checkPrefix(t: TunnelRef, linkPrefix: string): void {
  if (!t.tunnel_name.startsWith(linkPrefix)) throw new InvalidTunnel(`tunnel_name ${t.tunnel_name} does not start with the agent's link prefix ${linkPrefix}`);
}

/** id, tunnel_name and protected_ip: what `remove` needs (other fields are not used, so not checked). */
export function validateRef(t: TunnelRef, linkPrefix: string): void {
  const why = checkTunnel({ id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip }, false);
  if (why) throw new InvalidTunnel(why);
  checkPrefix(t, linkPrefix);
}

/**
 * A whole spec. Fields outside the spec are ignored and a null gre_key is no key, as normaliseSpec() stores it;
 * answers that stored form (normalised once: a reconcile checks 10,000 specs).
 */
export function validateSpec(t: TunnelSpec, linkPrefix: string): TunnelSpec {
  const spec = normaliseSpec(t);
  const why = checkTunnel(spec, true);
  if (why) throw new InvalidTunnel(why);
  checkPrefix(t, linkPrefix);
  return spec;
}
