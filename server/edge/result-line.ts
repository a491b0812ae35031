// What one edge job over SSH comes back with (docs/CONTRACTS.md "Transport", "Results"): the agent's one
// result line, checked against the channel's exit status, or an EdgeSshError when the job could not be
// delivered or answered. An agent's `ok: false` is a result, not an error. connections.ts runs the jobs.
// Also what `tunnel-agent hello` comes back with (docs/CONTRACTS.md "Versions"): the versions the agent
// accepts, or "version 1 only" from an agent that predates hello.
import { EXIT_UNSUPPORTED_COMMAND, JOB_VERSION_1, checkHello, type HelloLine, type ResultLine } from '../../common/job-contract.ts';
import type { TunnelLinks } from '../../common/tunnel-links.ts';

export type EdgeSshErrorKind =
  /** The agent presented another host key: nothing was sent. Needs an operator, not a retry. */
  | 'host_key_mismatch'
  /** The agent refused the gateway's key. Needs an operator. */
  | 'auth_failed'
  /** TCP or SSH handshake failure, connection lost before the result line. */
  | 'connect_failed'
  | 'timeout'
  /** The agent answered something that is not one result line consistent with its exit status. */
  | 'protocol';

export class EdgeSshError extends Error {
  override name = 'EdgeSshError';
  readonly kind: EdgeSshErrorKind;
  /** Whether trying again later can help (false for host_key_mismatch and auth_failed). */
  readonly retryable: boolean;
  /** For host_key_mismatch: the fingerprint the agent presented. */
  readonly presentedFingerprint: string | undefined;

  constructor(kind: EdgeSshErrorKind, message: string, presentedFingerprint?: string) {
    super(message);
    this.kind = kind;
    this.retryable = kind !== 'host_key_mismatch' && kind !== 'auth_failed';
    this.presentedFingerprint = presentedFingerprint;
  }
}

/** Most bytes of stdout accepted from an agent (a result line is small). */
export const MAX_OUTPUT = 1024 * 1024;

/** Which job versions an agent accepts, as its answer to `tunnel-agent hello` says. */
export interface AgentHello {
  /** The versions it listed (unknown newer ones included); [1] for an agent that predates hello. */
  versions: readonly number[];
  /** Its own version (agent/package.json); null for an agent that predates hello. */
  agent: string | null;
  /** Whether it can make its tunnels' links (docs/CONTRACTS.md "Tunnel links"); null when it did not say. */
  tunnelLinks: TunnelLinks | null;
  /** The features it listed (common/job-contract.ts FEATURE_ATTACKS); absent: none (an agent from before them). */
  features?: readonly string[];
}


const oneJsonLine = (stdout: string): unknown => {
  if (!stdout.endsWith('\n') || stdout.indexOf('\n') !== stdout.length - 1) return undefined;
  try {
    return JSON.parse(stdout);
  } catch {
    return undefined;
  }
};

/**
 * The agent's answer to `tunnel-agent hello`: exit 0 with one HelloLine, or exit 127 (or an
 * `unsupported_command` line), which means version 1 only. Anything else is a contract error (`protocol`).
 */
export function parseHelloAnswer(stdout: string, exitCode: number | undefined): AgentHello {
  const line = oneJsonLine(stdout);
  const l = (typeof line === 'object' && line !== null ? line : {}) as Record<string, unknown>;
  if (exitCode === EXIT_UNSUPPORTED_COMMAND || (exitCode === 1 && l.ok === false && l.error === 'unsupported_command')) return { versions: [JOB_VERSION_1], agent: null, tunnelLinks: null };
  const shown = JSON.stringify(stdout.slice(0, 200));
  if (line === undefined) throw new EdgeSshError('protocol', `the agent's hello is not one JSON line (exit status ${exitCode ?? 'none'}): ${shown}`);
  const why = checkHello(line);
  if (why) throw new EdgeSshError('protocol', `the agent's hello is not a hello line (${why}): ${shown}`);
  if (exitCode !== 0) throw new EdgeSshError('protocol', `the agent's hello came with exit status ${exitCode ?? 'none'}, not 0`);
  const hello = line as HelloLine;
  return { versions: [...hello.versions], agent: hello.agent, tunnelLinks: hello.tunnel_links ?? null, ...(hello.features ? { features: [...hello.features] } : {}) };
}

/** One result line from an agent's stdout, checked against its exit status. */
export function parseResultLine(stdout: string, exitCode: number | undefined): ResultLine {
  if (!stdout.endsWith('\n') || stdout.indexOf('\n') !== stdout.length - 1) {
    throw new EdgeSshError('protocol', `the agent did not answer exactly one line (exit status ${exitCode ?? 'none'}): ${JSON.stringify(stdout.slice(0, 200))}`);
  }
  let line: unknown;
  try {
    line = JSON.parse(stdout);
  } catch {
    throw new EdgeSshError('protocol', `the agent's answer is not JSON: ${JSON.stringify(stdout.slice(0, 200))}`);
  }
  const l = line as Partial<Record<string, unknown>>;
  const shapeOk =
    typeof l === 'object' &&
    l !== null &&
    ((l.ok === true && typeof l.jti === 'string' && typeof l.op === 'string' && typeof l.result === 'object' && l.result !== null) ||
      (l.ok === false && typeof l.error === 'string' && typeof l.error_description === 'string'));
  if (!shapeOk) throw new EdgeSshError('protocol', `the agent's answer is not a result line: ${JSON.stringify(stdout.slice(0, 200))}`);
  const expected = l.ok === true ? [0] : [1, 127];
  if (exitCode === undefined || !expected.includes(exitCode)) {
    throw new EdgeSshError('protocol', `exit status ${exitCode ?? 'none'} does not match ok: ${String(l.ok)}`);
  }
  return line as ResultLine;
}
