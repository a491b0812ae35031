// Verifies one signed edge job (docs/CONTRACTS.md "Exact rules") and maps every failure to its code.
// Pure but for the injected replay guard and clock: no file, socket or kernel access here.
//
// Precedence, first failing check wins (the order docs/CONTRACTS.md "Exact rules" lists the codes in):
//   1. malformed            not a compact JWS; header not a JSON object; typ not tunnel-job+jwt; no kid; a
//                           `crit` or `b64` header; payload not a JSON object; iss not tunnelgate; jti not a
//                           UUID; iat/exp not numbers; exp before iat; iat more than 30 s in the future;
//                           op missing or not a string; for a job of a version this agent speaks and a
//                           known op, a body that does not match the op as that version has it (or a claim
//                           beyond the standard ones and that body): a v1 tunnel carrying `policy` is one.
//   2. invalid_signature    alg other than EdDSA (none, HS256 ...), a kid other than the configured JWK's,
//                           a signature that does not verify with AGENT_JOB_KEY.
//   3. wrong_audience       aud missing, not a string, or not this node's id; an edge_ip that is not
//                           AGENT_EDGE_IP, or a protected_ip outside AGENT_PROTECTED_POOLS when that is
//                           set (every tunnel of a reconcile is checked; every op, remove included).
//   4. expired              now > exp + 30 s, or exp more than 60 s after iat.
//   5. unsupported_version  v missing or not one of the versions this agent speaks (ctx.versions: 1 and 2,
//                           or fewer with AGENT_JOB_VERSIONS).
//   6. unsupported_command  a signed job of a version this agent speaks whose op that version does not have
//                           (common/job-contract.ts OPS_BY_VERSION: `status` is version 2's, so a v 1 status).
//   7. replayed             the jti was used before (remembered until exp + 30 s, the skew window).
// Body shapes depend on the version (v 2 adds `tunnel.policy`), so they are only checked when v is one this
// agent speaks: a job of another version gets unsupported_version rather than malformed (docs/CONTRACTS.md
// "Edge jobs", "Versions"). The jti is recorded only by a job that passed every
// check, so recording happens after its signature verified and before anything touches the kernel.
import { compactVerify } from 'jose';
import type { JobKey } from './job-key.ts';
import {
  CLOCK_SKEW_S,
  JOB_ALG,
  JOB_ISS,
  JOB_TYP,
  JOB_VERSIONS,
  MAX_INPUT_BYTES,
  MAX_LIFETIME_S,
  OPS_BY_VERSION,
  checkBody,
  edgeIpsOf,
  isJobVersion,
  isOpOf,
  protectedIpsOf,
  type JobClaims,
  type JobErrorCode,
  type JobVersion,
} from '../../common/job-contract.ts';
import { isUuid } from '../../common/names.ts';
import { isPlainObject } from '../../common/tunnel-spec.ts';

export interface ReplayGuard {
  /**
   * Records `jti` as used until `until` (seconds since the epoch) and resolves true, or resolves false
   * when it was already recorded. The check and the record are one step (no await between them).
   */
  use(jti: string, until: number): Promise<boolean>;
}

export interface VerifyContext {
  /** This node's id (AGENT_NODE_ID), lower case. */
  nodeId: string;
  /** This router's GRE underlay address (AGENT_EDGE_IP). */
  edgeIp: string;
  /**
   * AGENT_JOB_KEY: one key, or two while the gateway's job-signing key is rotated; a job signed by either
   * is accepted (docs/OPERATOR.md "Rotating the job-signing key").
   */
  jobKeys: readonly JobKey[];
  /**
   * AGENT_PROTECTED_POOLS: the protected IPs this router may map; undefined = any. A stolen job key then
   * cannot map other addresses through this router (docs/CONTRACTS.md "Hardening of the listener").
   */
  protectedPools?: { contains(ip: string): boolean; readonly entries: readonly string[] };
  replay: ReplayGuard;
  /** Seconds since the epoch (fractions allowed). */
  now: () => number;
  /**
   * The job versions this agent accepts (AGENT_JOB_VERSIONS); default all of JOB_VERSIONS. Fewer only to
   * stand in for an older agent (tests of a rolling upgrade).
   */
  versions?: readonly JobVersion[];
}

