// Live status and health of the tunnels a page shows, from the tunnelStatus subscription: each change
// the gateway publishes replaces that tunnel's entry. No polling.
import { useEffect, useState } from 'preact/hooks';
import { subscribe } from '../api/graphql.ts';
import { TunnelRowLiveDocument, type TunnelHealth, type TunnelStatus } from '../graphql/generated.ts';

export interface LiveState {
  status: TunnelStatus;
  health: TunnelHealth;
}

/** The server allows 10 subscriptions per socket (docs/CONTRACTS.md "Storefront"). */
const MAX_WATCHED = 10;

export function useLiveTunnels(ids: readonly string[]): Map<string, LiveState> {
  const [states, setStates] = useState(() => new Map<string, LiveState>());
  const key = ids.slice(0, MAX_WATCHED).join(',');
  useEffect(() => {
    const stops = ids.slice(0, MAX_WATCHED).map((id) =>
      subscribe(
        TunnelRowLiveDocument,
        { id },
        (d) => setStates((m) => new Map(m).set(d.tunnelStatus.id, { status: d.tunnelStatus.status, health: d.tunnelStatus.health })),
        () => {},
      ),
    );
    return () => stops.forEach((stop) => stop());
    // The ids are compared by value (key).
  }, [key]);
  return states;
}
