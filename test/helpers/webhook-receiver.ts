// A real HTTP endpoint for webhook tests: records every delivery (headers and the exact body bytes) and
// answers each with the next scripted answer: a status, or `hold` (no answer until the test releases it
// or the connection dies). Also two dead endpoints: one that accepts and never answers (BlackHole), one
// whose connection never completes (NeverConnects). Tests verify deliveries with the `standardwebhooks` package, an independent
// implementation of the Standard Webhooks spec (verify()).
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { Worker } from 'node:worker_threads';
import { Webhook } from 'standardwebhooks';

export interface Delivery {
  headers: http.IncomingHttpHeaders;
  body: string;
  method: string;
  path: string;
  /** Date.now() when its body had arrived (latency figures; never asserted on). */
  receivedAt: number;
}

export type Answer = number | 'hold';

export class WebhookReceiver {
  readonly deliveries: Delivery[] = [];
  /** Answers for the coming deliveries to each path, in order; 200 once a path's list runs out. */
  private readonly scripts = new Map<string, Answer[]>();
  private readonly held: http.ServerResponse[] = [];

  private constructor(
    private readonly server: http.Server,
    readonly port: number,
  ) {}

  static async start(): Promise<WebhookReceiver> {
    let self: WebhookReceiver | null = null;
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (d: Buffer) => chunks.push(d));
      req.on('end', () => self!.answer(req, Buffer.concat(chunks).toString('utf8'), res));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    self = new WebhookReceiver(server, (server.address() as AddressInfo).port);
    return self;
  }

  /** http://127.0.0.1:<port><path> (registered where ALLOW_PRIVATE_WEBHOOKS=true). */
  url(path = '/hook'): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  private answer(req: http.IncomingMessage, body: string, res: http.ServerResponse): void {
    this.deliveries.push({ headers: req.headers, body, method: req.method ?? '', path: req.url ?? '', receivedAt: Date.now() });
    const next = this.scripts.get(req.url ?? '')?.shift() ?? 200;
    if (next === 'hold') {
      this.held.push(res);
      return;
    }
    res.statusCode = next;
    res.end('{}');
  }

  /** The next answers to deliveries to `path`. */
  script(path: string, answers: Answer[]): void {
    this.scripts.set(path, [...answers]);
  }

  /** Deliveries to one path (each test registers its own path). */
  to(path: string): Delivery[] {
    return this.deliveries.filter((d) => d.path === path);
  }

  /** Answers every held request with `status` now. */
  release(status = 200): void {
    for (const r of this.held.splice(0)) {
      r.statusCode = status;
      r.end('{}');
    }
  }

  async close(): Promise<void> {
    for (const r of this.held.splice(0)) r.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/**
 * The body, parsed, once its signature is the one `standardwebhooks` makes with `secret` for its id,
 * timestamp and body; throws otherwise. For deliveries sent by a worker whose clock a test moved, whose
 * timestamp verify() would refuse as out of its tolerance.
 */
export function signedWith(secret: string, d: Delivery): { type: string; timestamp: string; data: Record<string, unknown> } {
  const id = String(d.headers['webhook-id'] ?? '');
  const timestamp = Number(d.headers['webhook-timestamp']);
  const expected = new Webhook(secret).sign(id, new Date(timestamp * 1000), d.body);
  if (!String(d.headers['webhook-signature'] ?? '').split(' ').includes(expected)) throw new Error(`delivery ${id} is not signed with this secret`);
  return JSON.parse(d.body) as { type: string; timestamp: string; data: Record<string, unknown> };
}

/** The body, parsed, once `standardwebhooks` verified its signature with `secret`; throws otherwise. */
export function verified(secret: string, d: Delivery): { type: string; timestamp: string; data: { tunnel: Record<string, unknown> } } {
  const headers: Record<string, string> = {};
  for (const k of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) headers[k] = String(d.headers[k] ?? '');
  return new Webhook(secret).verify(d.body, headers) as { type: string; timestamp: string; data: { tunnel: Record<string, unknown> } };
}

/**
 * An endpoint that accepts the connection and reads the request but never answers (a black-holed
 * receiver, as a tenant's dead endpoint looks to the worker). Counts the requests open at once per path:
 * every attempt is one connection (the worker uses no keep-alive), so this is the number of attempts in
 * flight per webhook as the endpoint sees them.
 */
export class BlackHole {
  /** Requests open now, per path. */
  private readonly open = new Map<string, Set<http.IncomingMessage>>();
  /** The most requests ever open at once, per path. */
  readonly maxOpen = new Map<string, number>();

  private constructor(
    private readonly server: http.Server,
    readonly port: number,
  ) {}

  static async start(): Promise<BlackHole> {
    let self: BlackHole | null = null;
    const server = http.createServer((req) => self!.hold(req));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    self = new BlackHole(server, (server.address() as AddressInfo).port);
    return self;
  }

  url(path: string): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  private hold(req: http.IncomingMessage): void {
    const path = req.url ?? '';
    const set = this.open.get(path) ?? new Set();
    this.open.set(path, set);
    set.add(req);
    this.maxOpen.set(path, Math.max(this.maxOpen.get(path) ?? 0, set.size));
    req.resume();
    req.socket.once('close', () => set.delete(req));
  }

  /** Requests open now to `path`, or to every path. */
  openTo(path?: string): number {
    if (path !== undefined) return this.open.get(path)?.size ?? 0;
    return [...this.open.values()].reduce((n, s) => n + s.size, 0);
  }

  /** Paths with a request open now. */
  openPaths(): string[] {
    return [...this.open].filter(([, s]) => s.size > 0).map(([p]) => p);
  }

  /** Cuts one open request to `path` (its attempt ends as a network error, as when its timeout ends it). */
  cutOne(path: string): void {
    const req = this.open.get(path)?.values().next().value;
    if (!req) throw new Error(`no request open to ${path}`);
    req.socket.destroy();
  }

  /** Cuts every open request. */
  cutAll(): void {
    for (const set of this.open.values()) for (const req of set) req.socket.destroy();
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/**
 * An address whose TCP connection never completes, as one that drops packets: a listener on loopback
 * whose accept queue is full and whose event loop never accepts, so the kernel drops every further SYN
 * (Linux: a full accept queue drops new connection requests). The listener runs in a worker thread that
 * blocks right after listening; two connections made here fill its queue (backlog 1 holds two).
 */
export class NeverConnects {
  private constructor(
    private readonly worker: Worker,
    private readonly gate: Int32Array,
    private readonly fillers: net.Socket[],
    readonly port: number,
  ) {}

  static async start(): Promise<NeverConnects> {
    const shared = new SharedArrayBuffer(4);
    const worker = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads');
       const server = require('node:net').createServer();
       server.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {
         parentPort.postMessage(server.address().port);
         // Block this thread's event loop: nothing is ever accepted until the gate opens.
         Atomics.wait(new Int32Array(workerData), 0, 0);
         server.close();
       });`,
      { eval: true, workerData: shared },
    );
    const port = await new Promise<number>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    const fillers: net.Socket[] = [];
    for (let i = 0; i < 2; i++) {
      const s = net.connect(port, '127.0.0.1');
      fillers.push(s);
      await new Promise<void>((resolve, reject) => {
        s.once('connect', resolve);
        s.once('error', reject);
      });
    }
    return new NeverConnects(worker, new Int32Array(shared), fillers, port);
  }

  url(path: string): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  async close(): Promise<void> {
    for (const s of this.fillers) s.destroy();
    Atomics.store(this.gate, 0, 1);
    Atomics.notify(this.gate, 0);
    await this.worker.terminate();
  }
}
