// The traffic section of a tunnel's page: bytes, packets and drops over a chosen range, as charts
// (uPlot, loaded on demand: chart.ts) and, behind a disclosure, as a table; the tunnel's health changes
// marked on the time axis and in the table: its history, read with the points, and what the tunnel
// page's subscription reports since (healthMarks.ts). The section opens no subscription of its own.
//
// Refresh: every range ends now, so while the page is shown the last two steps are fetched again once a
// minute and merged in (series.ts refreshQuery). A minute because the gateway stores traffic by the
// minute from collection rounds every 30 s (docs/CONTRACTS.md "Health and traffic"): more often would
// mostly fetch nothing new. No subscription carries traffic, and the no-polling rule is about status and
// health, which do have one. A hidden tab fetches nothing, and catches up when shown again. Each refresh
// also reads the health changes since the last read, so the marks become the history's (the edge's
// times) and a change the subscription missed (a dropped connection) still shows.
import { useEffect, useId, useMemo, useRef, useState } from 'preact/hooks';
import { ApiFailure, request } from '../../../api/graphql.ts';
import { TrafficSectionHealthChangesDocument, TrafficSectionPointsDocument } from '../../../graphql/generated.ts';
import { formatDateTime, formatNumber, locale, useT } from '../../../i18n/index.ts';
import type { MessageKey } from '../../../i18n/en.ts';
import { Failure, Loading } from '../../../ui/components.tsx';
import type { TrafficCharts } from './chart.ts';
import { HISTORY_PAGE, addHistory, healthMarks as store, markOf, marksByStep, marksWithin, mergeMarks, readHistory, type HealthMark } from './healthMarks.ts';
import {
  DROP_REASONS,
  MINUTE_MS,
  RANGE_KEYS,
  buildSeries,
  formatBytes,
  formatPackets,
  mergePoints,
  rangeQuery,
  refreshQuery,
  totals,
  type PointLike,
  type RangeKey,
  type RangeQuery,
  type TrafficSeries,
} from './series.ts';

interface Loaded {
  range: RangeKey;
  query: RangeQuery;
  points: PointLike[];
  /** When the points were last fetched (ms). */
  at: number;
  /** The range's health changes read so far, oldest first. */
  changes: HealthMark[];
  /** When the last read of the changes was sent (this browser's clock, ms): mergeMarks. */
  changesReadAt: number;
  /** Changes left out: the range had more than readHistory reads, from `from` to `to` (ms) none are marked. */
  gap?: { from: number; to: number };
}

const REFRESH_MS = MINUTE_MS;
/**
 * A refresh reads the changes from this long before the last read: an up or down is dated by the
 * edge's check, which the gateway stores with the next collection round (every 30 s), so a change can
 * appear in the history after a read that began later than its time.
 */
const CHANGES_OVERLAP_MS = 2 * MINUTE_MS;

