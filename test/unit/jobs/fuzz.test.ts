// Property-based pass over the agent's job input (signed job bodies at the agent), with
// fast-check, through the production path the SSH channel feeds: JobHandler.handle (verify + run). Inputs:
// arbitrary bytes; JWS-shaped strings with arbitrary header and payload JSON; and validly signed tokens
// whose claims are valid jobs mutated in arbitrary ways (fields replaced by arbitrary JSON, dropped, added,
// tunnels swapped for arbitrary objects), plus signed arbitrary JSON objects. For every input:
//   - handle() resolves (never throws) with one result line that matches schema/job.schema.json's resultLine;
//   - a refusal carries one documented code, and no refusal ever reaches the dataplane (the FAKE below
//     records every call; probe's `has` is a lookup of the agent's own records, not a kernel call);
//   - an ok line means exactly one dataplane call, of that op, with a tunnel body the contract accepts.
// The dataplane is a FAKE (it fails at random, as a kernel can, to cover kernel_error).
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { CompactSign } from 'jose';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../../common/log.ts';
import { ERROR_CODES, type ResultLine } from '../../../common/job-contract.ts';
import { checkTunnel } from '../../../common/tunnel-spec.ts';
import { JobHandler } from '../../../agent/jobs/handle.ts';
import { parseJobKey } from '../../../agent/jobs/job-key.ts';
import type { ReplayGuard } from '../../../agent/jobs/verify.ts';
import { parseCidrList } from '../../../agent/cidr.ts';
import { KernelError, type ChangeCounts, type Dataplane, type ProbeResult, type ReconcileResult, type TunnelRef, type TunnelSpec } from '../../../agent/dataplane/types.ts';
import { EDGE_IP, tunnelSpec } from '../../helpers/tunnel-spec.ts';
import { resultLineValidator } from './fixtures.ts';

const NODE = randomUUID();
const KID = 'fuzz-kid';
const T0 = 1_900_000_000;
const signing = generateKeyPairSync('ed25519');
const jobKey = parseJobKey(JSON.stringify({ ...signing.publicKey.export({ format: 'jwk' }), kid: KID }));

const validLine = resultLineValidator();

class MemoryReplay implements ReplayGuard {
  private readonly used = new Set<string>();
  async use(jti: string): Promise<boolean> {
    if (this.used.has(jti)) return false;
    this.used.add(jti);
    return true;
  }
}

/** FAKE dataplane: records every call, checks what it is handed, fails when told to. */
class FuzzDataplane implements Dataplane {
  calls: { op: string; arg: unknown }[] = [];
  failNext = false;
  private readonly held = new Set<string>();
  private step(op: string, arg: unknown): void {
    this.calls.push({ op, arg });
    if (this.failNext) throw new KernelError(`${op}: injected failure`);
  }
  async apply(t: TunnelSpec): Promise<ChangeCounts> {
    this.step('apply', t);
    this.held.add(t.id);
    return { added: 1, changed: 0, removed: 0, unchanged: 0 };
  }
  async remove(t: TunnelRef): Promise<ChangeCounts> {
    this.step('remove', t);
    return { added: 0, changed: 0, removed: this.held.delete(t.id) ? 1 : 0, unchanged: 0 };
  }
  async reconcile(ts: TunnelSpec[]): Promise<ReconcileResult> {
    this.step('reconcile', ts);
    // The first tunnel "fails in the kernel", so `failed` is exercised too.
    return { added: Math.max(0, ts.length - 1), changed: 0, removed: 0, unchanged: 0, failed: ts.slice(0, 1).map((t) => ({ id: t.id, error: 'kernel_error' as const, error_description: 'injected' })) };
  }
  async probe(t: TunnelSpec): Promise<ProbeResult> {
    this.step('probe', t);
    return { reachable: true, rtt_ms: 1 };
  }
  async has(id: string): Promise<boolean> {
    return this.held.has(id) || id.endsWith('0');
  }
  async close(): Promise<void> {}
}

