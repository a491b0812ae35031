// A DATABASE_URL that names several PostgreSQL hosts (`postgresql://h1:5432,h2:5432/db?target_session_attrs=read-write`,
// libpq's spelling) and the connections that follow the primary among them (docs/OPERATOR.md "A database that
// fails over"). node-postgres parses one host only and knows no target_session_attrs, so the choice is made
// here, under every connection the gateway opens: MikroORM's pool, the hot-read pool, LISTEN connections,
// pg-boss's pool and listener, the advisory-lock pools. They all get pgConfig(url), whose `stream` is a socket
// that connects to the host the locator found read-write, whatever host and port pg asks it for.
//
// The locator asks every host `pg_is_in_recovery()` when it knows no primary, and watches the one it found
// (one query a second on a connection of its own while connections are open): when that host turns out to be
// a standby (demoted by the failover), every socket to it is destroyed, so pools drop those connections and
// open new ones, which go to the new primary. A socket that the server closed on its own (a stop, a crash)
// makes the locator forget its primary too. With no read-write host, connecting fails with NoPrimaryError,
// which the HTTP adapters answer 503 `unavailable` (server/db/unavailable.ts).
import net from 'node:net';
import pg from 'pg';
import { parse as parseConnectionString } from 'pg-connection-string';

export interface HostPort {
  host: string;
  port: number;
}

export interface DatabaseTarget {
  hosts: HostPort[];
  /** True when the URL asks for a read-write session (target_session_attrs=read-write or primary). */
  readWrite: boolean;
  /** The URL with the first host only and without target_session_attrs: what pg and MikroORM can parse. */
  singleHostUrl: string;
}

/** Connecting found no read-write host among the URL's (all down, or a switch in progress). */
export class NoPrimaryError extends Error {
  override name = 'NoPrimaryError';
  readonly code = 'TG_NO_PRIMARY';
}

const DEFAULT_PORT = 5432;

