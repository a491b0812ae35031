// The traffic charts, drawn by uPlot: bytes in/out, packets in/out, and drops stacked by reason, one
// chart each (their scales differ by orders of magnitude, so one chart would flatten two of them),
// with a cursor shared across the three. Loaded only by TrafficSection's dynamic import(), so uPlot
// stays out of the first page's JavaScript.
//
// CSP (`style-src 'self'`): uPlot sets element styles through the CSSOM (element.style.x = ...), which
// the policy allows, and injects no <style> element; its stylesheet ships in the panel's CSS
// (build/build.mjs). Colours come from app.css's variables, read when the charts are made and again
// when the colour scheme changes.
import uPlot from 'uplot';
import type { HealthMark } from './healthMarks.ts';
import { DROP_REASONS, formatBytes, stack, totals, type DropReason, type NumberFormat, type TrafficSeries } from './series.ts';

export interface ChartTexts {
  locale: string;
  format: NumberFormat;
  /** B, KB, MB, GB, TB, PB in the reader's language. */
  units: readonly string[];
  titles: { bytes: string; packets: string; drops: string };
  in: string;
  out: string;
  time: string;
  /** What the legend's time says while it shows the range's totals. */
  total: string;
  reasons: Record<DropReason, string>;
}

export interface TrafficCharts {
  update(series: TrafficSeries): void;
  setMarks(marks: readonly HealthMark[]): void;
  destroy(): void;
}

const REASON_COLOUR: Record<DropReason, string> = {
  notAllowed: '--drop-not-allowed',
  rateLimited: '--drop-rate-limited',
  spoofed: '--drop-spoofed',
  fragment: '--drop-fragment',
  invalid: '--drop-invalid',
};

/** A mark's line says its direction without colour alone: solid up, dashed down, dotted unknown. */
const MARK_DASH: Record<HealthMark['to'], number[]> = { UP: [], DOWN: [6, 4], UNKNOWN: [2, 3] };
const MARK_COLOUR: Record<HealthMark['to'], string> = { UP: '--ok', DOWN: '--bad', UNKNOWN: '--warn' };

const rgb = (colour: string) => {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(colour);
  return m ? [parseInt(m[1]!, 16), parseInt(m[2]!, 16), parseInt(m[3]!, 16)] : undefined;
};

/** `#rrggbb` at `alpha`; any other colour syntax is used as it is (opaque). */
function withAlpha(colour: string, alpha: number): string {
  const c = rgb(colour);
  return c ? `rgba(${c.join(', ')}, ${alpha})` : colour;
}

/** `colour` mixed into `background` (`share` of colour), opaque: a layer's tint that hides what it covers. */
function tint(colour: string, background: string, share: number): string {
  const c = rgb(colour);
  const b = rgb(background);
  if (!c || !b) return colour;
  return `rgb(${c.map((v, i) => Math.round(v * share + b[i]! * (1 - share))).join(', ')})`;
}

/** Chart height for a width: shorter on a phone, never a sliver. */
const heightFor = (width: number) => Math.round(Math.min(220, Math.max(150, width * 0.42)));

/** The drop reasons from the top of the stack down: the order the drops chart draws and lists them. */
const TOP_FIRST = [...DROP_REASONS].reverse();