const dataplane = new FuzzDataplane();
const handler = new JobHandler(
  { nodeId: NODE, edgeIp: EDGE_IP, jobKeys: [jobKey], replay: new MemoryReplay(), now: () => T0, protectedPools: parseCidrList('203.0.113.0/24, 198.51.100.0/24') },
  dataplane,
  createLogger('silent'),
);

const tried = { bytes: 0, shaped: 0, signedMutated: 0, signedArbitrary: 0 };
/** Outcomes seen ('ok' or the error code), over every input. */
const seen = new Map<string, number>();
afterAll(() => {
  const total = Object.values(tried).reduce((a, b) => a + b, 0);
  // The figure for the report (how many inputs were tried).
  console.log(`agent job fuzz: ${total} inputs (${JSON.stringify(tried)}); outcomes ${JSON.stringify(Object.fromEntries([...seen].sort()))}`);
});

const KERNEL_OPS = new Set(['apply', 'remove', 'reconcile', 'probe']);

/** Runs one input through the handler and checks every property; returns the line. */
async function check(input: string | Uint8Array, failKernel = false): Promise<ResultLine> {
  const before = dataplane.calls.length;
  dataplane.failNext = failKernel;
  let line: ResultLine;
  try {
    line = await handler.handle(input);
  } catch (e) {
    throw new Error(`handle threw: ${(e as Error)?.stack ?? String(e)}`);
  } finally {
    dataplane.failNext = false;
  }
  expect(validLine(line), `${JSON.stringify(line)} ${JSON.stringify(validLine.errors)}`).toBe(true);
  const outcome = line.ok ? 'ok' : line.error;
  seen.set(outcome, (seen.get(outcome) ?? 0) + 1);
  const calls = dataplane.calls.slice(before).filter((c) => KERNEL_OPS.has(c.op));
  if (line.ok) {
    expect(calls.map((c) => c.op)).toEqual([line.op]);
    const arg = calls[0]!.arg;
    if (line.op === 'reconcile') for (const t of arg as unknown[]) expect(checkTunnel(t, true)).toBeUndefined();
    else expect(checkTunnel(arg, line.op !== 'remove')).toBeUndefined();
  } else {
    expect(ERROR_CODES).toContain(line.error);
    expect(typeof line.error_description).toBe('string');
    // A refusal never touches the kernel; only a failure inside the dataplane is kernel_error after a call.
    if (line.error === 'kernel_error') expect(calls.length).toBeLessThanOrEqual(1);
    else expect(calls).toEqual([]);
  }
  return line;
}

const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
const sign = (claims: unknown, header: Record<string, unknown> = {}) =>
  new CompactSign(Buffer.from(JSON.stringify(claims))).setProtectedHeader({ alg: 'EdDSA', typ: 'tunnel-job+jwt', kid: KID, ...header } as { alg: string }).sign(signing.privateKey);

// ---- arbitraries ---------------------------------------------------------------------------------

const ipv4 = fc.oneof(
  fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((o) => o.join('.')),
  fc.constantFrom('203.0.113.10', '203.0.113.11', '198.51.100.7', EDGE_IP, '10.0.0.1', '1.2.3', '01.2.3.4', '256.0.0.1'),
);
/** Mostly `usual`, sometimes anything from `odd` (so most jobs get far enough to reach the dataplane). */
const mostly = <T>(usual: fc.Arbitrary<T>, odd: fc.Arbitrary<T>) => fc.oneof({ weight: 8, arbitrary: usual }, { weight: 1, arbitrary: odd });
const tunnelArb: fc.Arbitrary<Record<string, unknown>> = fc
  .record({
    i: fc.nat(63),
    protected_ip: mostly(fc.constant(undefined), ipv4),
    edge_ip: mostly(fc.constant(EDGE_IP), ipv4),
    mtu: mostly(fc.constant(1476), fc.integer({ min: -1, max: 10_000 })),
    gre_key: mostly(fc.oneof(fc.constant(undefined), fc.nat()), fc.constantFrom(4294967296, -1, 1.5)),
  })
  .map(({ i, protected_ip, ...o }) => {
    const t: Record<string, unknown> = {
      ...tunnelSpec({ tunnel_name: `tg-fz${i}`, protected_ip: protected_ip ?? `203.0.113.${i}`, edge_inner: `100.64.0.${4 * i + 1}/30`, origin_inner: `100.64.0.${4 * i + 2}/30` }),
      ...o,
    };
    if (t.gre_key === undefined) delete t.gre_key;
    return t;
  });

