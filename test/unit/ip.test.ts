import { describe, expect, it } from 'vitest';
import { cidrRange, formatIPv4, INNER_POOL, INNER_SLOTS, innerSubnet, IpError, isPublicUnicast, isUnicast, parseCidr, parseIPv4, poolAddresses } from '../../server/domain/ip.ts';
import { routeTableFor, tunnelNameFor } from '../../server/domain/tunnels/index.ts';

describe('ip', () => {
  it('parses strict dotted quads only', () => {
    expect(parseIPv4('8.8.4.4')).toBe(0x08080404);
    expect(formatIPv4(parseIPv4('255.255.255.255')!)).toBe('255.255.255.255');
    for (const bad of ['1.2.3', '1.2.3.4.5', '256.0.0.1', '01.2.3.4', '1.2.3.4 ', '', '1..2.3', '0x1.2.3.4', '-1.2.3.4']) {
      expect(parseIPv4(bad), bad).toBeNull();
    }
  });

  it('classifies public unicast addresses', () => {
    expect(isPublicUnicast(parseIPv4('8.8.8.8')!)).toBe(true);
    expect(isPublicUnicast(parseIPv4('100.63.255.255')!)).toBe(true);
    expect(isPublicUnicast(parseIPv4('100.64.0.0')!)).toBe(false);
    expect(isPublicUnicast(parseIPv4('172.31.255.255')!)).toBe(false);
    expect(isPublicUnicast(parseIPv4('172.32.0.0')!)).toBe(true);
    expect(isUnicast(parseIPv4('10.0.0.1')!)).toBe(true);
    expect(isUnicast(parseIPv4('224.0.0.5')!)).toBe(false);
  });

  it('enumerates pools and inner subnets', () => {
    expect(poolAddresses(parseCidr('198.18.0.0/30')).map(formatIPv4)).toEqual(['198.18.0.1', '198.18.0.2']);
    expect(poolAddresses(parseCidr('198.18.0.0/31')).map(formatIPv4)).toEqual(['198.18.0.0', '198.18.0.1']);
    expect(poolAddresses(parseCidr('198.18.0.7/32')).map(formatIPv4)).toEqual(['198.18.0.7']);
    expect(poolAddresses(parseCidr('198.18.0.0/24'))).toHaveLength(254);
    expect(() => parseCidr('198.18.0.1/24')).toThrow(IpError);
    expect(() => poolAddresses(parseCidr('10.0.0.0/8'))).toThrow(IpError);
    expect(innerSubnet(parseCidr('100.64.0.0/10'), 0)).toEqual({ edgeInner: '100.64.0.1/30', originInner: '100.64.0.2/30' });
    expect(innerSubnet(parseCidr('100.64.0.0/10'), 65)).toEqual({ edgeInner: '100.64.1.5/30', originInner: '100.64.1.6/30' });
    expect(() => innerSubnet(parseCidr('100.64.0.0/30'), 1)).toThrow(IpError);
  });

  it('the one inner pool holds INNER_SLOTS /30s, the last ending at 100.127.255.254', () => {
    expect(INNER_SLOTS).toBe(2 ** 20);
    expect(innerSubnet(parseCidr(INNER_POOL), INNER_SLOTS - 1)).toEqual({ edgeInner: '100.127.255.253/30', originInner: '100.127.255.254/30' });
    expect(() => innerSubnet(parseCidr(INNER_POOL), INNER_SLOTS)).toThrow(IpError);
    const r = cidrRange(parseCidr('45.90.2.0/29'));
    expect([formatIPv4(r.first), formatIPv4(r.last)]).toEqual(['45.90.2.0', '45.90.2.7']);
    const one = cidrRange(parseCidr('45.90.2.7/32'));
    expect([formatIPv4(one.first), formatIPv4(one.last)]).toEqual(['45.90.2.7', '45.90.2.7']);
  });

  it('derives valid interface names and route tables from tunnel ids', () => {
    const name = tunnelNameFor('0f8fad5b-d9cb-469f-a165-70867728950e');
    expect(name).toMatch(/^tg-[a-z2-7]{10}$/);
    expect(Buffer.byteLength(name)).toBeLessThanOrEqual(15);
    expect(tunnelNameFor('0f8fad5b-d9cb-469f-a165-70867728950e')).toBe(name);
    expect(tunnelNameFor('1f8fad5b-d9cb-469f-a165-70867728950e')).not.toBe(name);
  });

  it('numbers the origin\'s route table from the inner address: distinct for distinct inner subnets, /31 included', () => {
    const tables = ['100.64.0.2/30', '100.64.0.6/30', '100.64.1.1/31', '100.64.1.3/31', '100.64.1.4/31', '100.127.255.254/30', '10.0.0.2/30'].map(routeTableFor);
    expect(new Set(tables).size).toBe(tables.length);
    for (const t of [...tables, routeTableFor('255.255.255.255/32')]) {
      expect(t).toBeGreaterThan(255);
      expect(t).toBeLessThan(2 ** 31);
      expect(Number.isInteger(t)).toBe(true);
    }
    // Not from the id any more: two tunnels to one origin whose ids share their first hex digits differ.
    expect(routeTableFor('100.64.0.2/30')).toBe(routeTableFor('100.64.0.2'));
    expect(() => routeTableFor('not-an-address')).toThrow(/originInner/);
  });
});
