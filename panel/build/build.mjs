// `npm run build -w panel` (and the root's `npm install`, through `prepare`): builds the panel into dist/.
//
//   1. GraphQL operations are typed from schema/schema.graphql (codegen.config.mjs): a query the schema
//      does not accept fails here.
//   2. The sources are type-checked (tsc, panel/tsconfig.json) against those generated types.
//   3. rolldown bundles src/main.tsx for the browser; every asset name carries its content hash, so the
//      gateway can serve assets/ as immutable and only index.html is revalidated (docs/PANEL.md).
//   4. index.html links them by absolute path, with no inline script (the gateway's CSP forbids it).
//   5. Every text file gets .gz and .br siblings; the first page's gzipped JavaScript is reported and
//      held to its budget (FIRST_PAGE_BUDGET).
//
// dist/ is written to a temporary directory and renamed into place, so a failed build never leaves half
// a panel for the gateway to serve.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';

const PANEL = fileURLToPath(new URL('..', import.meta.url));
const DIST = join(PANEL, 'dist');
/** Gzipped JavaScript the first page may load, in bytes. */
export const FIRST_PAGE_BUDGET = 150 * 1024;

const step = (what) => process.stdout.write(`panel: ${what}\n`);

async function codegen() {
  const { generate } = await import('@graphql-codegen/cli');
  const { default: config } = await import('../codegen.config.mjs');
  await generate(config, true);
}

function typecheck() {
  const tsc = join(dirname(fileURLToPath(import.meta.resolve('typescript'))), '..', 'bin', 'tsc');
  execFileSync(process.execPath, [tsc, '-p', join(PANEL, 'tsconfig.json')], { stdio: 'inherit' });
}

const hash = (data) => createHash('sha256').update(data).digest('base64url').slice(0, 10);

async function bundle(out) {
  const { build } = await import('rolldown');
  const result = await build({
    input: { app: join(PANEL, 'src/main.tsx') },
    platform: 'browser',
    // JSX (automatic runtime, preact) comes from panel/tsconfig.json.
    tsconfig: join(PANEL, 'tsconfig.json'),
    treeshake: true,
    write: true,
    output: {
      dir: join(out, 'assets'),
      format: 'esm',
      minify: true,
      entryFileNames: '[name]-[hash].js',
      chunkFileNames: '[name]-[hash].js',
      assetFileNames: '[name]-[hash][extname]',
      sourcemap: false,
    },
  });
  return result.output;
}

/** The stylesheets, in order, as one content-hashed file. */
function styles(out) {
  const sources = [join(PANEL, 'src/styles/app.css'), fileURLToPath(import.meta.resolve('uplot/dist/uPlot.min.css'))];
  const css = sources.map((f) => readFileSync(f, 'utf8')).join('\n');
  const name = `app-${hash(css)}.css`;
  writeFileSync(join(out, 'assets', name), css);
  return name;
}

function indexHtml(out, entry, preload, css) {
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>Tunnelgate</title>
<link rel="icon" href="${iconHref()}">
<link rel="stylesheet" href="/assets/${css}">
${preload.map((f) => `<link rel="modulepreload" href="/assets/${f}">`).join('\n')}
<script type="module" src="/assets/${entry}"></script>
</head>
<body>
<div id="app"><noscript>Tunnelgate's panel needs JavaScript.</noscript></div>
</body>
</html>
`;
  writeFileSync(join(out, 'index.html'), html);
}

/**
 * The icon, inline as a data: URL (the CSP allows data: images): a file would be a request that the
 * first load's immediate redirect to the issuer aborts, and the browser would report it as failed.
 */
function iconHref() {
  const svg = readFileSync(join(PANEL, 'src/styles/icon.svg'), 'utf8').trim();
  return `data:image/svg+xml,${encodeURIComponent(svg)}`;
}

function compressAll(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) compressAll(path);
    else if (/\.(js|css|html|svg|json|map)$/.test(entry.name)) {
      const data = readFileSync(path);
      writeFileSync(`${path}.gz`, gzipSync(data, { level: 9 }));
      writeFileSync(`${path}.br`, brotliCompressSync(data, { params: { [constants.BROTLI_PARAM_QUALITY]: 11 } }));
    }
  }
}

const gzipped = (path) => gzipSync(readFileSync(path), { level: 9 }).length;
const kb = (n) => `${(n / 1024).toFixed(1)} KB`;

export async function buildPanel() {
  const started = Date.now();
  step('typing GraphQL operations from schema/schema.graphql');
  await codegen();
  step('type-checking');
  typecheck();
  const tmp = `${DIST}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(join(tmp, 'assets'), { recursive: true });
  step('bundling');
  const output = await bundle(tmp);
  const entry = output.find((o) => o.type === 'chunk' && o.isEntry);
  // What the first page loads: the entry and the chunks it imports statically (lazy pages load later).
  const firstPage = new Set([entry.fileName]);
  for (const name of firstPage) {
    const chunk = output.find((o) => o.fileName === name);
    for (const imported of chunk?.imports ?? []) firstPage.add(imported);
  }
  const css = styles(tmp);
  indexHtml(tmp, entry.fileName, [...firstPage].filter((f) => f !== entry.fileName), css);
  compressAll(tmp);
  const firstPageJs = [...firstPage].reduce((sum, f) => sum + gzipped(join(tmp, 'assets', f)), 0);
  const allJs = output.filter((o) => o.type === 'chunk').reduce((sum, o) => sum + gzipped(join(tmp, 'assets', o.fileName)), 0);
  step(`first page: ${kb(firstPageJs)} of gzipped JavaScript (budget ${kb(FIRST_PAGE_BUDGET)}); all chunks ${kb(allJs)}; css ${kb(gzipped(join(tmp, 'assets', css)))}`);
  if (firstPageJs > FIRST_PAGE_BUDGET) {
    rmSync(tmp, { recursive: true, force: true });
    throw new Error(`the first page needs ${kb(firstPageJs)} of gzipped JavaScript, over the ${kb(FIRST_PAGE_BUDGET)} budget`);
  }
  writeFileSync(join(tmp, 'build.json'), `${JSON.stringify({ firstPageGzipBytes: firstPageJs, allChunksGzipBytes: allJs, entry: entry.fileName }, null, 2)}\n`);
  rmSync(DIST, { recursive: true, force: true });
  renameSync(tmp, DIST);
  step(`built dist/ in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  buildPanel().catch((err) => {
    process.stderr.write(`panel: build failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
