// Whether the gateway can listen on HOST:PORT, asked before anything slow starts: opening the embedded
// database takes seconds (tens on a loaded machine), and a port held by another program would otherwise
// only show as a bare EADDRINUSE after all of that. The real listen reuses the same wording
// (listenFailure), since another program can still take the port in between.
import net from 'node:net';

/** Why the gateway cannot listen, in one line that names the address and what to do. */
export class ListenError extends Error {
  override name = 'ListenError';
  constructor(
    /** `address_in_use`, `address_not_available` or `permission_denied`: the `error` field of the line printed. */
    readonly code: 'address_in_use' | 'address_not_available' | 'permission_denied',
    message: string,
  ) {
    super(message);
  }
}

/** Where the port was chosen: PUBLIC_URL, when set, names the port too and must change with it. */
export interface ListenSettings {
  host: string;
  port: number;
  publicUrlSet: boolean;
}

/** The ListenError for a failed listen, or null when `e` is some other failure. */
export function listenFailure(e: unknown, s: ListenSettings): ListenError | null {
  const code = (e as NodeJS.ErrnoException | null)?.code;
  const address = s.host.includes(':') ? `[${s.host}]:${s.port}` : `${s.host}:${s.port}`;
  const setPort = `set PORT to a free port${s.publicUrlSet ? ' (and PUBLIC_URL to match it)' : ''}`;
  if (code === 'EADDRINUSE') {
    return new ListenError('address_in_use', `cannot listen on ${address}: another program is using it; stop that program, or ${setPort}, e.g. PORT=${s.port === 65535 ? 4000 : s.port + 1} npm start`);
  }
  if (code === 'EADDRNOTAVAIL') {
    return new ListenError('address_not_available', `cannot listen on ${address}: HOST is not an address of this machine; set HOST to one of its addresses (127.0.0.1, or 0.0.0.0 for all)`);
  }
  if (code === 'EACCES') {
    return new ListenError('permission_denied', `cannot listen on ${address}: ports below 1024 need root (or CAP_NET_BIND_SERVICE); ${setPort} of 1024 or above`);
  }
  return null;
}

/**
 * Binds HOST:PORT for a moment and lets it go. Resolves when the gateway could listen there; rejects
 * with a ListenError when it could not, with the underlying error otherwise. PORT=0 (any free port)
 * always can.
 */
export function checkListen(s: ListenSettings): Promise<void> {
  if (s.port === 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', (e) => reject(listenFailure(e, s) ?? e));
    // exclusive: a cluster worker would otherwise share the primary's handle and never see the conflict.
    probe.listen({ host: s.host, port: s.port, exclusive: true }, () => probe.close(() => resolve()));
  });
}