export function mountTrafficCharts(container: HTMLElement, first: TrafficSeries, firstMarks: readonly HealthMark[], texts: ChartTexts): TrafficCharts {
  let series = first;
  let sums = totals(first);
  const stepSeconds = () => (series.x.length > 1 ? series.x[1]! - series.x[0]! : 60);
  let marks = firstMarks;
  let plots: uPlot[] = [];
  let titles: HTMLElement[] = [];
  const sync = uPlot.sync(`traffic-${Math.random().toString(36).slice(2)}`);
  const timeOfDay = new Intl.DateTimeFormat(texts.locale, { hour: 'numeric', minute: '2-digit' });
  const day = new Intl.DateTimeFormat(texts.locale, { day: 'numeric', month: 'short' });
  const full = new Intl.DateTimeFormat(texts.locale, { dateStyle: 'medium', timeStyle: 'short' });
  const compact = new Intl.NumberFormat(texts.locale, { notation: 'compact', maximumFractionDigits: 1 });
  const bytes = (v: number) => formatBytes(v, texts.format, texts.units);
  const packets = (v: number) => texts.format(Math.round(v), 0);

  function build(): void {
    const css = getComputedStyle(container);
    const colour = (name: string) => css.getPropertyValue(name).trim() || css.color;
    const fg = colour('--fg');
    const grid = colour('--line');
    const bg = colour('--bg');
    const font = `12px ${css.fontFamily}`;
    const width = Math.max(200, container.clientWidth);

    const xAxis: uPlot.Axis = {
      stroke: fg,
      font,
      grid: { stroke: grid, width: 1 },
      ticks: { stroke: grid, width: 1 },
      // The reader's language and time zone; the date under a time where the day changes (or on the first tick).
      values: (u, splits) => {
        const span = (u.scales.x!.max ?? 0) - (u.scales.x!.min ?? 0);
        let lastDay = '';
        return splits.map((s) => {
          const d = new Date(s * 1000);
          if (span > 3 * 86400) return day.format(d);
          const dayText = day.format(d);
          const text = span > 86400 / 2 && dayText !== lastDay ? `${timeOfDay.format(d)}\n${dayText}` : timeOfDay.format(d);
          lastDay = dayText;
          return text;
        });
      },
    };
    const yAxis = (format: (v: number) => string): uPlot.Axis => ({
      stroke: fg,
      font,
      grid: { stroke: grid, width: 1 },
      ticks: { stroke: grid, width: 1 },
      values: (_u, splits) => splits.map(format),
      // Wide enough for the longest label ("999 MB", "300K"), at 12 px, with the tick and a gap.
      size: (_u, values) => Math.max(48, 20 + 8 * Math.max(0, ...(values ?? []).map((v) => String(v).length))),
    });
    // Off the plot (and always on a touch screen, which has no hover) the legend shows the range's
    // totals; over it, the values of the step under the cursor.
    const xSeries: uPlot.Series = { label: texts.time, value: (_u, v) => (v == null ? texts.total : full.format(new Date(v * 1000))) };
    const marker = markPlugin(() => marks, colour);
    const common = (height: number): Omit<uPlot.Options, 'series'> => ({
      width,
      height,
      cursor: { sync: { key: sync.key }, points: { size: 6 } },
      legend: { live: true },
      // x runs to the end of the last step (the range's `to`), so a health change in the current step shows.
      scales: { x: { time: true, range: (_u, min, max) => [min, max + stepSeconds()] }, y: { range: (_u, _min, max) => [0, max > 0 ? max : 1] } },
      axes: [xAxis, {}],
      plugins: [marker],
    });
    const height = heightFor(width);
    const line = (label: string, stroke: string, format: (v: number) => string, total: () => number): uPlot.Series => ({
      label,
      stroke,
      width: 2,
      fill: withAlpha(stroke, 0.1),
      points: { show: false },
      value: (_u, v, _si, idx) => (idx == null || v == null ? format(total()) : format(v)),
    });

    const bytesOpts: uPlot.Options = {
      ...common(height),
      axes: [xAxis, yAxis(bytes)],
      series: [xSeries, line(texts.in, colour('--traffic-in'), bytes, () => sums.bytesIn), line(texts.out, colour('--traffic-out'), bytes, () => sums.bytesOut)],
    };
    const packetsOpts: uPlot.Options = {
      ...common(height),
      axes: [xAxis, yAxis((v) => compact.format(v))],
      series: [xSeries, line(texts.in, colour('--traffic-in'), packets, () => sums.packetsIn), line(texts.out, colour('--traffic-out'), packets, () => sums.packetsOut)],
    };
    // Drops: each reason's series is the running sum up to it (series.ts `stack`), filled to zero with
    // an opaque tint and drawn top layer first, so each layer covers the lower part of the one above
    // and the top edge is the total dropped. (uPlot's bands between series go wrong once a range has
    // more points than pixels: each pixel column then draws a series' min-max envelope, and a band
    // between two envelopes fills more than the layer.) The legend lists the layers top first, as
    // they are stacked, and shows each reason's own count, not the running sum.
    const dropsOpts: uPlot.Options = {
      ...common(height),
      axes: [xAxis, yAxis((v) => compact.format(v))],
      series: [
        xSeries,
        ...TOP_FIRST.map((r): uPlot.Series => {
          const stroke = colour(REASON_COLOUR[r]);
          return {
            label: texts.reasons[r],
            stroke,
            width: 1.5,
            fill: tint(stroke, bg, 0.55),
            points: { show: false },
            value: (_u, _v, _si, idx) => packets(idx == null ? sums.drops[r] : (series.drops[r][idx] ?? 0)),
          };
        }),
      ],
    };

    const make = (title: string, opts: uPlot.Options, data: uPlot.AlignedData) => {
      const heading = document.createElement('p');
      heading.className = 'traffic-chart-title';
      heading.textContent = title;
      container.append(heading);
      titles.push(heading);
      const plot = new uPlot(opts, data, container);
      plots.push(plot);
    };
    make(texts.titles.bytes, bytesOpts, bytesData(series));
    make(texts.titles.packets, packetsOpts, packetsData(series));
    make(texts.titles.drops, dropsOpts, dropsData(series));
  }

  function teardown(): void {
    for (const p of plots) p.destroy();
    for (const h of titles) h.remove();
    plots = [];
    titles = [];
  }

  build();

  // The width of the container, as it changes (a rotated phone, a resized window); only the width
  // matters, and the height follows it.
  let lastWidth = container.clientWidth;
  const resize = new ResizeObserver(() => {
    const width = container.clientWidth;
    if (width === lastWidth || width === 0) return;
    lastWidth = width;
    for (const p of plots) p.setSize({ width: Math.max(200, width), height: heightFor(width) });
  });
  resize.observe(container);

  // The colours are read once per build: a change of scheme rebuilds.
  const scheme = matchMedia('(prefers-color-scheme: dark)');
  const onScheme = () => {
    teardown();
    build();
  };
  scheme.addEventListener('change', onScheme);

  return {
    update(next) {
      series = next;
      sums = totals(next);
      const [b, p, d] = plots;
      b?.setData(bytesData(next));
      p?.setData(packetsData(next));
      d?.setData(dropsData(next));
    },
    setMarks(next) {
      marks = next;
      for (const p of plots) p.redraw(false, false);
    },
    destroy() {
      resize.disconnect();
      scheme.removeEventListener('change', onScheme);
      teardown();
    },
  };
}

