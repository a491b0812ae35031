// The shared logger (common/log.ts) masks credentials in every string it writes, by default, with rules
// the caller can replace. Before, the masking function existed but no log line went through it.
import { describe, expect, it } from 'vitest';
import { CREDENTIAL_REDACTIONS, createLogger, redact } from '../../common/log.ts';

const KEY = `svc_0123456789abcdef0123456789abcdef_${'A'.repeat(43)}`;

function capture(...args: [Parameters<typeof createLogger>[3]?]) {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger('debug', { service: 'test' }, (l) => lines.push(JSON.parse(l) as Record<string, unknown>), ...args);
  return { log, lines };
}

describe('logger redaction', () => {
  it('masks svc_ keys and bearer tokens in the message, in fields at any depth and in error texts', () => {
    const { log, lines } = capture();
    log.warn(`refused ${KEY}`, { header: `Bearer ${KEY}`, nested: { list: [`key=${KEY}`] }, err: new Error(`bad key ${KEY}`), n: 5n });
    const text = JSON.stringify(lines);
    expect(text).not.toContain('A'.repeat(43));
    expect(text).not.toContain('0123456789abcdef0123456789abcdef');
    expect(lines[0]!.msg).toBe('refused svc_012345…');
    expect(lines[0]!.header).toBe('Bearer …');
    expect((lines[0]!.err as { message: string }).message).toBe('bad key svc_012345…');
    expect(lines[0]!.n).toBe('5');
    expect(lines[0]!.service).toBe('test');
  });

  it('a child keeps its parent\'s rules', () => {
    const { log, lines } = capture();
    log.child({ request_id: 'r1' }).info('x', { authorization: `bearer ${KEY}` });
    expect(lines[0]).toMatchObject({ request_id: 'r1', authorization: 'bearer …' });
  });

  it('the rules are the caller\'s to choose: none, or its own', () => {
    const none = capture([]);
    none.log.info(KEY);
    expect(none.lines[0]!.msg).toBe(KEY);
    const own = capture([{ pattern: /whsec_\S+/g, replacement: 'whsec_…' }]);
    own.log.info(`secret whsec_abc and ${KEY}`);
    expect(own.lines[0]!.msg).toBe(`secret whsec_… and ${KEY}`);
  });

  it('redact() applies the same rules to free text', () => {
    expect(redact(`Authorization: Bearer ${KEY}`)).toBe('Authorization: Bearer …');
    expect(redact(KEY, CREDENTIAL_REDACTIONS)).toBe('svc_012345…');
    expect(redact('secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw+/=; next')).toBe('secret whsec_…; next');
    expect(redact('nothing secret here')).toBe('nothing secret here');
    expect(redact('connect ECONNREFUSED postgres://tunnelgate:hunter2@db:5432/tg')).toBe('connect ECONNREFUSED postgres://tunnelgate:…@db:5432/tg');
    expect(redact('see https://example.com/a:b@c and http://host:8080/x')).toBe('see https://example.com/a:b@c and http://host:8080/x');
  });
});
