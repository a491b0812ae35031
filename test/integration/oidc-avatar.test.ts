// The avatar (docs/CONTRACTS.md "REST shapes"): userinfo's `picture` for the profile scope is always an absolute URL.
// A user who set none gets a generated avatar the gateway serves under PUBLIC_URL: no credential
// needed, cacheable, an SVG, at a URL that names neither the user id nor the email.
import { expect, it } from 'vitest';
import { createUser } from '../../server/domain/accounts.ts';
import { issuerRig } from '../helpers/issuer-rig.ts';
import { exchange, signIn } from '../helpers/oidc-login.ts';

const rig = issuerRig();

async function userinfoFor(u: { email: string; password: string }) {
  const s = await signIn(rig.gw.url, rig.client, u);
  const t = await exchange(rig.gw.url, rig.client, s.code, s.verifier);
  expect(t.status).toBe(200);
  const res = await fetch(`${rig.gw.url}/oauth/userinfo`, { headers: { authorization: `Bearer ${t.body.access_token}` } });
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

/** The gateway's answer for a URL under PUBLIC_URL (the test gateway listens elsewhere than PUBLIC_URL says). */
const fetchPublic = (url: string, init?: RequestInit) => fetch(`${rig.gw.url}${new URL(url).pathname}`, init);

it('a user without a picture gets an absolute generated-avatar URL that serves an SVG without credentials', async () => {
  const email = `noface-${Date.now()}@example.test`;
  const password = 'a long enough password';
  const u = await createUser(rig.gw.testDb.db, { email, name: 'Ada Lovelace', password });
  const info = await userinfoFor({ email, password });

  expect(typeof info.picture).toBe('string');
  const picture = new URL(info.picture as string);
  expect(picture.href).toBe(info.picture);
  expect(['http:', 'https:']).toContain(picture.protocol);
  expect(picture.href.startsWith(`${rig.gw.services.config.publicUrl}/avatars/`)).toBe(true);
  // Opaque: neither the user id nor the email can be read from (or used to build) the URL.
  expect(picture.href).not.toContain(u.user_id);
  expect(picture.href).not.toContain(u.user_id.replace(/-/g, ''));
  expect(picture.href.toLowerCase()).not.toContain(encodeURIComponent(email).toLowerCase());
  expect(picture.href).not.toContain('noface');

  const img = await fetchPublic(picture.href);
  expect(img.status).toBe(200);
  expect(img.headers.get('content-type')).toMatch(/^image\/svg\+xml\b/);
  expect(img.headers.get('cache-control')).toMatch(/\bpublic\b/);
  const svg = await img.text();
  expect(svg).toMatch(/^<svg [^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  expect(svg).toContain('>AL</text>');
  expect(svg).not.toContain(email);
  // Stable: the same URL on the next sign-in.
  expect((await userinfoFor({ email, password })).picture).toBe(info.picture);
  // HEAD works; an unknown key is a 404.
  expect((await fetchPublic(picture.href, { method: 'HEAD' })).status).toBe(200);
  const unknown = await fetchPublic(`${rig.gw.services.config.publicUrl}/avatars/${'0'.repeat(32)}.svg`);
  expect(unknown.status).toBe(404);
  expect(((await unknown.json()) as { error: string }).error).toBe('not_found');
});

it("a user's own picture is kept", async () => {
  const email = `face-${Date.now()}@example.test`;
  const password = 'a long enough password';
  await createUser(rig.gw.testDb.db, { email, name: 'Grace Hopper', password, picture: 'https://pictures.example.test/grace.png' });
  expect((await userinfoFor({ email, password })).picture).toBe('https://pictures.example.test/grace.png');
});

it('the profile scope is what releases it: without profile there is no picture', async () => {
  const email = `scoped-${Date.now()}@example.test`;
  const password = 'a long enough password';
  await createUser(rig.gw.testDb.db, { email, name: 'Scoped', password });
  const s = await signIn(rig.gw.url, rig.client, { email, password }, undefined, { scope: 'openid email' });
  const t = await exchange(rig.gw.url, rig.client, s.code, s.verifier);
  const info = (await (await fetch(`${rig.gw.url}/oauth/userinfo`, { headers: { authorization: `Bearer ${t.body.access_token}` } })).json()) as Record<string, unknown>;
  expect(info.email).toBe(email);
  expect(info).not.toHaveProperty('picture');
});
