// The soak's webhook endpoint: one real HTTP receiver (test/helpers/webhook-receiver.ts), one path per
// account's webhook, every delivery verified with `standardwebhooks` against that webhook's secret. What
// verified is what the webhook invariant counts as received; a delivery that does not verify is a finding.
import { verified, WebhookReceiver } from '../test/helpers/webhook-receiver.ts';

export class VerifiedReceiver {
  private readonly byPath = new Map<string, { webhookId: string; secret: string }>();
  private readonly received = new Map<string, Set<string>>();
  private seen = 0;
  /** Deliveries that failed verification (or came to a path no webhook has). */
  readonly bad: string[] = [];

  private constructor(readonly receiver: WebhookReceiver) {}

  static async start(): Promise<VerifiedReceiver> {
    return new VerifiedReceiver(await WebhookReceiver.start());
  }

  url(path: string): string {
    return this.receiver.url(path);
  }

  register(path: string, webhookId: string, secret: string): void {
    this.byPath.set(path, { webhookId, secret });
    this.received.set(webhookId, new Set());
  }

  /** Verifies every delivery that came since the last call. */
  drain(): void {
    const all = this.receiver.deliveries;
    for (; this.seen < all.length; this.seen++) {
      const d = all[this.seen]!;
      const hook = this.byPath.get(d.path);
      if (!hook) {
        this.bad.push(`delivery to unknown path ${d.path}`);
        continue;
      }
      try {
        verified(hook.secret, d);
        this.received.get(hook.webhookId)!.add(String(d.headers['webhook-id']));
      } catch (e) {
        this.bad.push(`delivery ${String(d.headers['webhook-id'])} to ${d.path}: ${(e as Error).message}`);
      }
    }
  }

  /** Message ids verified for `webhookId` (drained first). */
  receivedBy = (webhookId: string): ReadonlySet<string> => {
    this.drain();
    return this.received.get(webhookId) ?? new Set();
  };

  get deliveries(): number {
    return this.receiver.deliveries.length;
  }

  close(): Promise<void> {
    return this.receiver.close();
  }
}
