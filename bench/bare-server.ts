// The baseline: a bare node:http server answering a JSON body of the same size as pricing.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const body = JSON.stringify({
  price: 100, currency: 'RUB', price_usd: 1.11, usd_rub_rate: 90, billing: 'one_time',
  includes: ['dedicated_public_ip', 'full_tcp_udp_nat', 'gre_tunnel'], admin_ssh_port: 52222,
  availability: { total: 65534, available: 65000, in_stock: true },
});

const server = http.createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
});
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`${JSON.stringify({ msg: 'listening', url: `http://127.0.0.1:${port}` })}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
