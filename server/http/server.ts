// The gateway's node:http server, made one way for `npm start` and for the tests' gateways.
import http from 'node:http';

/**
 * Idle keep-alive connections live longer than any load balancer's idle timeout (60 s is the common
 * default), so the proxy, never the gateway, closes an idle connection: when the gateway closes first,
 * a request the peer sends on it at that moment fails with ECONNRESET. Node's 5 s default made exactly
 * that race show up in tests that pause between requests.
 */
export function createHttpServer(): http.Server {
  const server = http.createServer();
  server.keepAliveTimeout = 65_000;
  return server;
}
