// The gateway's side of the job contract: signJob produces exactly what the agent accepts, and
// schema/job.schema.json agrees with the agent's verifier.
import { beforeEach, describe, expect, it } from 'vitest';
import { JobSigningError, signJob } from '../../../server/edge/job-signing.ts';
import type { TunnelSpec } from '../../../agent/dataplane/types.ts';
import { NODE, OTHER_NODE, T0, gateway, KID, tunnel, claims, token, resetVerifier, ctx, code, jobSchema, jobSchemaAjv } from './fixtures.ts';
import { checkHello } from '../../../common/job-contract.ts';
import { checkAttackRecord } from '../../../common/attacks.ts';
import { checkEdgeEvent } from '../../../common/edge-events.ts';

beforeEach(resetVerifier);

describe('signJob (gateway side)', () => {
  it('produces exactly the contract: header {alg, typ, kid}, claims, a fresh jti, exp = iat + 60', async () => {
    const t = tunnel();
    const jws = await signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: t }, { now: T0 + 0.7 });
    const [h, p] = jws.split('.');
    expect(JSON.parse(Buffer.from(h!, 'base64url').toString())).toEqual({ alg: 'EdDSA', typ: 'tunnel-job+jwt', kid: KID });
    const c = JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<string, unknown>;
    expect(Object.keys(c)).toEqual(['iss', 'aud', 'jti', 'iat', 'exp', 'v', 'op', 'tunnel']);
    expect(c).toMatchObject({ iss: 'tunnelgate', aud: NODE, iat: T0, exp: T0 + 60, v: 1, op: 'apply', tunnel: t });
    expect(c.jti).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(await code(jws)).toBe('ok');
    const again = await signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: t }, { now: T0 });
    expect(JSON.parse(Buffer.from(again.split('.')[1]!, 'base64url').toString()).jti).not.toBe(c.jti);
    // A private JWK works too, and a shorter lifetime.
    const short = await signJob(gateway.privateKey.export({ format: 'jwk' }), KID, NODE, 'reconcile', { tunnels: [t] }, { now: T0, ttlSeconds: 15 });
    expect(JSON.parse(Buffer.from(short.split('.')[1]!, 'base64url').toString())).toMatchObject({ iat: T0, exp: T0 + 15 });
    expect(await code(short)).toBe('ok');
    // Signed now by the real clock, verified by a real-clock agent.
    expect(await code(await signJob(gateway.privateKey, KID, NODE, 'probe', { tunnel: t }), ctx({ now: () => Date.now() / 1000 }))).toBe('ok');
  });

  it('refuses to sign what an agent would call malformed', async () => {
    const t = tunnel();
    const sign = (op: string, body: unknown, opts = {}) => signJob(gateway.privateKey, KID, NODE, op as 'apply', body as { tunnel: TunnelSpec }, opts);
    await expect(sign('apply', { tunnel: { ...t, gre_key: null } })).rejects.toThrow(JobSigningError);
    await expect(sign('apply', { tunnel: { ...t, mtu: undefined } })).rejects.toThrow(/mtu is missing/);
    await expect(sign('apply', { tunnels: [t] })).rejects.toThrow(/exactly \{tunnel\}/);
    await expect(sign('apply', { tunnel: t, aud: OTHER_NODE })).rejects.toThrow(/exactly \{tunnel\}/);
    await expect(sign('destroy', { tunnel: t })).rejects.toThrow(/op must be/);
    await expect(sign('apply', { tunnel: t }, { ttlSeconds: 61 })).rejects.toThrow(/ttlSeconds/);
    await expect(signJob(gateway.privateKey, KID, 'node-1', 'apply', { tunnel: t })).rejects.toThrow(/UUID/);
    await expect(signJob(gateway.publicKey, KID, NODE, 'apply', { tunnel: t })).rejects.toThrow(/private key/);
    await expect(signJob(gateway.privateKey, '', NODE, 'apply', { tunnel: t })).rejects.toThrow(/kid/);
  });

  it('signs the version it is told (default 1); a policy only in version 2', async () => {
    const policy = { ports: [[443, 443]] as [number, number][], protocol: 'tcp' as const, syn_proxy: false, source_pps_limit: null, drop_fragments: false };
    const withPolicy = tunnel({ policy });
    const claimsOf = (jws: string) => JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString()) as Record<string, unknown>;
    const v2 = await signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: withPolicy }, { now: T0, version: 2 });
    expect(claimsOf(v2)).toMatchObject({ v: 2, tunnel: withPolicy });
    expect(await code(v2)).toBe('ok');
    expect(claimsOf(await signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: tunnel() }, { now: T0, version: 1 })).v).toBe(1);
    expect(claimsOf(await signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: tunnel() }, { now: T0 })).v).toBe(1);
    await expect(signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: withPolicy }, { now: T0 })).rejects.toThrow(/policy.*version 2/);
    await expect(signJob(gateway.privateKey, KID, NODE, 'reconcile', { tunnels: [withPolicy] }, { now: T0, version: 1 })).rejects.toThrow(JobSigningError);
    await expect(signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: tunnel() }, { now: T0, version: 4 as never })).rejects.toThrow(/version must be one of 1, 2, 3/);
    // forwarding (a tunnel held back until its origin answered the probe) only in version 3.
    const held = tunnel({ forwarding: false });
    expect(claimsOf(await signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: held }, { now: T0, version: 3 }))).toMatchObject({ v: 3, tunnel: held });
    await expect(signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: held }, { now: T0, version: 2 })).rejects.toThrow(/forwarding.*version 3/);
  });
});

