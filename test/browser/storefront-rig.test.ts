// The storefront test rig checked on its own (test/helpers/storefront.ts, browser.ts, a11y.ts): the world it
// builds really sells (a node added with the admin CLI, its real agent in a namespace, an owner with a balance
// and a promocode, a viewer, an origin that answers activate, traffic that reaches the traffic API), and each
// browser check can fail: the problem recorder catches a failed response and a console error (and excuses
// only what a test names), axe-core finds a critical violation, the width check finds a page that scrolls
// sideways. The issuer's own pages pass the checks the panel's pages are held to.
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkA11y, fitsWidth } from '../helpers/a11y.ts';
import { launchChromium, openSession, readClipboard, screenshot, skipWithoutChromium, tabTo } from '../helpers/browser.ts';
import { codeFlow, RedirectCatcher, refresh } from '../helpers/independent-client.ts';
import { authorizeUrl, pkce } from '../helpers/oidc.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { startStorefront, type Storefront } from '../helpers/storefront.ts';
import { until } from '../helpers/wait.ts';
import { isRoot } from '../netns/netns.ts';

const skip = skipWithoutChromium('the storefront rig') || skipUnless(isRoot, 'the storefront rig: root (network namespaces)');

describe.skipIf(skip)('the storefront test rig', () => {
  let w: Storefront;
  let browser: Browser;

  beforeAll(async () => {
    [w, browser] = await Promise.all([startStorefront({ pool: '203.0.113.64/28', panel: false }), launchChromium()]);
  });

  afterAll(async () => {
    await browser?.close();
    await w?.close();
  });

  it('the world sells: the promocode discounts, the agent provisions, the origin answers activate, traffic reaches the API; the viewer cannot write', async () => {
    const pricing = await w.api('GET', '/api/dedicated/pricing');
    expect(pricing.status).toBe(200);
    expect(pricing.body.availability).toMatchObject({ in_stock: true });
    const bought = await w.api('POST', '/api/dedicated', { token: w.owner.key, body: { name: 'rig', origin_ip: w.originIp, promocode: w.promocode.code.toLowerCase() } });
    expect(bought.status).toBe(201);
    // 10 % off the RUB price; the balance was the 50 USD `balance add` put there.
    expect(bought.body.charged).toBeCloseTo(pricing.body.price * 0.9, 2);
    expect(Math.round((50 - bought.body.charged_usd) * 100)).toBe(Math.round(bought.body.balance_after * 100));
    const t = bought.body.tunnel as { id: string; protected_ip: string };

    const p = await w.api('POST', `/api/dedicated/${t.id}/provision`, { token: w.owner.key });
    expect([p.status, p.body.tunnel?.status]).toEqual([200, 'provisioned']);
    // Nothing answers yet: activate says to run the origin script.
    const early = await w.api('POST', `/api/dedicated/${t.id}/activate`, { token: w.owner.key });
    expect([early.status, early.body.error]).toEqual([409, 'invalid_state']);
    await w.connectOrigin(t.id);
    const a = await w.api('POST', `/api/dedicated/${t.id}/activate`, { token: w.owner.key });
    expect([a.status, a.body.tunnel?.status]).toEqual([200, 'active']);

    await w.sendTraffic(t.protected_ip, 20);
    // The gateway's own status round (EDGE_STATUS_SECONDS) collects it.
    const points = await until('a traffic point with the packets sent', async () => {
      const r = await w.api('GET', `/api/dedicated/${t.id}/traffic?step=1m`, { token: w.owner.key });
      const pts = (r.body.points ?? []) as { packets_in: number }[];
      return pts.reduce((n, x) => n + x.packets_in, 0) >= 20 ? pts : null;
    });
    expect(points.reduce((n, x) => n + x.packets_in, 0)).toBe(20);

    // The viewer's key reads but never writes.
    const forged = await w.api('POST', '/api/dedicated', { token: w.viewer.key, body: { origin_ip: w.originIp } });
    expect([forged.status, forged.body.error]).toEqual([403, 'insufficient_scope']);
    const d = await w.api('DELETE', `/api/dedicated/${t.id}`, { token: w.owner.key });
    expect([d.status, d.body.tunnel?.status]).toEqual([200, 'deleted']);
  });

  it('the recorder: a failed response and a console error are problems; a named expectation excuses only what it covers', async () => {
    const s = await openSession(browser);
    try {
      await s.page.goto(`${w.url}/api/dedicated/no-such-thing`);
      await s.page.evaluate('console.error("something broke")');
      await until('both problems recorded', () => s.problems.problems().length >= 3);
      const seen = s.problems.problems();
      expect(seen.some((l) => l.startsWith('response: 4'))).toBe(true);
      expect(seen.some((l) => l.startsWith('console: Failed to load resource'))).toBe(true);
      expect(seen).toContain(`console: something broke (${w.url}/api/dedicated/no-such-thing)`);
    } finally {
      await s.close();
    }

    const t = await openSession(browser);
    try {
      t.problems.expect({ why: 'this test asks for a route that does not exist', url: /\/api\/dedicated\/no-such-thing$/ });
      // Chromium asks for /favicon.ico on its own for a page without an icon (these JSON answers), at a moment of
      // its choosing: that 404 is the browser's, not one this test makes, and would otherwise race the one below.
      t.problems.expect({ why: 'chromium asks for /favicon.ico of a JSON answer', url: /\/favicon\.ico$/ });
      await t.page.goto(`${w.url}/api/dedicated/no-such-thing`);
      await until('the 404 excused', () => t.problems.excused.length >= 2);
      expect(t.problems.problems()).toEqual([]);
      // Another URL is still a problem.
      await t.page.goto(`${w.url}/api/dedicated/another-thing`);
      await until('the other 404 recorded', () => t.problems.problems().length > 0);
      expect(t.problems.problems()[0]).toMatch(/another-thing/);
    } finally {
      await t.close();
    }
  });

  it('axe-core finds a critical violation and the width check a page that scrolls sideways (each check can fail)', async () => {
    const s = await openSession(browser);
    try {
      await s.page.setContent('<!doctype html><html lang="en"><title>t</title><main><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw="><div style="width:600px">wide</div></main></html>');
      const v = await checkA11y(s.page, 'a bad page');
      expect(v.map((x) => [x.page, x.rule, x.impact])).toContainEqual(['a bad page', 'image-alt', 'critical']);
      expect(await fitsWidth(s.page, 375)).toMatch(/scrollWidth 6\d\d > clientWidth 375; past the edge: div/);
      await s.page.setContent('<!doctype html><html lang="en"><title>t</title><main><p>narrow</p></main></html>');
      expect(await fitsWidth(s.page, 375)).toBe(true);
      expect(s.problems.problems()).toEqual([]);
    } finally {
      await s.close();
    }
  });

  it("the issuer's login and consent pages, by keyboard alone: no serious axe violation, they fit 375 px, no problem on the way", async () => {
    const client = await w.admin(['client', 'create', '--name', 'Rig client', '--redirect-uri', 'http://127.0.0.1:9/cb', '--api-access', 'read']);
    const s = await openSession(browser);
    try {
      const p = pkce();
      await s.page.goto(authorizeUrl(`${w.url}/oauth/authorize`, { clientId: String(client.client_id), redirectUri: 'http://127.0.0.1:9/cb', state: 'rig', challenge: p.challenge, method: 'S256' }).href);
      await s.page.locator('form input[name=password]').waitFor();
      expect(await checkA11y(s.page, 'login')).toEqual([]);
      expect(await fitsWidth(s.page, 375)).toBe(true);
      await screenshot(s.page, 'issuer-login');
      // Keyboard only: the email field has focus on arrival.
      await s.page.keyboard.type(w.owner.email);
      await s.page.keyboard.press('Tab');
      await s.page.keyboard.type(w.owner.password);
      await s.page.keyboard.press('Enter');
      await s.page.getByRole('button', { name: 'Allow' }).waitFor();
      expect(await checkA11y(s.page, 'consent')).toEqual([]);
      expect(await fitsWidth(s.page, 375)).toBe(true);
      await screenshot(s.page, 'issuer-consent');
      expect(s.problems.problems()).toEqual([]);
    } finally {
      await s.close();
    }
  });

  it('an independent client (oauth4webapi) completes a code flow through the browser; once its secret is rotated its refresh token is refused', async () => {
    const catcher = await RedirectCatcher.start();
    const s = await openSession(browser);
    try {
      const created = await w.admin(['client', 'create', '--name', 'Rig application', '--redirect-uri', catcher.uri, '--api-access', 'read']);
      const app = { clientId: String(created.client_id), clientSecret: String(created.client_secret) };
      const first = await codeFlow(s.page, w.url, app, catcher, w.owner);
      expect(first.consented).toBe(true);
      expect(first.tokens.refresh_token).toMatch(/^rt_/);
      // The access token is the API's: the read access this application was given.
      const list = await w.api('GET', '/api/dedicated', { token: first.tokens.access_token });
      expect(list.status).toBe(200);
      const again = await refresh(w.url, app, first.tokens.refresh_token!);
      expect('tokens' in again).toBe(true);
      const rt = 'tokens' in again ? again.tokens.refresh_token! : '';

      const rotated = await w.admin(['client', 'rotate-secret', '--client-id', app.clientId]);
      expect(await refresh(w.url, app, rt)).toEqual({ error: 'invalid_client' });
      expect(await refresh(w.url, { ...app, clientSecret: String(rotated.client_secret) }, rt)).toEqual({ error: 'invalid_grant' });
      expect(s.problems.problems()).toEqual([]);
    } finally {
      await s.close();
      await catcher.close();
    }
  });

  it('keyboard and clipboard helpers: tabTo reaches a control by its name (and fails naming the way when none), readClipboard reads what the page copied', async () => {
    const s = await openSession(browser, { clipboard: true });
    try {
      await s.page.goto(`${w.url}/healthz`);
      await s.page.setContent('<!doctype html><html lang="en"><title>t</title><main><a href="#x">First</a><label>Name <input></label><button onclick="navigator.clipboard.writeText(\'ip link add tg0 type gre\')">Copy the script</button></main></html>');
      expect(await tabTo(s.page, /^Copy the script$/)).toBe('Copy the script');
      await s.page.keyboard.press('Enter');
      await until('the script on the clipboard', async () => (await readClipboard(s.page)) === 'ip link add tg0 type gre');
      await expect(tabTo(s.page, /^Nothing like this$/, { max: 5 })).rejects.toThrow(/focus went through: .*First.*Name/);
    } finally {
      await s.close();
    }
  });
});
