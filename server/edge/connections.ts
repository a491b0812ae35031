// Warm SSH connections from the gateway to its agents: one authenticated connection per node, kept open,
// with one session channel per job (docs/CONTRACTS.md "Transport" allows any number of sessions). Opening an
// SSH connection costs a key exchange and an authentication, several round trips and milliseconds of
// CPU; a channel on a warm connection costs one round trip. Each connection refuses any host key but the
// node's pinned one (the SHA256 fingerprint recorded at `node add --host-key`) before it authenticates, so
// nothing reaches an agent that is not the one the operator pinned; it authenticates as `tunnelgate` with
// the gateway's key. A connection that drops is forgotten and reported through `onLost`, so the worker can
// reconcile the node on its next contact. Transport failures throw EdgeSshError (result-line.ts).
//
// Versions (docs/CONTRACTS.md "Versions"): on every new connection the pool asks `tunnel-agent hello`
// once, before the first job on it, and remembers the answer with that connection only: after a
// reconnect it asks again, since the agent may have been upgraded (or rolled back) meanwhile. A job is
// signed for one EdgeSession (one connection and its hello) and runs on that connection only, so a job
// signed as version 2 never reaches an agent that did not list 2. A bad hello answer fails the contact as
// a `protocol` error and is asked again on the next one.
import ssh2 from 'ssh2';
import { HELLO_COMMAND, JOB_COMMAND, JOB_VERSIONS, SSH_USER, isJobVersion, type JobVersion, type ResultLine } from '../../common/job-contract.ts';
import { sshFingerprint } from '../../common/openssh.ts';
import { EdgeSshError, MAX_OUTPUT, parseHelloAnswer, parseResultLine, type AgentHello } from './result-line.ts';
import { openLineChannel, type LineChannel, type LineChannelOptions } from './line-channel.ts';

export type { AgentHello } from './result-line.ts';

/** An edge node as the gateway contacts it. */
export interface EdgeNode {
  id: string;
  host: string;
  port: number;
  /** `SHA256:<base64>` as `ssh-keygen -l` and the agent print it (trailing `=` padding tolerated). */
  hostKeyFingerprint: string;
}

const normalizeFingerprint = (f: string) => f.trim().replace(/=+$/, '');

interface Entry {
  key: string;
  ready: Promise<ssh2.Client>;
  client: ssh2.Client;
  /** This connection's hello, asked once; cleared when it failed so the next contact asks again. */
  session: Promise<EdgeSession> | null;
}

/** One connection to a node's agent and what its hello said: the unit a job is signed for. */
export interface EdgeSession {
  readonly nodeId: string;
  readonly hello: AgentHello;
  /** The version to sign jobs with on this connection: the newest both the gateway and the agent speak. */
  readonly version: JobVersion;
  /** Runs one job signed for this session, on this connection only (connect_failed when it is gone). */
  run(jws: string, timeoutMs: number): Promise<ResultLine>;
  /** Opens a job signed for this session that answers lines (the `events` op), on this connection only. */
  stream(jws: string, o: LineChannelOptions): Promise<LineChannel>;
}

/** The newest job version both ends speak, or undefined when the agent listed none the gateway knows. */
export function commonVersion(agentVersions: readonly number[]): JobVersion | undefined {
  const both = agentVersions.filter(isJobVersion);
  return both.length === 0 ? undefined : (Math.max(...both) as JobVersion);
}

export class EdgeConnections {
  private readonly entries = new Map<string, Entry>();
  private closed = false;

  constructor(
    private readonly privateKey: string,
    private readonly opts: { connectTimeoutMs: number; onLost?: (nodeId: string, why: string) => void },
  ) {}

