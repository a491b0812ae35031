// Property-based fuzz of the panel's static files at `/` (server/http/panel.ts): request paths made of
// traversal pieces (`..`, `.`, their percent-encodings and overlong UTF-8 forms, encoded slashes and
// backslashes, NUL), reserved prefixes, file names of the fixture build and odd strings, sent byte for byte
// (fetch would normalise them), with any Accept and Accept-Encoding, by GET and HEAD, against a real
// gateway serving a fixture build beside a secret file. Properties: never a 5xx; never a byte of the
// secret or of a dotfile; a 200 is exactly one of the build's files (decompressed when encoded); the app
// (index.html) never answers under /assets nor under a path another part of the gateway owns; every 200
// carries the panel's CSP; the gateway's metrics count no 5xx at the end. Seed and run counts: test/fuzz/support.ts (FUZZ_SEED, FUZZ_RUNS).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import http from 'node:http';
import { brotliCompressSync, brotliDecompressSync, gunzipSync, gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { closeFuzzedGateway, fuzz, fuzzTimeout, oddString, pct } from './support.ts';

const INDEX = '<!DOCTYPE html><html><head><script type="module" src="/assets/app-3f9a1c.js"></script></head><body><div id="app"></div></body></html>';
const FILES: Record<string, string> = {
  'index.html': INDEX,
  'assets/app-3f9a1c.js': 'export const app = 1;\n',
  'assets/style-77b0e2.css': 'body{margin:0}\n',
  'developers/index.html': '<!DOCTYPE html><title>developers</title>',
  'robots.txt': 'User-agent: *\n',
};
const SECRET = 'SECRET-beside-the-build-output';
const DOTFILE = 'DOTFILE-inside-the-build-output';
/** What Koa's ctx.path may start with for another part of the gateway to own it (server/http/app.ts). */
const RESERVED = ['/api', '/graphql', '/metrics', '/healthz', '/readyz', '/avatars', '/oauth', '/interaction', '/.well-known'];

let tmp: string;
let gw: RunningGateway;

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'panel-fuzz-'));
  const dist = join(tmp, 'dist');
  for (const [rel, text] of Object.entries(FILES)) {
    mkdirSync(join(dist, rel, '..'), { recursive: true });
    writeFileSync(join(dist, rel), text);
  }
  writeFileSync(join(dist, 'assets/app-3f9a1c.js.br'), brotliCompressSync(FILES['assets/app-3f9a1c.js']!));
  writeFileSync(join(dist, 'assets/app-3f9a1c.js.gz'), gzipSync(FILES['assets/app-3f9a1c.js']!));
  writeFileSync(join(dist, '.env'), DOTFILE);
  writeFileSync(join(tmp, 'secret.txt'), SECRET);
  gw = await startGateway({ config: { panelDir: dist } });
});

afterAll(async () => {
  await closeFuzzedGateway(gw, 'panel');
  rmSync(tmp, { recursive: true, force: true });
});

/** Request-target bytes Node's parser lets through: visible ASCII (no space, no `#`, which a client never sends). */
const visible = fc.string({ unit: fc.integer({ min: 0x21, max: 0x7e }).filter((c) => c !== 0x23).map((c) => String.fromCharCode(c)), maxLength: 12 });

/** Header values node:http sends (visible latin-1, spaces; no controls or DEL). */
const headerText = fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).filter((c) => c < 0x7f || c > 0x9f).map((c) => String.fromCharCode(c)), maxLength: 60 });

const segment: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.constantFrom(
      '..', '.', '', '%2e%2e', '%2E%2e', '.%2e', '%2e', '%252e%252e', '%c0%ae%c0%ae', '%e0%80%ae',
      '..%2f..', '..%5c..', '%2f', '%5c', '\\', '..\\..', '%00', 'index.html%00', '%',
      '.env', '%2eenv', 'secret.txt', 'dist', 'assets', 'developers', 'index.html', 'robots.txt',
      'app-3f9a1c.js', 'app-3f9a1c.js.br', 'style-77b0e2.css', 'api', 'graphql', 'oauth', 'interaction',
      '.well-known', 'avatars', 'metrics', 'healthz', 'readyz', 'tunnels', 'callback',
    ),
  },
  { weight: 2, arbitrary: visible },
  { weight: 1, arbitrary: oddString.map(pct) },
);

