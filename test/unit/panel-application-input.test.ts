// The register-application form's own checks (panel/src/pages/developers/apps/application-input.ts),
// the same rules the gateway applies to developer-portal clients.
import { describe, expect, it } from 'vitest';
import { allowedApiAccess, checkApplicationName, checkRedirectUris } from '../../panel/src/pages/developers/apps/application-input.ts';

describe('checkRedirectUris', () => {
  it('reads one URI a line, trimmed, blank lines skipped, kept exactly as typed', () => {
    const check = checkRedirectUris('  https://app.example.com/cb?x=1  \n\nhttp://127.0.0.1:8765/callback\nhttp://[::1]/cb\nhttp://localhost:3000/cb\n');
    expect(check).toEqual({
      uris: ['https://app.example.com/cb?x=1', 'http://127.0.0.1:8765/callback', 'http://[::1]/cb', 'http://localhost:3000/cb'],
      problems: [],
      none: false,
      tooMany: false,
    });
  });

  it('allows http only on the loopback addresses', () => {
    expect(checkRedirectUris('http://example.com/cb').problems).toEqual([{ line: 1, uri: 'http://example.com/cb', problem: 'https' }]);
    expect(checkRedirectUris('http://127.0.0.2/cb').problems[0]?.problem).toBe('https');
    expect(checkRedirectUris('http://localhost.example.com/cb').problems[0]?.problem).toBe('https');
  });

  it('names the first problem of each line, counting lines from 1 with blank ones included', () => {
    const text = ['app.example.com/cb', '', 'ftp://example.com/x', 'https://example.com/cb#frag', 'https://u:p@example.com/cb', 'https://example.com/a b', 'https://ok.example.com/', 'https://ok.example.com/', `https://example.com/${'a'.repeat(2048)}`].join('\n');
    expect(checkRedirectUris(text).problems.map((p) => [p.line, p.problem])).toEqual([
      [1, 'invalid'],
      [3, 'scheme'],
      [4, 'fragment'],
      [5, 'credentials'],
      [6, 'whitespace'],
      [8, 'duplicate'],
      [9, 'tooLong'],
    ]);
  });

  it('says when there is none, or more than 20', () => {
    expect(checkRedirectUris(' \n ').none).toBe(true);
    const many = Array.from({ length: 21 }, (_, i) => `https://example.com/${i}`).join('\n');
    expect(checkRedirectUris(many).tooMany).toBe(true);
    expect(checkRedirectUris(many.split('\n').slice(0, 20).join('\n')).tooMany).toBe(false);
  });
});

describe('allowedApiAccess', () => {
  it("offers nothing above the owner's role", () => {
    expect(allowedApiAccess('OWNER')).toEqual(['NONE', 'READ', 'WRITE']);
    expect(allowedApiAccess('VIEWER')).toEqual(['NONE', 'READ']);
    expect(allowedApiAccess(null)).toEqual(['NONE']);
  });
});

describe('checkApplicationName', () => {
  it('wants 1 to 200 characters without control characters', () => {
    expect(checkApplicationName('  Billing bot ')).toBeUndefined();
    expect(checkApplicationName('   ')).toBe('required');
    expect(checkApplicationName('x'.repeat(201))).toBe('tooLong');
    expect(checkApplicationName('a\u0007b')).toBe('control');
  });
});
