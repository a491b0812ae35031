// The panel's sign-in and dashboard in chromium, against the real gateway process serving the built panel,
// its real agent in a namespace and PostgreSQL (test/helpers/storefront.ts). Signing in goes from `/` to the
// issuer's login page and back with no consent screen (the panel is the issuer's first-party client); a
// reload signs in again silently (prompt=none, no password); sign-out ends the issuer session. The dashboard
// shows the balance, passes axe-core and fits 375 px, and its status badges change live while it stays open.
// A viewer is offered no write control, and a write sent with the viewer's own panel token is refused by the
// API. No test ends with a console error or a failed request on any page.
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkA11y, fitsWidth } from '../helpers/a11y.ts';
import { launchChromium, openSession, screenshot, signIn, skipWithoutChromium, type Session } from '../helpers/browser.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { startStorefront, type Storefront } from '../helpers/storefront.ts';
import { until } from '../helpers/wait.ts';
import { isRoot } from '../netns/netns.ts';

const skip = skipWithoutChromium('the panel dashboard tests') || skipUnless(isRoot, 'the panel dashboard tests: root (network namespaces)');

/** What a read-only person must never be offered on the dashboard: any control that changes something. */
const WRITE_CONTROLS = 'button, input, select, textarea, a[href="/buy"], a[href^="/buy?"]';