  /**
   * The node's warm connection (opened on first use) and its hello (asked once per connection): what a
   * job is signed for. `timeoutMs` bounds the hello, as it bounds a job.
   */
  async session(node: EdgeNode, timeoutMs: number): Promise<EdgeSession> {
    const entry = this.entry(node);
    const client = await entry.ready;
    if (!entry.session) {
      const asked = this.askHello(entry, client, node, timeoutMs);
      entry.session = asked;
      // A failed hello is not remembered: the next contact asks again (on this connection if it is still up).
      asked.catch(() => {
        if (entry.session === asked) entry.session = null;
      });
    }
    return entry.session;
  }

  /** Runs one signed job on the node over its warm connection (opened and greeted on first use). */
  async run(node: EdgeNode, jws: string, timeoutMs: number): Promise<ResultLine> {
    return (await this.session(node, timeoutMs)).run(jws, timeoutMs);
  }

  private async askHello(entry: Entry, client: ssh2.Client, node: EdgeNode, timeoutMs: number): Promise<EdgeSession> {
    // No stdin: the channel's input is closed at once.
    const answer = await this.exec(entry, client, node, HELLO_COMMAND, '', timeoutMs);
    const hello = parseHelloAnswer(answer.stdout, answer.exitCode);
    const version = commonVersion(hello.versions);
    if (version === undefined) {
      throw new EdgeSshError('protocol', `the agent at ${node.host}:${node.port} accepts job versions ${JSON.stringify(hello.versions)}, none of ${JOB_VERSIONS.join(', ')}`);
    }
    const session: EdgeSession = {
      nodeId: node.id,
      hello,
      version,
      run: async (jws, ms) => {
        // Never on another connection: the agent behind a new one may not speak this session's version.
        if (this.entries.get(node.id) !== entry) throw new EdgeSshError('connect_failed', `the connection to ${node.host}:${node.port} this job was signed for is gone`);
        const out = await this.exec(entry, client, node, JOB_COMMAND, jws, ms);
        return parseResultLine(out.stdout, out.exitCode);
      },
      stream: async (jws, o) => {
        if (this.entries.get(node.id) !== entry) throw new EdgeSshError('connect_failed', `the connection to ${node.host}:${node.port} this job was signed for is gone`);
        return openLineChannel(client, JOB_COMMAND, jws, o);
      },
    };
    return session;
  }

  /** One exec channel on the entry's connection: writes `stdin` and closes it, collects stdout and the exit status. */
  private exec(entry: Entry, client: ssh2.Client, node: EdgeNode, command: string, stdin: string, timeoutMs: number): Promise<{ stdout: string; exitCode: number | undefined }> {
    return new Promise((resolve, reject) => {
      let settled = false;
      const settle = (fn: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        client.off('close', onClose);
        fn();
      };
      const onClose = () => settle(() => reject(new EdgeSshError('connect_failed', `the connection to ${node.host}:${node.port} closed before the agent answered`)));
      client.once('close', onClose);
      const timer = setTimeout(() => {
        // The job may or may not have run; the connection is in an unknown state, so it goes.
        settle(() => reject(new EdgeSshError('timeout', `no answer from ${node.host}:${node.port} within ${timeoutMs} ms`)));
        this.drop(entry, command === JOB_COMMAND ? 'job timeout' : 'hello timeout');
      }, timeoutMs);
      client.exec(command, (err, stream) => {
        if (err) {
          settle(() => reject(new EdgeSshError('connect_failed', `exec refused: ${err.message}`)));
          return;
        }
        const out: Buffer[] = [];
        let size = 0;
        let exitCode: number | undefined;
        stream.on('data', (d: Buffer) => {
          size += d.length;
          if (size > MAX_OUTPUT) {
            settle(() => reject(new EdgeSshError('protocol', 'the agent answered more than 1 MiB')));
            stream.destroy();
            return;
          }
          out.push(d);
        });
        stream.stderr.on('data', () => undefined);
        stream.on('error', () => undefined);
        stream.on('exit', (code: number | null) => {
          if (typeof code === 'number') exitCode = code;
        });
        stream.on('close', () => settle(() => resolve({ stdout: Buffer.concat(out).toString('utf8'), exitCode })));
        stream.end(stdin);
      });
    });
  }

