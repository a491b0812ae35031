// The customer panel's files at `/` (server/http/panel.ts, docs/CONTRACTS.md "Starting it") against a
// real gateway on real PostgreSQL, serving a fixture build output made here in a temporary directory with
// the build's layout: index.html, content-hashed assets (some with precompressed .br/.gz siblings written by
// node:zlib), a second HTML entry point, and a secret file beside the directory that no request may reach.
import http from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { brotliCompressSync, brotliDecompressSync, gunzipSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { createLogger } from '../../common/log.ts';
import { VERSION } from '../../server/version.ts';

const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';
const INDEX = '<!DOCTYPE html><html><head><script type="module" src="/assets/app-3f9a1c.js"></script><link rel="stylesheet" href="/assets/style-77b0e2.css"></head><body><div id="app"></div></body></html>';
const APP_JS = `export const app = ${JSON.stringify('x'.repeat(4000))};\n`;
const STYLE = 'body{margin:0}\n';
const SECRET = 'the secret beside the build output';

/** One request with the path sent exactly as written (fetch would normalise `..` and `%2e%2e` away). */
function raw(base: string, path: string, headers: Record<string, string> = {}, method = 'GET'): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method, path, headers: { connection: 'close', ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

let tmp: string;
let dist: string;
let gw: RunningGateway;

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'panel-serving-'));
  dist = join(tmp, 'dist');
  mkdirSync(join(dist, 'assets'), { recursive: true });
  mkdirSync(join(dist, 'developers'), { recursive: true });
  writeFileSync(join(dist, 'index.html'), INDEX);
  writeFileSync(join(dist, 'developers', 'index.html'), '<!DOCTYPE html><title>developers</title>');
  writeFileSync(join(dist, 'assets', 'app-3f9a1c.js'), APP_JS);
  writeFileSync(join(dist, 'assets', 'app-3f9a1c.js.br'), brotliCompressSync(APP_JS));
  writeFileSync(join(dist, 'assets', 'app-3f9a1c.js.gz'), gzipSync(APP_JS));
  writeFileSync(join(dist, 'assets', 'style-77b0e2.css'), STYLE);
  writeFileSync(join(dist, 'assets', 'logo-0c4d2e.svg'), '<svg xmlns="http://www.w3.org/2000/svg"/>');
  writeFileSync(join(dist, '.hidden'), 'a dotfile');
  writeFileSync(join(tmp, 'secret.txt'), SECRET);
  // A link inside the directory to a file outside it: followed, it would serve the secret.
  symlinkSync(join(tmp, 'secret.txt'), join(dist, 'assets', 'leak-000000.txt'));
  gw = await startGateway({ config: { panelDir: dist } });
});

afterAll(async () => {
  await gw?.close();
  rmSync(tmp, { recursive: true, force: true });
});

