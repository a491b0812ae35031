// Attacks on the gateway's side (docs/CONTRACTS.md "Attacks"), through the status ingest seam
// (server/health/ingest.ts -> server/attacks/ingest.ts) that the collector feeds with a node's `status` answer,
// against the real gateway and PostgreSQL: records stored once by id, the REST answer (validated against
// schema/openapi.yaml), GraphQL `Tunnel.attacks`, the `tunnelStatus` subscription over graphql-ws, the webhook
// events delivered over real HTTP and verified with `standardwebhooks`, the /metrics counters, an open attack
// its agent no longer lists, records of another node's tunnel, retention. The agent's side end to end (a real
// agent, real SSH, a flood in a namespace) is test/integration/attacks-edge.test.ts.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi, expectMatchesSchema } from '../helpers/openapi.ts';
import { until } from '../helpers/wait.ts';
import { WebhookReceiver, verified } from '../helpers/webhook-receiver.ts';
import { createLogger } from '../../common/log.ts';
import { MAX_REPORTED_ATTACKS, type AttackRecord } from '../../common/attacks.ts';
import type { StatusResult } from '../../common/tunnel-status.ts';

const ATTACKS = '/api/dedicated/{id}/attacks';
const MIN = 60_000;

let gw: RunningGateway;
let receiver: WebhookReceiver;
let user: SeededUser;
let other: SeededUser;
let nodeId: string;
let otherNodeId: string;

/** A status answer of the node: no tunnel reports (the seam under test is the attacks), and `attacks` when given. */
function status(attacks?: AttackRecord[]): StatusResult {
  return { agent: { version: '0.2.0', uptime_s: 100, tunnels: 0 }, tunnels: [], ...(attacks ? { attacks } : {}) };
}

function attack(tunnelId: string, over: Partial<AttackRecord> = {}): AttackRecord {
  const started = new Date(Date.now() - 5 * MIN).toISOString();
  return {
    id: randomUUID(),
    tunnel_id: tunnelId,
    started_at: started,
    ended_at: null,
    peak_pps: 250_000,
    peak_bps: 2_000_000_000,
    vector: { protocol: null, ports: null, top_drop_reason: 'rate_limited' },
    packets_dropped: 1_200_000,
    packets_passed: 40_000,
    ...over,
  };
}

let pools = 40;
/**
 * A node of its own for a test: an answer that carries `attacks` speaks for every open attack of its node's
 * tunnels, so tests on one node would close each other's.
 */
async function freshNode(): Promise<string> {
  nodeId = (await seedNode(gw.testDb.db, `198.18.${pools++}.0/28`)).node_id;
  return nodeId;
}

async function buy(u: SeededUser, node = nodeId): Promise<string> {
  const r = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(r.status).toBe(201);
  const id = r.body.tunnel.id as string;
  // On the edge without an agent (the seam is under test here), on the node the test says.
  await gw.testDb.raw.query(`update tunnel set status = 'active', node_id = $1 where id = $2`, [node, id]);
  return id;
}

async function attacksOf(id: string, q: Record<string, string> = {}, token = user.readKey) {
  const r = await call(gw.url, 'GET', `/api/dedicated/${id}/attacks?${new URLSearchParams(q).toString()}`, { token });
  expectMatchesOpenApi('get', ATTACKS, r.status, r.body, r.headers);
  return r;
}

