// The real panel build (panel/dist, made by `npm run build:panel`; PANEL_DIR names another) under the
// gateway's Content-Security-Policy in chromium: the app renders on its first page and on deep links,
// the browser reports no CSP violation and no uncaught error, and every request stays on the gateway's
// origin (no external asset). A change to the panel that needs inline script or style, eval, or a CDN
// fails here, before a user's browser refuses it.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../server/config.ts';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { skipUnless } from '../helpers/requirements.ts';

const CHROMIUM = '/usr/bin/chromium';
const PANEL_DIR = process.env.PANEL_DIR ? path.resolve(process.env.PANEL_DIR) : loadConfig({}).panelDir;
const skip =
  skipUnless(existsSync(CHROMIUM), `the browser test: ${CHROMIUM} (apt-get install chromium)`) ||
  skipUnless(existsSync(path.join(PANEL_DIR, 'index.html')), `the panel's CSP test: a built panel in ${PANEL_DIR} (npm run build:panel)`);

let gw: RunningGateway;
let context: BrowserContext;
let profileDir: string;

beforeAll(async () => {
  if (skip) return;
  gw = await startGateway({ config: { panelDir: PANEL_DIR }, publicUrlIsItself: true });
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
});

describe.skipIf(skip)('the built panel under the CSP', () => {
  for (const route of ['/', '/tunnels/00000000-0000-4000-8000-000000000000', '/developers']) {
    it(`${route}: renders, with no CSP violation, no uncaught error, nothing off the origin`, async () => {
      const page = await context.newPage();
      const problems: string[] = [];
      const offOrigin: string[] = [];
      page.on('console', (m) => {
        if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(`console: ${m.text()}`);
      });
      page.on('pageerror', (e) => problems.push(`error: ${e.message}`));
      page.on('request', (r) => {
        const u = new URL(r.url());
        if (u.protocol !== 'data:' && u.origin !== new URL(gw.url).origin) offOrigin.push(r.url());
      });
      try {
        await page.goto(`${gw.url}${route}`);
        // The app has rendered once #app holds more than its <noscript> fallback (signed out, it may
        // have gone to the issuer and back first: wait for the page it ends on).
        // Either the app renders here, or it goes on to the issuer to sign in (a checkout whose issuer has
        // no `panel` client yet stops on the issuer's own page; the panel's part has run by then).
        // (A selector, not a function: the CSP refuses the eval a string predicate needs.)
        const rendered = page.locator('#app > :not(noscript)').first().waitFor({ timeout: 60_000 });
        const toIssuer = page.waitForURL(/\/oauth\/authorize|\/interaction\//, { timeout: 60_000 });
        // The other wait fails when the page closes: that is expected, not an unhandled rejection.
        for (const p of [rendered, toIssuer]) p.catch(() => {});
        await Promise.any([rendered, toIssuer]);
        await page.waitForLoadState('networkidle');
        expect(problems).toEqual([]);
        expect(offOrigin).toEqual([]);
      } finally {
        await page.close();
      }
    });
  }
});
