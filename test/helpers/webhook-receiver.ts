// A real HTTP endpoint for webhook tests: records every delivery (headers and the exact body bytes) and
// answers each with the next scripted answer: a status, or `hold` (no answer until the test releases it
// or the connection dies). Tests verify deliveries with the `standardwebhooks` package, an independent
// implementation of the Standard Webhooks spec (verify()).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface Delivery {
  headers: http.IncomingHttpHeaders;
  body: string;
  method: string;
  path: string;
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
    this.deliveries.push({ headers: req.headers, body, method: req.method ?? '', path: req.url ?? '' });
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

/** The body, parsed, once `standardwebhooks` verified its signature with `secret`; throws otherwise. */
export function verified(secret: string, d: Delivery): { type: string; timestamp: string; data: { tunnel: Record<string, unknown> } } {
  const headers: Record<string, string> = {};
  for (const k of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) headers[k] = String(d.headers[k] ?? '');
  return new Webhook(secret).verify(d.body, headers) as { type: string; timestamp: string; data: { tunnel: Record<string, unknown> } };
}
