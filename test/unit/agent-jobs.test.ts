// The agent's job layer against docs/CONTRACTS.md "Exact rules": every refusal code with real jose-signed
// tokens, the precedence between codes, the replay cache on disk, the job handler's result lines, the
// configuration, the gateway's signJob, and schema/job.schema.json checked against the verifier.
import { createHash, generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CompactSign } from 'jose';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { ConfigError, loadConfig, parseConfigFile } from '../../agent/config.ts';
import { MAX_INPUT_BYTES } from '../../common/job-contract.ts';
import { JobHandler } from '../../agent/jobs/handle.ts';
import { InvalidTunnel } from '../../agent/dataplane/validate.ts';
import { parseJobKey, type JobKey } from '../../agent/jobs/job-key.ts';
import { REPLAY_FILE, ReplayCache } from '../../agent/jobs/replay-cache.ts';
import { verifyJob, type ReplayGuard, type VerifyContext } from '../../agent/jobs/verify.ts';
import { KernelError, type ChangeCounts, type Dataplane, type ProbeResult, type ReconcileResult, type TunnelRef, type TunnelSpec } from '../../agent/dataplane/types.ts';
import { EDGE_IP, tunnelSpec } from '../helpers/tunnel-spec.ts';
import { JobSigningError, signJob } from '../../server/edge/job-signing.ts';

// ---------------------------------------------------------------------------------------------------
// Fixtures

const NODE = randomUUID();
const OTHER_NODE = randomUUID();
const T0 = 1_900_000_000; // the test clock, seconds

const gateway = generateKeyPairSync('ed25519');
const gatewayJwk = gateway.publicKey.export({ format: 'jwk' });
const KID = createHash('sha256').update(`{"crv":"Ed25519","kty":"OKP","x":"${gatewayJwk.x}"}`).digest('base64url');
const jobKey: JobKey = parseJobKey(JSON.stringify({ ...gatewayJwk, kid: KID, alg: 'EdDSA', use: 'sig' }));
const intruder = generateKeyPairSync('ed25519');

const tunnel = tunnelSpec;

const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

/** Claims with overrides; an override of `undefined` removes the claim. */
function claims(over: Record<string, unknown> = {}): Record<string, unknown> {
  const c: Record<string, unknown> = { iss: 'tunnelgate', aud: NODE, jti: randomUUID(), iat: T0, exp: T0 + 60, v: 1, op: 'apply', tunnel: tunnel(), ...over };
  for (const k of Object.keys(c)) if (c[k] === undefined) delete c[k];
  return c;
}

/** Signs arbitrary claims with an arbitrary header (Ed25519 unless the header says otherwise). */
async function token(c: Record<string, unknown> = claims(), header: Record<string, unknown> = {}, key: KeyObject | Uint8Array = gateway.privateKey): Promise<string> {
  const h = { alg: 'EdDSA', typ: 'tunnel-job+jwt', kid: KID, ...header };
  for (const [k, v] of Object.entries(h)) if (v === undefined) delete h[k as keyof typeof h];
  return new CompactSign(Buffer.from(JSON.stringify(c))).setProtectedHeader(h as { alg: string }).sign(key);
}

function unsigned(c: Record<string, unknown>, header: Record<string, unknown> = { alg: 'none', typ: 'tunnel-job+jwt', kid: KID }): string {
  return `${b64(header)}.${b64(c)}.`;
}

class MemoryReplay implements ReplayGuard {
  readonly used = new Map<string, number>();
  async use(jti: string, until: number): Promise<boolean> {
    if (this.used.has(jti)) return false;
    this.used.set(jti, until);
    return true;
  }
}

let clock = T0;
let replay: MemoryReplay;
const ctx = (over: Partial<VerifyContext> = {}): VerifyContext => ({ nodeId: NODE, edgeIp: EDGE_IP, jobKey, replay, now: () => clock, ...over });
const code = async (jws: string | Uint8Array, c: VerifyContext = ctx()) => {
  const out = await verifyJob(jws, c);
  return out.ok ? 'ok' : out.error;
};

beforeEach(() => {
  clock = T0;
  replay = new MemoryReplay();
});

const tmpDirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'tg-agent-jobs-'));
  tmpDirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------------

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
      expect(replay.used.get(c.jti as string)).toBe(T0 + 90);
    }
    // An empty desired set is a valid reconcile.
    expect(await code(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [] })))).toBe('ok');
  });

  it('accepts exactly one trailing newline, and the time boundaries', async () => {
    expect(await code(`${await token()}\n`)).toBe('ok');
    expect(await code(Buffer.from(`${await token()}\n`))).toBe('ok');
    expect(await code(await token(claims({ iat: T0 + 30, exp: T0 + 60 })))).toBe('ok'); // iat 30 s ahead: allowed
    clock = T0 + 60 + 30;
    expect(await code(await token(claims({ iat: T0, exp: T0 + 60 })))).toBe('ok'); // exp passed by 30 s: allowed
  });

  it('accepts a PEM job key (no kid to match) and lower-cases UUIDs', async () => {
    const pemKey = parseJobKey(gateway.publicKey.export({ format: 'pem', type: 'spki' }).toString());
    const upper = randomUUID().toUpperCase();
    const out = await verifyJob(await token(claims({ jti: upper, aud: NODE.toUpperCase(), tunnel: tunnel({ id: upper }) }), { kid: 'any-kid' }), ctx({ jobKey: pemKey }));
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
    clock = T0 + 60 + 31;
    expect(await code(await token(claims({ iat: T0, exp: T0 + 60 })))).toBe('expired');
    clock = T0;
    expect(await code(await token(claims({ iat: T0 - 600, exp: T0 - 540 })))).toBe('expired');
    expect(await code(await token(claims({ iat: T0, exp: T0 + 61 })))).toBe('expired');
    expect(await code(await token(claims({ iat: T0 - 10, exp: T0 + 3600 })))).toBe('expired');
  });

  it('unsupported_version: v missing or not 1 or 2', async () => {
    for (const v of [undefined, 3, 0, '1', '2', 1.5, null]) expect(await code(await token(claims({ v }))), String(v)).toBe('unsupported_version');
  });

  it('unsupported_command: an op this agent does not know', async () => {
    expect(await code(await token(claims({ op: 'destroy' })))).toBe('unsupported_command');
    expect(await code(await token(claims({ op: 'APPLY' })))).toBe('unsupported_command');
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
      if (out.ok && out.job.op !== 'reconcile') expect(out.job.tunnel.policy).toEqual(policy);
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

  it('v 3 is unsupported_version, even with a body no version knows (not malformed)', async () => {
    expect(await code(await token(claims({ v: 3 })))).toBe('unsupported_version');
    expect(await code(await token(claims({ v: 3, tunnel: { ...tunnel(), policy: 'strict' } })))).toBe('unsupported_version');
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
      ['alg none, expired, v 3', async () => unsigned(claims({ iat: T0 - 600, exp: T0 - 590, v: 3 })), 'invalid_signature'],
      ['another node and expired', async () => token(claims({ aud: OTHER_NODE, iat: T0 - 600, exp: T0 - 590 })), 'wrong_audience'],
      ['another edge_ip', async () => token(claims({ tunnel: tunnel({ edge_ip: '198.51.100.9' }) })), 'wrong_audience'],
      ['expired and v 3', async () => token(claims({ iat: T0 - 600, exp: T0 - 590, v: 3 })), 'expired'],
      ['lifetime over 60 s and unknown op', async () => token(claims({ exp: T0 + 61, op: 'destroy' })), 'expired'],
      ['v 3 and unknown op', async () => token(claims({ v: 3, op: 'destroy' })), 'unsupported_version'],
      ['v 2 and unknown op', async () => token(claims({ v: 2, op: 'destroy' })), 'unsupported_command'],
      // Body shapes are only known for the versions the agent speaks: a v3 job with a body no version
      // knows is unsupported_version, a v2 one is malformed.
      ['v 3 with a body no version knows', async () => token(claims({ v: 3, tunnel: undefined, tunnel_v3: { id: 1 } })), 'unsupported_version'],
      ['v 2 with a body v2 does not know', async () => token(claims({ v: 2, tunnel: undefined, tunnel_v3: { id: 1 } })), 'malformed'],
      ['v 1 carrying a policy, and another edge_ip', async () => token(claims({ v: 1, tunnel: { ...tunnel({ edge_ip: '198.51.100.9' }), policy: { ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: false } } })), 'malformed'],
    ];
    for (const [name, make, expected] of cases) expect(await code(await make()), name).toBe(expected);
    // replayed comes last: a replay of a job that would now fail another check reports that check.
    const jws = await token(claims({ iat: T0, exp: T0 + 10 }));
    expect(await code(jws)).toBe('ok');
    expect(await code(jws)).toBe('replayed');
    clock = T0 + 41;
    expect(await code(jws)).toBe('expired');
  });

  it('does not consult the replay cache for refused jobs', async () => {
    const jti = randomUUID();
    expect(await code(await token(claims({ jti, aud: OTHER_NODE })))).toBe('wrong_audience');
    expect(replay.used.has(jti)).toBe(false);
    expect(await code(await token(claims({ jti })))).toBe('ok');
  });
});

// ---------------------------------------------------------------------------------------------------

