// The rules both programs share (common/): each written once, and every former copy now agrees with it.
// Before, the agent's dataplane had its own tunnel validator (inner /8 to /31, any non-empty id)
// and the netlink encoder its own IPv4 parser (leading zeros accepted): a tunnel the wire contract refused
// could still reach the kernel from the agent's own restore path, and the other way round.
// The properties run with the fuzz pass's fixed seed (FUZZ_SEED replays another).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatIPv4, parseIPv4, parseIPv4Prefix } from '../../common/ipv4.ts';
import { isCanonicalUuid, isInterfaceName, isUuid } from '../../common/names.ts';
import { checkTunnel, MTU_MAX, MTU_MIN } from '../../common/tunnel-spec.ts';
import { InvalidTunnel, validateRef, validateSpec } from '../../agent/dataplane/validate.ts';
import { ipv4ToBytes } from '../../agent/netlink/attrs.ts';
import { parseIPv4 as gatewayParseIPv4 } from '../../server/domain/ip.ts';
import { renderOriginScripts } from '../../server/domain/origin-scripts.ts';
import { SEED } from '../fuzz/support.ts';
import { tunnelSpec } from '../helpers/tunnel-spec.ts';
import type { TunnelSpec } from '../../common/tunnel-spec.ts';

const PREFIX = 'tg-';

/** What the dataplane's own check says: undefined when it takes the spec, else its reason. */
function dataplaneSays(t: TunnelSpec): string | undefined {
  try {
    validateSpec(t, PREFIX);
    return undefined;
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidTunnel);
    return (e as Error).message;
  }
}

describe('IPv4: one strict dotted-quad parser', () => {
  it('reads dotted quads and refuses everything else, leading zeros included', () => {
    expect(parseIPv4('0.0.0.0')).toBe(0);
    expect(parseIPv4('255.255.255.255')).toBe(0xffffffff);
    expect(parseIPv4('198.51.100.7')).toBe(((198 * 256 + 51) * 256 + 100) * 256 + 7);
    for (const bad of ['010.0.0.1', '1.2.3.04', '00.1.2.3', '256.1.1.1', '1.2.3', '1.2.3.4.5', '1..2.3', '.1.2.3', '1.2.3.', 'a.b.c.d', '1.2.3.4 ', ' 1.2.3.4', '+1.2.3.4', '1.2.3.0004', '', '1.2.3.4/32']) {
      expect(parseIPv4(bad), bad).toBeNull();
    }
    expect(parseIPv4(16843009)).toBeNull();
  });

  it('every copy that used to parse on its own now gives the same answer (gateway pools, netlink encoder, origin script)', () => {
    const octet = fc.oneof(fc.nat(300).map(String), fc.constantFrom('00', '01', '010', '0', '255', '256', '', 'x', ' 1'));
    const text = fc.oneof(fc.array(octet, { minLength: 3, maxLength: 5 }).map((o) => o.join('.')), fc.string({ maxLength: 16 }));
    fc.assert(
      fc.property(text, (s) => {
        const n = parseIPv4(s);
        expect(gatewayParseIPv4(s)).toBe(n);
        if (n === null) expect(() => ipv4ToBytes(s)).toThrow(RangeError);
        else expect(ipv4ToBytes(s).readUInt32BE(0)).toBe(n);
        if (n !== null) expect(formatIPv4(n)).toBe(s);
      }),
      { seed: SEED, numRuns: 3000 },
    );
  });

  it('the netlink encoder refuses a leading zero, which the origin\'s inet_aton would read as octal', () => {
    expect(() => ipv4ToBytes('010.0.0.1')).toThrow(RangeError);
  });

  it('address/prefix: host bits allowed, prefix 0 to 32 without leading zeros', () => {
    expect(parseIPv4Prefix('100.64.0.1/30')).toEqual({ addr: parseIPv4('100.64.0.1'), prefix: 30 });
    expect(parseIPv4Prefix('0.0.0.0/0')).toEqual({ addr: 0, prefix: 0 });
    for (const bad of ['100.64.0.1', '100.64.0.1/33', '100.64.0.1/030', '100.64.0.1/', '100.64.0.1/3 ', '01.64.0.1/30', '/30']) {
      expect(parseIPv4Prefix(bad), bad).toBeNull();
    }
  });
});

describe('names', () => {
  it('UUIDs: either case, or lower case only where the gateway wrote the value', () => {
    expect(isUuid('0f8fad5b-d9cb-469f-a165-70867728950e')).toBe(true);
    expect(isUuid('0F8FAD5B-D9CB-469F-A165-70867728950E')).toBe(true);
    expect(isCanonicalUuid('0F8FAD5B-D9CB-469F-A165-70867728950E')).toBe(false);
    expect(isCanonicalUuid('0f8fad5b-d9cb-469f-a165-70867728950e')).toBe(true);
    for (const bad of ['0f8fad5b-d9cb-469f-a165-70867728950', '0f8fad5bd9cb469fa16570867728950e', ' 0f8fad5b-d9cb-469f-a165-70867728950e', 42]) {
      expect(isUuid(bad)).toBe(false);
    }
  });

  it('interface names: 1 to 15 of letters, digits, _ and -, not starting with _ or -', () => {
    for (const ok of ['t', 'tg-abcdefghijkl', 'gre0', 'a_b-c']) expect(isInterfaceName(ok), ok).toBe(true);
    for (const bad of ['', 'tg-abcdefghijklm', '-tg', '_tg', 'tg.1', 'tg 1', 'tg/1', 'tg:1', 'tg\n']) expect(isInterfaceName(bad), bad).toBe(false);
  });
});