const bytesData = (s: TrafficSeries): uPlot.AlignedData => [s.x, s.bytesIn, s.bytesOut];
const packetsData = (s: TrafficSeries): uPlot.AlignedData => [s.x, s.packetsIn, s.packetsOut];
const dropsData = (s: TrafficSeries): uPlot.AlignedData => [s.x, ...stack(DROP_REASONS.map((r) => s.drops[r])).reverse()];

/** Draws each health change seen as a vertical line across the plot at its time, with a notch on top. */
function markPlugin(marks: () => readonly HealthMark[], colour: (name: string) => string): uPlot.Plugin {
  return {
    hooks: {
      draw: [
        (u) => {
          const { ctx, bbox } = u;
          const px = uPlot.pxRatio;
          ctx.save();
          for (const m of marks()) {
            const x = Math.round(u.valToPos(m.at / 1000, 'x', true));
            if (x < bbox.left || x > bbox.left + bbox.width) continue;
            const c = colour(MARK_COLOUR[m.to]);
            ctx.strokeStyle = c;
            ctx.fillStyle = c;
            ctx.lineWidth = 2 * px;
            ctx.setLineDash(MARK_DASH[m.to].map((d) => d * px));
            ctx.beginPath();
            ctx.moveTo(x, bbox.top);
            ctx.lineTo(x, bbox.top + bbox.height);
            ctx.stroke();
            ctx.setLineDash([]);
            ctx.beginPath();
            ctx.moveTo(x - 5 * px, bbox.top);
            ctx.lineTo(x + 5 * px, bbox.top);
            ctx.lineTo(x, bbox.top + 7 * px);
            ctx.closePath();
            ctx.fill();
          }
          ctx.restore();
        },
      ],
    },
  };
}