export type VerifiedJob = JobClaims & { kid: string };

export interface Refusal {
  ok: false;
  error: JobErrorCode;
  error_description: string;
  /** Present when the token carried a jti that is a UUID (signed or not). */
  jti?: string;
}

export type VerifyOutcome = { ok: true; job: VerifiedJob } | Refusal;

/** What step 3 checks a job's tunnels' addresses against: AGENT_EDGE_IP and AGENT_PROTECTED_POOLS. */
export type AddressRule = Pick<VerifyContext, 'edgeIp' | 'protectedPools'>;

/**
 * Why this router may not map tunnels with these addresses, or undefined: an edge_ip that is not
 * AGENT_EDGE_IP, a protected_ip outside AGENT_PROTECTED_POOLS when that is set. The one rule for a job's
 * tunnels (wrong_audience) and for the tunnels the agent restores at start from its journal (main.ts
 * restoreAtStart), so narrowing the pools takes effect on a restart as on the next job.
 */
export function addressRefusal(edgeIps: readonly string[], protectedIps: readonly string[], rule: AddressRule): string | undefined {
  const other = edgeIps.find((ip) => ip !== rule.edgeIp);
  if (other !== undefined) return `edge_ip ${other} is not this router's (${rule.edgeIp})`;
  const pools = rule.protectedPools;
  if (pools) {
    const outside = protectedIps.find((ip) => !pools.contains(ip));
    if (outside !== undefined) return `protected_ip ${outside} is outside this router's protected pools (${pools.entries.join(', ')})`;
  }
  return undefined;
}

const SEGMENT_RE = /^[A-Za-z0-9_-]*$/;