describe('the built panel', () => {
  it('index.html at / with no-cache, an ETag, and the security headers (a CSP without inline script)', async () => {
    const res = await raw(gw.url, '/', { accept: BROWSER });
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe(INDEX);
    expect(res.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(res.headers['cache-control']).toBe('no-cache');
    expect(res.headers.etag).toMatch(/^"[\w-]+"$/);
    const csp = String(res.headers['content-security-policy']);
    const directives = new Map(csp.split(/;\s*/).map((d) => [d.split(' ')[0]!, d.split(' ').slice(1)]));
    expect(directives.get('script-src')).toEqual(["'self'"]);
    expect(directives.get('style-src')).toEqual(["'self'"]);
    expect(directives.get('default-src')).toEqual(["'self'"]);
    expect(directives.get('frame-ancestors')).toEqual(["'none'"]);
    expect(directives.get('base-uri')).toEqual(["'none'"]);
    expect(directives.get('object-src')).toEqual(["'none'"]);
    // The GraphQL WebSocket of PUBLIC_URL (the test gateway's default http://localhost:4000) is named, and
    // the issuer, another origin here (ISSUER_URL is the gateway's own address), for the token calls and sign-out.
    expect(directives.get('connect-src')).toEqual(["'self'", 'ws://localhost:4000', gw.url]);
    expect(directives.get('form-action')).toEqual(["'self'", gw.url]);
    expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|\*/);
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(res.headers['x-frame-options']).toBe('DENY');
    expect(res.headers['referrer-policy']).toBe('strict-origin');
  });

  it('GET /config.json tells the panel its own address, its issuer, client, scope and sign-out endpoint, never cached', async () => {
    const res = await call(gw.url, 'GET', '/config.json');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.body).toEqual({ publicUrl: gw.services.config.publicUrl, issuer: gw.url, clientId: 'panel', scope: 'profile email', signOutUrl: `${gw.url}/oauth/logout` });
  });

  it('304 for a matching If-None-Match, the same validators again', async () => {
    const first = await raw(gw.url, '/', { accept: BROWSER });
    const again = await raw(gw.url, '/', { accept: BROWSER, 'if-none-match': first.headers.etag! });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
    expect(again.headers.etag).toBe(first.headers.etag);
    expect(again.headers['cache-control']).toBe('no-cache');
    const other = await raw(gw.url, '/', { accept: BROWSER, 'if-none-match': '"something-else"' });
    expect(other.status).toBe(200);
  });

  it('hashed assets: a year, immutable, typed, ETag and 304', async () => {
    for (const [path, type, body] of [
      ['/assets/style-77b0e2.css', 'text/css; charset=utf-8', STYLE],
      ['/assets/logo-0c4d2e.svg', 'image/svg+xml', '<svg xmlns="http://www.w3.org/2000/svg"/>'],
    ] as const) {
      const res = await raw(gw.url, path);
      expect(res.status, path).toBe(200);
      expect(res.body.toString()).toBe(body);
      expect(res.headers['content-type']).toBe(type);
      expect(res.headers['cache-control']).toBe('public, max-age=31536000, immutable');
      expect(res.headers['x-content-type-options']).toBe('nosniff');
      const cached = await raw(gw.url, path, { 'if-none-match': res.headers.etag! });
      expect(cached.status, path).toBe(304);
    }
  });

  it('precompressed siblings by Accept-Encoding (br first, then gzip, q=0 honoured), with Vary and one ETag per encoding', async () => {
    const path = '/assets/app-3f9a1c.js';
    const br = await raw(gw.url, path, { 'accept-encoding': 'gzip, deflate, br' });
    expect(br.headers['content-encoding']).toBe('br');
    expect(brotliDecompressSync(br.body).toString()).toBe(APP_JS);
    const gz = await raw(gw.url, path, { 'accept-encoding': 'gzip' });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(gz.body).toString()).toBe(APP_JS);
    const notBr = await raw(gw.url, path, { 'accept-encoding': 'br;q=0, gzip' });
    expect(notBr.headers['content-encoding']).toBe('gzip');
    const preferGzip = await raw(gw.url, path, { 'accept-encoding': 'br;q=0.5, gzip' });
    expect(preferGzip.headers['content-encoding']).toBe('gzip');
    const star = await raw(gw.url, path, { 'accept-encoding': '*' });
    expect(star.headers['content-encoding']).toBe('br');
    const none = await raw(gw.url, path, { 'accept-encoding': 'br;q=0, gzip;q=0' });
    expect(none.headers['content-encoding']).toBeUndefined();
    const plain = await raw(gw.url, path, { 'accept-encoding': 'identity' });
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.body.toString()).toBe(APP_JS);
    for (const res of [br, gz, plain]) {
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toMatch(/^(application|text)\/javascript/);
      expect(res.headers.vary).toMatch(/accept-encoding/i);
      expect(res.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    }
    expect(new Set([br.headers.etag, gz.headers.etag, plain.headers.etag]).size).toBe(3);
    // A file without siblings still says Vary (a later build may add them).
    expect((await raw(gw.url, '/assets/style-77b0e2.css', { 'accept-encoding': 'br' })).headers.vary).toMatch(/accept-encoding/i);
    expect((await raw(gw.url, '/assets/style-77b0e2.css', { 'accept-encoding': 'br' })).headers['content-encoding']).toBeUndefined();
  });

  it('HEAD answers the headers of GET without a body', async () => {
    const res = await raw(gw.url, '/assets/style-77b0e2.css', {}, 'HEAD');
    expect(res.status).toBe(200);
    expect(res.body.length).toBe(0);
    expect(res.headers['content-length']).toBe(String(Buffer.byteLength(STYLE)));
    expect(res.headers['cache-control']).toBe('public, max-age=31536000, immutable');
  });

  it('deep links a browser opens get index.html (the app routes them), without caching', async () => {
    for (const path of ['/tunnels/abc', '/callback?code=x&state=y', '/developers/graphql', '/tunnels/a%20b/']) {
      const res = await raw(gw.url, path, { accept: BROWSER });
      expect(res.status, path).toBe(200);
      expect(res.body.toString(), path).toBe(INDEX);
      expect(res.headers['cache-control']).toBe('no-cache');
      expect(res.headers['content-security-policy']).toContain("script-src 'self'");
      // A script asking for the same path gets the JSON 404: caches must tell the two apart.
      expect(String(res.headers.vary).toLowerCase().split(/,\s*/)).toContain('accept');
    }
    // Another entry point is served as itself (a directory's index.html).
    const dev = await raw(gw.url, '/developers/', { accept: BROWSER });
    expect(dev.body.toString()).toContain('<title>developers</title>');
    expect(dev.headers['cache-control']).toBe('no-cache');
  });

  it('no fallback for scripts (no text/html in Accept): the JSON 404', async () => {
    for (const accept of ['*/*', 'application/json', '']) {
      const res = await call(gw.url, 'GET', '/tunnels/abc', { headers: accept ? { accept } : {} });
      expect(res.status, accept).toBe(404);
      expect(res.body.error).toBe('not_found');
    }
  });

  it('a missing asset is a real 404, never the app', async () => {
    for (const path of ['/assets/missing-000000.js', '/assets/', '/assets']) {
      const res = await call(gw.url, 'GET', path, { headers: { accept: BROWSER } });
      expect(res.status, path).toBe(404);
      expect(res.body.error, path).toBe('not_found');
      expect(res.text).not.toContain('<div id="app">');
    }
  });

  it('the API, GraphQL, issuer and operations paths keep their own answers and 404s, however a browser asks', async () => {
    const json404 = ['/api/whatever', '/api', '/graphql/whatever', '/oauth/whatever', '/.well-known/whatever', '/avatars/nobody.svg', '/healthz/x', '/metrics/x', '/readyz/x'];
    for (const path of json404) {
      const res = await call(gw.url, 'GET', path, { headers: { accept: BROWSER } });
      expect(res.status, path).toBe(404);
      expect(res.body.error, path).toBe('not_found');
    }
    // The sign-in pages answer an unknown interaction themselves (their own error page).
    const interaction = await call(gw.url, 'GET', '/interaction/whatever', { headers: { accept: BROWSER } });
    expect(interaction.status).toBe(400);
    expect(interaction.text).not.toContain('<div id="app">');
    expect((await call(gw.url, 'GET', '/healthz', { headers: { accept: BROWSER } })).body).toEqual({ status: 'ok', version: VERSION });
    const discovery = await call(gw.url, 'GET', '/.well-known/openid-configuration', { headers: { accept: BROWSER } });
    expect(discovery.body.issuer).toBe(gw.url);
    expect((await call(gw.url, 'GET', '/api/dedicated/pricing', { headers: { accept: BROWSER } })).status).toBe(200);
  });

  it('other methods on panel paths are not the app', async () => {
    const res = await call(gw.url, 'POST', '/tunnels/abc', { headers: { accept: BROWSER }, body: {} });
    expect(res.status).toBe(404);
    expect(res.body.error).toBe('not_found');
  });

  it('no path reaches outside the directory or into hidden files: encoded dots, NUL, backslashes, links', async () => {
    const attempts = [
      '/../secret.txt',
      '/assets/../../secret.txt',
      '/%2e%2e/secret.txt',
      '/%2E%2E/secret.txt',
      '/assets/%2e%2e/%2e%2e/secret.txt',
      '/assets%2f..%2f..%2fsecret.txt',
      '/..%2fsecret.txt',
      '/%2e%2e%2fsecret.txt',
      '/assets/..%5c..%5csecret.txt',
      '/assets\\..\\..\\secret.txt',
      '/index.html%00.js',
      '/%00',
      '/assets/app-3f9a1c.js%00',
      '/assets/leak-000000.txt',
      '/.hidden',
      '/%2ehidden',
      '/assets/%c0%ae%c0%ae/secret.txt',
      '/%',
      `/${'%2e%2e/'.repeat(20)}etc/passwd`,
    ];
    for (const path of attempts) {
      for (const accept of [BROWSER, '*/*']) {
        const res = await raw(gw.url, path, { accept });
        const text = res.body.toString();
        expect(text, path).not.toContain(SECRET);
        expect(text, path).not.toContain('a dotfile');
        expect(text, path).not.toContain('root:');
        // Never the app either: an attempt is the plain 404 (or Node's/Koa's 400 for what does not parse).
        expect(text, path).not.toContain('<div id="app">');
        expect([400, 404], `${path} ${accept}`).toContain(res.status);
      }
    }
  });

  it('a browser opening /graphql is sent to the explorer page; queries and POSTs are unchanged', async () => {
    const browser = await raw(gw.url, '/graphql', { accept: BROWSER });
    expect(browser.status).toBe(302);
    expect(browser.headers.location).toBe('/developers/graphql');
    expect(String(browser.headers.vary).toLowerCase().split(/,\s*/)).toContain('accept');
    // With a query it runs, as before.
    const query = await call(gw.url, 'GET', `/graphql?query=${encodeURIComponent('{ __typename }')}`, { headers: { accept: BROWSER, 'apollo-require-preflight': 'true' } });
    expect(query.status).toBe(200);
    expect(query.body.data).toEqual({ __typename: 'Query' });
    // A script without a query still gets GraphQL's own refusal, not a redirect.
    const script = await call(gw.url, 'GET', '/graphql', { headers: { accept: 'application/json' } });
    expect(script.status).toBe(400);
    const post = await call(gw.url, 'POST', '/graphql', { headers: { accept: BROWSER }, body: { query: '{ __typename }' } });
    expect(post.status).toBe(200);
    expect(post.body.data).toEqual({ __typename: 'Query' });
  });

  it('a rebuild while the gateway runs is served at the next request (new hashed file, new index)', async () => {
    const next = INDEX.replace('app-3f9a1c', 'app-9d8e7f');
    writeFileSync(join(dist, 'assets', 'app-9d8e7f.js'), 'export {};\n');
    writeFileSync(join(dist, 'index.html'), next);
    try {
      const index = await raw(gw.url, '/', { accept: BROWSER });
      expect(index.body.toString()).toBe(next);
      expect((await raw(gw.url, '/assets/app-9d8e7f.js')).status).toBe(200);
    } finally {
      writeFileSync(join(dist, 'index.html'), INDEX);
    }
  });
});

