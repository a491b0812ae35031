// Shared pieces of the agent job-layer tests (test/unit/jobs/*.test.ts): a gateway signing key and its job
// key, claims and real jose-signed tokens in every shape, the verifier's context on a test clock, a FAKE
// dataplane, the agent's configuration environment, and schema/job.schema.json loaded into Ajv.
import { createHash, generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CompactSign } from 'jose';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { createLogger } from '../../../common/log.ts';
import { JobHandler } from '../../../agent/jobs/handle.ts';
import { parseJobKey, type JobKey } from '../../../agent/jobs/job-key.ts';
import { verifyJob, type ReplayGuard, type VerifyContext } from '../../../agent/jobs/verify.ts';
import type { ChangeCounts, Dataplane, ProbeResult, ReconcileResult, TunnelRef, TunnelSpec } from '../../../agent/dataplane/types.ts';
import { EDGE_IP, tunnelSpec } from '../../helpers/tunnel-spec.ts';

export const NODE = randomUUID();
export const OTHER_NODE = randomUUID();
export const T0 = 1_900_000_000; // the test clock, seconds

export const gateway = generateKeyPairSync('ed25519');
export const gatewayJwk = gateway.publicKey.export({ format: 'jwk' });
export const KID = createHash('sha256').update(`{"crv":"Ed25519","kty":"OKP","x":"${gatewayJwk.x}"}`).digest('base64url');
const jobKey: JobKey = parseJobKey(JSON.stringify({ ...gatewayJwk, kid: KID, alg: 'EdDSA', use: 'sig' }));
export const intruder = generateKeyPairSync('ed25519');

export const tunnel = tunnelSpec;

export const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

/** Claims with overrides; an override of `undefined` removes the claim. */
export function claims(over: Record<string, unknown> = {}): Record<string, unknown> {
  const c: Record<string, unknown> = { iss: 'tunnelgate', aud: NODE, jti: randomUUID(), iat: T0, exp: T0 + 60, v: 1, op: 'apply', tunnel: tunnel(), ...over };
  for (const k of Object.keys(c)) if (c[k] === undefined) delete c[k];
  return c;
}

/** Signs arbitrary claims with an arbitrary header (Ed25519 unless the header says otherwise). */
export async function token(c: Record<string, unknown> = claims(), header: Record<string, unknown> = {}, key: KeyObject | Uint8Array = gateway.privateKey): Promise<string> {
  const h = { alg: 'EdDSA', typ: 'tunnel-job+jwt', kid: KID, ...header };
  for (const [k, v] of Object.entries(h)) if (v === undefined) delete h[k as keyof typeof h];
  return new CompactSign(Buffer.from(JSON.stringify(c))).setProtectedHeader(h as { alg: string }).sign(key);
}

export function unsigned(c: Record<string, unknown>, header: Record<string, unknown> = { alg: 'none', typ: 'tunnel-job+jwt', kid: KID }): string {
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

/** The verifier's clock (seconds) and replay guard; a test file resets them before each test. */
export const verifier = { clock: T0, replay: new MemoryReplay() };
export function resetVerifier(): void {
  verifier.clock = T0;
  verifier.replay = new MemoryReplay();
}
export const ctx = (over: Partial<VerifyContext> = {}): VerifyContext => ({ nodeId: NODE, edgeIp: EDGE_IP, jobKeys: [jobKey], replay: verifier.replay, now: () => verifier.clock, ...over });
export const code = async (jws: string | Uint8Array, c: VerifyContext = ctx()) => {
  const out = await verifyJob(jws, c);
  return out.ok ? 'ok' : out.error;
};

const tmpDirs: string[] = [];
/** A fresh directory, removed by removeTempDirs (a file's afterAll). */
export const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'tg-agent-jobs-'));
  tmpDirs.push(d);
  return d;
};
export function removeTempDirs(): void {
  for (const d of tmpDirs.splice(0)) rmSync(d, { recursive: true, force: true });
}

// ---------------------------------------------------------------------------------------------------

/** FAKE dataplane (test double, no kernel): records calls and answers from an in-memory set. */
export class RecordingDataplane implements Dataplane {
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

export function handlerWith(dp: Dataplane) {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger('debug', {}, (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
  const h = new JobHandler(ctx(), dp, log);
  return { h, lines };
}

// ---------------------------------------------------------------------------------------------------
// The agent's configuration and the job contract's schema

export const sshPub = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGbR1mqRBy1LhRvBVZP2kzSt0Uu3IuLSpW1s3cYSv0Nq tunnelgate-gateway';

/** A complete agent environment for this node and job key; `over` replaces (or, with undefined, drops) values. */
export const agentEnv = (over: Record<string, string | undefined> = {}): NodeJS.ProcessEnv => ({
  AGENT_NODE_ID: NODE,
  AGENT_STATE_DIR: '/var/lib/tunnel-agent',
  AGENT_AUTHORIZED_KEY: sshPub,
  AGENT_JOB_KEY: JSON.stringify({ ...gatewayJwk, kid: KID }),
  AGENT_EDGE_IP: EDGE_IP,
  ...over,
});

export const jobSchema = JSON.parse(readFileSync(new URL('../../../schema/job.schema.json', import.meta.url), 'utf8')) as Record<string, unknown>;

/** A fresh Ajv for the job schema. strictRequired would flag `required` next to a `$ref` (valid 2020-12: the properties come from the $ref). */
export const jobSchemaAjv = () => new Ajv2020({ allErrors: true, strict: true, strictRequired: false });

/** The schema's check of one result line the agent answers with. */
export function resultLineValidator() {
  const ajv = jobSchemaAjv();
  ajv.addSchema(jobSchema);
  return ajv.getSchema(`${String(jobSchema.$id)}#/$defs/resultLine`)!;
}
