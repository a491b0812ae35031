// The pure parts of a tunnel's attacks section (Attacks.tsx; docs/CONTRACTS.md "Attacks"): the list newest
// first, an attack's vector as message keys, and the tunnel page's live events, which the section waits for to
// read the attacks again. No DOM and no preact: test/unit/panel-attacks.test.ts runs it under Node.
import type { MessageKey } from '../../../i18n/en.ts';

export type AttackProtocol = 'TCP' | 'UDP' | 'ICMP' | 'OTHER' | 'MIXED';
export type DropReason = 'NOT_ALLOWED' | 'RATE_LIMITED' | 'SPOOFED' | 'FRAGMENT' | 'INVALID';

/** An attack as `Tunnel.attacks` answers it (the generated type fits this shape). */
export interface AttackLike {
  id: string;
  startedAt: string;
  endedAt?: string | null;
  vector: { protocol?: AttackProtocol | null; ports?: readonly number[] | null; topDropReason?: DropReason | null };
}

/** Newest start first (the API answers oldest first); of two that started together, by id, so the order is stable. */
export function newestFirst<A extends AttackLike>(attacks: readonly A[]): A[] {
  return [...attacks].sort((a, b) => Date.parse(b.startedAt) - Date.parse(a.startedAt) || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
}

/** What the attack's packets were, what they were sent to and which protection dropped most of them, as keys and parameters. */
export interface VectorWords {
  protocol: MessageKey;
  ports: { key: MessageKey; params?: Record<string, string> };
  drop: MessageKey;
}

const PROTOCOL_KEYS: Record<AttackProtocol, MessageKey> = {
  TCP: 'attacks.protocol.tcp',
  UDP: 'attacks.protocol.udp',
  ICMP: 'attacks.protocol.icmp',
  OTHER: 'attacks.protocol.other',
  MIXED: 'attacks.protocol.mixed',
};

/** Each drop reason as the protection (or check) that drops for it (docs/BUYER.md "Tunnel settings"). */
const DROP_KEYS: Record<DropReason, MessageKey> = {
  NOT_ALLOWED: 'attacks.drop.notAllowed',
  RATE_LIMITED: 'attacks.drop.rateLimited',
  SPOOFED: 'attacks.drop.spoofed',
  FRAGMENT: 'attacks.drop.fragment',
  INVALID: 'attacks.drop.invalid',
};

/**
 * The vector in words. A null protocol or port list is not known (common/attacks.ts): an edge agent without the
 * vector meter, or a start decided before the meter counted. It is an answer to show, not an error.
 */
export function vectorWords(v: AttackLike['vector'], formatPort: (p: number) => string = String): VectorWords {
  const ports = v.ports ?? null;
  return {
    protocol: v.protocol ? PROTOCOL_KEYS[v.protocol] : 'attacks.protocol.unknown',
    ports:
      ports === null
        ? { key: 'attacks.ports.unknown' }
        : ports.length === 0
          ? { key: 'attacks.ports.none' }
          : { key: ports.length === 1 ? 'attacks.ports.one' : 'attacks.ports.many', params: { ports: ports.map(formatPort).join(', ') } },
    drop: v.topDropReason ? DROP_KEYS[v.topDropReason] : 'attacks.drop.none',
  };
}

/**
 * The tunnel page's `tunnelStatus` events, by tunnel id. The page holds the one subscription (Tunnel.tsx) and
 * fires this on each of its messages; the attacks section listens and reads its list again. Kept outside the
 * components so the page needs only one line to feed it.
 */
class TunnelEvents {
  private readonly listeners = new Set<(tunnelId: string) => void>();

  fire(tunnelId: string): void {
    for (const l of this.listeners) l(tunnelId);
  }

  /** Calls `listener` on each event of `tunnelId`; returns the unsubscribe. */
  on(tunnelId: string, listener: () => void): () => void {
    const l = (id: string) => {
      if (id === tunnelId) listener();
    };
    this.listeners.add(l);
    return () => void this.listeners.delete(l);
  }
}

export const tunnelEvents = new TunnelEvents();
