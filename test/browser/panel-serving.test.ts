// The panel's files (server/http/panel.ts) in a real browser: Debian's chromium, driven by playwright-core,
// loads a fixture build from a real gateway. The Content-Security-Policy lets the build's own module script
// run, fetch the API and open the GraphQL WebSocket, and stops what the policy exists to stop: an inline
// script, an inline style attribute, eval. A deep link loads the app; the script arrives precompressed
// (the build's .gz/.br sibling) and runs.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { skipUnless } from '../helpers/requirements.ts';

const CHROMIUM = '/usr/bin/chromium';
const skip = skipUnless(existsSync(CHROMIUM), `the browser test: ${CHROMIUM} (apt-get install chromium)`);

const INDEX = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>fixture panel</title>
<link rel="stylesheet" href="/assets/style-77b0e2.css">
<script>document.documentElement.dataset.inline = 'ran';</script>
<script type="module" src="/assets/app-3f9a1c.js"></script>
</head>
<body><p id="styled" style="color: rgb(255, 0, 0)">text</p></body>
</html>`;
// What the app script finds out, on <html data-*>, for the test to read.
const APP_JS = `
const root = document.documentElement;
root.dataset.app = location.pathname;
try { eval('1'); root.dataset.eval = 'ran'; } catch { root.dataset.eval = 'blocked'; }
fetch('/healthz').then((r) => r.json()).then((b) => { root.dataset.api = b.status; }, () => { root.dataset.api = 'blocked'; });
const ws = new WebSocket(location.origin.replace('http', 'ws') + '/graphql', 'graphql-transport-ws');
ws.onopen = () => { root.dataset.ws = 'open'; ws.close(); };
ws.onerror = () => { root.dataset.ws = root.dataset.ws || 'error'; };
`;
const STYLE = '#styled { font-weight: 700; }\n';

let tmp: string;
let gw: RunningGateway;
let context: BrowserContext;
let profileDir: string;

beforeAll(async () => {
  if (skip) return;
  tmp = mkdtempSync(path.join(os.tmpdir(), 'panel-browser-'));
  const dist = path.join(tmp, 'dist');
  mkdirSync(path.join(dist, 'assets'), { recursive: true });
  writeFileSync(path.join(dist, 'index.html'), INDEX);
  writeFileSync(path.join(dist, 'assets/app-3f9a1c.js'), APP_JS);
  writeFileSync(path.join(dist, 'assets/app-3f9a1c.js.br'), brotliCompressSync(APP_JS));
  writeFileSync(path.join(dist, 'assets/app-3f9a1c.js.gz'), gzipSync(APP_JS));
  writeFileSync(path.join(dist, 'assets/style-77b0e2.css'), STYLE);
  gw = await startGateway({ config: { panelDir: dist } });
  profileDir = mkdtempSync(path.join(os.tmpdir(), 'tg-chromium-'));
  context = await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}, 120_000);

afterAll(async () => {
  await context?.close();
  if (profileDir) rmSync(profileDir, { recursive: true, force: true });
  await gw?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** Opens `url`, waits until the app script has reported the API call and the WebSocket, returns what it saw. */
async function open(page: Page, url: string) {
  const violations: string[] = [];
  page.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
  });
  const script = page.waitForResponse((r) => r.url().endsWith('/assets/app-3f9a1c.js'));
  await page.goto(url);
  const scriptResponse = await script;
  // Browser-side code as text: this project's TypeScript has no DOM types (it is Node code).
  await page.waitForFunction('document.documentElement.dataset.api !== undefined && document.documentElement.dataset.ws !== undefined', undefined, { timeout: 60_000 });
  const seen = (await page.evaluate(
    "({ ...document.documentElement.dataset, color: getComputedStyle(document.getElementById('styled')).color, weight: getComputedStyle(document.getElementById('styled')).fontWeight })",
  )) as Record<string, string | undefined>;
  return { seen, violations, scriptEncoding: (await scriptResponse.allHeaders())['content-encoding'] };
}

describe.skipIf(skip)('the panel under its CSP in chromium', () => {
  it('the build runs (its script, stylesheet, API calls and WebSocket); inline script, inline style and eval do not', async () => {
    const page = await context.newPage();
    try {
      const { seen, violations, scriptEncoding } = await open(page, `${gw.url}/`);
      expect(seen.app).toBe('/');
      expect(seen.api).toBe('ok');
      expect(seen.ws).toBe('open');
      expect(seen.weight).toBe('700');
      expect(seen.inline).toBeUndefined();
      expect(seen.eval).toBe('blocked');
      expect(seen.color).not.toBe('rgb(255, 0, 0)');
      // The browser names each refusal (inline script, style attribute, eval) in its console.
      expect(violations.length, violations.join('\n')).toBeGreaterThanOrEqual(2);
      // Chromium accepts gzip everywhere (and br on secure origins): it got one of the build's siblings.
      expect(['gzip', 'br']).toContain(scriptEncoding);
    } finally {
      await page.close();
    }
  });

  it('a deep link loads the app, which sees its own path', async () => {
    const page = await context.newPage();
    try {
      const { seen } = await open(page, `${gw.url}/tunnels/abc?tab=traffic`);
      expect(seen.app).toBe('/tunnels/abc');
      expect(seen.api).toBe('ok');
    } finally {
      await page.close();
    }
  });
});
