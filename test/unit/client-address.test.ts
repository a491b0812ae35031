// TRUST_PROXY=N (docs/CONTRACTS.md "Starting it"): which X-Forwarded-For entry is the client.
import type http from 'node:http';
import { describe, expect, it } from 'vitest';
import { clientAddress } from '../../server/http/client-address.ts';

const req = (xff: string | string[] | undefined, peer = '10.0.0.1') =>
  ({ headers: xff === undefined ? {} : { 'x-forwarded-for': xff }, socket: { remoteAddress: peer } }) as unknown as http.IncomingMessage;

describe('clientAddress', () => {
  it('with no trusted proxy ignores X-Forwarded-For entirely', () => {
    expect(clientAddress(req('203.0.113.5'), 0)).toBe('10.0.0.1');
    expect(clientAddress(req(undefined), 0)).toBe('10.0.0.1');
  });

  it('with N proxies takes the N-th entry from the right, never what the client wrote before it', () => {
    expect(clientAddress(req('6.6.6.6, 203.0.113.5'), 1)).toBe('203.0.113.5');
    expect(clientAddress(req('6.6.6.6, 7.7.7.7, 203.0.113.5, 10.0.0.9'), 2)).toBe('203.0.113.5');
    // Repeated headers arrive as an array (or joined): the order is the arrival order.
    expect(clientAddress(req(['6.6.6.6', '203.0.113.5']), 1)).toBe('203.0.113.5');
    expect(clientAddress(req(' 6.6.6.6 ,203.0.113.5 '), 1)).toBe('203.0.113.5');
  });

  it('falls back to the socket when the header is absent or empty, and to the left-most entry when there are fewer than N', () => {
    expect(clientAddress(req(undefined), 1)).toBe('10.0.0.1');
    expect(clientAddress(req(' , '), 1)).toBe('10.0.0.1');
    expect(clientAddress(req('203.0.113.5'), 3)).toBe('203.0.113.5');
  });
});