describe('the panel not built', () => {
  let bare: RunningGateway;
  const lines: Array<Record<string, unknown>> = [];
  beforeAll(async () => {
    const log = createLogger('warn', {}, (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    bare = await startGateway({ testDb: gw.testDb, log, config: { panelDir: join(tmp, 'never-built') } });
  });
  afterAll(async () => bare?.close());

  it('/ answers a plain page (no script) saying how to build it, and the start logged one warning', async () => {
    for (const accept of [BROWSER, '*/*']) {
      const res = await raw(bare.url, '/', { accept });
      expect(res.status).toBe(503);
      expect(res.headers['content-type']).toBe('text/html; charset=utf-8');
      expect(res.headers['cache-control']).toBe('no-store');
      const text = res.body.toString();
      expect(text).toContain('npm run build:panel');
      expect(text).not.toMatch(/<script|<style|style=/i);
      expect(res.headers['content-security-policy']).toMatch(/^default-src 'none'/);
      expect(res.headers['x-frame-options']).toBe('DENY');
    }
    // Deep links too; assets and the API stay 404s.
    expect((await raw(bare.url, '/tunnels/abc', { accept: BROWSER })).body.toString()).toContain('npm run build:panel');
    expect((await call(bare.url, 'GET', '/assets/app-3f9a1c.js', { headers: { accept: BROWSER } })).status).toBe(404);
    expect((await call(bare.url, 'GET', '/api/whatever', { headers: { accept: BROWSER } })).body.error).toBe('not_found');
    const warnings = lines.filter((l) => l.level === 'warn' && String(l.msg).startsWith('panel not built'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.dir).toBe(join(tmp, 'never-built'));
  });

  it('/graphql in a browser still redirects (the page there says the panel is not built)', async () => {
    const res = await raw(bare.url, '/graphql', { accept: BROWSER });
    expect(res.status).toBe(302);
    expect(res.headers.location).toBe('/developers/graphql');
  });
});
