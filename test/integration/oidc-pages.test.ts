// The login and consent pages (server/oidc/interactions.ts, pages.ts): accessible self-contained
// HTML, CSRF defences, clear error messages, and brute-force limits that slow an attacker without
// locking the real user out from their own address. Client addresses come from X-Forwarded-For
// (the gateway runs with TRUST_PROXY=1 here), so one test process can act as several addresses.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { authorizeUrl, follow, formAction, get, hidden, Jar, newClient, newUser, pkcePair, post, type Client } from '../helpers/oidc-login.ts';

let gw: RunningGateway;
let client: Client;
const savedProxy = process.env.TRUST_PROXY;

beforeAll(async () => {
  process.env.TRUST_PROXY = '1';
  // The issuer's rate limits run on a stopped clock (nothing refills while a test runs), so each limit's
  // answer is exact whatever the host's speed.
  const stopped = Date.now();
  gw = await startGateway({ config: { trustProxy: 1 }, clock: () => stopped });
  client = await newClient(gw.testDb.db);
});
afterAll(async () => {
  if (savedProxy === undefined) delete process.env.TRUST_PROXY;
  else process.env.TRUST_PROXY = savedProxy;
  await gw?.close();
});

/** A fresh authorize in a fresh browser from `ip`: the login page, its form action and csrf value. */
async function loginPage(ip = '203.0.113.10', extra: Record<string, string> = {}) {
  const jar = new Jar();
  const { challenge } = pkcePair();
  const res = await fetch(authorizeUrl(gw.url, client, challenge, extra), { redirect: 'manual', headers: { 'x-forwarded-for': ip } });
  jar.store(res);
  const step = await follow(res, gw.url, jar);
  expect(step.page?.status).toBe(200);
  const html = step.page!.html;
  return { jar, html, headers: step.page!.headers, action: new URL(formAction(html), gw.url).href, csrf: hidden(html, 'csrf'), ip };
}

const submit = (p: { jar: Jar; action: string; ip: string }, form: Record<string, string>, headers: Record<string, string> = {}) =>
  post(p.action, p.jar, form, { 'x-forwarded-for': p.ip, origin: new URL(gw.url).origin, ...headers });

