// A loopback port free right now, for the tests and benchmarks that must name a port before the process that
// will listen on it starts (a gateway whose PUBLIC_URL names its port, an agent's SSH port, a private
// PostgreSQL, a VM's forwarded ports). Bound, read, released: another process may take it in between, which a
// loopback test on its own host accepts.
import { createServer, type AddressInfo } from 'node:net';

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}