export function TrafficSection(props: { tunnelId: string }) {
  const t = useT();
  const id = props.tunnelId;
  const [range, setRange] = useState<RangeKey>('1h');
  const [loaded, setLoaded] = useState<Loaded | undefined>(undefined);
  const [failure, setFailure] = useState<ApiFailure | undefined>(undefined);
  const [attempt, setAttempt] = useState(0);
  const held = useRef(loaded);
  held.current = loaded;

  // The points and health changes of the range chosen; more pages of changes when the first is full.
  useEffect(() => {
    let live = true;
    const now = Date.now();
    const query = rangeQuery(range, now);
    setFailure(undefined);
    const load = async (): Promise<Loaded> => {
      const d = await request(TrafficSectionPointsDocument, { id, from: query.from, to: query.to, step: query.step, changesFrom: query.from });
      const more = async (from: string) => (await request(TrafficSectionHealthChangesDocument, { id, from, to: query.to })).tunnel.healthChanges;
      const history = await readHistory(d.tunnel.healthChanges, more);
      const gap = history.truncatedAt === undefined ? undefined : { from: history.truncatedAt, to: now };
      return { range, query, points: d.tunnel.traffic.points, at: now, changes: history.marks, changesReadAt: now, gap };
    };
    load().then(
      (l) => live && setLoaded(l),
      (e: unknown) => live && setFailure(e instanceof ApiFailure ? e : new ApiFailure('server_error', String(e))),
    );
    return () => {
      live = false;
    };
  }, [id, range, attempt]);

  // The gentle refresh (see the top of this file).
  useEffect(() => {
    let live = true;
    let last = Date.now();
    const refresh = async () => {
      if (document.visibilityState !== 'visible') return;
      const now = Date.now();
      last = now;
      const fresh = refreshQuery(range, now);
      const query = rangeQuery(range, now);
      const before = held.current;
      if (!before || before.range !== range) return;
      const changesFrom = Math.max(query.fromMs, before.changesReadAt - CHANGES_OVERLAP_MS);
      try {
        const d = await request(TrafficSectionPointsDocument, { id, from: fresh.from, to: fresh.to, step: fresh.step, changesFrom: new Date(changesFrom).toISOString() });
        if (!live) return;
        const changes = d.tunnel.healthChanges.map(markOf);
        // A full page (a thousand changes in a few minutes) may have more after it: the read counts as
        // reaching only its last change, so the next refresh reads on from there.
        const readTo = changes.length >= HISTORY_PAGE ? changes[changes.length - 1]!.at : now;
        setLoaded((h) =>
          h && h.range === range
            ? {
                ...h,
                query,
                points: mergePoints(h.points, d.tunnel.traffic.points, query.fromMs),
                at: now,
                changes: addHistory(h.changes, changes).filter((m) => m.at >= query.fromMs),
                changesReadAt: readTo,
              }
            : h,
        );
      } catch {
        // A failed refresh keeps what is shown; the next minute tries again.
      }
    };
    const timer = setInterval(() => void refresh(), REFRESH_MS);
    const onVisible = () => {
      if (document.visibilityState === 'visible' && Date.now() - last >= REFRESH_MS) void refresh();
    };
    document.addEventListener('visibilitychange', onVisible);
    return () => {
      live = false;
      clearInterval(timer);
      document.removeEventListener('visibilitychange', onVisible);
    };
  }, [id, range]);

  // Live health changes: the tunnel page feeds the store from its own subscription (Tunnel.tsx).
  const [, setMarksSeen] = useState(0);
  useEffect(() => store.listen((changed) => changed === id && setMarksSeen((n) => n + 1)), [id]);
  const liveMarks = store.of(id);

  const series = useMemo(() => (loaded ? buildSeries(loaded.points, loaded.query) : undefined), [loaded]);
  const marks = useMemo(
    () => (loaded ? marksWithin(mergeMarks(loaded.changes, liveMarks, loaded.changesReadAt, loaded.gap), loaded.query.fromMs, loaded.query.toMs) : []),
    [liveMarks, loaded],
  );

  return (
    <section class="traffic" aria-labelledby={`${id}-traffic-title`}>
      <h2 id={`${id}-traffic-title`}>{t('traffic.title')}</h2>
      <div class="traffic-ranges" role="group" aria-label={t('traffic.range')}>
        {RANGE_KEYS.map((r) => (
          <button key={r} type="button" aria-pressed={r === range} onClick={() => setRange(r)}>
            {t(`traffic.range.${r}`)}
          </button>
        ))}
      </div>
      {failure && <Failure failure={failure} retry={() => setAttempt((n) => n + 1)} />}
      {!failure && (!loaded || loaded.range !== range) && <Loading />}
      {loaded && series && <TrafficView loaded={loaded} series={series} marks={marks} />}
    </section>
  );
}

