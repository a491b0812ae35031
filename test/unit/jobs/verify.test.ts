// verifyJob against docs/CONTRACTS.md "Exact rules": jobs it accepts, every refusal code with real jose-signed
// tokens, and the precedence between codes.
import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { MAX_INPUT_BYTES } from '../../../common/job-contract.ts';
import { parseJobKey } from '../../../agent/jobs/job-key.ts';
import { verifyJob } from '../../../agent/jobs/verify.ts';
import { NODE, OTHER_NODE, T0, gateway, gatewayJwk, KID, intruder, tunnel, b64, claims, token, unsigned, verifier, resetVerifier, ctx, code } from './fixtures.ts';

beforeEach(resetVerifier);

describe('verifyJob: accepted jobs', () => {
  it('accepts a job per op and hands back its claims, with the jti recorded until exp + 30 s', async () => {
    const t = tunnel();
    const bodies: Record<string, Record<string, unknown>> = {
      apply: { tunnel: t },
      remove: { tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } },
      reconcile: { tunnels: [t, tunnel({ id: randomUUID(), tunnel_name: 'tg-other', protected_ip: '203.0.113.11', edge_inner: '100.64.0.5/30', origin_inner: '100.64.0.6/30', gre_key: 42 })] },
      probe: { tunnel: t },
    };
    for (const [op, body] of Object.entries(bodies)) {
      const c = { iss: 'tunnelgate', aud: NODE, jti: randomUUID(), iat: T0, exp: T0 + 60, v: 1, op, ...body };
      const out = await verifyJob(await token(c), ctx());
      expect(out.ok, op).toBe(true);
      if (!out.ok) continue;
      expect(out.job.op).toBe(op);
      expect(out.job.jti).toBe(c.jti);
      expect(out.job.kid).toBe(KID);
      expect(verifier.replay.used.get(c.jti as string)).toBe(T0 + 90);
    }
    // An empty desired set is a valid reconcile.
    expect(await code(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [] })))).toBe('ok');
  });

  it('accepts exactly one trailing newline, and the time boundaries', async () => {
    expect(await code(`${await token()}\n`)).toBe('ok');
    expect(await code(Buffer.from(`${await token()}\n`))).toBe('ok');
    expect(await code(await token(claims({ iat: T0 + 30, exp: T0 + 60 })))).toBe('ok'); // iat 30 s ahead: allowed
    verifier.clock = T0 + 60 + 30;
    expect(await code(await token(claims({ iat: T0, exp: T0 + 60 })))).toBe('ok'); // exp passed by 30 s: allowed
  });

  it('accepts a PEM job key (no kid to match) and lower-cases UUIDs', async () => {
    const pemKey = parseJobKey(gateway.publicKey.export({ format: 'pem', type: 'spki' }).toString());
    const upper = randomUUID().toUpperCase();
    const out = await verifyJob(await token(claims({ jti: upper, aud: NODE.toUpperCase(), tunnel: tunnel({ id: upper }) }), { kid: 'any-kid' }), ctx({ jobKeys: [pemKey] }));
    expect(out.ok).toBe(true);
    if (out.ok && out.job.op === 'apply') {
      expect(out.job.jti).toBe(upper.toLowerCase());
      expect(out.job.tunnel.id).toBe(upper.toLowerCase());
    }
  });
});

