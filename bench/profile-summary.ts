// Summarises V8 .cpuprofile files (from `node --cpu-prof`, e.g. BENCH_CPU_PROF=DIR npm run bench):
// the functions with the most self time, and the same grouped by package, so a hot path's costs are
// visible without a GUI.  node --import ./loader/register.mjs bench/profile-summary.ts FILE... [--top N]
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

const args = process.argv.slice(2);
const topAt = args.indexOf('--top');
const top = topAt >= 0 ? Number(args[topAt + 1]) : 40;
const files = args.filter((a, i) => a !== '--top' && i !== topAt + 1);

/** The repository this script sits in, as profiles name its files: "ours" wherever the clone lives. */
const REPO_URL = new URL('..', import.meta.url).href;
const byFn = new Map<string, number>();
/** Time with the function anywhere on the stack (each sample counted once per function). */
const inclusive = new Map<string, number>();
const byPkg = new Map<string, number>();
let total = 0;
for (const f of files) {
  const p = JSON.parse(readFileSync(f, 'utf8')) as Profile;
  const nodes = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const keyOf = (n: Node): string => {
    const { functionName, url, lineNumber } = n.callFrame;
    const short = url.replace(/^file:\/\/.*?\/(node_modules\/)/, '$1').replace(REPO_URL, '');
    return `${functionName || '(anonymous)'} ${short}:${lineNumber + 1}`;
  };
  p.samples.forEach((id, i) => {
    const us = p.timeDeltas[i] ?? 0;
    const n = nodes.get(id)!;
    const { functionName, url } = n.callFrame;
    const key = keyOf(n);
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) seen.add(keyOf(nodes.get(at)!));
    for (const k of seen) inclusive.set(k, (inclusive.get(k) ?? 0) + us);
    byFn.set(key, (byFn.get(key) ?? 0) + us);
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1] ?? (url.startsWith('node:') ? 'node:internal' : url ? (url.startsWith(REPO_URL) ? 'ours' : url.split('/')[0]!) : functionName);
    byPkg.set(pkg, (byPkg.get(pkg) ?? 0) + us);
    total += us;
  });
}
const print = (title: string, m: Map<string, number>, n: number) => {
  console.log(`\n${title}`);
  for (const [k, us] of [...m].sort((a, b) => b[1] - a[1]).slice(0, n)) console.log(`${((100 * us) / total).toFixed(1).padStart(5)}%  ${k}`);
};
console.log(`${(total / 1e6).toFixed(1)} s sampled in ${files.length} profile(s)`);
print('by package', byPkg, 15);
print('by function (self time)', byFn, top);
print('by function (inclusive time)', inclusive, top);