function TrafficView(props: { loaded: Loaded; series: TrafficSeries; marks: readonly HealthMark[] }) {
  const t = useT();
  const { loaded, series, marks } = props;
  const units = t('traffic.units').split(',');
  const bytes = (n: number) => formatBytes(n, formatNumber, units);
  const packets = (n: number) => formatPackets(n, formatNumber);
  const sum = totals(series);
  const rangeText = t(`traffic.range.${loaded.range}`).toLowerCase();
  const per = t(`traffic.per.${loaded.query.step}`);
  const gapText = loaded.gap && t('traffic.health.truncated', { from: formatDateTime(new Date(loaded.gap.from).toISOString()), to: formatDateTime(new Date(loaded.gap.to).toISOString()) });
  const reasons = DROP_REASONS.filter((r) => sum.drops[r] > 0).map((r) => t('traffic.summary.reason', { reason: t(`traffic.drop.${r}`), packets: packets(sum.drops[r]) }));
  const summary =
    t('traffic.summary', {
      range: rangeText,
      bytesIn: bytes(sum.bytesIn),
      bytesOut: bytes(sum.bytesOut),
      packetsIn: packets(sum.packetsIn),
      packetsOut: packets(sum.packetsOut),
      dropped: packets(sum.dropped),
      reasons: reasons.length ? t('traffic.summary.reasons', { list: reasons.join(', ') }) : '',
    }) +
    (marks.length ? t('traffic.summary.marks', { count: formatNumber(marks.length) }) : '') +
    (gapText ? ` ${gapText}` : '');

  return (
    <>
      <ul class="traffic-totals">
        <li>{t('traffic.total.in', { bytes: bytes(sum.bytesIn), packets: packets(sum.packetsIn) })}</li>
        <li>{t('traffic.total.out', { bytes: bytes(sum.bytesOut), packets: packets(sum.packetsOut) })}</li>
        <li>{t('traffic.total.dropped', { packets: packets(sum.dropped) })}</li>
      </ul>
      <p class="hint">{t('traffic.inHint')}</p>
      <Chart series={series} marks={marks} step={loaded.query.step} summary={summary} />
      <HealthMarksList marks={marks} gapText={gapText} />
      <p class="hint">{t('traffic.live', { time: formatDateTime(new Date(loaded.at).toISOString()) })}</p>
      <TrafficTable loaded={loaded} series={series} marks={marks} caption={t('traffic.table.caption', { per, range: rangeText })} />
    </>
  );
}

/** The charts, an image to a screen reader (its label sums the range up; the table has the numbers). */
function Chart(props: { series: TrafficSeries; marks: readonly HealthMark[]; step: '1m' | '1h'; summary: string }) {
  const t = useT();
  const box = useRef<HTMLDivElement>(null);
  const charts = useRef<TrafficCharts | null>(null);
  const latest = useRef(props);
  latest.current = props;
  const [failed, setFailed] = useState<string | undefined>(undefined);
  const lang = locale();

  // Made once per language and step (the titles say "per minute" or "per hour"); the data and marks
  // are handed over below as they change. uPlot comes in its own chunk, fetched on first use.
  useEffect(() => {
    let live = true;
    const per = t(`traffic.per.${props.step}`);
    import('./chart.ts').then(
      ({ mountTrafficCharts }) => {
        if (!live || !box.current) return;
        charts.current = mountTrafficCharts(box.current, latest.current.series, latest.current.marks, {
          locale: lang,
          format: formatNumber,
          units: t('traffic.units').split(','),
          titles: { bytes: t('traffic.chart.bytes', { per }), packets: t('traffic.chart.packets', { per }), drops: t('traffic.chart.drops', { per }) },
          in: t('traffic.in'),
          out: t('traffic.out'),
          time: t('traffic.time'),
          total: t('traffic.legendTotal'),
          reasons: Object.fromEntries(DROP_REASONS.map((r) => [r, t(`traffic.drop.${r}`)])) as Record<(typeof DROP_REASONS)[number], string>,
        });
      },
      (e: unknown) => live && setFailed(e instanceof Error ? e.message : String(e)),
    );
    return () => {
      live = false;
      charts.current?.destroy();
      charts.current = null;
    };
  }, [lang, props.step]);
  useEffect(() => charts.current?.update(props.series), [props.series]);
  useEffect(() => charts.current?.setMarks(props.marks), [props.marks]);

  return (
    <>
      {failed && (
        <p class="alert" role="alert">
          {t('traffic.chartFailed', { message: failed })}
        </p>
      )}
      <div class="traffic-charts" role="img" aria-label={props.summary} ref={box} />
    </>
  );
}