describe('ReplayCache', () => {
  it('survives a restart: a jti used before a re-open is still refused after it', async () => {
    const dir = tmp();
    let now = T0;
    const a = await ReplayCache.open(dir, { now: () => now });
    const jti = randomUUID();
    expect(await a.use(jti, T0 + 90)).toBe(true);
    expect(await a.use(jti, T0 + 90)).toBe(false);
    await a.close();
    expect(statSync(join(dir, REPLAY_FILE)).mode & 0o777).toBe(0o600);
    const b = await ReplayCache.open(dir, { now: () => now });
    expect(await b.use(jti, T0 + 90)).toBe(false);
    expect(await b.use(jti.toUpperCase(), T0 + 90)).toBe(false);
    expect(b.size).toBe(1);
    // A token replayed through the verifier against the re-opened cache.
    const jws = await token(claims());
    expect(await code(jws, ctx({ replay: b }))).toBe('ok');
    await b.close();
    const c = await ReplayCache.open(dir, { now: () => now });
    expect(await code(jws, ctx({ replay: c }))).toBe('replayed');
    await c.close();
  });

  it('prunes expired entries, on open and in memory', async () => {
    const dir = tmp();
    let now = T0;
    const a = await ReplayCache.open(dir, { now: () => now });
    const short = randomUUID();
    const long = randomUUID();
    await a.use(short, T0 + 10);
    await a.use(long, T0 + 1000);
    expect(a.size).toBe(2);
    now = T0 + 11;
    expect(a.has(short)).toBe(false);
    expect(a.size).toBe(1);
    // An expired jti may be recorded again (its job could only be refused as expired anyway).
    expect(await a.use(short, T0 + 100)).toBe(true);
    now = T0 + 101;
    await a.close();
    const b = await ReplayCache.open(dir, { now: () => now });
    const lines = readFileSync(join(dir, REPLAY_FILE), 'utf8').trim().split('\n');
    expect(lines.map((l) => (JSON.parse(l) as { jti: string }).jti)).toEqual([long]);
    expect(b.has(long)).toBe(true);
    expect(b.has(short)).toBe(false);
    await b.close();
  });

  it('rewrites the log when it grows well past the live entries', async () => {
    const dir = tmp();
    let now = T0;
    const a = await ReplayCache.open(dir, { now: () => now, compactSlack: 5 });
    let last = '';
    for (let i = 0; i < 20; i++) {
      last = randomUUID();
      await a.use(last, now + 1);
      now += 11; // each entry has expired (and been pruned) before the next arrives
    }
    const lines = readFileSync(join(dir, REPLAY_FILE), 'utf8').trim().split('\n');
    // Without rewriting, 20 lines; with it, never more than live entries + slack + 1.
    expect(lines.length).toBeLessThanOrEqual(7);
    expect(lines.at(-1)).toContain(last);
    await a.close();
  });

  it('ignores a torn last line and reports it', async () => {
    const dir = tmp();
    const jti = randomUUID();
    writeFileSync(join(dir, REPLAY_FILE), `${JSON.stringify({ jti, until: T0 + 50 })}\n`);
    appendFileSync(join(dir, REPLAY_FILE), '{"jti":"1234');
    const warnings: string[] = [];
    const a = await ReplayCache.open(dir, { now: () => T0, warn: (m) => warnings.push(m) });
    expect(a.has(jti)).toBe(true);
    expect(warnings).toHaveLength(1);
    expect(readFileSync(join(dir, REPLAY_FILE), 'utf8')).toBe(`${JSON.stringify({ jti, until: T0 + 50 })}\n`);
    await a.close();
  });
});

// ---------------------------------------------------------------------------------------------------

/** FAKE dataplane (test double, no kernel): records calls and answers from an in-memory set. */
class RecordingDataplane implements Dataplane {
  readonly calls: { op: string; arg: unknown }[] = [];
  readonly tunnels = new Map<string, TunnelSpec>();
  failWith: Error | undefined;
  probeAnswer: ProbeResult = { reachable: true, rtt_ms: 1.5 };
  partialCounts = false;