describe('verifyJob: each refusal code', () => {
  it('malformed: not a compact JWS', async () => {
    const good = await token();
    const [h, p, s] = good.split('.');
    for (const bad of ['', 'hello', `${h}.${p}`, `${h}.${p}.${s}.x`, `${good}\n\n`, ` ${good}`, `${good} `, `${good}\r\n`, `.${p}.${s}`, `${h}..${s}`, `${h}.${p}.${s}=`, `${h}!.${p}.${s}`]) {
      expect(await code(bad), JSON.stringify(bad.slice(0, 20))).toBe('malformed');
    }
    expect(await code(`${b64('not json')}.${p}.${s}`)).toBe('malformed');
    expect(await code(`${b64([1, 2])}.${p}.${s}`)).toBe('malformed');
    expect(await code(`${h}.${b64('[]')}.${s}`)).toBe('malformed');
    expect(await code(`${h}.${b64('"a string"')}.${s}`)).toBe('malformed');
    expect(await code(Buffer.from([0xff, 0xfe, 0x2e, 0x41, 0x2e, 0x41]))).toBe('malformed');
  });

  it('malformed: wrong or missing typ, missing kid, crit', async () => {
    expect(await code(await token(claims(), { typ: undefined }))).toBe('malformed');
    expect(await code(await token(claims(), { typ: 'JWT' }))).toBe('malformed');
    expect(await code(await token(claims(), { typ: 'TUNNEL-JOB+JWT' }))).toBe('malformed');
    expect(await code(await token(claims(), { kid: undefined }))).toBe('malformed');
    expect(await code(await token(claims(), { kid: '' }))).toBe('malformed');
    expect(await code(unsigned(claims(), { alg: 'EdDSA', typ: 'tunnel-job+jwt', kid: KID, crit: ['exp'], exp: 1 }))).toBe('malformed');
  });

  it('malformed: wrong or missing iss, jti (a UUID), iat, exp', async () => {
    for (const c of [
      claims({ iss: undefined }),
      claims({ iss: 'someone-else' }),
      claims({ jti: undefined }),
      claims({ jti: 'not-a-uuid' }),
      claims({ jti: 42 }),
      claims({ jti: `${randomUUID()}x` }),
      claims({ iat: undefined }),
      claims({ iat: String(T0) }),
      claims({ iat: -1 }),
      claims({ exp: undefined }),
      claims({ exp: null }),
      claims({ iat: T0, exp: T0 - 1 }), // exp before iat
    ]) {
      expect(await code(await token(c)), JSON.stringify(c).slice(0, 120)).toBe('malformed');
    }
  });

  it('malformed: iat more than 30 s in the future', async () => {
    expect(await code(await token(claims({ iat: T0 + 31, exp: T0 + 60 })))).toBe('malformed');
    expect(await code(await token(claims({ iat: T0 + 3600, exp: T0 + 3630 })))).toBe('malformed');
  });

  it('malformed: a body that does not match the op', async () => {
    const t = tunnel();
    const bad: Record<string, unknown>[] = [
      claims({ op: undefined }),
      claims({ op: 7 }),
      claims({ tunnel: undefined }), // apply without tunnel
      claims({ tunnel: undefined, tunnels: [t] }), // apply with a list
      claims({ tunnels: [t] }), // apply with both
      claims({ op: 'reconcile', tunnel: undefined }),
      claims({ op: 'reconcile', tunnel: undefined, tunnels: t }),
      claims({ op: 'reconcile', tunnel: undefined, tunnels: [t, t] }), // duplicate id
      claims({ op: 'reconcile', tunnel: undefined, tunnels: [t, { ...t, id: randomUUID(), protected_ip: '203.0.113.99', edge_inner: '100.64.0.5/30', origin_inner: '100.64.0.6/30' }] }), // duplicate tunnel_name
      claims({ op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name } }), // remove without protected_ip
      claims({ op: 'probe', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } }), // probe needs the whole tunnel
      claims({ tunnel: { ...t, mtu: undefined } }),
      claims({ tunnel: { ...t, mtu: 1476.5 } }),
      claims({ tunnel: { ...t, mtu: 100 } }),
      claims({ tunnel: { ...t, id: 'tunnel-1' } }),
      claims({ tunnel: { ...t, protected_ip: '203.0.113.256' } }),
      claims({ tunnel: { ...t, origin_ip: '192.0.2.050' } }),
      claims({ tunnel: { ...t, tunnel_name: 'a-name-longer-than-15' } }),
      claims({ tunnel: { ...t, tunnel_name: 'tg x' } }),
      claims({ tunnel: { ...t, edge_inner: '100.64.0.1/24', origin_inner: '100.64.0.2/24' } }),
      claims({ tunnel: { ...t, edge_inner: '100.64.0.1/30', origin_inner: '100.64.0.6/30' } }), // two subnets
      claims({ tunnel: { ...t, edge_inner: '100.64.0.0/30', origin_inner: '100.64.0.1/30' } }), // network address
      claims({ tunnel: { ...t, origin_inner: t.edge_inner } }),
      claims({ tunnel: { ...t, gre_key: -1 } }),
      claims({ tunnel: { ...t, gre_key: 2 ** 32 } }),
      claims({ tunnel: { ...t, gre_key: null } }),
      claims({ tunnel: { ...t, status: 'active' } }), // unknown tunnel field
      claims({ tunnel: [t] }),
      claims({ note: 'extra claim' }),
      claims({ nbf: T0 }),
    ];
    for (const c of bad) expect(await code(await token(c)), JSON.stringify(c).slice(0, 160)).toBe('malformed');
    // The /31 form and a remove that carries every field are fine.
    expect(await code(await token(claims({ tunnel: { ...t, edge_inner: '100.64.0.0/31', origin_inner: '100.64.0.1/31' } })))).toBe('ok');
    expect(await code(await token(claims({ op: 'remove', tunnel: t })))).toBe('ok');
  });

  it('malformed: input over 16 MiB', async () => {
    expect(await code(Buffer.alloc(MAX_INPUT_BYTES + 1, 0x41))).toBe('malformed');
    const out = await verifyJob(Buffer.alloc(MAX_INPUT_BYTES + 1, 0x41), ctx());
    expect(!out.ok && out.error_description).toMatch(/16777216 bytes/);
  });

  it('invalid_signature: alg none, HS256, another Ed25519 key, a tampered payload, another kid', async () => {
    expect(await code(unsigned(claims()))).toBe('invalid_signature');
    expect(await code(unsigned(claims(), { alg: 'EdDSA', typ: 'tunnel-job+jwt', kid: KID }))).toBe('invalid_signature'); // EdDSA with no signature
    expect(await code(await token(claims(), { alg: 'HS256' }, new Uint8Array(32).fill(7)))).toBe('invalid_signature');
    // HS256 keyed with the public key's bytes (the classic algorithm-confusion attack).
    expect(await code(await token(claims(), { alg: 'HS256' }, Buffer.from(gatewayJwk.x!, 'base64url')))).toBe('invalid_signature');
    expect(await code(await token(claims(), {}, intruder.privateKey))).toBe('invalid_signature');
    expect(await code(await token(claims(), { alg: 'Ed25519' }))).toBe('invalid_signature'); // the fully-specified name is not EdDSA
    expect(await code(unsigned(claims(), { typ: 'tunnel-job+jwt', kid: KID }))).toBe('invalid_signature'); // no alg at all
    const good = await token();
    const [h, , s] = good.split('.');
    expect(await code(`${h}.${b64(claims())}.${s}`)).toBe('invalid_signature');
    const sig = Buffer.from(s!, 'base64url');
    sig[0]! ^= 1;
    expect(await code(`${good.split('.').slice(0, 2).join('.')}.${sig.toString('base64url')}`)).toBe('invalid_signature');
    expect(await code(await token(claims(), { kid: 'another-key' }))).toBe('invalid_signature');
  });

  it('wrong_audience: aud missing or another node, an edge_ip not AGENT_EDGE_IP', async () => {
    expect(await code(await token(claims({ aud: OTHER_NODE })))).toBe('wrong_audience');
    expect(await code(await token(claims({ aud: undefined })))).toBe('wrong_audience');
    expect(await code(await token(claims({ aud: [NODE] })))).toBe('wrong_audience');
    expect(await code(await token(claims({ aud: 'tunnelgate' })))).toBe('wrong_audience');
    expect(await code(await token(claims({ tunnel: tunnel({ edge_ip: '198.51.100.8' }) })))).toBe('wrong_audience');
    expect(await code(await token(claims({ op: 'probe', tunnel: tunnel({ edge_ip: '198.51.100.8' }) })))).toBe('wrong_audience');
    const t2 = tunnel({ id: randomUUID(), tunnel_name: 'tg-two', protected_ip: '203.0.113.12', edge_ip: '198.51.100.8', edge_inner: '100.64.0.5/30', origin_inner: '100.64.0.6/30' });
    expect(await code(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [tunnel(), t2] })))).toBe('wrong_audience');
    expect(await code(await token(claims({ op: 'remove', tunnel: { ...tunnel(), edge_ip: '198.51.100.8' } })))).toBe('wrong_audience');
    // A remove that names no edge_ip is fine.
    const t = tunnel();
    expect(await code(await token(claims({ op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } })))).toBe('ok');
  });

  it('expired: exp past beyond the 30 s skew, or more than 60 s after iat', async () => {
    verifier.clock = T0 + 60 + 31;
    expect(await code(await token(claims({ iat: T0, exp: T0 + 60 })))).toBe('expired');
    verifier.clock = T0;
    expect(await code(await token(claims({ iat: T0 - 600, exp: T0 - 540 })))).toBe('expired');
    expect(await code(await token(claims({ iat: T0, exp: T0 + 61 })))).toBe('expired');
    expect(await code(await token(claims({ iat: T0 - 10, exp: T0 + 3600 })))).toBe('expired');
  });

  it('unsupported_version: v missing or not 1, 2 or 3', async () => {
    for (const v of [undefined, 4, 0, '1', '2', '3', 1.5, null]) expect(await code(await token(claims({ v }))), String(v)).toBe('unsupported_version');
  });

  it('unsupported_command: an op this agent does not know', async () => {
    expect(await code(await token(claims({ op: 'destroy' })))).toBe('unsupported_command');
    expect(await code(await token(claims({ op: 'APPLY' })))).toBe('unsupported_command');
  });

  it('status is version 2\'s: a v 2 status (no body) is accepted, a v 1 status is unsupported_command', async () => {
    expect(await code(await token(claims({ v: 2, op: 'status', tunnel: undefined })))).toBe('ok');
    expect(await code(await token(claims({ v: 1, op: 'status', tunnel: undefined })))).toBe('unsupported_command');
    // An agent configured for version 1 only (AGENT_JOB_VERSIONS=1): a v 2 status is unsupported_version.
    expect(await code(await token(claims({ v: 2, op: 'status', tunnel: undefined })), ctx({ versions: [1] }))).toBe('unsupported_version');
  });

  it('replayed: a jti seen before, also when both arrive at once', async () => {
    const jws = await token();
    expect(await code(jws)).toBe('ok');
    expect(await code(jws)).toBe('replayed');
    expect(await code(`${jws}\n`)).toBe('replayed');
    // Another token with the same jti (re-signed) is a replay too.
    const jti = randomUUID();
    expect(await code(await token(claims({ jti })))).toBe('ok');
    expect(await code(await token(claims({ jti: jti.toUpperCase(), op: 'probe' })))).toBe('replayed');
    const twin = await token();
    const both = await Promise.all([code(twin), code(twin), code(twin)]);
    expect(both.sort()).toEqual(['ok', 'replayed', 'replayed']);
  });

  it('refusals carry the jti when it is a UUID, and say why', async () => {
    const jti = randomUUID();
    const out = await verifyJob(await token(claims({ jti, aud: OTHER_NODE })), ctx());
    expect(out).toEqual({ ok: false, jti, error: 'wrong_audience', error_description: 'aud is not this node' });
    const noJti = await verifyJob(await token(claims({ jti: 'x' })), ctx());
    expect(noJti.ok === false && 'jti' in noJti).toBe(false);
  });
});