describe.skipIf(skip)('the panel: sign-in and the dashboard', () => {
  let w: Storefront;
  let browser: Browser;
  let owner: Session;

  beforeAll(async () => {
    [w, browser] = await Promise.all([startStorefront({ pool: '203.0.113.80/28' }), launchChromium()]);
    owner = await openSession(browser);
  });

  afterAll(async () => {
    await browser?.close();
    await w?.close();
  });

  /** Every path the page's main frame navigated to, from now on. */
  const navigations = (page: Page): URL[] => {
    const seen: URL[] = [];
    page.on('framenavigated', (f) => {
      if (f === page.mainFrame()) seen.push(new URL(f.url()));
    });
    return seen;
  };

  const balance = (page: Page) => page.getByTestId('balance');

  it('sign-in from /: the issuer asks for the password, then the dashboard, with no consent screen; it shows the balance', async () => {
    const seen = navigations(owner.page);
    await signIn(owner.page, w.url, w.owner);
    await balance(owner.page).waitFor();
    expect(await balance(owner.page).innerText()).toBe('$50.00');
    expect(await owner.page.getByRole('heading', { level: 1 }).innerText()).toBe('Dashboard');
    // The owner is offered the purchase (the viewer test below checks its absence the same way).
    expect(await owner.page.locator('main').locator('a[href="/buy"]').count()).toBeGreaterThan(0);
    // The password form was shown once, on the issuer's origin; no consent page (its Allow button) came after it.
    expect(seen.filter((u) => u.pathname.startsWith('/interaction/')).length).toBe(1);
    expect(await owner.page.getByRole('button', { name: 'Allow' }).count()).toBe(0);
    expect(owner.page.url()).toBe(`${w.url}/`);
    expect(owner.problems.problems()).toEqual([]);
  });

  it('a reload signs in again without asking for the password (prompt=none through the issuer session)', async () => {
    const seen = navigations(owner.page);
    await owner.page.reload();
    await balance(owner.page).waitFor();
    // The silent round trip: authorize redirected straight back to the callback (it commits no page of its own).
    expect(seen.some((u) => u.pathname === '/callback' && u.searchParams.has('code'))).toBe(true);
    expect(seen.filter((u) => u.pathname.startsWith('/interaction/'))).toEqual([]);
    expect(await owner.page.locator('input[type=password]').count()).toBe(0);
    expect(owner.problems.problems()).toEqual([]);
  });

  it('the status badge turns provisioned on the open dashboard when the tunnel is provisioned through the API, with no reload', async () => {
    const bought = await w.api('POST', '/api/dedicated', { token: w.owner.key, body: { name: 'live-badge', origin_ip: w.originIp } });
    expect(bought.status).toBe(201);
    const id = (bought.body.tunnel as { id: string }).id;
    // The dashboard lists tunnels as it loads; open it again to see the new one.
    await owner.page.reload();
    const badge = owner.page.locator(`tr[data-tunnel-id="${id}"] .badge-status`);
    await badge.waitFor();
    expect(await badge.getAttribute('data-value')).toBe('PENDING');
    // A mark in this document: a reload or a navigation would lose it.
    await owner.page.evaluate('window.__sameDocument = true');

    const p = await w.api('POST', `/api/dedicated/${id}/provision`, { token: w.owner.key });
    expect([p.status, p.body.tunnel?.status]).toEqual([200, 'provisioned']);
    await until('the badge to say provisioned', async () => (await badge.getAttribute('data-value')) === 'PROVISIONED');
    expect(await badge.innerText()).toBe('Provisioned');
    expect(await badge.getAttribute('aria-label')).toBe('Status: Provisioned');
    expect(await owner.page.evaluate('window.__sameDocument === true')).toBe(true);
    expect(owner.problems.problems()).toEqual([]);
  });

  it('the dashboard passes axe-core (no serious or critical violation) and fits 375 px without scrolling sideways', async () => {
    await balance(owner.page).waitFor();
    expect(await checkA11y(owner.page, 'dashboard')).toEqual([]);
    expect(await fitsWidth(owner.page, 375)).toBe(true);
    await screenshot(owner.page, 'dashboard', { readme: true });
    expect(owner.problems.problems()).toEqual([]);
  });

  it('a viewer is offered no write control, and a write with the viewer\'s own panel token is refused by the API', async () => {
    const viewer = await openSession(browser);
    try {
      // The panel's own bearer token, as it leaves the browser.
      let bearer: string | undefined;
      viewer.context.on('request', (r) => {
        const h = r.headers().authorization;
        if (r.url().startsWith(`${w.url}/graphql`) && h?.startsWith('Bearer ')) bearer = h.slice('Bearer '.length);
      });
      await signIn(viewer.page, w.url, w.viewer);
      await balance(viewer.page).waitFor();
      expect(await viewer.page.locator('header.top').innerText()).toContain('read-only');
      expect(await viewer.page.locator('main').locator(WRITE_CONTROLS).count()).toBe(0);
      expect(await checkA11y(viewer.page, 'dashboard (viewer)')).toEqual([]);

      const token = await until('the panel to call the API with its token', () => bearer);
      const rest = await w.api('POST', '/api/dedicated', { token, body: { name: 'forged', origin_ip: w.originIp } });
      expect([rest.status, rest.body.error]).toEqual([403, 'insufficient_scope']);
      const gql = await fetch(`${w.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query: 'mutation { purchaseTunnel(input: { originIp: "198.51.100.20" }) { tunnel { id } } }' }),
      });
      const body = (await gql.json()) as { data?: unknown; errors?: { extensions?: { code?: string } }[] };
      expect(body.errors?.[0]?.extensions?.code).toBe('insufficient_scope');
      // Nothing was bought.
      const { rows } = await w.db.raw.query<{ n: number }>("select count(*)::int as n from tunnel where name = 'forged'");
      expect(rows[0]!.n).toBe(0);
      expect(viewer.problems.problems()).toEqual([]);
    } finally {
      await viewer.close();
    }
  });

  it('sign-out ends the session: the panel says so, and the next visit asks for the password again', async () => {
    await owner.page.getByRole('button', { name: 'Sign out' }).click();
    // The panel's signed-out page, or the sign-in page it leads to: either way no longer signed in.
    await owner.page.locator('form input[name=password]').or(owner.page.getByText('You are signed out.')).waitFor();
    expect(await owner.page.getByTestId('balance').count()).toBe(0);
    await owner.page.goto(`${w.url}/`);
    await owner.page.locator('form input[name=password]').waitFor();
    expect(new URL(owner.page.url()).pathname).toMatch(/^\/interaction\//);
    expect(owner.problems.problems()).toEqual([]);
  });
});