  /** Whether a connection to this node is open (or opening) right now. */
  isOpen(nodeId: string): boolean {
    return this.entries.has(nodeId);
  }

  /** Drops the node's connection (tests use it to cut a connection mid-job). */
  disconnect(nodeId: string): void {
    const e = this.entries.get(nodeId);
    if (e) this.drop(e, 'disconnect requested');
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const e of [...this.entries.values()]) this.drop(e, 'closing');
  }

  private drop(entry: Entry, why: string): void {
    for (const [id, e] of this.entries) {
      if (e === entry) {
        this.entries.delete(id);
        this.opts.onLost?.(id, why);
      }
    }
    entry.client.destroy();
  }

  private entry(node: EdgeNode): Entry {
    if (this.closed) throw new EdgeSshError('connect_failed', 'the edge connection pool is closed');
    // An address or pinned key changed by the operator invalidates the old connection.
    const key = `${node.host}|${node.port}|${normalizeFingerprint(node.hostKeyFingerprint)}`;
    const existing = this.entries.get(node.id);
    if (existing && existing.key === key) return existing;
    if (existing) this.drop(existing, 'node address changed');

    const pinned = normalizeFingerprint(node.hostKeyFingerprint);
    const client = new ssh2.Client();
    const entry: Entry = { key, client, ready: null as unknown as Promise<ssh2.Client>, session: null };
    entry.ready = new Promise<ssh2.Client>((resolve, reject) => {
      let presented: string | undefined;
      let hostKeyRefused = false;
      let isReady = false;
      client.on('ready', () => {
        isReady = true;
        resolve(client);
      });
      client.on('error', (err: Error & { level?: string }) => {
        let e: EdgeSshError;
        if (hostKeyRefused) e = new EdgeSshError('host_key_mismatch', `${node.host}:${node.port} presented host key ${presented}, pinned ${pinned}; nothing was sent`, presented);
        else if (err.level === 'client-authentication') e = new EdgeSshError('auth_failed', `the agent at ${node.host}:${node.port} refused the gateway's key`);
        else if (err.level === 'client-timeout') e = new EdgeSshError('timeout', `SSH handshake with ${node.host}:${node.port} timed out`);
        else e = new EdgeSshError('connect_failed', `${node.host}:${node.port}: ${err.message}`);
        if (!isReady) reject(e);
      });
      client.on('close', () => {
        if (!isReady) reject(new EdgeSshError('connect_failed', `the connection to ${node.host}:${node.port} closed during the handshake`));
        if (this.entries.get(node.id) === entry) {
          this.entries.delete(node.id);
          // Only a connection that was up is "lost"; a failed connect is reported to its caller.
          if (isReady) this.opts.onLost?.(node.id, 'connection closed');
        }
      });
      try {
        client.connect({
          host: node.host,
          port: node.port,
          username: SSH_USER,
          privateKey: this.privateKey,
          authHandler: ['publickey'],
          readyTimeout: this.opts.connectTimeoutMs,
          // A dead peer (agent host gone without a FIN) is noticed within about a minute.
          keepaliveInterval: 15_000,
          keepaliveCountMax: 4,
          hostVerifier: (blob: Buffer) => {
            presented = sshFingerprint(blob);
            hostKeyRefused = presented !== pinned;
            return !hostKeyRefused;
          },
        });
        // A job is a few small packets each way: without TCP_NODELAY each round trip waits for delayed ACKs.
        client.setNoDelay(true);
      } catch (e) {
        reject(new EdgeSshError('connect_failed', `cannot connect to ${node.host}:${node.port}: ${(e as Error).message}`));
      }
    });
    // A failed connect must not leave a rejected promise cached or unhandled.
    entry.ready.catch(() => {
      if (this.entries.get(node.id) === entry) this.entries.delete(node.id);
      client.destroy();
    });
    this.entries.set(node.id, entry);
    return entry;
  }
}