type Mutation = { kind: 'set'; key: string; value: unknown } | { kind: 'drop'; key: string } | { kind: 'tunnelSet'; key: string; value: unknown } | { kind: 'tunnelDrop'; key: string };
const claimKeys = fc.constantFrom('iss', 'aud', 'jti', 'iat', 'exp', 'v', 'op', 'tunnel', 'tunnels', 'extra');
const tunnelKeys = fc.constantFrom('id', 'tunnel_name', 'protected_ip', 'origin_ip', 'edge_ip', 'edge_inner', 'origin_inner', 'mtu', 'gre_key', 'other');
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('set' as const), key: claimKeys, value: fc.jsonValue({ maxDepth: 3 }) }),
  fc.record({ kind: fc.constant('drop' as const), key: claimKeys }),
  fc.record({ kind: fc.constant('tunnelSet' as const), key: tunnelKeys, value: fc.oneof(fc.jsonValue({ maxDepth: 2 }), ipv4, fc.constant(undefined)) }),
  fc.record({ kind: fc.constant('tunnelDrop' as const), key: tunnelKeys }),
);

const validJob = fc
  .record({
    op: fc.constantFrom('apply', 'remove', 'reconcile', 'probe', 'status'),
    tunnels: fc.array(tunnelArb, { maxLength: 4 }),
    tunnel: tunnelArb,
    ref: fc.boolean(),
    aud: mostly(fc.constant(NODE), fc.uuid()),
    iat: mostly(fc.constant(T0), fc.integer({ min: T0 - 200, max: T0 + 200 })),
    life: mostly(fc.constant(60), fc.integer({ min: -10, max: 120 })),
    v: mostly(fc.constant(1), fc.jsonValue({ maxDepth: 1 })),
  })
  .map(({ op, tunnels, tunnel, ref, aud, iat, life, v }) => {
    const c: Record<string, unknown> = { iss: 'tunnelgate', aud, jti: randomUUID(), iat, exp: iat + life, v, op };
    if (op === 'reconcile') c.tunnels = tunnels;
    else c.tunnel = op === 'remove' && ref ? { id: tunnel.id, tunnel_name: tunnel.tunnel_name, protected_ip: tunnel.protected_ip } : tunnel;
    return c;
  });

function mutate(c: Record<string, unknown>, ms: Mutation[]): Record<string, unknown> {
  const out = structuredClone(c);
  for (const m of ms) {
    const target = (Array.isArray(out.tunnels) && out.tunnels.length > 0 ? out.tunnels[0] : out.tunnel) as Record<string, unknown> | undefined;
    if (m.kind === 'set') out[m.key] = m.value;
    else if (m.kind === 'drop') delete out[m.key];
    else if (target && typeof target === 'object') {
      if (m.kind === 'tunnelSet') target[m.key] = m.value;
      else delete target[m.key];
    }
  }
  return out;
}

const NUM = Number(process.env.TG_FUZZ_RUNS ?? 1) || 1; // multiplies the run counts below for longer local passes

