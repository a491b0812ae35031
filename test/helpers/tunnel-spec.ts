// A valid `tunnel` job body for agent tests; override what a test is about.
import { randomUUID } from 'node:crypto';
import type { TunnelSpec } from '../../agent/dataplane/types.ts';

export const EDGE_IP = '198.51.100.7';

export const tunnelSpec = (over: Partial<TunnelSpec> = {}): TunnelSpec => ({
  id: randomUUID(),
  tunnel_name: 'tg-abcdefghij',
  protected_ip: '203.0.113.10',
  origin_ip: '192.0.2.50',
  edge_ip: EDGE_IP,
  edge_inner: '100.64.0.1/30',
  origin_inner: '100.64.0.2/30',
  mtu: 1476,
  ...over,
});