  private fail(): void {
    if (this.failWith) throw this.failWith;
  }
  async apply(t: TunnelSpec): Promise<ChangeCounts> {
    this.calls.push({ op: 'apply', arg: t });
    this.fail();
    const before = this.tunnels.get(t.id);
    this.tunnels.set(t.id, t);
    if (this.partialCounts) return { added: 1 } as ChangeCounts;
    return { added: before ? 0 : 1, changed: before && JSON.stringify(before) !== JSON.stringify(t) ? 1 : 0, removed: 0, unchanged: before && JSON.stringify(before) === JSON.stringify(t) ? 1 : 0 };
  }
  async remove(t: TunnelRef): Promise<ChangeCounts> {
    this.calls.push({ op: 'remove', arg: t });
    this.fail();
    const had = this.tunnels.delete(t.id);
    return { added: 0, changed: 0, removed: had ? 1 : 0, unchanged: 0 };
  }
  /** Tunnels the next reconciles report as refused by the kernel (and leave alone). */
  refuse = new Map<string, string>();
  async reconcile(ts: TunnelSpec[]): Promise<ReconcileResult> {
    this.calls.push({ op: 'reconcile', arg: ts });
    this.fail();
    const failed = ts.filter((t) => this.refuse.has(t.id)).map((t) => ({ id: t.id, error: 'kernel_error' as const, error_description: this.refuse.get(t.id)! }));
    ts = ts.filter((t) => !this.refuse.has(t.id));
    const counts = { added: 0, changed: 0, removed: 0, unchanged: 0 };
    const want = new Map(ts.map((t) => [t.id, t]));
    for (const id of this.tunnels.keys()) if (!want.has(id) && !this.refuse.has(id)) (this.tunnels.delete(id), counts.removed++);
    for (const t of ts) {
      const before = this.tunnels.get(t.id);
      if (!before) counts.added++;
      else if (JSON.stringify(before) !== JSON.stringify(t)) counts.changed++;
      else counts.unchanged++;
      this.tunnels.set(t.id, t);
    }
    return { ...counts, failed };
  }
  async probe(t: TunnelSpec): Promise<ProbeResult> {
    this.calls.push({ op: 'probe', arg: t });
    this.fail();
    return this.probeAnswer;
  }
  async has(id: string): Promise<boolean> {
    this.calls.push({ op: 'has', arg: id });
    return this.tunnels.has(id);
  }
  async close(): Promise<void> {}
}

