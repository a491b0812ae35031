// Tunnel settings that reach the edge (docs/CONTRACTS.md "Tunnel settings", "Tunnel lifecycle"):
// the real gateway, queue and worker drive the real agent process over SSH, its dataplane in a fresh
// network namespace (veth stand-in for GRE, as test/integration/provisioning.test.ts). What the agent
// holds is read from its desired-state journal (agent/dataplane/state.ts DESIRED_FILE), the database with
// a plain pool. Changes here are of origin_ip and name: a non-default policy needs job version 2, whose
// choice per agent is the version helper's (server/provisioning/worker.ts); until then the gateway
// signs version 1 and refuses a policy in it.
import fs from 'node:fs';
import { join } from 'node:path';
import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { TunnelSpec } from '../../common/tunnel-spec.ts';
import { DESIRED_FILE } from '../../agent/dataplane/state.ts';
import { EDGE_QUEUE } from '../../server/provisioning/queue.ts';
import { buyTunnel, tunnelStatus } from '../helpers/queue.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, TestEdge, type AgentCall } from '../helpers/edge.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('tunnel settings on the edge (namespace, veth stand-in)', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;

  const buy = (name: string) => buyTunnel(gw.url, user.writeKey, name);
  const status = (id: string) => tunnelStatus(gw.testDb.raw, id);
  /** Tunnel jobs of `id` queued, retrying or running. */
  const liveJobs = async (id: string) =>
    (await gw.testDb.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where data->>'tunnelId' = $1 and state < 'completed'`, [id])).rows[0]!.n;
  /** A provisioned tunnel whose provision job has ended too (it ends just after the status moved), so a test counts only its own jobs. */
  const provisioned = async (name: string) => {
    const t = await buy(name);
    const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect(await settle(p, 'provisioned', () => status(t.id))).toBe('provisioned');
    await until('the provision job ended', async () => (await liveJobs(t.id)) === 0);
    return t;
  };
  const patch = async (id: string, body: unknown) => {
    const r = await call(gw.url, 'PATCH', `/api/dedicated/${id}`, { token: user.writeKey, body });
    expectMatchesOpenApi('patch', '/api/dedicated/{id}', r.status, r.body, r.headers);
    return r;
  };
  /** Tunnel jobs ever queued for `id` (live or ended). */
  const jobsFor = async (id: string) =>
    (await gw.testDb.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where data->>'tunnelId' = $1`, [id])).rows[0]!.n;
  /** The spec of `id` the agent last recorded as desired (its journal: the last put or del line wins). */
  const onEdge = (id: string): TunnelSpec | undefined => {
    let spec: TunnelSpec | undefined;
    for (const line of fs.readFileSync(join(edge.stateDir, DESIRED_FILE), 'utf8').split('\n')) {
      let l: { put?: TunnelSpec; del?: string };
      try {
        l = JSON.parse(line) as typeof l;
      } catch {
        continue;
      }
      if (l.put?.id === id) spec = l.put;
      else if (l.del === id) spec = undefined;
    }
    return spec;
  };
  const applies = (id: string) => edge.count('apply', id);
  const storedOrigin = async (id: string) => (await gw.testDb.raw.query<{ origin_ip: string }>(`select origin_ip from tunnel where id = $1`, [id])).rows[0]!.origin_ip;
  /** Once a PATCH in flight has committed origin `ip`, stops holding and lets the held agent call go on. */
  const letGoOnceStored = async (id: string, ip: string, held: AgentCall) => {
    await until(`origin ${ip} stored`, async () => (await storedOrigin(id)) === ip);
    edge.holding = () => false;
    edge.release(held);
  };
  const carries = (id: string, op: AgentCall['call']) => (c: AgentCall) => c.call === op && c.ids.includes(id);

  beforeAll(async () => {
    // The longest wait the gateway allows, so the 200 path is the one taken whenever the agent answers at all
    // (a loaded 2-core host); every dataplane call is announced and held until the test lets it go.
    // The sweeper's own round is an hour away: a test that needs it calls sweep() itself, and no other
    // test passes because the sweeper happened to come by.
    ({ gw, edge } = await startProvisioningRig({
      config: { edgeWaitMs: 60_000, edgeJobTimeoutMs: 30_000, edgeRetryLimit: 20, edgeSweepSeconds: 3600 },
      pool: '203.0.113.32/28',
      startAgent: false,
    }));
    await edge.start({ hold: 'before' });
    user = await seedUser(gw.testDb.db);
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
  });

  it('a new origin_ip on an active tunnel: 200 once the edge applied it, back to provisioned, the edge and the setup script on the new origin', async () => {
    const t = await provisioned('moving');
    // Activation needs an origin answering the probe (provisioning.test.ts covers it); the move back
    // depends on the status alone, so the test puts it there.
    await gw.testDb.raw.query(`update tunnel set status = 'active' where id = $1`, [t.id]);
    const before = applies(t.id);
    expect(onEdge(t.id)?.origin_ip).toBe('8.8.4.4');
    // The buyer's webhook hears of the move back (written with it, in its transaction: Transitions.moveIn).
    const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: 'https://hooks.example.com/tunnelgate' } });
    expect(hook.status).toBe(201);
    const moves = async () =>
      (
        await gw.testDb.raw.query<{ body: string }>(
          `select d.body from webhook_delivery d where d.webhook_id = $1 and d.event_type = 'tunnel.status_changed' order by d.created_at`,
          [hook.body.webhook.id],
        )
      ).rows.map((row) => (JSON.parse(row.body) as { data: { tunnel: { id: string; status: string } } }).data.tunnel);

    const r = await patch(t.id, { origin_ip: '9.9.9.9' });
    expect(r.status).toBe(200);
    expect(r.body.tunnel).toMatchObject({ status: 'provisioned', origin_ip: '9.9.9.9' });
    expect(await status(t.id)).toBe('provisioned');
    expect(await moves()).toEqual([expect.objectContaining({ id: t.id, status: 'provisioned' })]);
    expect(applies(t.id)).toBe(before + 1);
    const { rows } = await gw.testDb.raw.query<{ gre_key: string }>('select gre_key::text as gre_key from tunnel where id = $1', [t.id]);
    // The new origin has answered no probe: the edge holds the tunnel without its DNAT (job version 3).
    expect(onEdge(t.id)).toMatchObject({ origin_ip: '9.9.9.9', gre_key: Number(rows[0]!.gre_key), forwarding: false });
    expect(edge.mapElements()).not.toContain(t.protected_ip);
    const setup = await call(gw.url, 'GET', `/api/dedicated/${t.id}/setup`, { token: user.readKey });
    expect(setup.body.scripts.origin).toContain("ORIGIN_IP='9.9.9.9'");

    // A provisioned tunnel's new origin: applied the same way, and it stays provisioned.
    const again = await patch(t.id, { origin_ip: '1.1.1.1' });
    expect([again.status, again.body.tunnel.status]).toEqual([200, 'provisioned']);
    expect(onEdge(t.id)?.origin_ip).toBe('1.1.1.1');
    expect(applies(t.id)).toBe(before + 2);
  }, 180_000);

  it('a change that changes nothing, or only the name, is 200 and sends nothing to the edge', async () => {
    const t = await provisioned('still');
    const jobs = await jobsFor(t.id);
    const calls = edge.calls.length;
    for (const body of [{}, { origin_ip: '8.8.4.4', ports: '*', protocol: 'both', protection: { syn_proxy: false } }, { name: 'renamed only' }]) {
      const r = await patch(t.id, body);
      expect([r.status, r.body.tunnel.status], JSON.stringify(body)).toEqual([200, 'provisioned']);
    }
    expect(await jobsFor(t.id)).toBe(jobs);
    expect(edge.calls.slice(calls).filter((c) => c.ids.includes(t.id))).toEqual([]);
  }, 120_000);

  it('GraphQL updateTunnel with the agent answering: settingsApplied true, as REST answers 200', async () => {
    const t = await provisioned('applied at once');
    const u = await updateTunnel(gw, user.writeKey, t.id, { originIp: '9.9.9.9' });
    expect(u).toMatchObject({ originIp: '9.9.9.9', status: 'PROVISIONED', settingsApplied: true });
    expect(onEdge(t.id)?.origin_ip).toBe('9.9.9.9');
    // The REST object keeps its shape: the same answer carries no such field there.
    const rest = await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: user.readKey });
    expect(rest.body.tunnel).not.toHaveProperty('settings_applied');
    expect(rest.body.tunnel).not.toHaveProperty('settingsApplied');
  }, 180_000);

  it('a change stored while the provision applies the older spec: provisioned first, then the same job applies the change', async () => {
    const t = await buy('changed while provisioning');
    edge.holding = carries(t.id, 'apply');
    const from = edge.calls.length;
    const provision = call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    const held = await edge.waitForCall(carries(t.id, 'apply'), from);
    const change = patch(t.id, { origin_ip: '9.9.9.9' });
    await letGoOnceStored(t.id, '9.9.9.9', held);
    const [p, r] = await Promise.all([provision, change]);
    expect(await settle(p, 'provisioned', () => status(t.id))).toBe('provisioned');
    expect([r.status, r.body.tunnel.status, r.body.tunnel.origin_ip]).toEqual([200, 'provisioned', '9.9.9.9']);
    expect(onEdge(t.id)?.origin_ip).toBe('9.9.9.9');
    expect(await jobsFor(t.id)).toBe(1);
    expect(applies(t.id)).toBe(2);
  }, 180_000);

  it('a live job that ends without the change (it looked just before the change committed): the PATCH queues one of its own', async () => {
    const t = await provisioned('job ended');
    // A job live for the tunnel that will not run (due in an hour) stands for one past its last look.
    const queue = await gw.services.provisioning.queue();
    const stale = await queue.sendOnce({ tunnelId: t.id, nodeId: edge.nodeId }, { delaySeconds: 3600 });
    expect(stale.queued).toBe(true);
    const change = patch(t.id, { origin_ip: '9.9.9.9' });
    await until('the change stored', async () => (await storedOrigin(t.id)) === '9.9.9.9');
    // The PATCH found that job live and queued nothing; now it ends without having applied anything.
    await queue.boss.cancel(EDGE_QUEUE, stale.jobId!);
    const r = await change;
    expect([r.status, r.body.tunnel.origin_ip]).toEqual([200, '9.9.9.9']);
    expect(onEdge(t.id)?.origin_ip).toBe('9.9.9.9');
  }, 180_000);

  it('the sweeper queues a provisioned tunnel whose edge lacks its latest spec (a change whose job was lost)', async () => {
    const t = await provisioned('swept');
    // As if a PATCH had committed and its job never ran: the stored spec is ahead of the applied one.
    await gw.testDb.raw.query(`update tunnel set origin_ip = '1.0.0.1', spec_revision = spec_revision + 1 where id = $1`, [t.id]);
    expect(await gw.services.provisioning.sweep(0)).toBeGreaterThanOrEqual(1);
    await until('the edge holds the stored spec', async () => {
      const { rows } = await gw.testDb.raw.query<{ behind: boolean }>(`select applied_revision < spec_revision as behind from tunnel where id = $1`, [t.id]);
      return !rows[0]!.behind;
    });
    expect(onEdge(t.id)?.origin_ip).toBe('1.0.0.1');
    expect(await status(t.id)).toBe('provisioned');
  }, 180_000);

  it("a change stored while the tunnel's job applies an older spec is applied by that same job: one live job per tunnel", async () => {
    const t = await provisioned('twice');
    const jobs = await jobsFor(t.id);
    const before = applies(t.id);
    // The first change's apply is held inside the agent: its job is live, carrying the older spec.
    edge.holding = carries(t.id, 'apply');
    const from = edge.calls.length;
    const first = patch(t.id, { origin_ip: '9.9.9.9' });
    const held = await edge.waitForCall(carries(t.id, 'apply'), from);
    const second = patch(t.id, { origin_ip: '1.0.0.1' });
    await letGoOnceStored(t.id, '1.0.0.1', held);
    const [r1, r2] = await Promise.all([first, second]);
    expect([r1.status, r2.status]).toEqual([200, 200]);
    expect(r2.body.tunnel).toMatchObject({ origin_ip: '1.0.0.1', status: 'provisioned' });
    expect(onEdge(t.id)?.origin_ip).toBe('1.0.0.1');
    // The second change queued nothing of its own: the live job applied again.
    expect(await jobsFor(t.id)).toBe(jobs + 1);
    expect(applies(t.id)).toBe(before + 2);
  }, 180_000);
});