describe('login page', () => {
  it('is self-contained, labelled HTML with email, password and a csrf field', async () => {
    const p = await loginPage();
    expect(p.headers.get('content-type')).toMatch(/^text\/html/);
    expect(p.headers.get('content-security-policy')).toContain("default-src 'none'");
    expect(p.headers.get('x-frame-options')).toBe('DENY');
    expect(p.html).toMatch(/<label for="email">[^<]+<\/label>\s*<input id="email" name="email" type="email"/);
    expect(p.html).toMatch(/<label for="password">[^<]+<\/label>\s*<input id="password" name="password" type="password"/);
    expect(p.csrf).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // No external assets: no scripts, no links or sources to other origins.
    expect(p.html).not.toMatch(/<script|<link|src=|url\(|https?:\/\/(?!127\.0\.0\.1)/i);
    expect(p.html).toContain('Focused test app');
  });

  it('refuses a submission without the csrf token, or with another interaction\'s token', async () => {
    const u = await newUser(gw.testDb.db);
    const p = await loginPage();
    const noCsrf = await submit(p, { email: u.email, password: u.password });
    expect(noCsrf.status).toBe(403);
    expect(await noCsrf.text()).toMatch(/could not be verified/);
    const other = await loginPage();
    const wrong = await submit(p, { email: u.email, password: u.password, csrf: other.csrf });
    expect(wrong.status).toBe(403);
    // The genuine token still works afterwards.
    const ok = await submit(p, { email: u.email, password: u.password, csrf: p.csrf });
    expect(ok.status).toBe(303);
  });

  it('refuses a cross-site POST (another Origin) and a POST without the interaction cookie', async () => {
    const u = await newUser(gw.testDb.db);
    const p = await loginPage();
    const cross = await submit(p, { email: u.email, password: u.password, csrf: p.csrf }, { origin: 'https://evil.example' });
    expect(cross.status).toBe(403);
    // A sandboxed frame posts with Origin: null; refused too. (Hence the pages' Referrer-Policy is not
    // no-referrer, which would make browsers send Origin: null on our own form.)
    const opaque = await submit(p, { email: u.email, password: u.password, csrf: p.csrf }, { origin: 'null' });
    expect(opaque.status).toBe(403);
    expect(p.headers.get('referrer-policy')).toBe('same-origin');
    // A forged form from elsewhere arrives without the SameSite=Lax interaction cookie.
    const noCookie = await post(p.action, new Jar(), { email: u.email, password: u.password, csrf: p.csrf }, { 'x-forwarded-for': p.ip });
    expect(noCookie.status).toBe(400);
    expect(await noCookie.text()).toMatch(/expired/);
  });

  it('says clearly when the password is wrong or a field is missing, keeping the email', async () => {
    const u = await newUser(gw.testDb.db);
    const p = await loginPage('203.0.113.11');
    const wrong = await submit(p, { email: u.email, password: 'not the password', csrf: p.csrf });
    expect(wrong.status).toBe(401);
    const html = await wrong.text();
    expect(html).toContain('The email address or password is incorrect.');
    expect(html).toContain('role="alert"');
    expect(html).toContain(`value="${u.email}"`);
    const missing = await submit(p, { email: u.email, password: '', csrf: p.csrf });
    expect(missing.status).toBe(400);
    expect(await missing.text()).toContain('Enter your email address and your password.');
    // An unknown email gets the very same message (no account enumeration).
    const unknown = await submit(p, { email: 'nobody@example.test', password: 'whatever pw', csrf: p.csrf });
    expect(unknown.status).toBe(401);
    expect(await unknown.text()).toContain('The email address or password is incorrect.');
  });

  it('escapes what it echoes', async () => {
    const p = await loginPage('203.0.113.12');
    const res = await submit(p, { email: '"><script>alert(1)</script>', password: 'x', csrf: p.csrf });
    const html = await res.text();
    expect(html).not.toContain('<script>alert(1)</script>');
    expect(html).toContain('&quot;&gt;&lt;script&gt;');
  });

  it('an unknown or expired interaction gets a page saying so', async () => {
    const res = await get(`${gw.url}/interaction/doesnotexist123`, new Jar());
    expect(res.status).toBe(400);
    expect(await res.text()).toMatch(/Sign-in expired/);
  });
});

describe('brute-force limits', () => {
  it('per account and address: 429 with Retry-After, while the real user signs in from another address', async () => {
    const u = await newUser(gw.testDb.db);
    const attacker = await loginPage('198.51.100.66');
    const statuses: number[] = [];
    let limited: Response | null = null;
    for (let i = 0; i < 8; i++) {
      const r = await submit(attacker, { email: u.email, password: `guess ${i}`, csrf: attacker.csrf });
      statuses.push(r.status);
      if (r.status === 429) {
        limited = r;
        break;
      }
      await r.arrayBuffer();
    }
    expect(statuses.slice(0, 5)).toEqual([401, 401, 401, 401, 401]);
    expect(limited?.status).toBe(429);
    expect(Number(limited!.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await limited!.text()).toMatch(/Too many failed sign-in attempts\. Try again in \d+ seconds\./);
    // Even the right password is refused from the attacker's address while limited...
    const blocked = await submit(attacker, { email: u.email, password: u.password, csrf: attacker.csrf });
    expect(blocked.status).toBe(429);
    // ...but the real user, from their own address, is not locked out.
    const real = await loginPage('192.0.2.44');
    const ok = await submit(real, { email: u.email, password: u.password, csrf: real.csrf });
    expect(ok.status).toBe(303);
  });

  it('per address: spraying many accounts from one address is limited too, other addresses are not', async () => {
    const sprayer = await loginPage('198.51.100.77');
    let limitedAt = -1;
    // 30 failures are allowed at once, then one per 10 s, and the clock stands still: the 31st is refused.
    for (let i = 0; i < 40; i++) {
      const r = await submit(sprayer, { email: `victim-${i}@example.test`, password: 'Summer2026!', csrf: sprayer.csrf });
      await r.arrayBuffer();
      if (r.status === 429) {
        expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
        limitedAt = i;
        break;
      }
      expect(r.status).toBe(401);
    }
    expect(limitedAt).toBe(30);
    const u = await newUser(gw.testDb.db);
    const elsewhere = await loginPage('192.0.2.45');
    expect((await submit(elsewhere, { email: u.email, password: u.password, csrf: elsewhere.csrf })).status).toBe(303);
  }, 60_000);

  // Attempts are charged before the password check, so a burst of parallel posts
  // cannot all pass a limit that only the finished failures would have paid for.
  it('50 parallel wrong posts from one address: at most the allowed 5 reach the password check', async () => {
    const u = await newUser(gw.testDb.db);
    const attacker = await loginPage('198.51.100.88');
    const responses = await Promise.all(
      Array.from({ length: 50 }, (_, i) => submit(attacker, { email: u.email, password: `parallel guess ${i}`, csrf: attacker.csrf })),
    );
    const statuses = await Promise.all(responses.map(async (r) => (await r.arrayBuffer(), r.status)));
    const evaluated = statuses.filter((st) => st !== 429);
    // The (account, address) bucket: 5 at once, then one a minute, and the clock stands still.
    expect(evaluated.every((st) => st === 401)).toBe(true);
    expect(evaluated.length).toBe(5);
    expect(statuses.filter((st) => st === 429).length).toBe(50 - evaluated.length);
  }, 60_000);

  it('a success gives its charge back: failures then a success then more failures stay within the same limits', async () => {
    const u = await newUser(gw.testDb.db);
    const p = await loginPage('198.51.100.99');
    for (let i = 0; i < 4; i++) expect((await submit(p, { email: u.email, password: `wrong ${i}`, csrf: p.csrf }).then(async (r) => (await r.arrayBuffer(), r))).status).toBe(401);
    expect((await submit(p, { email: u.email, password: u.password, csrf: p.csrf })).status).toBe(303);
    // The success cleared the pair's failures: five more guesses are answered 401 before a 429.
    const again = await loginPage('198.51.100.99');
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await submit(again, { email: u.email, password: `wrong again ${i}`, csrf: again.csrf });
      await r.arrayBuffer();
      statuses.push(r.status);
    }
    expect(statuses).toEqual([401, 401, 401, 401, 401, 429]);
  });
});

describe('consent page', () => {
  async function toConsent(ip: string) {
    const u = await newUser(gw.testDb.db);
    const p = await loginPage(ip);
    const step = await follow(await submit(p, { email: u.email, password: u.password, csrf: p.csrf }), gw.url, p.jar);
    const html = step.page!.html;
    return { ...p, html, action: new URL(formAction(html), gw.url).href, csrf: hidden(html, 'csrf'), user: u };
  }

  it('lists what the client asks for and has Allow and Deny buttons', async () => {
    const c = await toConsent('203.0.113.20');
    expect(c.html).toContain('Focused test app');
    expect(c.html).toContain(c.user.email);
    expect(c.html).toMatch(/See your email address/);
    expect(c.html).toContain('name="decision" value="allow"');
    expect(c.html).toContain('name="decision" value="deny"');
  });

  it('refuses a consent without the csrf token', async () => {
    const c = await toConsent('203.0.113.21');
    const res = await submit(c, { decision: 'allow' });
    expect(res.status).toBe(403);
  });

  it('Deny sends the user back to the client with access_denied and the state', async () => {
    const c = await toConsent('203.0.113.22');
    const step = await follow(await submit(c, { decision: 'deny', csrf: c.csrf }), gw.url, c.jar);
    expect(step.location?.origin + step.location!.pathname).toBe(client.redirectUri);
    expect(step.location!.searchParams.get('error')).toBe('access_denied');
    expect(step.location!.searchParams.get('state')).toMatch(/^[0-9a-f]{16}$/);
    expect(step.location!.searchParams.get('code')).toBeNull();
  });

  it('Allow sends the user back with a code and the state', async () => {
    const c = await toConsent('203.0.113.23');
    const step = await follow(await submit(c, { decision: 'allow', csrf: c.csrf }), gw.url, c.jar);
    expect(step.location!.searchParams.get('code')).toMatch(/^[A-Za-z0-9_-]{20,}$/);
    expect(step.location!.searchParams.get('state')).toMatch(/^[0-9a-f]{16}$/);
  });
});
