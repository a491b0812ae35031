// The login and consent pages in a real browser: Debian's chromium driven by playwright-core goes
// authorize -> login (email, password) -> consent -> the client's redirect_uri, a small local HTTP
// server that records the `code` and `state` it receives. Also checked in the browser: a wrong
// password gives a clear error on the page, every input has a label, and no request leaves the
// issuer's origin (no external assets). Screenshots are kept in test-results/ (git-ignored).
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authorizeUrl, pkce, postForm } from '../helpers/oidc.ts';
import { startOidcWorld, type OidcWorld, type TestClient } from '../helpers/oidc-fixture.ts';
import { CHROMIUM, CHROMIUM_ARGS, skipWithoutChromium } from '../helpers/browser.ts';

// Skipped without chromium on a developer's machine; in CI (TUNNELGATE_TESTS=require, CI) that fails instead.
const skip = skipWithoutChromium('the browser test');
const ARTIFACTS = path.resolve(import.meta.dirname, '../../test-results');

let w: OidcWorld;
let c: TestClient;
let redirectServer: http.Server;
let redirectUri: string;
const received: URL[] = [];
let context: BrowserContext;
let profileDir: string;
/** Every URL the browser requested, with the test that caused it. */
const requests: string[] = [];

beforeAll(async () => {
  if (skip) return;
  redirectServer = http.createServer((req, res) => {
    received.push(new URL(req.url ?? '/', 'http://placeholder'));
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<!doctype html><title>Client callback</title><p>Signed in.</p>');
  });
  await new Promise<void>((r) => redirectServer.listen(0, '127.0.0.1', r));
  redirectUri = `http://127.0.0.1:${(redirectServer.address() as AddressInfo).port}/callback`;
  w = await startOidcWorld();
  c = await w.newClient([redirectUri]);
  profileDir = mkdtempSync(path.join(os.tmpdir(), 'tg-chromium-'));
  context = await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
  });
  context.on('request', (r) => requests.push(r.url()));
  mkdirSync(ARTIFACTS, { recursive: true });
}, 120_000);

afterAll(async () => {
  await context?.close();
  if (profileDir) rmSync(profileDir, { recursive: true, force: true });
  await w?.close();
  await new Promise<void>((r) => (redirectServer ? redirectServer.close(() => r()) : r()));
});

function startUrl(state: string, challenge: string): string {
  return authorizeUrl(`${w.issuer}/oauth/authorize`, { clientId: c.id, redirectUri, state, challenge, method: 'S256' }).href;
}

/** Every input the user types into has an accessible label naming it. */
async function expectLabelled(page: Page): Promise<void> {
  await expect(page.getByLabel(/e-?mail/i)).toHaveAttribute('name', 'email');
  await expect(page.getByLabel(/password/i)).toHaveAttribute('name', 'password');
  const unlabelled = await page.$$eval('input:not([type=hidden]):not([type=submit]):not([type=button])', (inputs) =>
    inputs.filter((i) => !(i as unknown as { labels: { length: number } | null }).labels?.length && !i.getAttribute('aria-label') && !i.getAttribute('aria-labelledby')).map((i) => i.outerHTML),
  );
  expect(unlabelled).toEqual([]);
}

/** `expect` from vitest has no toHaveAttribute; a small locator assertion instead. */
declare module 'vitest' {
  interface Assertion {
    toHaveAttribute(name: string, value: string): Promise<void>;
  }
}
expect.extend({
  async toHaveAttribute(locator: Locator, name: string, value: string) {
    const count = await locator.count();
    const actual = count === 1 ? await locator.getAttribute(name) : null;
    return {
      pass: count === 1 && actual === value,
      message: () => `expected exactly one element labelled like that with ${name}="${value}"; found ${count}, ${name}=${JSON.stringify(actual)}`,
    };
  },
});