describe('agent job input: property-based (fast-check)', () => {
  it('arbitrary bytes: one documented refusal, never a throw, never the dataplane', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.uint8Array({ maxLength: 4096 }), fc.string({ maxLength: 512 }).map((s) => Buffer.from(s))), async (bytes) => {
        tried.bytes++;
        const line = await check(bytes);
        expect(line.ok).toBe(false);
      }),
      { numRuns: 1500 * NUM },
    );
  }, 120_000);

  it('JWS-shaped input with arbitrary header and payload JSON (bad or no signature)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.record({ alg: fc.constantFrom('EdDSA', 'none', 'HS256', 'RS256'), typ: fc.constantFrom('tunnel-job+jwt', 'JWT'), kid: fc.constantFrom(KID, 'x') })),
        fc.oneof(fc.jsonValue({ maxDepth: 3 }), validJob),
        fc.oneof(fc.constant(''), fc.base64String({ maxLength: 120 }).map((s) => s.replace(/\+/g, '-').replace(/\//g, '_').replace(/=/g, ''))),
        fc.constantFrom('', '\n', '\n\n', ' '),
        async (header, payload, sig, tail) => {
          tried.shaped++;
          const line = await check(`${b64(header)}.${b64(payload)}.${sig}${tail}`);
          expect(line.ok).toBe(false); // nothing here carries a valid signature
        },
      ),
      { numRuns: 1500 * NUM },
    );
  }, 120_000);

  it('validly signed jobs with mutated bodies: ok or one documented code, and a refusal never reaches the dataplane', async () => {
    await fc.assert(
      fc.asyncProperty(validJob, mostly(fc.constant([] as Mutation[]), fc.array(mutation, { minLength: 1, maxLength: 3 })), fc.boolean(), fc.constantFrom('', '\n'), async (job, ms, failKernel, tail) => {
        tried.signedMutated++;
        await check(`${await sign(mutate(job, ms))}${tail}`, failKernel);
      }),
      { numRuns: 3000 * NUM },
    );
  }, 180_000);

  it('validly signed arbitrary JSON payloads and headers', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.object({ maxDepth: 2 }), fc.dictionary(claimKeys, fc.jsonValue({ maxDepth: 2 }))),
        fc.dictionary(fc.constantFrom('crit', 'b64', 'typ', 'kid', 'x5u', 'zip'), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 2 }),
        async (payload, header) => {
          tried.signedArbitrary++;
          let jws: string;
          try {
            jws = await sign(payload, header);
          } catch {
            return; // jose refuses to sign some headers (e.g. crit); nothing reaches the agent
          }
          await check(jws);
        },
      ),
      { numRuns: 1500 * NUM },
    );
  }, 120_000);

  it('the pass is not vacuous: the generated inputs reached ok and most refusal codes', () => {
    expect(seen.get('ok') ?? 0).toBeGreaterThan(100);
    for (const code of ['malformed', 'invalid_signature', 'wrong_audience', 'expired', 'unsupported_version', 'unsupported_command', 'kernel_error', 'unknown_tunnel']) {
      expect(seen.get(code) ?? 0, code).toBeGreaterThan(0);
    }
  });

  it('deterministic witnesses on the same handler: a real job runs, an out-of-pool one is refused', async () => {
    // Deterministic witnesses on the same handler, so the properties above are known to reach both sides.
    const t = tunnelSpec({ tunnel_name: 'tg-witness' });
    expect(await check(await sign({ iss: 'tunnelgate', aud: NODE, jti: randomUUID(), iat: T0, exp: T0 + 60, v: 1, op: 'apply', tunnel: t }))).toMatchObject({ ok: true });
    expect(await check(await sign({ iss: 'tunnelgate', aud: NODE, jti: randomUUID(), iat: T0, exp: T0 + 60, v: 1, op: 'apply', tunnel: { ...t, protected_ip: '192.0.2.1' } }))).toMatchObject({
      ok: false,
      error: 'wrong_audience',
    });
    expect(dataplane.calls.filter((c) => c.op === 'apply').length).toBeGreaterThan(1);
  });
});