function handlerWith(dp: Dataplane) {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger('debug', {}, (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
  const h = new JobHandler(ctx(), dp, log);
  return { h, lines };
}

describe('JobHandler', () => {
  it('runs each op and answers the documented result line', async () => {
    const dp = new RecordingDataplane();
    const { h, lines } = handlerWith(dp);
    const t = tunnel();
    const apply = await token(claims({ tunnel: t }));
    const jti = JSON.parse(Buffer.from(apply.split('.')[1]!, 'base64url').toString()).jti as string;
    expect(await h.handle(apply)).toEqual({ ok: true, jti, op: 'apply', result: { added: 1, changed: 0, removed: 0, unchanged: 0 } });
    expect(await h.handle(await token(claims({ tunnel: t })))).toMatchObject({ ok: true, result: { added: 0, changed: 0, removed: 0, unchanged: 1 } });
    expect(await h.handle(await token(claims({ op: 'probe', tunnel: t })))).toMatchObject({ ok: true, op: 'probe', result: { reachable: true, rtt_ms: 1.5 } });
    dp.probeAnswer = { reachable: false };
    const probe = await h.handle(await token(claims({ op: 'probe', tunnel: t })));
    expect(probe).toMatchObject({ ok: true, result: { reachable: false } });
    expect(probe.ok && 'rtt_ms' in probe.result).toBe(false);
    expect(await h.handle(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [] })))).toMatchObject({ ok: true, op: 'reconcile', result: { added: 0, changed: 0, removed: 1, unchanged: 0 } });
    // Removing a tunnel that is not there: ok with removed 0.
    expect(await h.handle(await token(claims({ op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } })))).toEqual(
      expect.objectContaining({ ok: true, op: 'remove', result: { added: 0, changed: 0, removed: 0, unchanged: 0 } }),
    );
    expect(lines.filter((l) => l.msg === 'job done')).toHaveLength(6);
  });

  it('result counts always carry all four keys', async () => {
    const dp = new RecordingDataplane();
    dp.partialCounts = true;
    const { h } = handlerWith(dp);
    const out = await h.handle(await token());
    expect(out).toMatchObject({ ok: true, result: { added: 1, changed: 0, removed: 0, unchanged: 0 } });
  });

  it('refuses before the dataplane is touched, and logs the code', async () => {
    const dp = new RecordingDataplane();
    const { h, lines } = handlerWith(dp);
    const jti = randomUUID();
    const out = await h.handle(await token(claims({ jti }), {}, intruder.privateKey), { peer: '192.0.2.1:5000' });
    expect(out).toMatchObject({ ok: false, jti, error: 'invalid_signature' });
    expect(dp.calls).toEqual([]);
    expect(lines).toContainEqual(expect.objectContaining({ level: 'warn', msg: 'job refused', code: 'invalid_signature', jti, peer: '192.0.2.1:5000' }));
    for (const [jws, c] of [
      ['garbage', 'malformed'],
      [await token(claims({ aud: OTHER_NODE })), 'wrong_audience'],
      [await token(claims({ v: 3 })), 'unsupported_version'],
    ] as const) {
      expect(await h.handle(jws)).toMatchObject({ ok: false, error: c });
      expect(lines.at(-1)).toMatchObject({ msg: 'job refused', code: c });
    }
    expect(dp.calls).toEqual([]);
  });

  it('probe of a tunnel this node does not have: unknown_tunnel, without probing', async () => {
    const dp = new RecordingDataplane();
    const { h, lines } = handlerWith(dp);
    const t = tunnel();
    const out = await h.handle(await token(claims({ op: 'probe', tunnel: t })));
    expect(out).toMatchObject({ ok: false, error: 'unknown_tunnel' });
    expect(dp.calls.map((c) => c.op)).toEqual(['has']);
    expect(lines.at(-1)).toMatchObject({ msg: 'job refused', code: 'unknown_tunnel' });
  });

  it('a dataplane failure is kernel_error, and the jti stays used', async () => {
    const dp = new RecordingDataplane();
    dp.failWith = new KernelError('create GRE link tg-abcdefghij: Operation not supported (Unknown device type)');
    const { h, lines } = handlerWith(dp);
    const jws = await token();
    const out = await h.handle(jws);
    expect(out).toMatchObject({ ok: false, error: 'kernel_error', error_description: 'create GRE link tg-abcdefghij: Operation not supported (Unknown device type)' });
    expect(out.ok === false && typeof out.jti).toBe('string');
    expect(lines.at(-1)).toMatchObject({ level: 'error', msg: 'job failed', code: 'kernel_error' });
    dp.failWith = undefined;
    expect(await h.handle(jws)).toMatchObject({ ok: false, error: 'replayed' });
    expect(dp.calls).toHaveLength(1);
  });

  it('the dataplane finding a tunnel unusable (InvalidTunnel) is malformed', async () => {
    const dp = new RecordingDataplane();
    const inner = new InvalidTunnel('tunnel_name x does not start with the agent\'s link prefix tg-');
    dp.failWith = Object.assign(new KernelError(`apply: ${inner.message}`), { cause: inner });
    const { h } = handlerWith(dp);
    expect(await h.handle(await token())).toMatchObject({ ok: false, error: 'malformed', error_description: expect.stringContaining('link prefix') });
  });

  it('a replay cache that cannot be written refuses the job', async () => {
    const dp = new RecordingDataplane();
    const lines: string[] = [];
    const broken: ReplayGuard = { use: async () => Promise.reject(new Error('EROFS: read-only file system')) };
    const h = new JobHandler(ctx({ replay: broken }), dp, createLogger('debug', {}, (l) => lines.push(l)));
    expect(await h.handle(await token())).toMatchObject({ ok: false, error: 'kernel_error', error_description: expect.stringContaining('EROFS') });
    expect(dp.calls).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------------

describe('agent configuration', () => {
  const sshPub = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGbR1mqRBy1LhRvBVZP2kzSt0Uu3IuLSpW1s3cYSv0Nq tunnelgate-gateway';
  const env = (over: Record<string, string | undefined> = {}): NodeJS.ProcessEnv => ({
    AGENT_NODE_ID: NODE,
    AGENT_STATE_DIR: '/var/lib/tunnel-agent',
    AGENT_AUTHORIZED_KEY: sshPub,
    AGENT_JOB_KEY: JSON.stringify({ ...gatewayJwk, kid: KID }),
    AGENT_EDGE_IP: EDGE_IP,
    ...over,
  });

  it('reads the environment, with defaults for AGENT_LISTEN and AGENT_NFT_TABLE', () => {
    const c = loadConfig(env());
    expect(c.nodeId).toBe(NODE);
    expect(c.listen).toEqual({ host: '0.0.0.0', port: 52222 });
    expect(c.nftTable).toBe('tunnelgate');
    expect(c.edgeIp).toBe(EDGE_IP);
    expect(c.jobKey.kid).toBe(KID);
    expect(c.authorizedKey.type).toBe('ssh-ed25519');
    expect(c.authorizedKey.fingerprint).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
    expect(c.sources).toMatchObject({ AGENT_NODE_ID: 'env', AGENT_LISTEN: 'default' });
    expect(loadConfig(env({ AGENT_LISTEN: '[::1]:2222', AGENT_NODE_ID: NODE.toUpperCase() })).listen).toEqual({ host: '::1', port: 2222 });
    expect(loadConfig(env({ AGENT_NODE_ID: NODE.toUpperCase() })).nodeId).toBe(NODE);
  });

  it('AGENT_JOB_VERSIONS: every version this agent speaks by default; a subset of them when set', () => {
    expect(loadConfig(env()).jobVersions).toEqual([1, 2]);
    expect(loadConfig(env({ AGENT_JOB_VERSIONS: '1' })).jobVersions).toEqual([1]);
    expect(loadConfig(env({ AGENT_JOB_VERSIONS: ' 2, 1 ,2' })).jobVersions).toEqual([1, 2]);
    for (const bad of ['3', '1,3', 'one', '1;2', '01', ',']) expect(() => loadConfig(env({ AGENT_JOB_VERSIONS: bad })), bad).toThrow(/AGENT_JOB_VERSIONS must be/);
  });

  it('reads a key = value file with lower-case keys; the environment overrides it', () => {
    const dir = tmp();
    const file = join(dir, 'agent.conf');
    const pem = gateway.publicKey.export({ format: 'pem', type: 'spki' }).toString().trim().replace(/\n/g, '\\n');
    writeFileSync(
      file,
      [
        '# tunnel-agent',
        `agent_node_id = ${NODE}`,
        'agent_listen = 127.0.0.1:52222',
        `agent_state_dir = ${dir}`,
        `agent_authorized_key = "${sshPub}"`,
        `agent_job_key = ${pem}`,
        `agent_edge_ip = ${EDGE_IP}`,
        'agent_nft_table = tg_test',
        '',
      ].join('\n'),
    );
    const c = loadConfig({}, file);
    expect(c.listen).toEqual({ host: '127.0.0.1', port: 52222 });
    expect(c.nftTable).toBe('tg_test');
    expect(c.jobKey.kid).toBeUndefined();
    expect(c.jobKey.thumbprint).toBe(KID);
    expect(c.sources.AGENT_JOB_KEY).toBe('file');
    const o = loadConfig({ AGENT_EDGE_IP: '198.51.100.99' }, file);
    expect(o.edgeIp).toBe('198.51.100.99');
    expect(o.sources.AGENT_EDGE_IP).toBe('env');
  });

  it('the shipped example parses', () => {
    const parsed = parseConfigFile(readFileSync(new URL('../../agent/deploy/agent.conf.example', import.meta.url), 'utf8'));
    expect(Object.keys(parsed).sort()).toEqual(['AGENT_AUTHORIZED_KEY', 'AGENT_EDGE_IP', 'AGENT_JOB_KEY', 'AGENT_LISTEN', 'AGENT_NFT_TABLE', 'AGENT_NODE_ID', 'AGENT_STATE_DIR']);
  });

  it('names every missing or invalid value', () => {
    const problems = (e: NodeJS.ProcessEnv, file?: string) => {
      try {
        loadConfig(e, file);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as Error).message;
      }
      throw new Error('loadConfig accepted it');
    };
    const all = problems({});
    for (const k of ['AGENT_NODE_ID', 'AGENT_STATE_DIR', 'AGENT_AUTHORIZED_KEY', 'AGENT_JOB_KEY', 'AGENT_EDGE_IP']) expect(all).toContain(`${k} is not set`);
    expect(all).not.toContain('AGENT_LISTEN');
    expect(problems(env({ AGENT_NODE_ID: 'node-1' }))).toMatch(/AGENT_NODE_ID must be the node's UUID/);
    expect(problems(env({ AGENT_LISTEN: '52222' }))).toMatch(/AGENT_LISTEN must be ADDRESS:PORT/);
    expect(problems(env({ AGENT_LISTEN: '0.0.0.0:70000' }))).toMatch(/AGENT_LISTEN/);
    expect(problems(env({ AGENT_LISTEN: 'localhost:52222' }))).toMatch(/AGENT_LISTEN/);
    expect(problems(env({ AGENT_STATE_DIR: 'relative/dir' }))).toMatch(/AGENT_STATE_DIR must be an absolute path/);
    expect(problems(env({ AGENT_AUTHORIZED_KEY: 'ssh-ed25519 AAAAnotakey' }))).toMatch(/AGENT_AUTHORIZED_KEY/);
    expect(problems(env({ AGENT_JOB_KEY: JSON.stringify(gateway.privateKey.export({ format: 'jwk' })) }))).toMatch(/AGENT_JOB_KEY.*private key/);
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ format: 'pem', type: 'spki' }).toString();
    expect(problems(env({ AGENT_JOB_KEY: rsa }))).toMatch(/AGENT_JOB_KEY.*Ed25519/);
    expect(problems(env({ AGENT_JOB_KEY: 'secret' }))).toMatch(/AGENT_JOB_KEY/);
    expect(problems(env({ AGENT_EDGE_IP: '198.51.100' }))).toMatch(/AGENT_EDGE_IP must be/);
    expect(problems(env({ AGENT_NFT_TABLE: 'bad table' }))).toMatch(/AGENT_NFT_TABLE/);
    const dir = tmp();
    writeFileSync(join(dir, 'typo.conf'), 'agent_nod_id = x\n');
    expect(problems({}, join(dir, 'typo.conf'))).toMatch(/typo.conf:1: unknown key "agent_nod_id"/);
    writeFileSync(join(dir, 'upper.conf'), `AGENT_NODE_ID = ${NODE}\n`);
    expect(problems({}, join(dir, 'upper.conf'))).toMatch(/keys are lower case/);
    writeFileSync(join(dir, 'twice.conf'), `agent_edge_ip = ${EDGE_IP}\nagent_edge_ip = ${EDGE_IP}\n`);
    expect(problems({}, join(dir, 'twice.conf'))).toMatch(/set twice/);
    expect(problems({}, join(dir, 'missing.conf'))).toMatch(/cannot read the config file/);
  });
});

