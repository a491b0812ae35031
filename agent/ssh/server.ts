// The agent's SSH endpoint (docs/CONTRACTS.md "Transport"): ssh2 Server on AGENT_LISTEN with the agent's
// host key. Only user `tunnelgate` with the gateway's public key gets in; only session channels, and in
// them only exec. `tunnel-agent job` reads one JWS from stdin and answers one JSON line on stdout with
// exit status 0 (ok) or 1 (refused or failed), except a verified `events` job, whose channel stays open and carries
// event lines until it closes (runEvents; docs/CONTRACTS.md "Events stream"); `tunnel-agent hello` reads nothing and answers the job
// versions this agent accepts and its own version (docs/CONTRACTS.md "Edge jobs", "Versions"), exit 0;
// any other command gets exit status 127 and an `unsupported_command` line. Shells, subsystems, ptys,
// env, X11, agent and port forwarding are refused.
// The agent owns the listening socket (ssh2's Server is handed each accepted socket): admission.ts decides
// at accept who may connect and for how long (docs/CONTRACTS.md "Hardening of the listener").
import { timingSafeEqual } from 'node:crypto';
import { createServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import ssh2 from 'ssh2';
import type { AuthContext, Connection, ServerChannel } from 'ssh2';
import {
  EXIT_UNSUPPORTED_COMMAND,
  HELLO_COMMAND,
  JOB_COMMAND,
  JOB_VERSIONS,
  JOB_VERSION_1,
  MAX_INPUT_BYTES,
  SSH_USER,
  type HelloLine,
  FEATURE_ATTACKS,
  type JobErrorCode,
  type JobVersion,
  type ResultLine,
} from '../../common/job-contract.ts';
import { FEATURE_TRAFFIC_LIVE } from '../../common/traffic-live.ts';
import { exitCodeFor, type EventsStream, type JobLog } from '../jobs/handle.ts';
import { FEATURE_EVENTS } from '../../common/edge-events.ts';
import { FEATURE_STATUS_DELTA } from '../../common/tunnel-status.ts';
import type { TunnelLinks } from '../../common/tunnel-links.ts';
import type { AuthorizedKey, HostKey } from './keys.ts';
import { Admission, type Ticket } from './admission.ts';

/** What the server needs from the job handler (agent/jobs/handle.ts's JobHandler). */
export interface JobSink {
  /** One job's result line, or the `events` op's stream (docs/CONTRACTS.md "Events stream"). */
  handleExec(input: Uint8Array, fields?: Record<string, unknown>): Promise<ResultLine | EventsStream>;
  refuse(error: JobErrorCode, description: string, fields?: Record<string, unknown>): ResultLine;
  idle(): Promise<void>;
}

export interface AgentSshServerOptions {
  host: string;
  port: number;
  hostKey: HostKey;
  authorizedKey: AuthorizedKey;
  jobs: JobSink;
  log: JobLog;
  /** A job's stdin must reach EOF within this time (default 30 s), else `malformed`. */
  inputTimeoutMs?: number;
  /** From accept to authenticated, the client's banner included (default 10 s, docs/CONTRACTS.md "Hardening of the listener"). */
  handshakeTimeoutMs?: number;
  /** Unauthenticated connections per source address (IPv6: per /64) (default 4, docs/CONTRACTS.md "Hardening of the listener"). */
  maxUnauthenticatedPerSource?: number;
  /** AGENT_ALLOW_FROM: other sources are closed at accept; undefined = any. */
  allowFrom?: { contains(ip: string): boolean } | undefined;
  /** Failed authentication attempts before the connection is dropped (default 10). */
  maxAuthFailures?: number;
  /**
   * The job versions `hello` lists (AGENT_JOB_VERSIONS; default all of JOB_VERSIONS). Only version 1:
   * `hello` is answered like any unknown command (127), as an agent from before version 2 does.
   */
  versions?: readonly JobVersion[];
  /** This agent's own version (agent/package.json), for `hello`. */
  agentVersion?: string;
  /** Whether it can make its tunnels' links, as last found (dataplane/link-support.ts), for `hello`; undefined: not said. */
  tunnelLinks?: () => TunnelLinks | undefined;
  /** Whether `hello` lists the feature `events` (the agent has an event hub: health checks are on). */
  events?: boolean;
  /** Whether `hello` lists the feature `traffic_live` (the agent keeps per-second traffic: health checks are on). */
  trafficLive?: boolean;
  /** Whether `hello` lists the feature `status_delta` (the agent answers `status` by change: agent/health/status.ts). */
  statusDelta?: boolean;
}

/** Unsent bytes an events channel may hold before it is closed as too far behind (the gateway reopens it). */
const MAX_EVENTS_BACKLOG = 1024 * 1024;

const DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000;
const DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE = 4;

/** Session-channel requests that are always refused. */
const REFUSED_SESSION_REQUESTS = ['pty', 'shell', 'subsystem', 'sftp', 'x11', 'auth-agent', 'env', 'signal', 'window-change'] as const;

function sameKey(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

type ServerOptions = Required<Omit<AgentSshServerOptions, 'host' | 'port' | 'allowFrom' | 'tunnelLinks' | 'events' | 'trafficLive' | 'statusDelta'>> & Pick<AgentSshServerOptions, 'host' | 'port' | 'allowFrom' | 'tunnelLinks' | 'events' | 'trafficLive' | 'statusDelta'>;

/** Whether an agent accepting `versions` answers `hello`: one that speaks only version 1 predates it. */
function answersHello(versions: readonly JobVersion[]): boolean {
  return versions.some((v) => v !== JOB_VERSION_1);
}

export class AgentSshServer {
  private readonly server: ssh2.Server;
  /** The listening socket; each accepted socket passes admission, then goes to `server`. */
  private readonly listener: NetServer;
  private readonly admission: Admission;
  /** Admission tickets of sockets handed to ssh2, until their connection authenticates. */
  private readonly tickets = new WeakMap<Socket, Ticket>();
  private readonly connections = new Set<Connection>();
  private closing = false;
  private readonly opts: ServerOptions;

  constructor(opts: AgentSshServerOptions) {
    this.opts = {
      inputTimeoutMs: 30_000,
      handshakeTimeoutMs: DEFAULT_HANDSHAKE_TIMEOUT_MS,
      maxUnauthenticatedPerSource: DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE,
      maxAuthFailures: 10,
      versions: JOB_VERSIONS,
      agentVersion: '0.0.0',
      ...opts,
    };
    // Keepalives find a gateway that vanished without closing its connection.
    this.server = new ssh2.Server({ hostKeys: [opts.hostKey.privateKey], ident: 'tunnelgate-agent', keepaliveInterval: 15_000, keepaliveCountMax: 4 }, (client, info) =>
      this.onConnection(client, { peer: `${info.ip}:${info.port}` }),
    );
    this.server.on('error', (err: Error) => this.opts.log.error('ssh server error', { err }));
    this.admission = new Admission({
      allowFrom: this.opts.allowFrom,
      maxPerSource: this.opts.maxUnauthenticatedPerSource,
      deadlineMs: this.opts.handshakeTimeoutMs,
      log: this.opts.log,
    });
    this.listener = createServer((socket) => {
      socket.on('error', () => undefined); // a reset before ssh2 attached its handlers
      if (this.closing) return void socket.destroy();
      const ticket = this.admission.admit(socket);
      if (!ticket) return;
      this.tickets.set(socket, ticket);
      this.server.injectSocket(socket);
    });
    this.listener.on('error', (err: Error) => this.opts.log.error('ssh server error', { err }));
  }

  /** Unauthenticated connections held now (tests, diagnostics). */
  get unauthenticated(): number {
    return this.admission.pending;
  }

  /** Starts listening; resolves with the bound address (port 0 picks a free port). */
  listen(): Promise<{ host: string; port: number }> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.listener.once('error', onError);
      // A deep accept backlog: a burst of strangers' connections must not fill it before admission runs.
      this.listener.listen({ port: this.opts.port, host: this.opts.host, backlog: 4096 }, () => {
        this.listener.off('error', onError);
        const addr = this.listener.address() as AddressInfo;
        resolve({ host: addr.address, port: addr.port });
      });
    });
  }

  /**
   * Stops accepting connections, lets jobs already running finish (up to `drainMs`), then ends every
   * connection. The dataplane is left as it is.
   */
  async close(drainMs = 10_000): Promise<void> {
    this.closing = true;
    const closed = new Promise<void>((resolve) => this.listener.close(() => resolve()));
    this.admission.destroyUnauthenticated();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.opts.jobs.idle(), new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs)))]);
    clearTimeout(timer);
    for (const c of this.connections) c.end();
    await closed;
  }

  private onConnection(client: Connection, fields: { peer: string }): void {
    const { log } = this.opts;
    this.connections.add(client);
    // Jobs are a few small packets each way: without TCP_NODELAY every round trip waits out delayed ACKs.
    (client as Connection & { setNoDelay(on: boolean): void }).setNoDelay(true); // ssh2 has it; @types/ssh2 lacks it
    let failures = 0;
    const ticket = this.tickets.get((client as Connection & { _sock: Socket })._sock); // ssh2 keeps the socket there; @types/ssh2 lacks it
    client.on('authentication', (ctx) => {
      if (this.authenticate(ctx, fields)) return;
      if (++failures >= this.opts.maxAuthFailures) {
        log.warn('ssh connection dropped: too many failed authentications', fields);
        client.end();
      }
    });
    client.on('ready', () => {
      ticket?.authenticated();
      log.info('ssh client authenticated', fields);
    });
    client.on('session', (accept) => this.onSession(accept(), fields));
    // Port forwarding of every kind, refused (ssh2 would refuse them too without a listener; explicit here).
    client.on('tcpip', (_accept, reject, info) => {
      log.warn('ssh request refused', { ...fields, request: 'direct-tcpip', dest: `${info.destIP}:${info.destPort}` });
      reject();
    });
    client.on('openssh.streamlocal', (_accept, reject) => {
      log.warn('ssh request refused', { ...fields, request: 'direct-streamlocal' });
      reject();
    });
    client.on('request', (_accept, reject, name) => {
      log.warn('ssh request refused', { ...fields, request: name });
      reject?.();
    });
    client.on('error', (err: Error) => log.warn('ssh connection error', { ...fields, err: err.message }));
    client.on('close', () => {
      this.connections.delete(client);
    });
  }

  /** Accepts or rejects one authentication attempt; true when accepted (or the key was only being queried). */
  private authenticate(ctx: AuthContext, fields: { peer: string }): boolean {
    const { log, authorizedKey } = this.opts;
    const refuse = (reason: string) => {
      log.warn('ssh authentication refused', { ...fields, user: ctx.username, method: ctx.method, reason });
      ctx.reject(['publickey']);
      return false;
    };
    if (ctx.method !== 'publickey') return ctx.method === 'none' ? (ctx.reject(['publickey']), false) : refuse('only public-key authentication is accepted');
    if (ctx.username !== SSH_USER) return refuse(`only user ${SSH_USER} is accepted`);
    if (!sameKey(ctx.key.data, authorizedKey.blob)) return refuse('not the gateway\'s key');
    if (!ctx.signature || !ctx.blob) {
      ctx.accept(); // "this key would do": the client then signs.
      return true;
    }
    let valid = false;
    try {
      valid = authorizedKey.key.verify(ctx.blob, ctx.signature, ctx.hashAlgo) === true;
    } catch {
      valid = false;
    }
    if (!valid) return refuse('bad signature');
    ctx.accept();
    return true;
  }

  private onSession(session: ssh2.Session, fields: { peer: string }): void {
    const { log } = this.opts;
    for (const request of REFUSED_SESSION_REQUESTS) {
      (session as unknown as NodeJS.EventEmitter).on(request, (_accept: unknown, reject?: () => void) => {
        log.warn('ssh request refused', { ...fields, request });
        reject?.();
      });
    }
    session.on('exec', (accept, reject, info) => {
      // Shutting down: the exec request fails, so the gateway sees a transport error and retries elsewhere/later.
      if (this.closing) return reject();
      this.onExec(accept(), info.command, fields);
    });
  }

  /**
   * A verified `events` job: the channel stays open and carries the hub's lines (agent/events/hub.ts) until the
   * gateway closes it or the connection goes; a channel too far behind is closed (the gateway reopens it, and the
   * `status` pull carries what it missed). No exit status: the stream has no outcome.
   */
  private runEvents(stream: ServerChannel, s: EventsStream, fields: { peer: string }, markFinished: () => void): void {
    markFinished();
    if (stream.destroyed || stream.writableEnded) return;
    const opened = performance.now();
    let stop: (() => void) | undefined;
    const write = (line: string): boolean => {
      if (stream.destroyed || stream.writableEnded) return false;
      if (stream.writableLength > MAX_EVENTS_BACKLOG) {
        this.opts.log.warn('events stream closed: the gateway does not read it', { ...fields, jti: s.jti, backlog: stream.writableLength });
        stream.destroy();
        return false;
      }
      stream.write(line);
      return true;
    };
    stream.once('close', () => {
      stop?.();
      this.opts.log.info('events stream closed', { ...fields, jti: s.jti, s: Math.round((performance.now() - opened) / 1000) });
    });
    stop = s.subscribe(write);
  }

  private onExec(stream: ServerChannel, command: string, fields: { peer: string }): void {
    const { jobs, inputTimeoutMs } = this.opts;
    let finished = false;
    const finish = (line: ResultLine | HelloLine, status: number) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      if (stream.destroyed || stream.writableEnded) return;
      stream.write(`${JSON.stringify(line)}\n`);
      stream.exit(status);
      stream.end();
    };
    let timer: NodeJS.Timeout | undefined;
    if (command === HELLO_COMMAND && answersHello(this.opts.versions)) {
      // No stdin is read: whatever the client sends (or whether it ever closes it) does not matter.
      const hello: HelloLine = { ok: true, versions: [...this.opts.versions], agent: this.opts.agentVersion, features: [FEATURE_ATTACKS, ...(this.opts.trafficLive ? [FEATURE_TRAFFIC_LIVE] : []), ...(this.opts.events ? [FEATURE_EVENTS] : []), ...(this.opts.statusDelta ? [FEATURE_STATUS_DELTA] : [])] };
      // Additive (docs/CONTRACTS.md "Tunnel links"): a gateway from before it ignores the key.
      const links = this.opts.tunnelLinks?.();
      if (links) hello.tunnel_links = links;
      this.opts.log.info('hello', { ...fields, versions: hello.versions });
      finish(hello, 0);
      return;
    }
    if (command !== JOB_COMMAND) {
      const shown = command.length > 200 ? `${command.slice(0, 200)}…` : command;
      finish(jobs.refuse('unsupported_command', `only "${JOB_COMMAND}" is accepted`, { ...fields, command: shown }), EXIT_UNSUPPORTED_COMMAND);
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;

    timer = setTimeout(() => {
      finish(jobs.refuse('malformed', `no end of input within ${inputTimeoutMs} ms`, fields), 1);
    }, inputTimeoutMs);
    stream.on('data', (data: Buffer) => {
      if (finished) return;
      size += data.length;
      if (size > MAX_INPUT_BYTES) {
        chunks.length = 0;
        finish(jobs.refuse('malformed', `input is larger than ${MAX_INPUT_BYTES} bytes`, fields), 1);
        return;
      }
      chunks.push(data);
    });
    stream.on('end', () => {
      if (finished) return;
      clearTimeout(timer);
      jobs.handleExec(Buffer.concat(chunks), fields).then(
        (line) => ('kind' in line ? this.runEvents(stream, line, fields, () => (finished = true)) : finish(line, exitCodeFor(line))),
        (err: unknown) => finish(jobs.refuse('kernel_error', `internal error: ${(err as Error)?.message ?? String(err)}`, fields), 1),
      );
    });
    stream.on('error', () => undefined);
    stream.on('close', () => {
      if (!finished) {
        finished = true;
        clearTimeout(timer);
      }
    });
  }
}
