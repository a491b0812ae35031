// The tunnel page's attacks section and attack settings in chromium, against the real gateway process serving
// the built panel and PostgreSQL (test/helpers/storefront.ts). Attacks reach the database the way the gateway's
// status rounds store them: the server's own AttackIngest (server/attacks/ingest.ts: store.ts upsertAttacks and
// closeUnlisted in a transaction, then the notice on the status bus, PostgreSQL NOTIFY, which the gateway's
// `tunnelStatus` subscription hears as from another replica). The records it is given stand in for an edge
// agent's `status` answer: a real agent only reports an attack after a flood and ends it 60 quiet seconds later,
// which test/integration/attacks-edge.test.ts proves end to end. So that the rig's real agent never answers a
// round meanwhile (its answer lists no attack, which would end ours: ingest.ts), the gateway's rounds are an hour
// apart, and the test waits for the first one, made as the gateway starts, before it records anything.
//
// On the page: an attack found by its accessible name, newest first, its vector and counts in words; an ongoing
// attack's end appearing without a reload when it ends, and a new one appearing when it starts; max_flows and
// alert_pps set from the form and read back through GraphQL and REST, empty alert_pps saved as automatic (null);
// an out-of-range max_flows refused at its field before anything is sent. The page passes axe-core and fits
// 375 px; no test ends with a console error or a failed request.
import { randomUUID } from 'node:crypto';
import type { Browser, Locator } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AttackRecord } from '../../common/attacks.ts';
import type { StatusResult } from '../../common/tunnel-status.ts';
import { AttackIngest } from '../../server/attacks/ingest.ts';
import { TunnelStatusBus } from '../../server/provisioning/status-bus.ts';
import { TunnelEvents } from '../../server/webhooks/events.ts';
import { checkA11y, fitsWidth } from '../helpers/a11y.ts';
import { launchChromium, openSession, screenshot, signIn, skipWithoutChromium, type Session } from '../helpers/browser.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { startStorefront, type Storefront } from '../helpers/storefront.ts';
import { until } from '../helpers/wait.ts';
import { isRoot } from '../netns/netns.ts';

const skip = skipWithoutChromium('the tunnel page attacks tests') || skipUnless(isRoot, 'the tunnel page attacks tests: root (network namespaces)');

/** The text as read, with the panel's non-breaking spaces (between a number and its unit) as spaces. */
const text = async (l: Locator) => (await l.innerText()).replace(/\u00a0/g, ' ').trim();
/** An ISO time `ms` from now, to the millisecond (as the API answers it). */
const ago = (ms: number) => new Date(Math.floor(Date.now() / 1000) * 1000 - ms).toISOString();