function HealthMarksList(props: { marks: readonly HealthMark[]; gapText: string | undefined }) {
  const t = useT();
  const word = (h: HealthMark['to']) => t(`health.${h}` as MessageKey);
  return (
    <div class="traffic-health">
      <h3 class="traffic-chart-title">{t('traffic.health.title')}</h3>
      <p class="hint">{t('traffic.health.note')}</p>
      {props.gapText && <p class="warning">{props.gapText}</p>}
      {props.marks.length === 0 ? (
        <p class="muted">{t('traffic.health.none')}</p>
      ) : (
        <ul class="traffic-marks">
          {props.marks.map((m, i) => (
            <li key={`${m.at}-${i}`}>{t('traffic.health.mark', { time: formatDateTime(new Date(m.at).toISOString()), from: word(m.from), to: word(m.to) })}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

/** The same numbers as the charts, one row per step, behind a disclosure (thousands of rows otherwise). */
function TrafficTable(props: { loaded: Loaded; series: TrafficSeries; marks: readonly HealthMark[]; caption: string }) {
  const t = useT();
  const [open, setOpen] = useState(false);
  const tableId = useId();
  const units = t('traffic.units').split(',');
  const { series, marks } = props;
  const stepMs = props.loaded.query.stepMs;
  const word = (h: HealthMark['to']) => t(`health.${h}` as MessageKey);
  const byStep = useMemo(() => (open ? marksByStep(marks, props.loaded.query.fromMs, stepMs, series.x.length) : []), [open, marks, props.loaded.query.fromMs, stepMs, series.x.length]);
  return (
    <div class="traffic-table">
      <button type="button" aria-expanded={open} aria-controls={tableId} onClick={() => setOpen((o) => !o)}>
        {t('traffic.showTable')}
      </button>
      <div id={tableId} hidden={!open}>
        {open && (
          <div class="table-wrap" role="region" aria-label={t('traffic.table.region')} tabIndex={0}>
            <table>
              <caption>{props.caption}</caption>
              <thead>
                <tr>
                  <th scope="col">{t('traffic.time')}</th>
                  <th scope="col">{t('traffic.col.bytesIn')}</th>
                  <th scope="col">{t('traffic.col.bytesOut')}</th>
                  <th scope="col">{t('traffic.col.packetsIn')}</th>
                  <th scope="col">{t('traffic.col.packetsOut')}</th>
                  {DROP_REASONS.map((r) => (
                    <th scope="col" key={r}>
                      {t(`traffic.drop.${r}`)}
                    </th>
                  ))}
                  <th scope="col">{t('traffic.col.health')}</th>
                </tr>
              </thead>
              <tbody>
                {series.x.map((x, i) => {
                  const start = x * 1000;
                  const changes = byStep[i] ?? [];
                  return (
                    <tr key={x}>
                      <th scope="row">{formatDateTime(new Date(start).toISOString())}</th>
                      <td>{formatBytes(series.bytesIn[i]!, formatNumber, units)}</td>
                      <td>{formatBytes(series.bytesOut[i]!, formatNumber, units)}</td>
                      <td>{formatPackets(series.packetsIn[i]!, formatNumber)}</td>
                      <td>{formatPackets(series.packetsOut[i]!, formatNumber)}</td>
                      {DROP_REASONS.map((r) => (
                        <td key={r}>{formatPackets(series.drops[r][i]!, formatNumber)}</td>
                      ))}
                      <td>{changes.map((m) => `${word(m.from)} → ${word(m.to)}`).join(', ')}</td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
        )}
      </div>
    </div>
  );
}