// ---------------------------------------------------------------------------------------------------

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
    await expect(signJob(gateway.privateKey, KID, NODE, 'apply', { tunnel: tunnel() }, { now: T0, version: 3 as never })).rejects.toThrow(/version must be one of 1, 2/);
  });
});

// ---------------------------------------------------------------------------------------------------

/** A policy other than the default, in the wire form of a v2 job (common/tunnel-policy.ts). */
const POLICY = { ports: [[22, 22], [80, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 500, drop_fragments: true };

describe('schema/job.schema.json', () => {
  const schema = JSON.parse(readFileSync(new URL('../../schema/job.schema.json', import.meta.url), 'utf8')) as Record<string, unknown>;
  // strictRequired would flag `required` next to a `$ref` (valid 2020-12: the properties come from the $ref).
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false });
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
      for (const version of [1, 2] as const) {
        const jws = await signJob(gateway.privateKey, KID, NODE, op, body as never, { now: T0, version });
        const [h, p] = jws.split('.');
        expect(validate(JSON.parse(Buffer.from(p!, 'base64url').toString())), `${op}: ${JSON.stringify(validate.errors)}`).toBe(true);
        expect(validateHeader(JSON.parse(Buffer.from(h!, 'base64url').toString()))).toBe(true);
      }
    }
    const tp = tunnel({ policy: { ports: [[22, 22], [80, 443]], protocol: 'udp', syn_proxy: true, source_pps_limit: 100, drop_fragments: true } });
    const p2 = (await signJob(gateway.privateKey, KID, NODE, 'reconcile', { tunnels: [tp] }, { now: T0, version: 2 })).split('.')[1]!;
    expect(validate(JSON.parse(Buffer.from(p2, 'base64url').toString())), JSON.stringify(validate.errors)).toBe(true);
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
      claims({ v: 3 }),
      claims({ v: '2' }),
      claims({ v: 2, tunnel: { ...t, policy: POLICY } }),
      claims({ v: 1, tunnel: { ...t, policy: POLICY } }),
      claims({ v: 2, op: 'reconcile', tunnel: undefined, tunnels: [{ ...t, policy: POLICY }] }),
      claims({ v: 1, op: 'reconcile', tunnel: undefined, tunnels: [{ ...t, policy: POLICY }] }),
      claims({ v: 2, op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip, policy: POLICY } }),
      claims({ v: 1, op: 'remove', tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip, policy: POLICY } }),
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
    expect(validateHello({ ok: false, error: 'unsupported_command', error_description: 'x' })).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------------

