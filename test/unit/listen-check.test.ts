// server/http/listen-check.ts against the real kernel: the ListenError each refusal becomes.
import net from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { checkListen, ListenError } from '../../server/http/listen-check.ts';
import { freePort } from '../helpers/ports.ts';

let held: net.Server | undefined;
afterEach(() => held?.close());

it('a free port passes, and is free again afterwards', async () => {
  const port = await freePort();
  await checkListen({ host: '127.0.0.1', port, publicUrlSet: false });
  await checkListen({ host: '127.0.0.1', port, publicUrlSet: false });
});

it('a held port is address_in_use, naming the address', async () => {
  const port = await freePort();
  held = net.createServer();
  await new Promise<void>((r) => held!.listen(port, '127.0.0.1', r));
  const e = await checkListen({ host: '127.0.0.1', port, publicUrlSet: false }).catch((x: unknown) => x);
  expect(e).toBeInstanceOf(ListenError);
  expect((e as ListenError).code).toBe('address_in_use');
  expect((e as ListenError).message).toContain(`127.0.0.1:${port}`);
  expect((e as ListenError).message).not.toContain('PUBLIC_URL');
});

it('a HOST that is not this machine\'s is address_not_available', async () => {
  // 192.0.2.1 (TEST-NET-1, RFC 5737) is on no interface here.
  const e = await checkListen({ host: '192.0.2.1', port: 4000, publicUrlSet: false }).catch((x: unknown) => x);
  expect(e).toBeInstanceOf(ListenError);
  expect((e as ListenError).code).toBe('address_not_available');
  expect((e as ListenError).message).toContain('192.0.2.1:4000');
});

it('PORT=0 (any free port) is never refused', async () => {
  await expect(checkListen({ host: '127.0.0.1', port: 0, publicUrlSet: true })).resolves.toBeUndefined();
});