// ---------------------------------------------------------------------------------------------------

/** A policy other than the default, in the wire form of a v2 job (common/tunnel-policy.ts). */
const POLICY = { ports: [[22, 22], [80, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 500, drop_fragments: true };

describe('schema/job.schema.json', () => {
  const schema = jobSchema;
  const ajv = jobSchemaAjv();
  const validate = ajv.compile(schema);
  const validateHeader = ajv.getSchema(`${String(schema.$id)}#/$defs/header`)!;

  it('is a valid 2020-12 schema and accepts what signJob signs', async () => {
    expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    const t = tunnel({ gre_key: 7 });
    for (const [op, body] of [
      ['apply', { tunnel: t }],
      ['remove', { tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } }],
      ['reconcile', { tunnels: [t] }],
      ['probe', { tunnel: t }],
    ] as const) {
      for (const version of [1, 2, 3] as const) {
        const jws = await signJob(gateway.privateKey, KID, NODE, op, body as never, { now: T0, version });
        const [h, p] = jws.split('.');
        expect(validate(JSON.parse(Buffer.from(p!, 'base64url').toString())), `${op}: ${JSON.stringify(validate.errors)}`).toBe(true);
        expect(validateHeader(JSON.parse(Buffer.from(h!, 'base64url').toString()))).toBe(true);
      }
    }
    const tp = tunnel({ policy: { ports: [[22, 22], [80, 443]], protocol: 'udp', syn_proxy: true, source_pps_limit: 100, drop_fragments: true } });
    const p2 = (await signJob(gateway.privateKey, KID, NODE, 'reconcile', { tunnels: [tp] }, { now: T0, version: 2 })).split('.')[1]!;
    expect(validate(JSON.parse(Buffer.from(p2, 'base64url').toString())), JSON.stringify(validate.errors)).toBe(true);
    const p3 = (await signJob(gateway.privateKey, KID, NODE, 'reconcile', { tunnels: [{ ...tp, forwarding: false }] }, { now: T0, version: 3 })).split('.')[1]!;
    expect(validate(JSON.parse(Buffer.from(p3, 'base64url').toString())), JSON.stringify(validate.errors)).toBe(true);
    expect(validateHeader({ alg: 'none', typ: 'tunnel-job+jwt', kid: KID })).toBe(false);
    expect(validateHeader({ alg: 'EdDSA', typ: 'JWT', kid: KID })).toBe(false);
    expect(validateHeader({ alg: 'EdDSA', typ: 'tunnel-job+jwt' })).toBe(false);
  });

  it('agrees with the verifier: for well-signed, current jobs, schema-valid exactly when the agent accepts', async () => {
    const t = tunnel();
    const corpus: Record<string, unknown>[] = [
      claims(),
      claims({ tunnel: tunnel({ gre_key: 0 }) }),
      claims({ tunnel: tunnel({ gre_key: 4294967295, mtu: 9000 }) }),
      claims({ tunnel: tunnel({ edge_inner: '100.64.0.0/31', origin_inner: '100.64.0.1/31' }) }),
      claims({ op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } }),
      claims({ op: 'remove', tunnel: t }),
      claims({ op: 'reconcile', tunnel: undefined, tunnels: [] }),
      claims({ op: 'probe' }),
      claims({ iss: 'x' }),
      claims({ jti: 'x' }),
      claims({ iat: '1' }),
      claims({ exp: undefined }),
      claims({ v: 2 }),
      claims({ v: undefined }),
      claims({ op: 'destroy' }),
      claims({ op: undefined }),
      claims({ aud: undefined }),
      claims({ extra: 1 }),
      claims({ tunnel: undefined }),
      claims({ tunnels: [t] }),
      claims({ op: 'reconcile', tunnel: undefined, tunnels: {} }),
      claims({ op: 'reconcile', tunnel: undefined, tunnels: [{ ...t, mtu: '1476' }] }),
      claims({ op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name } }),
      claims({ op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip, edge_inner: t.edge_inner } }),
      claims({ op: 'probe', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } }),
      // Version 2 and its tunnel policy.
      claims({ v: 4 }),
      claims({ v: '2' }),
      claims({ v: 2, tunnel: { ...t, policy: POLICY } }),
      claims({ v: 1, tunnel: { ...t, policy: POLICY } }),
      claims({ v: 2, op: 'reconcile', tunnel: undefined, tunnels: [{ ...t, policy: POLICY }] }),
      claims({ v: 1, op: 'reconcile', tunnel: undefined, tunnels: [{ ...t, policy: POLICY }] }),
      claims({ v: 2, op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip, policy: POLICY } }),
      claims({ v: 1, op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip, policy: POLICY } }),
      // Version 3 and its tunnel forwarding: a boolean, never in an older version.
      claims({ v: 3 }),
      claims({ v: 3, tunnel: { ...t, forwarding: false } }),
      claims({ v: 3, tunnel: { ...t, forwarding: true, policy: POLICY } }),
      claims({ v: 3, tunnel: { ...t, forwarding: 'no' } }),
      claims({ v: 3, tunnel: { ...t, forwarding: null } }),
      claims({ v: 2, tunnel: { ...t, forwarding: false } }),
      claims({ v: 1, tunnel: { ...t, forwarding: true } }),
      claims({ v: 3, op: 'reconcile', tunnel: undefined, tunnels: [{ ...t, forwarding: false }] }),
      claims({ v: 2, op: 'reconcile', tunnel: undefined, tunnels: [{ ...t, forwarding: false }] }),
      claims({ v: 3, op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip, forwarding: false } }),
      claims({ v: 3, op: 'status', tunnel: undefined }),
      // status (version 2, no body): a v 1 status, and a status carrying a body, are refused by both.
      claims({ v: 2, op: 'status', tunnel: undefined }),
      claims({ v: 1, op: 'status', tunnel: undefined }),
      claims({ v: 2, op: 'status' }),
      claims({ v: 2, op: 'status', tunnel: undefined, tunnels: [] }),
      claims({ v: 2, op: 'status', tunnel: undefined, extra: {} }),
      // traffic (versions 2 and 3, feature traffic_live): ids 1 to 100 UUIDs, an optional ISO since, nothing else.
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [t.id] }),
      claims({ v: 3, op: 'traffic', tunnel: undefined, ids: [t.id], since: '2026-11-29T02:00:00Z' }),
      claims({ v: 3, op: 'traffic', tunnel: undefined, ids: [t.id], since: '2026-11-29T02:00:00.123Z' }),
      claims({ v: 1, op: 'traffic', tunnel: undefined, ids: [t.id] }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [] }),
      claims({ v: 2, op: 'traffic', tunnel: undefined }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: 'x' }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: ['x'] }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [t.id, t.id] }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: Array.from({ length: 100 }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`) }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: Array.from({ length: 101 }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`) }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [t.id], since: 'yesterday' }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [t.id], since: 1764381600 }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [t.id], since: '2026-11-29T02:00:00+01:00' }),
      claims({ v: 2, op: 'traffic', ids: [t.id] }),
      claims({ v: 2, op: 'traffic', tunnel: undefined, ids: [t.id], extra: 1 }),
      // events (version 2, no body, a stream): the same rules as status.
      claims({ v: 2, op: 'events', tunnel: undefined }),
      claims({ v: 3, op: 'events', tunnel: undefined }),
      claims({ v: 1, op: 'events', tunnel: undefined }),
      claims({ v: 2, op: 'events' }),
      claims({ v: 2, op: 'events', tunnel: undefined, after: 'x' }),
      ...(
        [
          ['ports', '*'],
          ['ports', [[1, 65535]]],
          ['ports', []],
          ['ports', '22'],
          ['ports', [[0, 22]]],
          ['ports', [[22, 65536]]],
          ['ports', [[22]]],
          ['ports', [[22, 23, 24]]],
          ['ports', [[22.5, 23]]],
          ['ports', Array.from({ length: 33 }, (_, i) => [i + 1, i + 1])],
          ['protocol', 'both'],
          ['protocol', 'icmp'],
          ['syn_proxy', 'yes'],
          ['source_pps_limit', null],
          ['source_pps_limit', 10],
          ['source_pps_limit', 9],
          ['source_pps_limit', 1_000_001],
          ['source_pps_limit', 100.5],
          ['drop_fragments', 0],
          ['drop_fragments', undefined],
          ['max_flows', 1000],
          ['max_flows', 1_000_000],
          ['max_flows', 999],
          ['max_flows', 1_000_001],
          ['max_flows', null],
          ['alert_pps', null],
          ['alert_pps', 100],
          ['alert_pps', 100_000_000],
          ['alert_pps', 99],
          ['alert_pps', 100_000_001],
          ['alert_pps', 250.5],
          ['extra', true],
        ] as const
      ).map(([k, v]) => claims({ v: 2, tunnel: { ...t, policy: { ...POLICY, [k]: v } } })),
      claims({ v: 2, tunnel: { ...t, policy: null } }),
      claims({ v: 2, tunnel: { ...t, policy: [] } }),
      ...(
        [
          ['id', 'x'],
          ['tunnel_name', 'tg.dot'],
          ['tunnel_name', '-tg'],
          ['tunnel_name', 'sixteen-chars-xx'],
          ['tunnel_name', ''],
          ['protected_ip', '1.2.3'],
          ['protected_ip', '01.2.3.4'],
          ['origin_ip', '256.1.1.1'],
          ['edge_inner', '100.64.0.1/29'],
          ['edge_inner', '100.64.0.1'],
          ['origin_inner', 12],
          ['mtu', 575],
          ['mtu', 9001],
          ['mtu', 1476.5],
          ['gre_key', -1],
          ['gre_key', 4294967296],
          ['gre_key', '42'],
          ['gre_key', null],
          ['status', 'x'],
        ] as const
      ).map(([k, v]) => claims({ tunnel: { ...t, [k]: v } })),
    ];
    for (const c of corpus) {
      const bySchema = validate(c);
      const byAgent = (await code(await token(c))) === 'ok';
      expect(bySchema, `${JSON.stringify(c).slice(0, 800)} schema=${bySchema} agent=${byAgent} ${JSON.stringify(validate.errors?.[0])}`).toBe(byAgent);
    }
  });

  it('names the checks it cannot express, which only the verifier makes', async () => {
    const t = tunnel();
    // Schema-valid, refused by the agent: inner ends in two subnets, a reconcile with a duplicate id, a
    // port range backwards.
    for (const c of [
      claims({ tunnel: { ...t, edge_inner: '100.64.0.1/30', origin_inner: '100.64.0.6/30' } }),
      claims({ op: 'reconcile', tunnel: undefined, tunnels: [t, t] }),
      claims({ v: 2, tunnel: { ...t, policy: { ...POLICY, ports: [[443, 80]] } } }),
    ]) {
      expect(validate(c)).toBe(true);
      expect(await code(await token(c))).toBe('malformed');
    }
    expect(String(schema.description)).toMatch(/same subnet|one \/30/);
    expect(String(schema.description)).toMatch(/distinct id/);
    expect(String(schema.description)).toMatch(/from <= to/);
  });

  it('describes the hello line the agent answers', () => {
    const validateHello = ajv.getSchema(`${String(schema.$id)}#/$defs/helloLine`)!;
    expect(validateHello({ ok: true, versions: [1, 2], agent: '0.1.0' })).toBe(true);
    expect(validateHello({ ok: true, versions: [1, 2] })).toBe(false);
    // tunnel_links (docs/CONTRACTS.md "Tunnel links"): optional, and the same shape checkHello takes.
    for (const links of [{ kind: 'gre', usable: false, reason: 'no GRE' }, { kind: 'veth-standin', usable: true }, { kind: 'gre', usable: null }]) {
      const line = { ok: true, versions: [1, 2], agent: '0.1.0', tunnel_links: links };
      expect(validateHello(line)).toBe(true);
      expect(checkHello(line)).toBeUndefined();
    }
    for (const links of [{ kind: 'gre' }, { kind: 'gre', usable: 'no' }, 'gre']) {
      const line = { ok: true, versions: [1, 2], agent: '0.1.0', tunnel_links: links };
      expect(validateHello(line), JSON.stringify(links)).toBe(false);
      expect(checkHello(line), JSON.stringify(links)).toMatch(/tunnel_links/);
    }
    expect(validateHello({ ok: false, error: 'unsupported_command', error_description: 'x' })).toBe(false);
    // features (docs/CONTRACTS.md "Attacks"): optional, a list of strings; unknown ones allowed (a newer agent).
    for (const features of [['attacks'], [], ['attacks', 'later']]) {
      const line = { ok: true, versions: [1, 2], agent: '0.1.0', features };
      expect(validateHello(line)).toBe(true);
      expect(checkHello(line)).toBeUndefined();
    }
    for (const features of ['attacks', [1], [null]]) {
      const line = { ok: true, versions: [1, 2], agent: '0.1.0', features };
      expect(validateHello(line), JSON.stringify(features)).toBe(false);
      expect(checkHello(line), JSON.stringify(features)).toMatch(/features/);
    }
  });

  it("describes the status answer's attack records as common/attacks.ts checks them", () => {
    const validateAttack = ajv.getSchema(`${String(schema.$id)}#/$defs/attackRecord`)!;
    const a = {
      id: '00000000-0000-4000-8000-000000000001',
      tunnel_id: '7d3c4b0e-2f7a-4c8e-9a51-0b6f1f9b2c11',
      started_at: '2026-11-25T12:00:00.000Z',
      ended_at: null,
      peak_pps: 120_000,
      peak_bps: 96_000_000,
      vector: { protocol: null, ports: null, top_drop_reason: 'rate_limited' },
      packets_dropped: 100,
      packets_passed: 5,
    };
    const corpus: unknown[] = [
      a,
      { ...a, ended_at: '2026-11-25T12:01:00.000Z', vector: { protocol: 'udp', ports: [53, 123], top_drop_reason: null } },
      { ...a, extra: true },
      { ...a, id: 'x' },
      { ...a, tunnel_id: undefined },
      { ...a, ended_at: 5 },
      { ...a, peak_pps: -1 },
      { ...a, packets_passed: 2.5 },
      { ...a, vector: { ...a.vector, protocol: 'gre' } },
      { ...a, vector: { ...a.vector, ports: [1, 2, 3, 4, 5, 6] } },
      { ...a, vector: { ...a.vector, ports: [65536] } },
      { ...a, vector: { ...a.vector, top_drop_reason: 'boredom' } },
      { ...a, vector: { protocol: null, ports: null } },
    ];
    for (const c of corpus) expect(validateAttack(c), JSON.stringify(c)).toBe(checkAttackRecord(c) === undefined);
  });

  it('describes the events stream\'s lines as common/edge-events.ts checks them', () => {
    const validateLine = ajv.getSchema(`${String(schema.$id)}#/$defs/eventLine`)!;
    const a = {
      id: '00000000-0000-4000-8000-000000000001',
      tunnel_id: '7d3c4b0e-2f7a-4c8e-9a51-0b6f1f9b2c11',
      started_at: '2026-11-25T12:00:00.000Z',
      ended_at: null,
      peak_pps: 120_000,
      peak_bps: 96_000_000,
      vector: { protocol: null, ports: null, top_drop_reason: null },
      packets_dropped: 0,
      packets_passed: 5,
    };
    const ended = { ...a, ended_at: '2026-11-25T12:01:00.000Z' };
    const h = { type: 'health_changed', tunnel_id: a.tunnel_id, health: 'down', checked_at: '2026-11-25T12:00:01Z' };
    const corpus: unknown[] = [
      { type: 'attack_started', attack: a },
      { type: 'attack_ended', attack: ended },
      { type: 'attack_started', attack: ended },
      { type: 'attack_ended', attack: a },
      { type: 'attack_started', attack: { ...a, id: 'x' } },
      { type: 'attack_started' },
      h,
      { ...h, extra: 1 },
      { ...h, health: 'sick' },
      { ...h, tunnel_id: 'x' },
      { ...h, checked_at: 'yesterday' },
      { ...h, checked_at: undefined },
      { type: 'keepalive', at: '2026-11-25T12:00:01.5+02:00' },
      { type: 'keepalive' },
      { type: 'keepalive', at: 5 },
      { type: 'reboot' },
      {},
      [],
      'keepalive',
    ];
    for (const c of corpus) expect(validateLine(c), JSON.stringify(c)).toBe(checkEdgeEvent(c) === undefined);
  });
});