/** GraphQL updateTunnel's answer: the tunnel's status, origin and settingsApplied. */
async function updateTunnel(gw: RunningGateway, token: string, id: string, input: Record<string, unknown>): Promise<{ status: string; originIp: string; settingsApplied: boolean }> {
  const r = await call(gw.url, 'POST', '/graphql', {
    token,
    body: { query: 'mutation($id: ID!, $input: UpdateTunnelInput!) { updateTunnel(id: $id, input: $input) { status originIp settingsApplied } }', variables: { id, input } },
  });
  expect(r.body.errors).toBeUndefined();
  return r.body.data.updateTunnel;
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('settingsApplied while the edge has not applied a change yet (namespace, veth stand-in)', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  const status = (id: string) => tunnelStatus(gw.testDb.raw, id);
  const carries = (id: string) => (c: AgentCall) => c.call === 'apply' && c.ids.includes(id);

  beforeAll(async () => {
    // A short wait, so a mutation whose apply the test holds in the agent answers before it is let go
    // (REST's 202); the job's own timeout is long, so the held call is the one that applies it.
    ({ gw, edge } = await startProvisioningRig({
      config: { edgeWaitMs: 1000, edgeJobTimeoutMs: 60_000, edgeRetryLimit: 20, edgeSweepSeconds: 3600 },
      pool: '203.0.113.48/28',
      startAgent: false,
    }));
    await edge.start({ hold: 'before' });
    user = await seedUser(gw.testDb.db);
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
  });

  it('updateTunnel answers settingsApplied false while the apply is held; tunnelStatus then fires with true, the status unchanged', async () => {
    const t = await buyTunnel(gw.url, user.writeKey, 'applied later');
    const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect(await settle(p, 'provisioned', () => status(t.id))).toBe('provisioned');
    // Its provision job ended too, so the change's apply is the next apply call for this tunnel.
    await until('the provision job ended', async () =>
      (await gw.testDb.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where data->>'tunnelId' = $1 and state < 'completed'`, [t.id])).rows[0]!.n === 0,
    );

    edge.holding = carries(t.id);
    const from = edge.calls.length;
    const u = await updateTunnel(gw, user.writeKey, t.id, { originIp: '9.9.9.9' });
    expect(u).toMatchObject({ originIp: '9.9.9.9', status: 'PROVISIONED', settingsApplied: false });
    const held = await edge.waitForCall(carries(t.id), from);
    // The one tunnel and the list say the same (the list reads its rows its own way: queries.ts).
    const read = async () => {
      const r = await call(gw.url, 'POST', '/graphql', {
        token: user.readKey,
        body: { query: 'query($id: ID!) { tunnel(id: $id) { settingsApplied } tunnels(limit: 100) { tunnels { id settingsApplied } } }', variables: { id: t.id } },
      });
      expect(r.body.errors).toBeUndefined();
      const listed = (r.body.data.tunnels.tunnels as { id: string; settingsApplied: boolean }[]).find((x) => x.id === t.id);
      return [r.body.data.tunnel.settingsApplied, listed?.settingsApplied];
    };
    expect(await read()).toEqual([false, false]);

    const client = createClient({
      url: gw.url.replace('http', 'ws') + '/graphql',
      webSocketImpl: WebSocket,
      connectionParams: { Authorization: `Bearer ${user.readKey}` },
      retryAttempts: 0,
      lazy: true,
    });
    const seen: { status: string; settingsApplied: boolean }[] = [];
    const failures: unknown[] = [];
    try {
      client.subscribe<{ tunnelStatus: { status: string; settingsApplied: boolean } }>(
        { query: 'subscription S($id: ID!) { tunnelStatus(id: $id) { status settingsApplied } }', variables: { id: t.id } },
        {
          next: (m) => (m.errors ? failures.push(m.errors) : seen.push(m.data!.tunnelStatus)),
          error: (e) => failures.push(e),
          complete: () => {},
        },
      );
      // The tunnel now: still not applied (its apply is held in the agent).
      await until('the first event', () => seen.length >= 1 || failures.length > 0);
      expect(failures).toEqual([]);
      expect(seen[0]).toEqual({ status: 'PROVISIONED', settingsApplied: false });

      edge.holding = () => false;
      edge.release(held);
      await until('settingsApplied true on the subscription', () => seen.some((e) => e.settingsApplied) || failures.length > 0);
      expect(failures).toEqual([]);
      // It fired on the applied revision alone: no status moved.
      expect(seen).toEqual([
        { status: 'PROVISIONED', settingsApplied: false },
        { status: 'PROVISIONED', settingsApplied: true },
      ]);
      expect(await status(t.id)).toBe('provisioned');
      expect(await read()).toEqual([true, true]);
    } finally {
      await client.dispose();
    }
  }, 180_000);
});
