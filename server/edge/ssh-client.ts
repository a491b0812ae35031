// The gateway's SSH client for edge jobs (docs/CONTRACTS.md "Transport"): connects to an agent, refuses any
// host key but the pinned one (SHA256 fingerprint recorded at `node add --host-key`), authenticates as
// `tunnelgate` with the gateway's key, runs `tunnel-agent job`, writes the JWS, closes stdin, and reads
// back the one result line. Transport failures throw EdgeSshError; an agent's `ok: false` is a result.
import ssh2 from 'ssh2';
import { JOB_COMMAND, SSH_USER, type ResultLine } from '../../common/job-contract.ts';
import { sshFingerprint } from '../../common/openssh.ts';

export type { ResultLine } from '../../common/job-contract.ts';

export interface EdgeNodeAddress {
  host: string;
  port: number;
  /** `SHA256:<base64>` as `ssh-keygen -l` and the agent print it (trailing `=` padding tolerated). */
  hostKeyFingerprint: string;
}

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

export const normalizeFingerprint = (f: string) => f.trim().replace(/=+$/, '');

/** One result line from an agent's stdout, checked against its exit status (shared with connections.ts). */
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

/**
 * Runs one signed job on one agent. Resolves with the agent's result line (ok or not); rejects with an
 * EdgeSshError when the job could not be delivered or answered within `timeoutMs` (connect included).
 * A rejection after the JWS was written means the job may have run: retry with a fresh jti and let the
 * agent's idempotent apply/remove (or a reconcile) settle it.
 */
export function runJob(node: EdgeNodeAddress, privateKey: string | Buffer, jws: string, timeoutMs: number): Promise<ResultLine> {
  const pinned = normalizeFingerprint(node.hostKeyFingerprint);
  return new Promise<ResultLine>((resolve, reject) => {
    const conn = new ssh2.Client();
    let presented: string | undefined;
    let hostKeyRefused = false;
    let settled = false;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      fn();
      conn.end();
    };
    const fail = (err: EdgeSshError) => settle(() => reject(err));
    const timer = setTimeout(() => {
      fail(new EdgeSshError('timeout', `no answer from ${node.host}:${node.port} within ${timeoutMs} ms`));
      conn.destroy();
    }, timeoutMs);

    conn.on('ready', () => {
      conn.exec(JOB_COMMAND, (err, stream) => {
        if (err) return fail(new EdgeSshError('connect_failed', `exec refused: ${err.message}`));
        const out: Buffer[] = [];
        let size = 0;
        let exitCode: number | undefined;
        stream.on('data', (d: Buffer) => {
          size += d.length;
          if (size > MAX_OUTPUT) return fail(new EdgeSshError('protocol', 'the agent answered more than 1 MiB'));
          out.push(d);
        });
        stream.stderr.on('data', () => undefined);
        stream.on('exit', (code: number | null) => {
          if (typeof code === 'number') exitCode = code;
        });
        stream.on('close', () => {
          if (settled) return;
          try {
            const line = parseResultLine(Buffer.concat(out).toString('utf8'), exitCode);
            settle(() => resolve(line));
          } catch (e) {
            fail(e as EdgeSshError);
          }
        });
        stream.end(jws);
      });
    });
    conn.on('error', (err: Error & { level?: string }) => {
      if (hostKeyRefused) {
        return fail(new EdgeSshError('host_key_mismatch', `${node.host}:${node.port} presented host key ${presented}, pinned ${pinned}; nothing was sent`, presented));
      }
      if (err.level === 'client-authentication') return fail(new EdgeSshError('auth_failed', `the agent at ${node.host}:${node.port} refused the gateway's key`));
      if (err.level === 'client-timeout') return fail(new EdgeSshError('timeout', `SSH handshake with ${node.host}:${node.port} timed out`));
      fail(new EdgeSshError('connect_failed', `${node.host}:${node.port}: ${err.message}`));
    });
    conn.on('close', () => fail(new EdgeSshError('connect_failed', `the connection to ${node.host}:${node.port} closed before the agent answered`)));

    try {
      conn.connect({
        host: node.host,
        port: node.port,
        username: SSH_USER,
        privateKey,
        authHandler: ['publickey'],
        readyTimeout: timeoutMs,
        hostVerifier: (key: Buffer) => {
          presented = sshFingerprint(key);
          hostKeyRefused = presented !== pinned;
          return !hostKeyRefused;
        },
      });
      // A job is a few small packets each way: without TCP_NODELAY each round trip waits for delayed ACKs.
      conn.setNoDelay(true);
    } catch (e) {
      fail(new EdgeSshError('connect_failed', `cannot connect to ${node.host}:${node.port}: ${(e as Error).message}`));
    }
  });
}