const request = fc.record({
  method: fc.constantFrom('GET', 'HEAD'),
  segments: fc.array(segment, { minLength: 0, maxLength: 6 }),
  trailingSlash: fc.boolean(),
  query: fc.option(fc.constantFrom('?x=1', '?query=%7B__typename%7D', '?/../secret.txt', '?'), { nil: undefined }),
  accept: fc.oneof(fc.constantFrom('text/html,*/*;q=0.8', '*/*', 'application/json', 'text/html;q=0', ''), headerText),
  encoding: fc.oneof(fc.constantFrom('br', 'gzip, deflate, br', 'br;q=0, gzip', 'br;q=x', 'gzip;q=0.001', '*', '*;q=0', 'identity', ''), headerText),
});

/** One request with the target sent byte for byte; the body as bytes, decompressed when the answer is encoded. */
function send(method: string, target: string, headers: Record<string, string>): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const { hostname, port } = new URL(gw.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, method, path: target, headers: { connection: 'close', ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const raw = Buffer.concat(chunks);
        const enc = res.headers['content-encoding'];
        const bytes = enc === 'br' ? brotliDecompressSync(raw) : enc === 'gzip' ? gunzipSync(raw) : raw;
        resolve({ status: res.statusCode!, headers: res.headers, body: bytes.toString('utf8') });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('panel paths', () => {
  it(
    'never a 5xx, never outside the build, the app only where it belongs',
    async () => {
      await fuzz('panel paths', request, 400, async (r) => {
        const pathname = `/${r.segments.join('/')}${r.trailingSlash && r.segments.length > 0 ? '/' : ''}`;
        const target = pathname + (r.query ?? '');
        const headers: Record<string, string> = {};
        if (r.accept) headers.accept = r.accept;
        if (r.encoding) headers['accept-encoding'] = r.encoding;
        const res = await send(r.method, target, headers);
        const what = `${r.method} ${target} (Accept ${JSON.stringify(r.accept)}, Accept-Encoding ${JSON.stringify(r.encoding)})`;
        expect(res.status, `${what}: ${res.body.slice(0, 200)}`).toBeLessThan(500);
        // Node's own parser refuses some targets before any gateway code runs: a bare 400 without X-Request-Id.
        if (res.status === 400 && res.headers['x-request-id'] === undefined) return 'node 400';
        const body = res.body;
        expect(body, what).not.toContain(SECRET);
        expect(body, what).not.toContain(DOTFILE);
        const reserved = RESERVED.some((p) => pathname === p || pathname.startsWith(`${p}/`));
        let decodedPath: string | null = null;
        try {
          decodedPath = decodeURIComponent(pathname);
        } catch {
          decodedPath = null;
        }
        const underAssets = decodedPath !== null && (decodedPath === '/assets' || decodedPath.startsWith('/assets/'));
        if (res.status === 200 && r.method === 'GET' && !reserved) {
          expect(res.headers['content-security-policy'], what).toMatch(/script-src 'self'/);
          const encoding = res.headers['content-encoding'];
          expect(Object.values(FILES), what).toContain(body);
          if (body === INDEX) expect(underAssets, `${what}: the app answered under /assets`).toBe(false);
          return encoding ? `200 ${encoding}` : body === INDEX ? '200 app' : '200 file';
        }
        if (reserved) expect(body, `${what}: the app answered a reserved path`).not.toContain('<div id="app">');
        if (underAssets) expect(body, what).not.toContain('<div id="app">');
        return `${res.status}${reserved ? ' reserved' : ''}`;
      });
    },
    fuzzTimeout(400),
  );
});