describe('verifyJob: job version 2 (docs/CONTRACTS.md "Edge jobs", "Versions")', () => {
  const policy = { ports: [[22, 22], [80, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 500, drop_fragments: true };

  it('accepts v 2 with a tunnel policy, and hands the policy on unchanged', async () => {
    const t = tunnel({ policy } as never);
    for (const c of [claims({ v: 2, tunnel: t }), claims({ v: 2, op: 'probe', tunnel: t }), claims({ v: 2, op: 'remove', tunnel: t })]) {
      const out = await verifyJob(await token(c), ctx());
      expect(out.ok, JSON.stringify(out)).toBe(true);
      if (out.ok && out.job.op !== 'reconcile' && out.job.op !== 'status' && out.job.op !== 'traffic') expect(out.job.tunnel.policy).toEqual(policy);
    }
    const out = await verifyJob(await token(claims({ v: 2, op: 'reconcile', tunnel: undefined, tunnels: [t] })), ctx());
    expect(out.ok && out.job.op === 'reconcile' && out.job.v === 2 && out.job.tunnels[0]!.policy).toEqual(policy);
    // v 2 without a policy (the default) is fine too, and so is v 1 without one.
    expect(await code(await token(claims({ v: 2 })))).toBe('ok');
    expect(await code(await token(claims({ v: 1 })))).toBe('ok');
  });

  it('a v 1 tunnel carrying policy is malformed; a v 2 policy of the wrong shape is malformed', async () => {
    expect(await code(await token(claims({ v: 1, tunnel: tunnel({ policy } as never) })))).toBe('malformed');
    expect(await code(await token(claims({ v: 1, op: 'reconcile', tunnel: undefined, tunnels: [tunnel({ policy } as never)] })))).toBe('malformed');
    for (const bad of [{ ...policy, ports: '22' }, { ...policy, protocol: 'icmp' }, { ...policy, source_pps_limit: 1 }, { ...policy, extra: 1 }, { ...policy, drop_fragments: undefined }, null]) {
      expect(await code(await token(claims({ v: 2, tunnel: { ...tunnel(), policy: bad } }))), JSON.stringify(bad)).toBe('malformed');
    }
  });

  it('v 4 is unsupported_version, even with a body no version knows (not malformed)', async () => {
    expect(await code(await token(claims({ v: 4 })))).toBe('unsupported_version');
    expect(await code(await token(claims({ v: 4, tunnel: { ...tunnel(), policy: 'strict' } })))).toBe('unsupported_version');
  });

  it('v 3 adds tunnel.forwarding (docs/CONTRACTS.md "Versions"): a boolean in v 3 only, handed on as sent; false only when held back', async () => {
    for (const forwarding of [false, true]) {
      const t = tunnel({ forwarding });
      for (const c of [claims({ v: 3, tunnel: t }), claims({ v: 3, op: 'probe', tunnel: t }), claims({ v: 3, op: 'remove', tunnel: t }), claims({ v: 3, op: 'reconcile', tunnel: undefined, tunnels: [t] })]) {
        const out = await verifyJob(await token(c), ctx());
        expect(out.ok, JSON.stringify(out)).toBe(true);
        if (out.ok) expect(out.job.op === 'reconcile' ? out.job.tunnels[0]!.forwarding : out.job.op === 'status' || out.job.op === 'traffic' ? null : out.job.tunnel.forwarding).toBe(forwarding);
      }
    }
    // Without it (forwarding, as in v 1 and 2), and with a policy: v 3 has everything v 2 has.
    expect(await code(await token(claims({ v: 3 })))).toBe('ok');
    expect(await code(await token(claims({ v: 3, tunnel: tunnel({ policy, forwarding: false } as never) })))).toBe('ok');
    expect(await code(await token(claims({ v: 3, op: 'status', tunnel: undefined })))).toBe('ok');
    // Older versions have no such field: an agent from before version 3 would refuse it as an unknown field.
    for (const v of [1, 2]) {
      expect(await code(await token(claims({ v, tunnel: tunnel({ forwarding: false }) }))), `v ${v}`).toBe('malformed');
      expect(await code(await token(claims({ v, op: 'reconcile', tunnel: undefined, tunnels: [tunnel({ forwarding: true })] }))), `v ${v} reconcile`).toBe('malformed');
    }
    for (const bad of [null, 'false', 0, 1, {}]) expect(await code(await token(claims({ v: 3, tunnel: { ...tunnel(), forwarding: bad } }))), JSON.stringify(bad)).toBe('malformed');
  });

  it('an agent accepting only v 1 and 2 (AGENT_JOB_VERSIONS=1,2: an agent from before version 3) refuses v 3 as unsupported_version, body unchecked', async () => {
    const v2 = ctx({ versions: [1, 2] });
    expect(await code(await token(claims({ v: 3, tunnel: tunnel({ forwarding: false }) })), v2)).toBe('unsupported_version');
    expect(await code(await token(claims({ v: 2 })), v2)).toBe('ok');
  });

  it('an agent accepting only v 1 (AGENT_JOB_VERSIONS=1, an old agent\'s stand-in) refuses v 2 as unsupported_version, body unchecked', async () => {
    const old = ctx({ versions: [1] });
    expect(await code(await token(claims({ v: 2 })), old)).toBe('unsupported_version');
    expect(await code(await token(claims({ v: 2, tunnel: tunnel({ policy } as never) })), old)).toBe('unsupported_version');
    expect(await code(await token(claims({ v: 2, tunnel: undefined })), old)).toBe('unsupported_version');
    expect(await code(await token(claims({ v: 1 })), old)).toBe('ok');
  });
});

describe('verifyJob: precedence (malformed > invalid_signature > wrong_audience > expired > unsupported_version > unsupported_command > replayed)', () => {
  it('reports the first failing check', async () => {
    const cases: [string, () => Promise<string>, string][] = [
      ['alg none and no typ', async () => unsigned(claims(), { alg: 'none', kid: KID }), 'malformed'],
      ['another key and a body that does not match', async () => token(claims({ tunnel: undefined }), {}, intruder.privateKey), 'malformed'],
      ['HS256 and iat far in the future', async () => token(claims({ iat: T0 + 600, exp: T0 + 620 }), { alg: 'HS256' }, new Uint8Array(32)), 'malformed'],
      ['another key and another node', async () => token(claims({ aud: OTHER_NODE }), {}, intruder.privateKey), 'invalid_signature'],
      ['alg none, expired, v 4', async () => unsigned(claims({ iat: T0 - 600, exp: T0 - 590, v: 4 })), 'invalid_signature'],
      ['another node and expired', async () => token(claims({ aud: OTHER_NODE, iat: T0 - 600, exp: T0 - 590 })), 'wrong_audience'],
      ['another edge_ip', async () => token(claims({ tunnel: tunnel({ edge_ip: '198.51.100.9' }) })), 'wrong_audience'],
      ['expired and v 4', async () => token(claims({ iat: T0 - 600, exp: T0 - 590, v: 4 })), 'expired'],
      ['lifetime over 60 s and unknown op', async () => token(claims({ exp: T0 + 61, op: 'destroy' })), 'expired'],
      ['v 4 and unknown op', async () => token(claims({ v: 4, op: 'destroy' })), 'unsupported_version'],
      ['v 3 and unknown op', async () => token(claims({ v: 3, op: 'destroy' })), 'unsupported_command'],
      ['v 2 and unknown op', async () => token(claims({ v: 2, op: 'destroy' })), 'unsupported_command'],
      // A v 1 status: its body is not checked (status is no op of v 1), so a body it should not carry does not
      // make it malformed; it is unsupported_command, after the audience and expiry checks.
      ['v 1 status carrying a tunnel', async () => token(claims({ v: 1, op: 'status' })), 'unsupported_command'],
      ['v 1 status, expired', async () => token(claims({ v: 1, op: 'status', tunnel: undefined, iat: T0 - 600, exp: T0 - 590 })), 'expired'],
      ['v 2 status carrying a tunnel', async () => token(claims({ v: 2, op: 'status' })), 'malformed'],
      // Body shapes are only known for the versions the agent speaks: a v4 job with a body no version
      // knows is unsupported_version, a v3 one is malformed.
      ['v 4 with a body no version knows', async () => token(claims({ v: 4, tunnel: undefined, tunnel_v4: { id: 1 } })), 'unsupported_version'],
      ['v 3 with a body v3 does not know', async () => token(claims({ v: 3, tunnel: undefined, tunnel_v4: { id: 1 } })), 'malformed'],
      ['v 2 carrying forwarding, and another edge_ip', async () => token(claims({ v: 2, tunnel: { ...tunnel({ edge_ip: '198.51.100.9' }), forwarding: false } })), 'malformed'],
      ['v 1 carrying a policy, and another edge_ip', async () => token(claims({ v: 1, tunnel: { ...tunnel({ edge_ip: '198.51.100.9' }), policy: { ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: false } } })), 'malformed'],
    ];
    for (const [name, make, expected] of cases) expect(await code(await make()), name).toBe(expected);
    // replayed comes last: a replay of a job that would now fail another check reports that check.
    const jws = await token(claims({ iat: T0, exp: T0 + 10 }));
    expect(await code(jws)).toBe('ok');
    expect(await code(jws)).toBe('replayed');
    verifier.clock = T0 + 41;
    expect(await code(jws)).toBe('expired');
  });

  it('does not consult the replay cache for refused jobs', async () => {
    const jti = randomUUID();
    expect(await code(await token(claims({ jti, aud: OTHER_NODE })))).toBe('wrong_audience');
    expect(verifier.replay.used.has(jti)).toBe(false);
    expect(await code(await token(claims({ jti })))).toBe('ok');
  });
});