describe('the tunnel spec has one validator: the dataplane takes exactly what the wire contract takes', () => {
  it('an inner subnet other than /30 or /31 is refused by the dataplane too (it took /8 to /31 before)', () => {
    const t = tunnelSpec({ tunnel_name: 'tg-a', edge_inner: '100.64.0.1/24', origin_inner: '100.64.0.2/24' });
    expect(checkTunnel(t, true)).toMatch(/\/30 or \/31/);
    expect(dataplaneSays(t)).toMatch(/\/30 or \/31/);
  });

  it('a /30\'s network or broadcast address is refused by the dataplane too', () => {
    const t = tunnelSpec({ tunnel_name: 'tg-a', edge_inner: '100.64.0.0/30', origin_inner: '100.64.0.1/30' });
    expect(dataplaneSays(t)).toMatch(/network or broadcast/);
  });

  it('remove: the id must be a UUID at the dataplane too (any non-empty text passed before)', () => {
    expect(() => validateRef({ id: 'id1', tunnel_name: 'tg-a', protected_ip: '203.0.113.1' }, PREFIX)).toThrow(/UUID/);
    expect(() => validateRef({ id: tunnelSpec().id, tunnel_name: 'tg-a', protected_ip: '203.0.113.1' }, PREFIX)).not.toThrow();
  });

  it('the agent\'s own rule on top: the link prefix', () => {
    expect(dataplaneSays(tunnelSpec({ tunnel_name: 'other-a' }))).toMatch(/link prefix/);
  });

  it('for arbitrary changes to a valid spec, the dataplane refuses exactly what checkTunnel refuses', () => {
    const value = fc.oneof(
      fc.constantFrom('100.64.0.1/24', '100.64.0.2/24', '100.64.0.1/31', '100.64.0.0/31', '100.64.0.3/30', '10.0.0.1/8', '010.0.0.1', '1.2.3.4', '100.64.0.5/30'),
      fc.constantFrom(MTU_MIN - 1, MTU_MIN, MTU_MAX, MTU_MAX + 1, 1476.5, -1, 0, 2 ** 32, 2 ** 32 - 1),
      fc.constantFrom('tg-x', 'tg-', 'tg-abcdefghijklm', 'tg.x', 'id1', '0F8FAD5B-D9CB-469F-A165-70867728950E'),
      fc.jsonValue({ maxDepth: 1 }),
    );
    const keys = fc.constantFrom('id', 'tunnel_name', 'protected_ip', 'origin_ip', 'edge_ip', 'edge_inner', 'origin_inner', 'mtu', 'gre_key');
    fc.assert(
      fc.property(fc.array(fc.tuple(keys, value), { maxLength: 3 }), (changes) => {
        const t: Record<string, unknown> = { ...tunnelSpec({ tunnel_name: 'tg-a' }) };
        for (const [k, v] of changes) t[k] = v;
        // The dataplane stores a null gre_key as no key (normaliseSpec): the contract's view of that spec.
        const asStored = { ...t };
        if (asStored.gre_key === null) delete asStored.gre_key;
        const contract = checkTunnel(asStored, true);
        const dataplane = dataplaneSays(t as unknown as TunnelSpec);
        if (contract === undefined && typeof t.tunnel_name === 'string' && !t.tunnel_name.startsWith(PREFIX)) {
          expect(dataplane).toMatch(/link prefix/);
        } else {
          expect(dataplane).toBe(contract);
        }
      }),
      { seed: SEED, numRuns: 2000 },
    );
  });
});

describe('the origin script uses the shared address and name rules', () => {
  const params = { tunnelId: '0f8fad5b-d9cb-469f-a165-70867728950e', tunnelName: 'tg-a', protectedIp: '203.0.113.10', originIp: '192.0.2.50', edgeIp: '198.51.100.7', edgeInner: '100.64.0.1/30', originInner: '100.64.0.2/30', mtu: 1476, routeTable: 100 };
  it('refuses what the shared rules refuse', () => {
    expect(() => renderOriginScripts(params)).not.toThrow();
    expect(() => renderOriginScripts({ ...params, originIp: '192.0.2.050' })).toThrow(/originIp is not an IPv4 address/);
    expect(() => renderOriginScripts({ ...params, tunnelName: 'tg-abcdefghijklm' })).toThrow(/tunnelName/);
    expect(() => renderOriginScripts({ ...params, tunnelId: 'id1' })).toThrow(/tunnelId is not a UUID/);
  });
});
