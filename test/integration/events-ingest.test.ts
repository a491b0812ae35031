// Pushed events into the gateway's ingestion (server/events/apply.ts; docs/CONTRACTS.md "Events stream") against
// the real gateway and PostgreSQL, through the seam the stream keeper calls: an attack start pushed, then ended,
// then the same record in a status pull is one row and one webhook event each way; a pushed start does not end the
// node's other open attacks (one record says nothing of the others, unlike a status answer); a pushed health
// change writes the tunnel, its history row at the agent's check time and one `tunnel.health_changed`, and the
// same change pushed again or pulled later writes nothing more; another node's tunnel is left alone. The stream
// itself over SSH with a real agent is test/integration/events-stream.test.ts.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { applyEdgeEvent } from '../../server/events/apply.ts';
import type { AttackRecord } from '../../common/attacks.ts';
import type { EdgeEvent } from '../../common/edge-events.ts';
import type { StatusResult } from '../../common/tunnel-status.ts';
import { until } from '../helpers/wait.ts';

let gw: RunningGateway;
let user: SeededUser;
let pools = 60;

async function freshNode(): Promise<string> {
  return (await seedNode(gw.testDb.db, `198.18.${pools++}.0/28`)).node_id;
}

async function buy(nodeId: string): Promise<string> {
  const r = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(r.status).toBe(201);
  const id = r.body.tunnel.id as string;
  await gw.testDb.raw.query(`update tunnel set status = 'active', node_id = $1, health = 'up' where id = $2`, [nodeId, id]);
  return id;
}

function attack(tunnelId: string, over: Partial<AttackRecord> = {}): AttackRecord {
  return {
    id: randomUUID(),
    tunnel_id: tunnelId,
    started_at: new Date(Date.now() - 60_000).toISOString(),
    ended_at: null,
    peak_pps: 5_000,
    peak_bps: 4_000_000,
    vector: { protocol: null, ports: null, top_drop_reason: null },
    packets_dropped: 0,
    packets_passed: 10_000,
    ...over,
  };
}

const push = (nodeId: string, e: EdgeEvent) => applyEdgeEvent({ db: gw.testDb.db, attacks: gw.services.attacks.ingest, health: gw.services.health.ingest }, nodeId, e);

const outbox = async (tunnelId: string, type: string) =>
  (await gw.testDb.raw.query<{ n: number }>(`select count(*)::int as n from webhook_delivery where event_type = $1 and body::jsonb #>> '{data,tunnel,id}' = $2`, [type, tunnelId])).rows[0]!.n;

beforeAll(async () => {
  gw = await startGateway({ config: { allowPrivateWebhooks: true } });
  user = await seedUser(gw.testDb.db, { balanceUsd: '1000.00' });
  const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: 'https://hooks.example.com/events' } });
  expect(hook.status).toBe(201);
}, 120_000);

afterAll(async () => {
  await gw?.close();
});

