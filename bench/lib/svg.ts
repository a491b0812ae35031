// A line chart as plain SVG text, for the scaling curves the benchmarks write into bench/results/
// (how cost grows with tunnels): x on a log scale (tunnel counts 1 .. 100,000), y linear from 0, one line per series.
// Hand-written on purpose: a plotting dependency for a handful of points is not worth its weight.

export interface Series {
  name: string;
  points: { x: number; y: number }[];
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
/** 1234 -> "1,234", 0.5 -> "0.5": tick labels short enough for the margin. */
const num = (v: number) => (Math.abs(v) >= 100 ? Math.round(v).toLocaleString('en-US') : String(+v.toPrecision(3)));

export function lineChart(opts: { title: string; xLabel: string; yLabel: string; series: Series[]; width?: number; height?: number }): string {
  const W = opts.width ?? 720;
  const H = opts.height ?? 420;
  const m = { left: 80, right: 200, top: 40, bottom: 60 };
  const pw = W - m.left - m.right;
  const ph = H - m.top - m.bottom;
  const all = opts.series.flatMap((s) => s.points);
  const xs = all.map((p) => Math.log10(Math.max(1, p.x)));
  // The decades the points span (1,000 to 100,000 for the gateway's curve, 1 to 10,000 for the agent's).
  const x0 = Math.floor(Math.min(...xs));
  const x1 = Math.max(Math.ceil(Math.max(...xs)), x0 + 1);
  const yMax = Math.max(...all.map((p) => p.y), 1e-9) * 1.1;
  const X = (x: number) => m.left + ((Math.log10(Math.max(1, x)) - x0) / (x1 - x0)) * pw;
  const Y = (y: number) => m.top + ph - (y / yMax) * ph;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${m.left + pw / 2}" y="22" text-anchor="middle" font-size="14">${esc(opts.title)}</text>`,
  ];
  for (let d = x0; d <= x1; d++) {
    const x = m.left + ((d - x0) / (x1 - x0)) * pw;
    out.push(`<line x1="${x}" y1="${m.top}" x2="${x}" y2="${m.top + ph}" stroke="#eee"/>`, `<text x="${x}" y="${m.top + ph + 18}" text-anchor="middle">${num(10 ** d)}</text>`);
  }
  for (let i = 0; i <= 5; i++) {
    const v = (yMax * i) / 5;
    out.push(`<line x1="${m.left}" y1="${Y(v)}" x2="${m.left + pw}" y2="${Y(v)}" stroke="#eee"/>`, `<text x="${m.left - 6}" y="${Y(v) + 4}" text-anchor="end">${num(v)}</text>`);
  }
  out.push(
    `<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#888"/>`,
    `<text x="${m.left + pw / 2}" y="${H - 16}" text-anchor="middle">${esc(opts.xLabel)}</text>`,
    `<text transform="translate(18 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(opts.yLabel)}</text>`,
  );
  opts.series.forEach((s, i) => {
    const c = COLORS[i % COLORS.length]!;
    const pts = [...s.points].sort((a, b) => a.x - b.x);
    out.push(`<polyline fill="none" stroke="${c}" stroke-width="2" points="${pts.map((p) => `${X(p.x).toFixed(1)},${Y(p.y).toFixed(1)}`).join(' ')}"/>`);
    for (const p of pts) out.push(`<circle cx="${X(p.x).toFixed(1)}" cy="${Y(p.y).toFixed(1)}" r="3.5" fill="${c}"><title>${esc(`${s.name}: ${num(p.x)} -> ${num(p.y)}`)}</title></circle>`);
    const ly = m.top + 10 + i * 20;
    out.push(`<line x1="${m.left + pw + 14}" y1="${ly}" x2="${m.left + pw + 34}" y2="${ly}" stroke="${c}" stroke-width="2"/>`, `<text x="${m.left + pw + 40}" y="${ly + 4}">${esc(s.name)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