function decodeSegment(seg: string): unknown {
  if (seg.length % 4 === 1) return undefined;
  try {
    return JSON.parse(Buffer.from(seg, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
}

const isNumericDate = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/** Verifies `input` (the bytes read from the channel: one compact JWS, optionally one trailing newline). */
export async function verifyJob(input: string | Uint8Array, ctx: VerifyContext): Promise<VerifyOutcome> {
  let jti: string | undefined;
  const refuse = (error: JobErrorCode, error_description: string): Refusal => (jti ? { ok: false, jti, error, error_description } : { ok: false, error, error_description });

  // 1. malformed ------------------------------------------------------------------------------
  const size = typeof input === 'string' ? Buffer.byteLength(input) : input.byteLength;
  if (size > MAX_INPUT_BYTES) return refuse('malformed', `input is larger than ${MAX_INPUT_BYTES} bytes`);
  let text = typeof input === 'string' ? input : Buffer.from(input.buffer, input.byteOffset, input.byteLength).toString('latin1');
  if (text.endsWith('\n')) text = text.slice(0, -1);
  const parts = text.split('.');
  if (parts.length !== 3 || !parts.every((p) => SEGMENT_RE.test(p)) || parts[0] === '' || parts[1] === '') {
    return refuse('malformed', 'input is not one compact JWS (three base64url segments, at most one trailing newline)');
  }
  const [h64, p64] = parts as [string, string, string];
  const header = decodeSegment(h64);
  if (!isPlainObject(header)) return refuse('malformed', 'the JWS header is not a JSON object');
  const claims = decodeSegment(p64);
  if (!isPlainObject(claims)) return refuse('malformed', 'the JWS payload is not a JSON object');
  if (isUuid(claims.jti)) jti = claims.jti.toLowerCase();

  if (header.typ !== JOB_TYP) return refuse('malformed', `header typ must be "${JOB_TYP}"`);
  if (typeof header.kid !== 'string' || header.kid === '') return refuse('malformed', 'header kid is missing');
  if ('crit' in header || 'b64' in header) return refuse('malformed', 'header parameters crit and b64 are not supported');
  if (claims.iss !== JOB_ISS) return refuse('malformed', `iss must be "${JOB_ISS}"`);
  if (!jti) return refuse('malformed', 'jti must be a UUID');
  if (!isNumericDate(claims.iat)) return refuse('malformed', 'iat must be a NumericDate');
  if (!isNumericDate(claims.exp)) return refuse('malformed', 'exp must be a NumericDate');
  if (claims.exp < claims.iat) return refuse('malformed', 'exp is before iat');
  const now = ctx.now();
  if (claims.iat > now + CLOCK_SKEW_S) return refuse('malformed', `iat is more than ${CLOCK_SKEW_S} s in the future`);
  if (typeof claims.op !== 'string') return refuse('malformed', 'op must be a string');
  const versions = ctx.versions ?? JOB_VERSIONS;
  const version = isJobVersion(claims.v) && versions.includes(claims.v) ? claims.v : undefined;
  const known = version !== undefined && isOpOf(claims.op, version);
  if (known) {
    const why = checkBody(claims.op as JobClaims['op'], claims, version);
    if (why) return refuse('malformed', `the body does not match the op: ${why}`);
  }

  // 2. invalid_signature ----------------------------------------------------------------------
  if (header.alg !== JOB_ALG) return refuse('invalid_signature', `alg must be ${JOB_ALG}, got ${JSON.stringify(header.alg ?? null)}`);
  // A key with a kid (a JWK from node add) is tried only for jobs naming it; a PEM key has none and is
  // tried for any. The gateway names its key by its thumbprint (server/edge/job-signing.ts).
  const candidates = ctx.jobKeys.filter((k) => k.kid === undefined || k.kid === header.kid);
  if (candidates.length === 0) {
    const trusted = ctx.jobKeys.map((k) => JSON.stringify(k.kid)).join(' and ');
    return refuse('invalid_signature', `signed with key ${JSON.stringify(header.kid)}; this agent trusts ${trusted}`);
  }
  let verified = false;
  for (const k of candidates) {
    try {
      await compactVerify(text, k.key, { algorithms: [JOB_ALG] });
      verified = true;
      break;
    } catch {
      // the next key, if any
    }
  }
  if (!verified) return refuse('invalid_signature', `the signature does not verify with this agent's job key${ctx.jobKeys.length > 1 ? 's' : ''}`);

  // 3. wrong_audience -------------------------------------------------------------------------
  if (typeof claims.aud !== 'string' || claims.aud.toLowerCase() !== ctx.nodeId) {
    return refuse('wrong_audience', claims.aud === undefined ? 'aud is missing' : 'aud is not this node');
  }
  if (known) {
    const why = addressRefusal(edgeIpsOf(claims as unknown as JobClaims), protectedIpsOf(claims as unknown as JobClaims), ctx);
    if (why !== undefined) return refuse('wrong_audience', why);
  }

  // 4. expired --------------------------------------------------------------------------------
  if (now > claims.exp + CLOCK_SKEW_S) return refuse('expired', 'exp has passed');
  if (claims.exp - claims.iat > MAX_LIFETIME_S) return refuse('expired', `exp is more than ${MAX_LIFETIME_S} s after iat`);

  // 5. unsupported_version / 6. unsupported_command ------------------------------------------------
  if (version === undefined) return refuse('unsupported_version', `v must be ${versions.join(' or ')}, got ${JSON.stringify(claims.v ?? null)}`);
  if (!isOpOf(claims.op, version)) return refuse('unsupported_command', `op ${JSON.stringify(claims.op)} is not one of ${OPS_BY_VERSION[version].join(', ')} (job version ${version})`);

  // 7. replayed -------------------------------------------------------------------------------
  if (!(await ctx.replay.use(jti, claims.exp + CLOCK_SKEW_S))) return refuse('replayed', 'this jti was used before');

  // UUIDs compare case-insensitively; the dataplane keys tunnels by id, so hand it the canonical form.
  const job = { ...(claims as unknown as JobClaims), jti, kid: header.kid } as VerifiedJob;
  if (job.op === 'reconcile') job.tunnels = job.tunnels.map((t) => ({ ...t, id: t.id.toLowerCase() }));
  else if (job.op === 'traffic') job.ids = job.ids.map((id) => id.toLowerCase());
  else if (job.op !== 'status' && job.op !== 'events') job.tunnel = { ...job.tunnel, id: job.tunnel.id.toLowerCase() };
  return { ok: true, job };
}