describe.skipIf(skip)('the panel: a tunnel under attack', () => {
  let w: Storefront;
  let browser: Browser;
  let s: Session;
  let ingest: AttackIngest;
  let tunnelId: string;
  let nodeId: string;

  /**
   * One status round's attacks, stored as the gateway stores them: in a transaction, then published (the
   * subscription's notice) after the commit. `held` is every attack the stand-in agent holds open or just ended.
   */
  const report = async (held: AttackRecord[]) => {
    const result: StatusResult = { agent: { version: 'stand-in', uptime_s: 60, tunnels: 1 }, tunnels: [], attacks: held };
    const round = await w.db.db.transaction((sql) => ingest.record(sql, nodeId, result, new Date()));
    await ingest.published(round.changes);
    return round.changes.map((c) => `${c.kind}:${c.attack.id}`);
  };

  const graphql = async (query: string, variables: Record<string, unknown>) => {
    const r = await fetch(`${w.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${w.owner.key}` },
      body: JSON.stringify({ query, variables }),
    });
    return (await r.json()) as { data?: Record<string, unknown>; errors?: unknown[] };
  };

  beforeAll(async () => {
    [w, browser] = await Promise.all([startStorefront({ pool: '203.0.113.224/28', statusSeconds: 3600 }), launchChromium()]);
    s = await openSession(browser);
    // The gateway's first status round (made at its start): after it, none for an hour.
    await until('the gateway to finish its first status round', async () => (await w.db.raw.query('select 1 from traffic.node_poll')).rowCount! > 0);
    ingest = new AttackIngest(new TunnelEvents(52222), new TunnelStatusBus(w.db.db));
    const bought = await w.api('POST', '/api/dedicated', { token: w.owner.key, body: { name: 'under-attack', origin_ip: w.originIp } });
    expect(bought.status).toBe(201);
    tunnelId = (bought.body.tunnel as { id: string }).id;
    nodeId = (await w.db.raw.query<{ node_id: string }>('select node_id from tunnel where id = $1', [tunnelId])).rows[0]!.node_id;
  });

  afterAll(async () => {
    await browser?.close();
    await w?.close();
  });

  const attacks = () => s.page.getByRole('region', { name: 'Attacks' });
  const list = () => attacks().getByRole('list', { name: 'Attacks in the last 7 days, newest first' });
  const item = (id: string) => list().locator(`li[data-attack-id="${id}"]`);

  const earlier: AttackRecord = {
    id: randomUUID(),
    tunnel_id: '',
    started_at: ago(2 * 3_600_000),
    ended_at: ago(2 * 3_600_000 - 300_000),
    peak_pps: 950,
    peak_bps: 800_000,
    vector: { protocol: null, ports: null, top_drop_reason: null },
    packets_dropped: 0,
    packets_passed: 12_000,
  };
  const ongoing: AttackRecord = {
    id: randomUUID(),
    tunnel_id: '',
    started_at: ago(60_000),
    ended_at: null,
    peak_pps: 250_000,
    peak_bps: 1_200_000_000,
    vector: { protocol: 'udp', ports: [27015], top_drop_reason: 'rate_limited' },
    packets_dropped: 1_234_567,
    packets_passed: 4_321,
  };

  it('an empty tunnel says it had no attack; then the attacks recorded are listed newest first, found by name, the vector and counts in words', async () => {
    await signIn(s.page, w.url, w.owner, { path: `/tunnels/${tunnelId}` });
    await attacks().getByTestId('attacks-empty').waitFor();
    expect(await text(attacks().getByTestId('attacks-empty'))).toBe('No attack on this tunnel in the last 7 days.');
    await s.page.evaluate('window.__sameDocument = true');

    earlier.tunnel_id = ongoing.tunnel_id = tunnelId;
    // The earlier one is new and already over (a start the gateway missed): started, then ended, at once.
    expect((await report([earlier, ongoing])).sort()).toEqual([`ended:${earlier.id}`, `started:${earlier.id}`, `started:${ongoing.id}`].sort());

    // Both appear with no reload (the start fired the subscription), the newest first.
    await list().waitFor();
    await until('both attacks listed', async () => (await list().getByRole('listitem').count()) === 2);
    expect(await list().getByRole('listitem').evaluateAll((els) => els.map((e) => e.getAttribute('data-attack-id')))).toEqual([ongoing.id, earlier.id]);
    expect(await s.page.evaluate('window.__sameDocument === true')).toBe(true);

    // The ongoing one, by its accessible name (its heading).
    const live = list().getByRole('listitem', { name: /^Since .*: going on$/ });
    expect(await live.getAttribute('data-attack-id')).toBe(ongoing.id);
    expect(await live.locator('dd time').first().getAttribute('datetime')).toBe(ongoing.started_at);
    expect(await text(live.getByTestId('attack-end'))).toBe('Ongoing');
    const facts = await text(live.locator('dl'));
    expect(facts).toContain('250 kpps, 1.2 Gbit/s');
    expect(facts).toContain('UDP to port 27015; most drops by the packet limit per client address.');
    expect(facts).toContain('1,234,567 packets');
    expect(facts).toContain('4,321 packets');

    // The earlier one: ended, what today's edge cannot tell said so, nothing dropped.
    const old = item(earlier.id);
    expect(await text(old.getByRole('heading'))).toMatch(/^.+ to .+$/);
    expect(await old.getByTestId('attack-end').locator('time').getAttribute('datetime')).toBe(earlier.ended_at);
    expect(await text(old.locator('dl'))).toContain('Protocol not known (ports not known); nothing dropped.');
    expect(await text(old.locator('dl'))).toContain('950 pps, 800 kbit/s');
    expect(s.problems.problems()).toEqual([]);
  });

  it('an attack that ends shows its end time in place of "Ongoing", and a new one appears on top, both without a reload', async () => {
    const ended = { ...ongoing, ended_at: ago(5_000), packets_dropped: 2_000_000 };
    expect(await report([ended])).toEqual([`ended:${ongoing.id}`]);
    const end = item(ongoing.id).getByTestId('attack-end');
    await until('the end time to replace "Ongoing"', async () => (await end.locator('time').count()) === 1);
    expect(await end.locator('time').getAttribute('datetime')).toBe(ended.ended_at);
    expect(await text(end)).not.toBe('Ongoing');
    expect(await text(item(ongoing.id).getByRole('heading'))).toMatch(/^.+ to .+$/);
    expect(await text(item(ongoing.id).locator('dl'))).toContain('2,000,000 packets');

    const next: AttackRecord = { ...ongoing, id: randomUUID(), started_at: ago(2_000), ended_at: null, vector: { protocol: 'tcp', ports: [80, 443], top_drop_reason: 'not_allowed' } };
    expect(await report([next])).toEqual([`started:${next.id}`]);
    await until('the new attack on top', async () => (await list().getByRole('listitem').first().getAttribute('data-attack-id')) === next.id);
    expect(await list().getByRole('listitem').count()).toBe(3);
    expect(await text(item(next.id).locator('dl'))).toContain('TCP to ports 80, 443; most drops by the port and protocol filter.');
    expect(await s.page.evaluate('window.__sameDocument === true')).toBe(true);

    expect(await checkA11y(s.page, 'tunnel (attacks)')).toEqual([]);
    expect(await fitsWidth(s.page, 375)).toBe(true);
    await screenshot(s.page, 'tunnel-attacks');
    expect(s.problems.problems()).toEqual([]);
  });

  it('max_flows out of range is refused at its field and nothing is sent; in range, both settings are saved, and an empty threshold is automatic', async () => {
    const form = s.page.locator('form.tunnel-settings');
    const limits = form.getByRole('group', { name: 'Attack detection and connections' });
    const maxFlows = limits.getByLabel('Connection limit');
    const alertPps = limits.getByLabel('Attack alert threshold (packets per second)');
    expect(await maxFlows.inputValue()).toBe('65536');
    expect(await alertPps.inputValue()).toBe('');
    expect(await text(limits)).toContain('Leave it empty for automatic');

    const saves: string[] = [];
    s.page.on('request', (r) => {
      if (r.url() === `${w.url}/graphql` && (r.postData() ?? '').includes('UpdateTunnel')) saves.push(r.postData()!);
    });
    await maxFlows.fill('999');
    await form.getByRole('button', { name: 'Save settings' }).click();
    const error = limits.getByRole('alert');
    await error.waitFor();
    expect(await text(error)).toBe('Enter a whole number from 1000 to 1000000.');
    expect(await maxFlows.getAttribute('aria-invalid')).toBe('true');
    expect(saves).toEqual([]);

    await maxFlows.fill('2000');
    expect(await limits.getByRole('alert').count()).toBe(0);
    await alertPps.fill('750');
    await form.getByRole('button', { name: 'Save settings' }).click();
    const outcome = s.page.getByTestId('save-outcome');
    await outcome.waitFor();
    // A pending tunnel is on no edge yet: stored, and its next provision carries it.
    expect(await outcome.getAttribute('data-outcome')).toBe('stored');
    expect(saves).toHaveLength(1);
    const read = await graphql('query ($id: ID!) { tunnel(id: $id) { protection { maxFlows alertPps } } }', { id: tunnelId });
    expect(read).toEqual({ data: { tunnel: { protection: { maxFlows: 2000, alertPps: 750 } } } });
    const rest = await w.api('GET', `/api/dedicated/${tunnelId}`, { token: w.owner.key });
    expect(rest.body.tunnel.protection).toMatchObject({ max_flows: 2000, alert_pps: 750 });

    // Emptied, the threshold is automatic again (null); the connection limit keeps its value.
    await alertPps.fill('');
    await form.getByRole('button', { name: 'Save settings' }).click();
    await until('the automatic threshold saved', async () => ((await w.api('GET', `/api/dedicated/${tunnelId}`, { token: w.owner.key })).body.tunnel.protection.alert_pps === null ? true : null));
    expect((await graphql('query ($id: ID!) { tunnel(id: $id) { protection { maxFlows alertPps } } }', { id: tunnelId })).data).toEqual({ tunnel: { protection: { maxFlows: 2000, alertPps: null } } });
    expect(await alertPps.inputValue()).toBe('');
    expect(await maxFlows.inputValue()).toBe('2000');
    expect(s.problems.problems()).toEqual([]);
  });
});
