// Live status and health of the tunnels a list shows, from one tunnelsStatus subscription (a socket may
// hold only 10 subscriptions, a dashboard shows more tunnels): each change the gateway publishes replaces
// that tunnel's entry. No polling.
import { useEffect, useState } from 'preact/hooks';
import { subscribe } from '../api/graphql.ts';
import { TunnelRowsLiveDocument, type TunnelHealth, type TunnelStatus } from '../graphql/generated.ts';

export interface LiveState {
  status: TunnelStatus;
  health: TunnelHealth;
}

/** What one tunnelsStatus subscription may follow (the gateway's WATCH_MANY_MAX). */
const MAX_WATCHED = 500;

export function useLiveTunnels(ids: readonly string[]): Map<string, LiveState> {
  const [states, setStates] = useState(() => new Map<string, LiveState>());
  const watched = ids.slice(0, MAX_WATCHED);
  const key = watched.join(',');
  useEffect(() => {
    if (watched.length === 0) return;
    return subscribe(
      TunnelRowsLiveDocument,
      { ids: watched },
      (d) => setStates((m) => new Map(m).set(d.tunnelsStatus.id, { status: d.tunnelsStatus.status, health: d.tunnelsStatus.health })),
      () => {},
    );
    // The ids are compared by value (key).
  }, [key]);
  return states;
}