describe('AGENT_PROTECTED_POOLS (docs/CONTRACTS.md "Hardening of the listener")', () => {
  const sshPub = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGbR1mqRBy1LhRvBVZP2kzSt0Uu3IuLSpW1s3cYSv0Nq tunnelgate-gateway';
  const configWith = (over: Record<string, string>) =>
    loadConfig({ AGENT_NODE_ID: NODE, AGENT_STATE_DIR: '/var/lib/tunnel-agent', AGENT_AUTHORIZED_KEY: sshPub, AGENT_JOB_KEY: JSON.stringify({ ...gatewayJwk, kid: KID }), AGENT_EDGE_IP: EDGE_IP, ...over });
  const handlerWithPools = (pools: string) => {
    const dp = new RecordingDataplane();
    const lines: Record<string, unknown>[] = [];
    const config = configWith({ AGENT_PROTECTED_POOLS: pools });
    const h = new JobHandler(ctx({ protectedPools: config.protectedPools! }), dp, createLogger('debug', {}, (l) => lines.push(JSON.parse(l) as Record<string, unknown>)));
    return { h, dp, lines };
  };
  const other = () => tunnel({ id: randomUUID(), tunnel_name: 'tg-other', protected_ip: '198.18.0.9', edge_inner: '100.64.0.5/30', origin_inner: '100.64.0.6/30' });

  it('a job whose protected_ip lies outside the pools is wrong_audience, before the dataplane is touched', async () => {
    const { h, dp, lines } = handlerWithPools('203.0.113.0/28, 192.0.2.128/25');
    const inside = tunnel(); // 203.0.113.10
    const outside = tunnel({ protected_ip: '203.0.113.16' }); // just past the /28
    expect(await h.handle(await token(claims({ tunnel: inside })))).toMatchObject({ ok: true, op: 'apply' });
    for (const c of [
      claims({ tunnel: outside }),
      claims({ op: 'probe', tunnel: outside }),
      claims({ op: 'remove', tunnel: { id: outside.id, tunnel_name: outside.tunnel_name, protected_ip: outside.protected_ip } }),
      // One tunnel of a reconcile outside is enough.
      claims({ op: 'reconcile', tunnel: undefined, tunnels: [inside, other()] }),
    ]) {
      const out = await h.handle(await token(c));
      expect(out).toMatchObject({ ok: false, error: 'wrong_audience', error_description: expect.stringContaining('outside this router\'s protected pools') });
      expect(lines.at(-1)).toMatchObject({ msg: 'job refused', code: 'wrong_audience' });
    }
    expect(dp.calls.map((c) => c.op)).toEqual(['apply']);
    // The second pool counts too; a reconcile whose tunnels all lie inside runs.
    const second = other();
    second.protected_ip = '192.0.2.200';
    expect(await h.handle(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [inside, second] })))).toMatchObject({ ok: true, op: 'reconcile' });
  });

  it('unset means any protected IP; a malformed value is a configuration error', async () => {
    expect(configWith({}).protectedPools).toBeUndefined();
    const dp = new RecordingDataplane();
    const h = new JobHandler(ctx(), dp, createLogger('silent'));
    expect(await h.handle(await token(claims({ tunnel: other() })))).toMatchObject({ ok: true });
    for (const bad of ['203.0.113.0/33', '2001:db8::/32', 'pool-a', '203.0.113.0/28,,']) {
      expect(() => configWith({ AGENT_PROTECTED_POOLS: bad }), bad).toThrow(ConfigError);
    }
    expect(() => configWith({ AGENT_ALLOW_FROM: '10.0.0.0/8, 2001:db8::/32' })).not.toThrow();
    expect(() => configWith({ AGENT_ALLOW_FROM: '10.0.0.0/40' })).toThrow(/AGENT_ALLOW_FROM/);
  });
});

