// Who may hold a connection to the admin port, and for how long (docs/CONTRACTS.md "Hardening of the
// listener"). Decided at accept, before the SSH layer sees the socket:
//   - a source outside AGENT_ALLOW_FROM is closed at once;
//   - a source may hold at most `maxPerSource` connections that have not authenticated yet (IPv6 sources
//     count per /64, since one host owns a whole /64); the next one is closed at accept;
//   - every connection must finish the SSH handshake and authenticate within `deadlineMs` of accept, its
//     banner included (ssh2 only reports a connection once the client's banner arrived, so this timer
//     cannot live in the SSH layer).
// There is no global cap: a global cap is exactly what idle strangers could exhaust to keep the gateway
// out; per-source caps and the deadline bound what each source can hold instead.
import { isIPv6, type Socket } from 'node:net';
import { unmapIPv4 } from '../cidr.ts';

export interface AdmissionLog {
  warn(msg: string, fields?: Record<string, unknown>): void;
}

export interface AdmissionOptions {
  /** AGENT_ALLOW_FROM; undefined = any source. */
  allowFrom?: { contains(ip: string): boolean } | undefined;
  /** Unauthenticated connections one source may hold (docs/CONTRACTS.md "Hardening of the listener": 4). */
  maxPerSource: number;
  /** Accept to authenticated, banner included (docs/CONTRACTS.md "Hardening of the listener": 10 s). */
  deadlineMs: number;
  log: AdmissionLog;
}

/** One admitted connection, until it authenticated or closed. */
export interface Ticket {
  readonly peer: string;
  /** The connection authenticated: it no longer counts against its source, and its deadline is off. */
  authenticated(): void;
}

/** The full 8 groups of an IPv6 address (no embedded IPv4 form: sockets report those as ::ffff:a.b.c.d). */
function ipv6Groups(ip: string): string[] {
  const [head = '', tail] = ip.toLowerCase().split('%')[0]!.split('::');
  const h = head === '' ? [] : head.split(':');
  const t = tail === undefined || tail === '' ? [] : tail.split(':');
  const fill = tail === undefined ? [] : new Array<string>(8 - h.length - t.length).fill('0');
  return [...h, ...fill, ...t].map((g) => g.replace(/^0+(?=.)/, ''));
}

/** What the per-source cap counts by: the IPv4 address, or the IPv6 /64. */
export function sourceKey(remoteAddress: string): string {
  const ip = unmapIPv4(remoteAddress);
  return isIPv6(ip) ? `${ipv6Groups(ip).slice(0, 4).join(':')}::/64` : ip;
}

export class Admission {
  private readonly unauthenticated = new Map<string, number>();
  /** Sockets not authenticated yet. */
  private readonly sockets = new Set<Socket>();

  constructor(private readonly opts: AdmissionOptions) {}

  /** Unauthenticated connections held now, all sources together (for tests and diagnostics). */
  get pending(): number {
    let n = 0;
    for (const c of this.unauthenticated.values()) n += c;
    return n;
  }

  /** Admits the socket (returns its ticket) or destroys it (returns undefined). */
  admit(socket: Socket): Ticket | undefined {
    const { log } = this.opts;
    const address = socket.remoteAddress;
    const peer = `${address}:${socket.remotePort}`;
    if (address === undefined) {
      socket.destroy(); // already gone
      return undefined;
    }
    if (this.opts.allowFrom && !this.opts.allowFrom.contains(address)) {
      log.warn('ssh connection refused: source not in AGENT_ALLOW_FROM', { peer });
      socket.destroy();
      return undefined;
    }
    const key = sourceKey(address);
    const held = this.unauthenticated.get(key) ?? 0;
    if (held >= this.opts.maxPerSource) {
      log.warn('ssh connection refused: too many unauthenticated connections from this source', { peer, source: key, limit: this.opts.maxPerSource });
      socket.destroy();
      return undefined;
    }
    this.unauthenticated.set(key, held + 1);
    this.sockets.add(socket);
    let counted = true;
    const release = () => {
      if (!counted) return;
      counted = false;
      clearTimeout(timer);
      this.sockets.delete(socket);
      const n = (this.unauthenticated.get(key) ?? 1) - 1;
      if (n <= 0) this.unauthenticated.delete(key);
      else this.unauthenticated.set(key, n);
    };
    const timer = setTimeout(() => {
      log.warn('ssh connection closed: no authentication within the deadline', { peer, deadline_ms: this.opts.deadlineMs });
      release();
      socket.destroy();
    }, this.opts.deadlineMs);
    socket.once('close', release);
    return { peer, authenticated: release };
  }

  /** Destroys every connection that has not authenticated (shutdown: nothing to drain there). */
  destroyUnauthenticated(): void {
    for (const s of this.sockets) s.destroy();
  }
}