describe.skipIf(skip)('login and consent in chromium', () => {
  it('login -> consent -> redirect carrying code and state; the code is exchangeable', async () => {
    const page = await context.newPage();
    page.setDefaultTimeout(10_000);
    const from = requests.length;
    const p = pkce();
    const state = `st-${Date.now().toString(36)}`;
    await page.goto(startUrl(state, p.challenge));
    await expect(page.locator('form input[name=password]')).toHaveAttribute('type', 'password');
    await expectLabelled(page);
    await page.screenshot({ path: path.join(ARTIFACTS, 'login.png'), fullPage: true });

    await page.getByLabel(/e-?mail/i).fill(w.owner.email);
    await page.getByLabel(/password/i).fill(w.owner.password);
    await Promise.all([page.waitForLoadState('load'), page.locator('form:has(input[name=password]) [type=submit]').first().click()]);

    // Consent: names the client and the scopes, approved with its primary button.
    await page.waitForURL((u) => u.origin === new URL(w.issuer).origin);
    const consentText = await page.locator('body').innerText();
    expect(consentText).toContain('Independent client');
    // The consent page: the page says in plain words what the application may do with the API (this
    // test's client has write access and the user is an owner).
    expect(consentText).toContain('Buy, change and delete tunnels and spend your balance');
    await page.screenshot({ path: path.join(ARTIFACTS, 'consent.png'), fullPage: true });
    const approve = page.getByRole('button', { name: /allow|approve|continue|accept|authori[sz]e|yes/i });
    await Promise.all([page.waitForURL((u) => u.href.startsWith(redirectUri)), approve.first().click()]);

    const cb = new URL(page.url());
    expect(cb.searchParams.get('state')).toBe(state);
    expect(cb.searchParams.get('code')).toMatch(/^[\x21-\x7e]{16,}$/);
    // What the client's server received (the browser may also ask it for /favicon.ico).
    expect(received.filter((u) => u.pathname === '/callback').map((u) => u.searchParams.get('code'))).toEqual([cb.searchParams.get('code')]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'callback.png') });

    // The code from the browser is a real one.
    const tok = await postForm(`${w.issuer}/oauth/token`, { grant_type: 'authorization_code', code: cb.searchParams.get('code')!, code_verifier: p.verifier, redirect_uri: redirectUri, client_id: c.id, client_secret: c.secret });
    expect(tok.status).toBe(200);
    expect(tok.body.refresh_token).toMatch(/^rt_/);

    // Every request before the redirect went to the issuer's origin: no external assets.
    const issuerOrigin = new URL(w.issuer).origin;
    const seen = requests.slice(from);
    const atCallback = seen.findIndex((u) => u.startsWith(redirectUri));
    expect(atCallback).toBeGreaterThan(0);
    expect(seen.slice(0, atCallback).filter((u) => new URL(u).origin !== issuerOrigin)).toEqual([]);
    // After it, only the client's own origin (its page, perhaps its favicon).
    expect(seen.slice(atCallback).filter((u) => new URL(u).origin !== new URL(redirectUri).origin)).toEqual([]);
    await page.close();
  });

  it('a wrong password shows a clear error on the login page and no redirect happens', async () => {
    const page = await context.newPage();
    page.setDefaultTimeout(10_000);
    await context.clearCookies();
    const from = received.filter((u) => u.pathname === '/callback').length;
    const p = pkce();
    await page.goto(startUrl('st-wrong', p.challenge));
    await page.getByLabel(/e-?mail/i).fill(w.viewer.email);
    await page.getByLabel(/password/i).fill(`${w.viewer.password} not`);
    await Promise.all([page.waitForLoadState('load'), page.locator('form:has(input[name=password]) [type=submit]').first().click()]);
    await page.waitForSelector('input[name=password]');
    const text = await page.locator('body').innerText();
    expect(text).toMatch(/(incorrect|invalid|wrong|does not match|not recogni[sz]ed)/i);
    // The message is announced to assistive technology.
    const alerts = await page.locator('[role=alert], [aria-live]').allInnerTexts();
    expect(alerts.join(' ')).toMatch(/(incorrect|invalid|wrong|does not match|not recogni[sz]ed)/i);
    // The password is not echoed back into the form.
    expect(await page.locator('input[name=password]').inputValue()).toBe('');
    await page.screenshot({ path: path.join(ARTIFACTS, 'login-wrong-password.png'), fullPage: true });
    await expectLabelled(page);
    expect(received.filter((u) => u.pathname === '/callback').length).toBe(from);
    expect(page.url().startsWith(redirectUri)).toBe(false);
    await page.close();
  });
});
