// The panel's language and its session over time, in chromium against the real gateway (test/helpers/storefront.ts):
// - an access token that expires while the panel is open is replaced silently from the refresh token (the
//   page's clock is moved past the token's 15 minutes; the gateway's is not, so the refresh is real);
// - a grant revoked while the panel is open (sign-out in another tab ends the panel's grant and the issuer
//   session) sends the next request to the sign-in page, and signing in again brings the user back to the
//   page they were on, its #fragment included.
import type { Browser, Request } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium, openSession, signIn, skipWithoutChromium } from '../helpers/browser.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { startStorefront, type Storefront } from '../helpers/storefront.ts';
import { isRoot } from '../netns/netns.ts';

const skip = skipWithoutChromium('the panel session tests') || skipUnless(isRoot, 'the panel session tests: root (network namespaces)');

/** The grant_type of a token-endpoint request, or null for any other request. */
function grantType(r: Request): string | null {
  if (r.method() !== 'POST' || !new URL(r.url()).pathname.endsWith('/oauth/token')) return null;
  return new URLSearchParams(r.postData() ?? '').get('grant_type');
}

describe.skipIf(skip)('the panel: its language and a session over time', () => {
  let w: Storefront;
  let browser: Browser;

  beforeAll(async () => {
    [w, browser] = await Promise.all([startStorefront({ pool: '203.0.113.144/28' }), launchChromium()]);
  });

  afterAll(async () => {
    await browser?.close();
    await w?.close();
  });

  it('speaks the browser\'s language, and the switch in the header changes every string at once and is remembered', async () => {
    // A browser that asks for Russian first gets the panel in Russian, the price in roubles included.
    const context = await browser.newContext({ locale: 'ru-RU', viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    await signIn(page, w.url, w.owner);
    await page.getByRole('heading', { level: 1, name: 'Обзор' }).waitFor();
    await page.getByRole('navigation').getByRole('link', { name: 'Купить туннель' }).waitFor();
    await page.getByText(/Туннель стоит .*₽/).waitFor();
    // The switch: English at once, no reload, and kept for the next visit.
    await page.getByRole('combobox', { name: 'Язык' }).selectOption('en');
    await page.getByRole('heading', { level: 1, name: 'Dashboard' }).waitFor();
    expect(await page.locator('html').getAttribute('lang')).toBe('en');
    await page.reload();
    await page.getByRole('heading', { level: 1, name: 'Dashboard' }).waitFor();
    await context.close();
  });

  it('an access token that expired while the page was open is refreshed silently: the next page loads with no sign-in', async () => {
    const s = await openSession(browser);
    // The page's clock only (Date and timers in the page); the gateway keeps real time.
    await s.page.clock.install();
    await signIn(s.page, w.url, w.owner);
    await s.page.getByTestId('balance').waitFor();
    const grants: string[] = [];
    s.page.on('request', (r) => {
      const g = grantType(r);
      if (g) grants.push(g);
    });
    // Past the access token's 15 minutes, well within the refresh token's 14 days.
    await s.page.clock.fastForward('20:00');
    await s.page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Account' }).click();
    await s.page.getByRole('heading', { level: 1, name: 'Account' }).waitFor();
    await s.page.getByRole('heading', { name: 'Ledger' }).waitFor();
    expect(grants).toEqual(['refresh_token']);
    expect(await s.page.locator('input[type=password]').count()).toBe(0);
    expect(new URL(s.page.url()).pathname).toBe('/account');
    expect(s.problems.problems()).toEqual([]);
    await s.close();
  });

  it('a grant revoked while the page is open sends the next request to sign in, and back to the same place after', async () => {
    const s = await openSession(browser);
    await signIn(s.page, w.url, w.owner, { path: '/developers/api#post-api-dedicated' });
    await s.page.getByRole('heading', { level: 1 }).waitFor();
    expect(new URL(s.page.url()).pathname).toBe('/developers/api');

    // Another tab of the same browser signs out: the issuer session and the panel's grant end, so the
    // first tab's access and refresh tokens are refused from now on.
    const other = await s.context.newPage();
    await other.goto(`${w.url}/`);
    await other.getByRole('button', { name: 'Sign out' }).click();
    await other.waitForURL((u) => u.pathname === '/signed-out');
    await other.close();

    // The first tab's next request is refused (401), its refresh too (invalid_grant): the sign-in page.
    s.problems.expect({ why: 'the revoked access token, refused once before the refresh', url: /\/graphql$/, status: 401 });
    s.problems.expect({ why: 'the revoked refresh token', url: /\/oauth\/token$/, status: 400 });
    await s.page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Account' }).click();
    await s.page.locator('form input[name=password]').waitFor();
    await s.page.getByLabel('Email').fill(w.owner.email);
    await s.page.getByLabel('Password').fill(w.owner.password);
    await s.page.getByRole('button', { name: 'Sign in' }).click();
    // Back where the user was when the refusal came: the account page they had asked for.
    await s.page.getByRole('heading', { level: 1, name: 'Account' }).waitFor();
    expect(new URL(s.page.url()).pathname).toBe('/account');
    expect(s.problems.problems()).toEqual([]);
    await s.close();
  });
});
