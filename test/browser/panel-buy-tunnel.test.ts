// A buyer's whole first tunnel in chromium, against the real gateway process, its real agent in a namespace
// (veth stand-in for GRE), the origin namespace and PostgreSQL (test/helpers/storefront.ts): bought by
// keyboard alone with a promocode, the price and the balance it leaves shown before the click and the
// balance changed after it; the origin script copied; provisioned with the badge turning Provisioned live;
// activated once the origin answers through the tunnel (refused, in words, before); protection changed and
// reported applied (and present in the edge's nftables); a traffic point after traffic; deleted. Every page
// passes axe-core and fits 375 px; no test ends with a console error or a failed request.
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkA11y, fitsWidth } from '../helpers/a11y.ts';
import { launchChromium, openSession, readClipboard, screenshot, signIn, skipWithoutChromium, tabTo, type Session } from '../helpers/browser.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { startStorefront, type Storefront } from '../helpers/storefront.ts';
import { until } from '../helpers/wait.ts';
import { isRoot } from '../netns/netns.ts';

const skip = skipWithoutChromium('the buy and tunnel page tests') || skipUnless(isRoot, 'the buy and tunnel page tests: root (network namespaces)');

const money = (n: number) => new Intl.NumberFormat('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 }).format(n);

describe.skipIf(skip)('the panel: buying a tunnel and bringing it up', () => {
  let w: Storefront;
  let browser: Browser;
  let s: Session;
  /** The tunnel bought in the first test, carried through the rest. */
  let tunnel: { id: string; protectedIp: string };

  beforeAll(async () => {
    [w, browser] = await Promise.all([startStorefront({ pool: '203.0.113.96/28' }), launchChromium()]);
    s = await openSession(browser, { clipboard: true });
  });

  afterAll(async () => {
    await browser?.close();
    await w?.close();
  });

  const statusBadge = () => s.page.locator('main dl.facts .badge-status');

  it('buys by keyboard alone with a promocode: the price and the balance after shown before the click, then the balance is lower by what was charged', async () => {
    await signIn(s.page, w.url, w.owner, { keyboard: true });
    await s.page.getByTestId('balance').waitFor();
    expect(await s.page.getByTestId('balance').innerText()).toBe('$50.00');
    await tabTo(s.page, /^Buy a tunnel$/);
    await s.page.keyboard.press('Enter');
    await s.page.getByTestId('buy-price').waitFor();
    expect(await checkA11y(s.page, 'buy')).toEqual([]);
    expect(await fitsWidth(s.page, 375)).toBe(true);
    await screenshot(s.page, 'buy');

    // The price at today's rate and what the balance would be, before anything is bought.
    const pricing = (await w.api('GET', '/api/dedicated/pricing')).body as { price: number; price_usd: number };
    expect(await s.page.getByTestId('buy-price').innerText()).toBe(`${money(pricing.price)} ₽ once, $${money(pricing.price_usd)} at 90 ₽ per $ today`);
    expect(await s.page.getByTestId('buy-balance').innerText()).toBe('Your balance: $50.00');
    expect(await s.page.getByTestId('buy-balance-after').innerText()).toBe(`Balance after the purchase: $${money(50 - pricing.price_usd)}`);

    await tabTo(s.page, /^Name \(optional\)/);
    await s.page.keyboard.type('web');
    await tabTo(s.page, /^Origin IP/);
    await s.page.keyboard.type(w.originIp);
    await tabTo(s.page, /^Promocode/);
    await s.page.keyboard.type(w.promocode.code.toLowerCase());
    await tabTo(s.page, /^Buy the tunnel$/);
    await Promise.all([s.page.waitForURL(/\/tunnels\/[0-9a-f-]{36}$/), s.page.keyboard.press('Enter')]);
    const id = /\/tunnels\/([0-9a-f-]{36})$/.exec(s.page.url())![1]!;
    await statusBadge().waitFor();
    tunnel = { id, protectedIp: await s.page.getByTestId('protected-ip').innerText() };
    expect(await statusBadge().getAttribute('data-value')).toBe('PENDING');

    // What the gateway charged: the promocode's 10 % off, recorded with the purchase.
    const { rows } = await w.db.raw.query<{ amount_usd: string; balance_after: string; promocode: string | null }>(
      "select amount_usd, balance_after, promocode from ledger_entry where tunnel_id = $1 and kind = 'purchase'",
      [id],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.promocode).toBe(w.promocode.code);
    const chargedCents = Math.round(-Number(rows[0]!.amount_usd) * 100);
    expect(chargedCents).toBeLessThan(Math.round(pricing.price_usd * 100));
    expect(chargedCents).toBe(Math.round(Math.round(pricing.price * 0.9 * 100) / 90));
    // Back on the dashboard (by keyboard), the balance shown is the one left.
    await tabTo(s.page, /^Dashboard$/);
    await s.page.keyboard.press('Enter');
    await s.page.getByTestId('balance').waitFor();
    expect(await s.page.getByTestId('balance').innerText()).toBe(`$${money((5000 - chargedCents) / 100)}`);
    expect(Number(rows[0]!.balance_after)).toBe((5000 - chargedCents) / 100);
    expect(s.problems.problems()).toEqual([]);
  });

  it('copies the origin script: the clipboard holds exactly the script the API serves', async () => {
    await s.page.goto(`${w.url}/tunnels/${tunnel.id}`);
    await s.page.getByTestId('origin-script').waitFor();
    await s.page.getByRole('button', { name: 'Copy: Origin script' }).click();
    const served = await fetch(`${w.url}/api/dedicated/${tunnel.id}/setup/origin.sh`, { headers: { authorization: `Bearer ${w.owner.key}` } }).then((r) => r.text());
    expect(served).toContain('#!');
    await until('the script on the clipboard', async () => (await readClipboard(s.page)) === served);
    expect((await s.page.getByTestId('origin-script').innerText()).trim()).toBe(served.trim());
    expect(s.problems.problems()).toEqual([]);
  });

  it('provisions from the page: the status badge turns Provisioned with no reload', async () => {
    await s.page.evaluate('window.__sameDocument = true');
    await s.page.getByRole('button', { name: 'Provision' }).click();
    await until('the badge to say provisioned', async () => (await statusBadge().getAttribute('data-value')) === 'PROVISIONED');
    expect(await statusBadge().innerText()).toBe('Provisioned');
    expect(await s.page.getByTestId('provision-state').innerText()).toBe('The edge holds the tunnel.');
    expect(await s.page.evaluate('window.__sameDocument === true')).toBe(true);
    expect(w.edge.links()).toContain((await w.db.raw.query<{ tunnel_name: string }>('select tunnel_name from tunnel where id = $1', [tunnel.id])).rows[0]!.tunnel_name);
    expect(s.problems.problems()).toEqual([]);
  });

  it('activate is refused in words while the origin is silent, and succeeds once it answers through the tunnel', async () => {
    await s.page.getByRole('button', { name: 'Activate' }).click();
    await s.page.getByTestId('activate-refusal').waitFor();
    expect(await s.page.getByTestId('activate-refusal').innerText()).toContain('Your origin did not answer through the tunnel');
    expect(await statusBadge().getAttribute('data-value')).toBe('PROVISIONED');

    await w.connectOrigin(tunnel.id);
    await s.page.getByRole('button', { name: 'Activate' }).click();
    await until('the badge to say active', async () => (await statusBadge().getAttribute('data-value')) === 'ACTIVE');
    expect(await s.page.getByTestId('activate-state').innerText()).toBe(`Active: traffic to ${tunnel.protectedIp} reaches your origin.`);
    expect(await s.page.getByTestId('activate-refusal').count()).toBe(0);
    expect(await w.tunnelStatus(tunnel.id)).toBe('active');
    expect(s.problems.problems()).toEqual([]);
  });

  it('changes protection: the page says it was applied, and the edge holds it', async () => {
    const settings = s.page.locator('form.tunnel-settings');
    await settings.getByRole('radio', { name: 'Custom' }).check();
    await settings.getByRole('checkbox', { name: 'SYN proxy' }).check();
    await settings.getByRole('button', { name: 'Save settings' }).click();
    const outcome = s.page.getByTestId('save-outcome');
    await outcome.waitFor();
    expect(await outcome.getAttribute('data-outcome')).toBe('applied');
    expect(await outcome.innerText()).toBe('Saved and applied on the edge.');
    expect(w.edge.netns.run('nft', 'list', 'set', 'ip', 'tunnelgate', 'synproxied')).toContain(tunnel.protectedIp);
    expect(s.problems.problems()).toEqual([]);
  });

  it('shows a traffic point after traffic; the tunnel page with its chart passes axe-core and fits 375 px', async () => {
    await w.sendTraffic(tunnel.protectedIp, 20);
    // Collected by the gateway's own status round, then read by the page.
    await until('the gateway to hold the traffic', async () => {
      const r = await w.api('GET', `/api/dedicated/${tunnel.id}/traffic?step=1m`, { token: w.owner.key });
      return ((r.body.points ?? []) as { packets_in: number }[]).reduce((n, p) => n + p.packets_in, 0) >= 20;
    });
    // The section reads its range again when one is chosen.
    const ranges = s.page.getByRole('group', { name: 'Time range' });
    await ranges.getByRole('button', { name: 'Last 48 hours' }).click();
    await ranges.getByRole('button', { name: 'Last hour' }).click();
    await until('the totals to count the packets', async () => /^In: .*, 20 packets$/.test(await s.page.locator('.traffic-totals li').first().innerText()));
    expect(await checkA11y(s.page, 'tunnel')).toEqual([]);
    expect(await fitsWidth(s.page, 375)).toBe(true);
    await screenshot(s.page, 'tunnel-full');
    // README's picture: the traffic section at the top of the window.
    await s.page.evaluate(`document.querySelector('section.traffic').scrollIntoView({ block: 'start' })`);
    await screenshot(s.page, 'tunnel', { fullPage: false, readme: true });
    expect(s.problems.problems()).toEqual([]);
  });

  it('deletes the tunnel after its IP is typed to confirm: the page says deleted and the edge has no link left', async () => {
    const button = s.page.getByRole('button', { name: 'Delete tunnel' });
    expect(await button.isDisabled()).toBe(true);
    await s.page.getByLabel(`Type ${tunnel.protectedIp} to confirm`).fill(tunnel.protectedIp);
    await button.click();
    await until('the badge to say deleted', async () => (await statusBadge().getAttribute('data-value')) === 'DELETED');
    await s.page.getByText('This tunnel is deleted; its protected IP went back to the pool.').waitFor();
    expect(w.edge.links()).toEqual([]);
    expect(s.problems.problems()).toEqual([]);
  });

  it('a viewer opening the buy page is told the role is read-only and offered no form', async () => {
    const viewer = await openSession(browser);
    try {
      await signIn(viewer.page, w.url, w.viewer, { path: '/buy' });
      await viewer.page.getByText('Your role is read-only: ask an owner of the account to do this.').waitFor();
      expect(await viewer.page.locator('main').locator('form, input, select, textarea, button').count()).toBe(0);
      expect(await checkA11y(viewer.page, 'buy (viewer)')).toEqual([]);
      expect(await fitsWidth(viewer.page, 375)).toBe(true);
      expect(viewer.problems.problems()).toEqual([]);
    } finally {
      await viewer.close();
    }
  });
});