/** The value of a counter in this gateway's /metrics. */
async function metric(name: string): Promise<number> {
  const text = (await call(gw.url, 'GET', '/metrics')).text;
  const m = new RegExp(`^${name} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

const ingest = (node: string, attacks: AttackRecord[] | undefined, at = new Date()) => gw.services.health.ingest.ingestStatus(node, status(attacks), at);

beforeAll(async () => {
  receiver = await WebhookReceiver.start();
  gw = await startGateway({ config: { allowPrivateWebhooks: true } });
  otherNodeId = (await seedNode(gw.testDb.db, '198.18.31.0/27')).node_id;
  user = await seedUser(gw.testDb.db, { balanceUsd: '1000.00' });
  other = await seedUser(gw.testDb.db);
  gw.services.webhooks.startDelivery(createLogger('silent'), { pollMs: 20, backoffBaseMs: 1 });
}, 120_000);

afterAll(async () => {
  await gw?.close();
  await receiver?.close();
});

describe('an attack from a status answer', () => {
  it('reaches the table, REST, GraphQL, the subscription, a verified webhook and /metrics; a record sent again is stored once', async () => {
    await freshNode();
    const id = await buy(user);
    // Default events: every event, the attack events among them.
    const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: receiver.url('/attacks') } });
    expect(hook.status).toBe(201);
    expect(hook.body.webhook.events).toEqual(expect.arrayContaining(['tunnel.attack_started', 'tunnel.attack_ended']));
    const secret = hook.body.secret as string;
    const started0 = await metric('tunnelgate_attacks_started_total');
    const ended0 = await metric('tunnelgate_attacks_ended_total');

    const client = createClient({ url: `${gw.url.replace('http', 'ws')}/graphql`, webSocketImpl: WebSocket, connectionParams: { Authorization: `Bearer ${user.readKey}` }, retryAttempts: 0 });
    type Seen = { status: string; attacks: { id: string; endedAt: string | null; peakPps: number }[] };
    const seen: Seen[] = [];
    const sub = client.iterate<{ tunnelStatus: Seen }>({ query: `subscription($id: ID!) { tunnelStatus(id: $id) { status attacks { id endedAt peakPps } } }`, variables: { id } });
    const reading = (async () => {
      for await (const m of sub) seen.push(m.data!.tunnelStatus);
    })();
    try {
      await until('the first subscription event', () => seen.length >= 1);
      expect(seen[0]!.attacks).toEqual([]);

      const a = attack(id);
      const out = await ingest(nodeId, [a]);
      expect(out.attacks.map((c) => c.kind)).toEqual(['started']);

      // The table: one row, the record as sent.
      const rows = (await gw.testDb.raw.query('select id, tunnel_id, ended_at, peak_pps::text, vector from attack where tunnel_id = $1', [id])).rows;
      expect(rows).toEqual([{ id: a.id, tunnel_id: id, ended_at: null, peak_pps: '250000', vector: a.vector }]);
      // REST: the record, in the document's shape.
      const r = await attacksOf(id);
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ tunnel_id: id, attacks: [{ ...a, started_at: a.started_at }] });
      // GraphQL over HTTP.
      const g = await call(gw.url, 'POST', '/graphql', {
        token: user.readKey,
        body: { query: `query($id: ID!) { tunnel(id: $id) { attacks { id tunnelId startedAt endedAt peakPps peakBps packetsDropped packetsPassed vector { protocol ports topDropReason } } } }`, variables: { id } },
      });
      expect(g.body.errors).toBeUndefined();
      expect(g.body.data.tunnel.attacks).toEqual([
        { id: a.id, tunnelId: id, startedAt: a.started_at, endedAt: null, peakPps: 250_000, peakBps: 2_000_000_000, packetsDropped: 1_200_000, packetsPassed: 40_000, vector: { protocol: null, ports: null, topDropReason: 'RATE_LIMITED' } },
      ]);
      // The subscription fired with the attack in it.
      await until('the attack on the subscription', () => seen.some((s) => s.attacks.length === 1));
      // The webhook: delivered, signed (verified by an independent implementation), {tunnel, attack}.
      await until('the attack_started delivery', () => receiver.to('/attacks').length >= 1);
      const first = verified(secret, receiver.to('/attacks')[0]!) as unknown as { type: string; data: { tunnel: Record<string, unknown>; attack: AttackRecord } };
      expect(first.type).toBe('tunnel.attack_started');
      expect(first.data.attack).toEqual(a);
      expect(first.data.tunnel).toMatchObject({ id, status: 'active' });
      expectMatchesSchema('TunnelAttackEvent', first);
      expect(await metric('tunnelgate_attacks_started_total')).toBe(started0 + 1);

      // The next rounds carry it again, bigger: stored over the same row, no event.
      const grown = { ...a, peak_pps: 400_000, packets_dropped: 9_000_000 };
      expect((await ingest(nodeId, [grown])).attacks).toEqual([]);
      expect((await ingest(nodeId, [grown])).attacks).toEqual([]);
      expect((await attacksOf(id)).body.attacks).toEqual([grown]);

      // It ends: one attack_ended, with the final record; the subscription fires again.
      const ended = { ...grown, ended_at: new Date(Date.now() - MIN).toISOString() };
      expect((await ingest(nodeId, [ended])).attacks.map((c) => c.kind)).toEqual(['ended']);
      expect((await ingest(nodeId, [ended])).attacks).toEqual([]);
      await until('the attack_ended delivery', () => receiver.to('/attacks').length >= 2);
      const second = verified(secret, receiver.to('/attacks')[1]!) as unknown as { type: string; data: { attack: AttackRecord } };
      expect(second.type).toBe('tunnel.attack_ended');
      expect(second.data.attack).toEqual(ended);
      await until('the end on the subscription', () => seen.some((s) => s.attacks[0]?.endedAt === ended.ended_at));
      expect(await metric('tunnelgate_attacks_ended_total')).toBe(ended0 + 1);
      expect(await metric('tunnelgate_attacks_started_total')).toBe(started0 + 1);
      // Exactly two deliveries, and two subscription events after the first snapshot, whatever the rounds repeated
      // (and though this replica hears each of its own notices twice: at once, and by LISTEN).
      expect(receiver.to('/attacks')).toHaveLength(2);
      expect(seen.map((s) => s.attacks.map((x) => x.endedAt))).toEqual([[], [null], [ended.ended_at]]);
      expect((await gw.testDb.raw.query('select count(*)::int as n from attack where tunnel_id = $1', [id])).rows[0].n).toBe(1);
    } finally {
      await sub.return?.();
      await client.dispose();
      await reading.catch(() => {});
    }
  });

  it('tunnelsStatus (many tunnels on one subscription) sends the tunnel at an attack\'s start and end, and nothing for a record sent again', async () => {
    await freshNode();
    const id = await buy(user);
    const quiet = await buy(user);
    const client = createClient({ url: `${gw.url.replace('http', 'ws')}/graphql`, webSocketImpl: WebSocket, connectionParams: { Authorization: `Bearer ${user.readKey}` }, retryAttempts: 0 });
    const seen: { id: string; attacks: { endedAt: string | null }[] }[] = [];
    const sub = client.iterate<{ tunnelsStatus: { id: string; attacks: { endedAt: string | null }[] } }>({
      query: `subscription($ids: [ID!]!) { tunnelsStatus(ids: $ids) { id attacks { endedAt } } }`,
      variables: { ids: [id, quiet] },
    });
    const reading = (async () => {
      for await (const m of sub) seen.push(m.data!.tunnelsStatus);
    })();
    try {
      // No first snapshot: nothing comes until a change, and a change made before the subscription listens is not
      // sent. So the other tunnel takes a new attack at each try (each answer ends the one before, which it no
      // longer lists) until one arrives: then the subscription listens.
      let q = attack(quiet);
      await until('the subscription listening', async () => {
        if (seen.length > 0) return true;
        q = attack(quiet);
        await ingest(nodeId, [q]);
        await new Promise((r) => setTimeout(r, 200));
        return seen.length > 0;
      });
      const forId = () => seen.filter((x) => x.id === id);
      const a = attack(id);
      await ingest(nodeId, [q, a]);
      await until('the start on tunnelsStatus', () => forId().length >= 1);
      // The same record again: no change, nothing sent.
      await ingest(nodeId, [q, a]);
      const ended = { ...a, ended_at: new Date().toISOString() };
      await ingest(nodeId, [q, ended]);
      await until('the end on tunnelsStatus', () => forId().length >= 2);
      expect(forId().map((x) => x.attacks)).toEqual([[{ endedAt: null }], [{ endedAt: ended.ended_at }]]);
    } finally {
      await sub.return?.();
      await client.dispose();
      await reading.catch(() => {});
    }
  });

  it('one first seen already ended: attack_started then attack_ended, in that order', async () => {
    await freshNode();
    const id = await buy(user);
    const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: receiver.url('/late'), events: ['tunnel.attack_started', 'tunnel.attack_ended'] } });
    const a = attack(id, { ended_at: new Date(Date.now() - 2 * MIN).toISOString() });
    expect((await ingest(nodeId, [a])).attacks.map((c) => c.kind)).toEqual(['started', 'ended']);
    const outbox = (await gw.testDb.raw.query(`select event_type from webhook_delivery where webhook_id = $1 order by created_at, event_type desc`, [hook.body.webhook.id])).rows.map((r) => r.event_type);
    expect(outbox).toEqual(['tunnel.attack_started', 'tunnel.attack_ended']);
  });
});

describe('what the agent no longer lists', () => {
  it('an open attack missing from an answer that carries attacks ends at the last round that listed it; an answer without attacks closes nothing', async () => {
    await freshNode();
    const id = await buy(user);
    const a = attack(id);
    const listedAt = new Date(Date.now() - 30_000);
    await ingest(nodeId, [a], listedAt);
    // An agent from before attack detection (no `attacks` key): nothing is known, nothing changes.
    expect((await ingest(nodeId, undefined)).attacks).toEqual([]);
    expect((await attacksOf(id)).body.attacks[0].ended_at).toBeNull();
    // The agent restarted and forgot it: an answer with `attacks`, without it.
    const out = await ingest(nodeId, []);
    expect(out.attacks.map((c) => [c.kind, c.attack.id])).toEqual([['ended', a.id]]);
    expect((await attacksOf(id)).body.attacks[0].ended_at).toBe(listedAt.toISOString());
    // Ended stays ended: the record reported open again cannot reopen it.
    expect((await ingest(nodeId, [a])).attacks).toEqual([]);
    expect((await attacksOf(id)).body.attacks[0].ended_at).toBe(listedAt.toISOString());
  });

  it('a full answer (MAX_REPORTED_ATTACKS records) may have left some out: it closes nothing', async () => {
    await freshNode();
    const id = await buy(user);
    const a = attack(id);
    await ingest(nodeId, [a]);
    // A full answer of records this gateway does not keep (another node's tunnel), none of them `a`.
    const stranger = await buy(user, otherNodeId);
    const full = Array.from({ length: MAX_REPORTED_ATTACKS }, () => attack(stranger));
    const out = await ingest(nodeId, full);
    expect(out.attacks).toEqual([]);
    expect((await attacksOf(id)).body.attacks[0].ended_at).toBeNull();
  });

  it("records of another node's tunnel are left out: an agent speaks for its own tunnels only", async () => {
    await freshNode();
    const theirs = await buy(user, otherNodeId);
    expect((await ingest(nodeId, [attack(theirs)])).attacks).toEqual([]);
    expect((await attacksOf(theirs)).body.attacks).toEqual([]);
  });

  it('a malformed record refuses the whole answer: nothing of it is stored', async () => {
    await freshNode();
    const id = await buy(user);
    const bad = { ...attack(id), peak_pps: -1 };
    await expect(ingest(nodeId, [attack(id), bad])).rejects.toThrow(/attacks\[1\]\.peak_pps/);
    expect((await attacksOf(id)).body.attacks).toEqual([]);
  });
});

describe('GET /api/dedicated/{id}/attacks', () => {
  it('the range: attacks going on at some time in it, oldest start first; defaults to the last 7 days', async () => {
    await freshNode();
    const id = await buy(user);
    const at = (minutesAgo: number) => new Date(Date.now() - minutesAgo * MIN).toISOString();
    const old = attack(id, { started_at: at(60 * 24 * 10), ended_at: at(60 * 24 * 10 - 5) });
    const spanning = attack(id, { started_at: at(120), ended_at: at(30) });
    const open = attack(id, { started_at: at(10) });
    await ingest(nodeId, [old, spanning, open]);
    expect((await attacksOf(id)).body.attacks.map((a: AttackRecord) => a.id)).toEqual([spanning.id, open.id]);
    // An attack that started before `from` and ended after it is in; one that ended before is not.
    expect((await attacksOf(id, { from: at(60), to: at(20) })).body.attacks.map((a: AttackRecord) => a.id)).toEqual([spanning.id]);
    expect((await attacksOf(id, { from: at(25) })).body.attacks.map((a: AttackRecord) => a.id)).toEqual([open.id]);
    expect((await attacksOf(id, { from: at(60 * 24 * 11) })).body.attacks.map((a: AttackRecord) => a.id)).toEqual([old.id, spanning.id, open.id]);
  });

  it('400 for a bad range or parameter, 404 for another account\'s tunnel and an unknown one, 401 without a credential', async () => {
    await freshNode();
    const id = await buy(user);
    const bad: Record<string, string>[] = [{ from: 'yesterday' }, { to: '2026-13-01T00:00:00Z' }, { from: new Date(Date.now() - 91 * 24 * 60 * MIN).toISOString() }, { from: '2026-11-25T10:00:00Z', to: '2026-11-25T10:00:00Z' }, { step: '1m' }];
    for (const q of bad) {
      const r = await attacksOf(id, q);
      expect([r.status, r.body.error], JSON.stringify(q)).toEqual([400, 'invalid_request']);
    }
    const twice = await call(gw.url, 'GET', `/api/dedicated/${id}/attacks?from=2026-11-25T10:00:00Z&from=2026-11-25T11:00:00Z`, { token: user.readKey });
    expect([twice.status, twice.body.error]).toEqual([400, 'invalid_request']);
    expect((await attacksOf(id, {}, other.readKey)).status).toBe(404);
    expect((await attacksOf(randomUUID())).status).toBe(404);
    const anon = await call(gw.url, 'GET', `/api/dedicated/${id}/attacks`);
    expect(anon.status).toBe(401);
    // GraphQL: another account's tunnel is not_found too (the tunnel itself is).
    const g = await call(gw.url, 'POST', '/graphql', { token: other.readKey, body: { query: `query($id: ID!) { tunnel(id: $id) { attacks { id } } }`, variables: { id } } });
    expect(g.body.errors?.[0]?.extensions?.code).toBe('not_found');
  });

  it('retention: an attack that ended over 90 days ago is purged by the upkeep; one going on is kept', async () => {
    await freshNode();
    const id = await buy(user);
    const now = new Date();
    const day = 24 * 60 * MIN;
    const ancient = attack(id, { started_at: new Date(now.getTime() - 95 * day).toISOString(), ended_at: new Date(now.getTime() - 91 * day).toISOString() });
    const recent = attack(id, { started_at: new Date(now.getTime() - 89 * day).toISOString(), ended_at: new Date(now.getTime() - 89 * day + MIN).toISOString() });
    const longOpen = attack(id, { started_at: new Date(now.getTime() - 95 * day).toISOString() });
    await ingest(nodeId, [ancient, recent, longOpen]);
    const upkeep = await gw.services.health.store.maintain(now);
    expect(upkeep.attacksPurged).toBeGreaterThanOrEqual(1);
    const left = (await gw.testDb.raw.query('select id from attack where tunnel_id = $1 order by started_at, id', [id])).rows.map((r) => r.id);
    expect(left.sort()).toEqual([recent.id, longOpen.id].sort());
  });
});