// ---------------------------------------------------------------------------------------------------

describe('reconcile reports tunnels the kernel refused, per tunnel (issue 8 item 3)', () => {
  const schema = JSON.parse(readFileSync(new URL('../../schema/job.schema.json', import.meta.url), 'utf8')) as Record<string, unknown>;
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false }); // as above: `required` next to a `$ref`
  ajv.addSchema(schema);
  const validateLine = ajv.getSchema(`${String(schema.$id)}#/$defs/resultLine`)!;
  const second = () => tunnel({ id: randomUUID(), tunnel_name: 'tg-second', protected_ip: '203.0.113.11', edge_inner: '100.64.0.5/30', origin_inner: '100.64.0.6/30' });

  it('ok: true with the counts and `failed` (always present), each {id, error: kernel_error, error_description}; the line matches the schema', async () => {
    const dp = new RecordingDataplane();
    const { h, lines } = handlerWith(dp);
    const [a, b] = [tunnel(), second()];
    const clean = await h.handle(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [a, b] })));
    expect(clean).toMatchObject({ ok: true, op: 'reconcile', result: { added: 2, changed: 0, removed: 0, unchanged: 0, failed: [] } });
    expect(validateLine(clean), JSON.stringify(validateLine.errors)).toBe(true);

    dp.refuse.set(b.id, 'link tg-second exists and was not created by this agent');
    const out = await h.handle(await token(claims({ op: 'reconcile', tunnel: undefined, tunnels: [a, { ...b, mtu: 1400 }] })));
    expect(out).toEqual({
      ok: true,
      jti: expect.any(String),
      op: 'reconcile',
      result: { added: 0, changed: 0, removed: 0, unchanged: 1, failed: [{ id: b.id, error: 'kernel_error', error_description: 'link tg-second exists and was not created by this agent' }] },
    });
    expect(validateLine(out), JSON.stringify(validateLine.errors)).toBe(true);
    expect(lines).toContainEqual(expect.objectContaining({ level: 'warn', msg: 'tunnel failed in reconcile', tunnel_id: b.id, code: 'kernel_error' }));
    // apply keeps its result (no `failed`), and a broken apply is still ok: false kernel_error.
    const apply = await h.handle(await token(claims({ tunnel: a })));
    expect(apply.ok && 'failed' in apply.result).toBe(false);
    expect(validateLine(apply)).toBe(true);
    dp.failWith = new KernelError('apply: link tg-second exists and was not created by this agent');
    const broken = await h.handle(await token(claims({ tunnel: b })));
    expect(broken).toMatchObject({ ok: false, error: 'kernel_error' });
    expect(validateLine(broken)).toBe(true);
    // The schema holds the agent to the contract: `failed` missing or with another code does not validate.
    expect(validateLine({ ...clean, result: { added: 2, changed: 0, removed: 0, unchanged: 0 } })).toBe(false);
    expect(validateLine({ ...out, result: { ...(out.ok ? out.result : {}), failed: [{ id: b.id, error: 'malformed', error_description: 'x' }] } })).toBe(false);
  });
});
