// Activate's 503 edge_unavailable, produced for real (untested before). docs/CONTRACTS.md "REST errors": 503 edge_unavailable when
// the edge could not be reached in time; docs/API.md "Errors and rate limits": its body never names the edge's internal address (that
// is logged with the request id). Two real unreachable edges: a closed port (connection refused at once)
// and a black hole that accepts TCP and never speaks SSH (only EDGE_JOB_TIMEOUT_MS ends the wait; the
// timeout is a bound on the gateway, the test decides nothing on time). The tunnel is left provisioned.
import net from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { fakeHostKey, seedUser } from '../helpers/fixtures.ts';
import { addNode } from '../../server/domain/nodes.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { createLogger, type Logger } from '../../common/log.ts';

let gw: RunningGateway;
const logged: Record<string, unknown>[] = [];
let blackHole: net.Server;
const held: net.Socket[] = [];

/** A port nothing listens on: bound by us, then released. */
async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

beforeAll(async () => {
  blackHole = net.createServer((socket) => held.push(socket));
  await new Promise<void>((r) => blackHole.listen(0, '127.0.0.1', r));
  // The gateway's own logger, writing into this array instead of stdout.
  const log: Logger = createLogger('info', { service: 'gateway' }, (line: string) => logged.push(JSON.parse(line) as Record<string, unknown>));
  gw = await startGateway({ config: { edgeJobTimeoutMs: 1000, logLevel: 'info' }, log });
  // The worker side stays off (EDGE_WORKER=false): activate asks the agent directly, as an API replica does.
  await gw.services.provisioning.start((await loadSecrets(gw.testDb.db, {})).secrets, { worker: false });
});
afterAll(async () => {
  for (const s of held) s.destroy();
  blackHole?.close();
  await gw?.close();
});

async function provisionedTunnelOn(sshPort: number, pool: string) {
  const name = `hidden-edge-${sshPort}`;
  const node = await addNode(gw.testDb.db, { name, publicIp: '192.0.2.1', sshHost: '127.0.0.1', sshPort, pool, hostKey: fakeHostKey() });
  const u = await seedUser(gw.testDb.db);
  const bought = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { name: 'web', origin_ip: '8.8.4.4' } });
  expect(bought.status).toBe(201);
  const id = bought.body.tunnel.id as string;
  // Provisioned as the worker would leave it after the agent applied it.
  await gw.testDb.raw.query(`update tunnel set status = 'provisioned' where id = $1`, [id]);
  return { id, u, node, name };
}

for (const edge of ['closed port', 'black hole'] as const) {
  it(`activate with the edge unreachable (${edge}): 503 edge_unavailable, no internals, the tunnel stays provisioned`, async () => {
    const port = edge === 'closed port' ? await closedPort() : (blackHole.address() as net.AddressInfo).port;
    const { id, u, node, name } = await provisionedTunnelOn(port, edge === 'closed port' ? '198.18.20.0/30' : '198.18.21.0/30');
    const res = await call(gw.url, 'POST', `/api/dedicated/${id}/activate`, { token: u.writeKey, headers: { 'x-request-id': `act-${port}` } });
    expect(res.status).toBe(503);
    expect(Object.keys(res.body).sort()).toEqual(['error', 'error_description']);
    expect(res.body.error).toBe('edge_unavailable');
    expect(res.body.error_description).toMatch(/try again/i);
    for (const secret of ['127.0.0.1', String(port), name, node.node_id, 'ECONNREFUSED', 'timed out', 'ssh']) {
      expect(res.text.toLowerCase()).not.toContain(secret.toLowerCase());
    }
    // The cause is logged with the request id, for the operator.
    const refusal = logged.find((l) => l.request_id === `act-${port}` && l.error === 'edge_unavailable');
    expect(refusal, JSON.stringify(logged.slice(-5))).toBeDefined();
    expect(String(refusal!.detail)).toMatch(/127\.0\.0\.1|timed out|ECONNREFUSED/i);
    // Nothing moved: still provisioned, and activate can be asked again.
    const after = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: u.writeKey });
    expect(after.body.tunnel.status).toBe('provisioned');
  });
}