describe('pushed events into the ingestion', () => {
  it('an attack pushed and then pulled is one row and one event each way; a push closes no other open attack', async () => {
    const nodeId = await freshNode();
    const id = await buy(nodeId);
    const other = attack(id, { started_at: new Date(Date.now() - 120_000).toISOString() });
    await push(nodeId, { type: 'attack_started', attack: other });
    const a = attack(id);
    await push(nodeId, { type: 'attack_started', attack: a });
    await push(nodeId, { type: 'attack_started', attack: a });
    const open = (await gw.testDb.raw.query('select id from attack where tunnel_id = $1 and ended_at is null order by started_at', [id])).rows;
    expect(open).toEqual([{ id: other.id }, { id: a.id }]);
    expect(await outbox(id, 'tunnel.attack_started')).toBe(2);

    const ended = { ...a, ended_at: new Date().toISOString(), peak_pps: 9_000 };
    await push(nodeId, { type: 'attack_ended', attack: ended });
    // The pull later carries both records as the agent holds them: nothing new.
    const status: StatusResult = { agent: { version: '0.2.0', uptime_s: 10, tunnels: 0 }, tunnels: [], attacks: [other, ended] };
    const round = await gw.services.health.ingest.ingestStatus(nodeId, status, new Date());
    expect(round.attacks).toEqual([]);
    expect(await outbox(id, 'tunnel.attack_started')).toBe(2);
    expect(await outbox(id, 'tunnel.attack_ended')).toBe(1);
    const rows = (await gw.testDb.raw.query('select id, ended_at is not null as ended, peak_pps::int as peak from attack where tunnel_id = $1 order by started_at', [id])).rows;
    expect(rows).toEqual([
      { id: other.id, ended: false, peak: 5_000 },
      { id: a.id, ended: true, peak: 9_000 },
    ]);
  });

  it("an attack on another node's tunnel is left out", async () => {
    const nodeId = await freshNode();
    const elsewhere = await freshNode();
    const id = await buy(nodeId);
    await push(elsewhere, { type: 'attack_started', attack: attack(id) });
    expect((await gw.testDb.raw.query('select count(*)::int as n from attack where tunnel_id = $1', [id])).rows[0].n).toBe(0);
    expect(await outbox(id, 'tunnel.attack_started')).toBe(0);
  });

  it('a health change pushed writes the tunnel, its history at the check time and one event; again, or pulled, nothing more', async () => {
    const nodeId = await freshNode();
    const id = await buy(nodeId);
    const checkedAt = new Date(Date.now() - 1500).toISOString();
    const down: EdgeEvent = { type: 'health_changed', tunnel_id: id, health: 'down', checked_at: checkedAt };
    await push(nodeId, down);
    await push(nodeId, down);
    expect((await gw.testDb.raw.query('select health from tunnel where id = $1', [id])).rows[0].health).toBe('down');
    const history = (await gw.testDb.raw.query('select previous, health, at from traffic.tunnel_health_change where tunnel_id = $1', [id])).rows;
    expect(history).toEqual([{ previous: 'up', health: 'down', at: new Date(checkedAt) }]);
    expect(await outbox(id, 'tunnel.health_changed')).toBe(1);

    const zero = { packets_in: 0, bytes_in: 0, packets_out: 0, bytes_out: 0, dropped: { not_allowed: 0, rate_limited: 0, spoofed: 0, invalid: 0, fragment: 0 } };
    const status = { agent: { version: '0.2.0', uptime_s: 10, tunnels: 1 }, tunnels: [{ id, health: 'down', checked_at: checkedAt, counters: zero }] } as unknown as StatusResult;
    const round = await gw.services.health.ingest.ingestStatus(nodeId, status, new Date());
    expect(round.healthChanged).toEqual([]);
    expect(await outbox(id, 'tunnel.health_changed')).toBe(1);

    // Another node's agent cannot move it.
    await push(await freshNode(), { type: 'health_changed', tunnel_id: id, health: 'up', checked_at: new Date().toISOString() });
    expect((await gw.testDb.raw.query('select health from tunnel where id = $1', [id])).rows[0].health).toBe('down');
  });

  it('a pull whose check is older than a change pushed meanwhile does not undo it; a later check does change it', async () => {
    const nodeId = await freshNode();
    const id = await buy(nodeId);
    const zero = { packets_in: 0, bytes_in: 0, packets_out: 0, bytes_out: 0, dropped: { not_allowed: 0, rate_limited: 0, spoofed: 0, invalid: 0, fragment: 0 } };
    const pulled = (health: string, checkedAt: string) =>
      ({ agent: { version: '0.2.0', uptime_s: 10, tunnels: 1 }, tunnels: [{ id, health, checked_at: checkedAt, counters: zero }] }) as unknown as StatusResult;
    const t0 = Date.now() - 10_000;
    // The agent answered a status pull (up, checked at t0), then its next check saw the tunnel down and pushed it;
    // the pull's answer reaches the ingestion after the push.
    await push(nodeId, { type: 'health_changed', tunnel_id: id, health: 'down', checked_at: new Date(t0 + 2000).toISOString() });
    const stale = await gw.services.health.ingest.ingestStatus(nodeId, pulled('up', new Date(t0).toISOString()), new Date());
    expect(stale.healthChanged).toEqual([]);
    expect((await gw.testDb.raw.query('select health from tunnel where id = $1', [id])).rows[0].health).toBe('down');
    expect(await outbox(id, 'tunnel.health_changed')).toBe(1);
    // A pull from a later check is news: it changes the health, with its history row and event.
    const later = await gw.services.health.ingest.ingestStatus(nodeId, pulled('up', new Date(t0 + 4000).toISOString()), new Date());
    expect(later.healthChanged).toEqual([id]);
    expect((await gw.testDb.raw.query('select health from tunnel where id = $1', [id])).rows[0].health).toBe('up');
    expect(await outbox(id, 'tunnel.health_changed')).toBe(2);
  });

  it("an attack's end is not lost when its push and a pull of it still open write at once", async () => {
    const nodeId = await freshNode();
    const id = await buy(nodeId);
    const a = attack(id);
    // A pull's round stores the attack as open, and has not committed yet...
    let release!: () => void;
    const hold = new Promise<void>((r) => (release = r));
    let stored!: () => void;
    const pulledIn = new Promise<void>((r) => (stored = r));
    const round = gw.testDb.db.transaction(async (sql) => {
      await gw.services.attacks.ingest.recordEvent(sql, nodeId, a, new Date());
      stored();
      await hold;
    });
    await pulledIn;
    // ...when the push of its end arrives: it must wait for the round, then see the row as open and end it.
    const pushed = push(nodeId, { type: 'attack_ended', attack: { ...a, ended_at: new Date().toISOString() } });
    await until('the push waiting for the round', async () => {
      const r = await gw.testDb.raw.query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`);
      return r.rows[0]!.n > 0;
    });
    release();
    await round;
    await pushed;
    expect((await gw.testDb.raw.query('select ended_at is not null as ended from attack where id = $1', [a.id])).rows).toEqual([{ ended: true }]);
    expect(await outbox(id, 'tunnel.attack_started')).toBe(1);
    expect(await outbox(id, 'tunnel.attack_ended')).toBe(1);
  });
});
