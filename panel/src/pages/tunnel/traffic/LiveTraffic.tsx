// The live graph of a tunnel's page: packets per second in, out and dropped over the last 5 minutes, one point a
// second, from the `tunnelTraffic` subscription (docs/CONTRACTS.md "Live traffic"). Closed until the user opens
// it: each open graph makes the gateway ask the edge once a second, so nobody pays for a graph nobody looks at.
// A plain SVG line: the uPlot charts of TrafficSection.tsx are for the stored history.
import { useId, useState } from 'preact/hooks';
import { useSubscription } from '../../../api/hooks.ts';
import { TunnelTrafficLiveDocument } from '../../../graphql/generated.ts';
import { formatNumber, useT } from '../../../i18n/index.ts';
import { Failure } from '../../../ui/components.tsx';

import { LIVE_WINDOW_S as WINDOW_S, droppedOf, mergeLive, type LivePoint } from './live.ts';

const WIDTH = 600;
const HEIGHT = 120;

function line(points: LivePoint[], value: (p: LivePoint) => number, max: number): string {
  if (points.length === 0) return '';
  const newest = Date.parse(points[points.length - 1]!.t);
  return points.map((p) => `${((WINDOW_S - (newest - Date.parse(p.t)) / 1000) / WINDOW_S) * WIDTH},${HEIGHT - (value(p) / max) * HEIGHT}`).join(' ');
}

function LiveGraph(props: { tunnelId: string }) {
  const t = useT();
  const [points, setPoints] = useState<LivePoint[]>([]);
  const failure = useSubscription(TunnelTrafficLiveDocument, { id: props.tunnelId }, (d) => setPoints((before) => mergeLive(before, d.tunnelTraffic.backfill, d.tunnelTraffic.points)));
  if (failure) return <Failure failure={failure} />;
  const last = points[points.length - 1];
  const max = Math.max(1, ...points.map((p) => Math.max(p.ppsIn, p.ppsOut, droppedOf(p))));
  return (
    <div>
      <svg viewBox={`0 0 ${WIDTH} ${HEIGHT}`} width="100%" height={HEIGHT} role="img" aria-label={t('traffic.live.graph')}>
        <polyline fill="none" stroke="currentColor" stroke-width="1.5" points={line(points, (p) => p.ppsIn, max)} />
        <polyline fill="none" stroke="currentColor" stroke-opacity="0.5" stroke-width="1.5" points={line(points, (p) => p.ppsOut, max)} />
        <polyline fill="none" stroke="#c0392b" stroke-width="1.5" points={line(points, droppedOf, max)} />
      </svg>
      <p>
        {last
          ? t('traffic.live.now', { in: formatNumber(last.ppsIn), out: formatNumber(last.ppsOut), dropped: formatNumber(droppedOf(last)), bitsIn: formatNumber(last.bpsIn) })
          : t('traffic.live.waiting')}
      </p>
    </div>
  );
}

export function LiveTraffic(props: { tunnelId: string }) {
  const t = useT();
  const id = useId();
  const [open, setOpen] = useState(false);
  return (
    <section aria-labelledby={`${id}-live-title`}>
      <h2 id={`${id}-live-title`}>{t('traffic.live.title')}</h2>
      <button type="button" onClick={() => setOpen(!open)} aria-expanded={open}>
        {open ? t('traffic.live.stop') : t('traffic.live.start')}
      </button>
      {open && <LiveGraph tunnelId={props.tunnelId} />}
    </section>
  );
}
