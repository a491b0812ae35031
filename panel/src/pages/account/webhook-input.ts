// What the add-webhook form checks before sending: the cheap mistakes, said at the field. The gateway
// checks the rest (public addresses only, https unless the operator allows http for a lab;
// server/webhooks/service.ts) and its refusal is shown at the same field.
import type { WebhookEventType } from '../../graphql/generated.ts';

/** The gateway's cap per account (docs/CONTRACTS.md "Webhooks"). */
export const MAX_WEBHOOKS = 10;

export const WEBHOOK_EVENTS: readonly WebhookEventType[] = ['TUNNEL_STATUS_CHANGED', 'TUNNEL_HEALTH_CHANGED', 'TUNNEL_ATTACK_STARTED', 'TUNNEL_ATTACK_ENDED', 'WEBHOOK_DISABLED'];

export type WebhookUrlProblem = 'required' | 'invalid' | 'scheme' | 'credentials' | 'fragment';

export function checkWebhookUrl(input: string): WebhookUrlProblem | undefined {
  const url = input.trim();
  if (!url) return 'required';
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'invalid';
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return 'scheme';
  if (!parsed.hostname) return 'invalid';
  if (parsed.username || parsed.password) return 'credentials';
  if (url.includes('#')) return 'fragment';
  return undefined;
}