/** Splits a possibly multi-host URL. A URL with one host and no target_session_attrs comes back as it was. */
export function parseDatabaseUrl(url: string): DatabaseTarget {
  const m = /^(postgres(?:ql)?:\/\/)(?:([^@/]*)@)?([^/?#]*)(.*)$/.exec(url);
  if (!m) return { hosts: [], readWrite: false, singleHostUrl: url };
  const [, scheme, userinfo, hostList, rest] = m as unknown as [string, string, string | undefined, string, string];
  const hosts: HostPort[] = [];
  for (const part of hostList.split(',')) {
    if (part === '') continue;
    // [::1]:5432, host:5432 or host
    const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(part);
    const plain = /^([^:]+)(?::(\d+))?$/.exec(part);
    const hp = v6 ?? plain;
    if (!hp) throw new Error(`DATABASE_URL: cannot read the host "${part}"`);
    hosts.push({ host: decodeURIComponent(hp[1]!), port: hp[2] ? Number(hp[2]) : DEFAULT_PORT });
  }
  const q = rest.indexOf('?');
  const path = q < 0 ? rest : rest.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : rest.slice(q + 1));
  const attrs = params.get('target_session_attrs');
  if (attrs !== null && !['any', 'read-write', 'primary'].includes(attrs)) {
    throw new Error(`DATABASE_URL: target_session_attrs=${attrs} is not supported here (any, read-write or primary)`);
  }
  params.delete('target_session_attrs');
  const first = hosts[0];
  const hostText = first ? `${first.host.includes(':') ? `[${first.host}]` : encodeURIComponent(first.host)}:${first.port}` : '';
  const query = params.toString();
  return {
    hosts,
    readWrite: attrs === 'read-write' || attrs === 'primary',
    singleHostUrl: hosts.length > 1 || attrs !== null ? `${scheme}${userinfo !== undefined ? `${userinfo}@` : ''}${hostText}${path}${query ? `?${query}` : ''}` : url,
  };
}

/** True when connections for this URL must go through a locator (several hosts, or a session kind asked for). */
export function needsLocator(target: DatabaseTarget): boolean {
  return target.hosts.length > 1 || target.readWrite;
}

/**
 * Whether a host cannot take writes: in recovery (a standby), or promoted but still read-only by default
 * (pg_auto_failover keeps a promoted node read-only until the monitor confirms it), as libpq's read-write
 * check asks `transaction_read_only`.
 */
const READ_ONLY_SQL = `select pg_is_in_recovery() or current_setting('transaction_read_only') = 'on' as standby`;

/** How often the watched primary is asked whether it still is one. */
const WATCH_MS = 1000;
/** A host that does not answer within this is skipped by a search. */
const PROBE_TIMEOUT_MS = 2000;

export class PrimaryLocator {
  private primary: HostPort | null = null;
  private search: Promise<HostPort> | null = null;
  private readonly sockets = new Set<PrimarySocket>();
  private watcher: NodeJS.Timeout | null = null;
  private watchClient: pg.Client | null = null;
  private watching = false;
  private readonly listeners = new Set<(primary: HostPort | null) => void>();

  constructor(
    readonly target: DatabaseTarget,
    private readonly base: pg.ClientConfig,
  ) {}

  /** The host connections go to now, or null while none is known. */
  current(): HostPort | null {
    return this.primary;
  }

  /** Called with the new primary (or null when it is lost). For logs and tests. */
  onChange(fn: (primary: HostPort | null) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** The read-write host: the known one, or the first in the URL's order that says it is not in recovery. */
  find(): Promise<HostPort> {
    if (this.primary) return Promise.resolve(this.primary);
    this.search ??= this.probeAll().finally(() => (this.search = null));
    return this.search;
  }

  /** Forgets the primary (its connection dropped, or it answered as a standby); the next connect searches again. */
  forget(host: HostPort | null = this.primary): void {
    if (!host || !this.primary || !sameHost(host, this.primary)) return;
    this.setPrimary(null);
  }

  private setPrimary(p: HostPort | null): void {
    const before = this.primary;
    this.primary = p;
    if ((before === null) !== (p === null) || (before && p && !sameHost(before, p))) for (const fn of this.listeners) fn(p);
  }

  private async probeAll(): Promise<HostPort> {
    const answers = await Promise.all(this.target.hosts.map((h) => this.isPrimary(h).catch(() => false)));
    const i = answers.findIndex((a) => a);
    if (i < 0) throw new NoPrimaryError(`no read-write PostgreSQL among ${this.target.hosts.length} host(s) (a switch-over in progress, or all down)`);
    // Two hosts taking writes at once: an old primary restarted before its keeper demoted it. Writing to
    // either could be lost; refusing (503) until one of them is a standby is the safe answer.
    if (answers.filter((a) => a).length > 1) throw new NoPrimaryError(`no read-write PostgreSQL among ${this.target.hosts.length} host(s): more than one accepts writes (a switch-over settling)`);
    const found = this.target.hosts[i]!;
    this.setPrimary(found);
    return found;
  }

  private async isPrimary(h: HostPort): Promise<boolean> {
    const c = new pg.Client({ ...this.base, host: h.host, port: h.port, stream: undefined, connectionTimeoutMillis: PROBE_TIMEOUT_MS, query_timeout: PROBE_TIMEOUT_MS, application_name: 'tunnelgate-locate' });
    c.on('error', () => {});
    try {
      await c.connect();
      const { rows } = await c.query<{ standby: boolean }>(READ_ONLY_SQL);
      return this.target.readWrite || this.target.hosts.length > 1 ? rows[0]!.standby === false : true;
    } finally {
      void c.end().catch(() => {});
    }
  }

  /** A socket for pg: connects to the primary whatever pg asks for. */
  socket(): net.Socket {
    return new PrimarySocket(this);
  }

  /** @internal */ opened(s: PrimarySocket): void {
    this.sockets.add(s);
    this.startWatch();
  }

  /** @internal */ closed(s: PrimarySocket, byServer: boolean): void {
    this.sockets.delete(s);
    // The server ended a session we did not end: it stopped, crashed or was demoted. Search again.
    if (byServer && s.target) this.forget(s.target);
    if (this.sockets.size === 0) this.stopWatch();
  }

  private startWatch(): void {
    if (this.watcher) return;
    this.watcher = setInterval(() => void this.watchOnce(), WATCH_MS);
    this.watcher.unref();
  }

  private stopWatch(): void {
    if (this.watcher) clearInterval(this.watcher);
    this.watcher = null;
    const c = this.watchClient;
    this.watchClient = null;
    void c?.end().catch(() => {});
  }

  /** Asks the primary whether it still is one; drops every connection to it when it is not. */
  private async watchOnce(): Promise<void> {
    const p = this.primary;
    if (!p || this.watching) return;
    this.watching = true;
    try {
      if (!this.watchClient) {
        const c = new pg.Client({ ...this.base, host: p.host, port: p.port, stream: undefined, connectionTimeoutMillis: PROBE_TIMEOUT_MS, query_timeout: PROBE_TIMEOUT_MS, application_name: 'tunnelgate-locate' });
        c.on('error', () => {});
        c.on('end', () => {
          if (this.watchClient === c) this.watchClient = null;
        });
        this.watchClient = c;
        await c.connect();
      }
      const c = this.watchClient;
      const { rows } = await c.query<{ standby: boolean }>(READ_ONLY_SQL);
      if (rows[0]!.standby) this.demoted(p);
    } catch {
      // Unreachable now: new connections search again (a restart of the same primary finds it again).
      const c = this.watchClient;
      this.watchClient = null;
      void c?.end().catch(() => {});
      this.forget(p);
    } finally {
      this.watching = false;
    }
  }

  /** `p` is a standby now: nothing may keep writing to it, and nothing could; pools open new connections. */
  private demoted(p: HostPort): void {
    this.forget(p);
    const c = this.watchClient;
    this.watchClient = null;
    void c?.end().catch(() => {});
    for (const s of [...this.sockets]) if (s.target && sameHost(s.target, p)) s.destroy(new NoPrimaryError(`${p.host}:${p.port} is no longer the primary`));
  }

  close(): void {
    this.stopWatch();
  }
}

function sameHost(a: HostPort, b: HostPort): boolean {
  return a.host === b.host && a.port === b.port;
}

/**
 * A TCP socket whose connect() ignores the address pg passes (the URL's first host) and goes to the
 * locator's primary. pg calls connect(port, host) once, then waits for 'connect' or 'error', so resolving the
 * address first and connecting a moment later is invisible to it.
 */
class PrimarySocket extends net.Socket {
  target: HostPort | null = null;
  private endedByUs = false;
  private lostByServer = false;

  constructor(private readonly locator: PrimaryLocator) {
    super();
    // The server's end before ours, or a reset: the server stopped, crashed or was demoted.
    this.once('end', () => {
      if (!this.endedByUs) this.lostByServer = true;
    });
    this.once('error', () => {
      if (!this.endedByUs) this.lostByServer = true;
    });
    // Our side finished writing first: pg ended the session (Terminate), not the server.
    this.once('finish', () => {
      if (!this.lostByServer) this.endedByUs = true;
    });
    this.once('close', () => this.locator.closed(this, this.lostByServer));
  }

  // pg calls connect(port, host); the overloads of net.Socket are not used by it.
  override connect(...args: unknown[]): this {
    void args;
    this.locator.find().then(
      (p) => {
        if (this.destroyed) return;
        this.target = p;
        this.locator.opened(this);
        super.connect(p.port, p.host);
      },
      (e: Error) => this.destroy(e),
    );
    return this;
  }
}

const locators = new Map<string, PrimaryLocator>();

/**
 * pg's connection settings for a DATABASE_URL, for pg.Client, pg.Pool and pg-boss alike. A URL with one
 * host and no target_session_attrs is passed as it is; otherwise the settings carry the socket above,
 * with one locator per URL in this process (every pool follows the same primary).
 */
export function pgConfig(url: string): pg.ClientConfig {
  const target = parseDatabaseUrl(url);
  if (!needsLocator(target)) return { connectionString: url };
  const base = parseConnectionString(target.singleHostUrl) as pg.ClientConfig;
  return { ...base, stream: () => locatorFor(url).socket() };
}

/** The locator of a multi-host URL (created on first use), or null for a plain one. */
export function locatorFor(url: string): PrimaryLocator {
  let l = locators.get(url);
  if (!l) {
    const target = parseDatabaseUrl(url);
    l = new PrimaryLocator(target, parseConnectionString(target.singleHostUrl) as pg.ClientConfig);
    locators.set(url, l);
  }
  return l;
}
