// The client's address (docs/CONTRACTS.md "Starting it", TRUST_PROXY=N). Every limit keyed by address (REST, GraphQL over
// HTTP and WebSocket, the issuer's sign-in and token limits) reads it from here, so all agree.
//
// Each proxy appends the address it received the request from to X-Forwarded-For, so with N trusted
// proxies in front of us the N-th entry from the right was written by the outermost of them and is
// the real client; everything left of it was written by the client and proves nothing. With no
// trusted proxy (N = 0) the header is ignored and the socket's peer is the client.
import type http from 'node:http';

export function clientAddress(req: http.IncomingMessage, trustProxy: number): string {
  const socketAddress = req.socket.remoteAddress ?? '';
  if (trustProxy <= 0) return socketAddress;
  // Node joins repeated X-Forwarded-For headers with ", ", in arrival order.
  const raw = req.headers['x-forwarded-for'];
  const header = Array.isArray(raw) ? raw.join(',') : (raw ?? '');
  const entries = header
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  if (entries.length === 0) return socketAddress;
  // Fewer entries than proxies: the request skipped an outer proxy; the left-most entry is then the
  // closest thing to the client that one of ours wrote.
  return entries[Math.max(0, entries.length - trustProxy)]!;
}
