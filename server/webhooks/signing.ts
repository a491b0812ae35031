// Standard Webhooks signing (https://www.standardwebhooks.com, docs/CONTRACTS.md "Health, traffic and
// events"): the secret is `whsec_` + base64 of random bytes; a message is signed as
// `v1,<base64 HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")>`, keyed with the secret's
// decoded bytes (not its text). Receivers verify with any Standard Webhooks library.
import { createHmac, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';
/** 24 random bytes: the spec asks for 24 to 64. */
const SECRET_BYTES = 24;

export function newWebhookSecret(): string {
  return PREFIX + randomBytes(SECRET_BYTES).toString('base64');
}

function keyOf(secret: string): Buffer {
  if (!secret.startsWith(PREFIX)) throw new Error('a webhook secret starts with whsec_');
  return Buffer.from(secret.slice(PREFIX.length), 'base64');
}

/** The `webhook-signature` header value for one attempt. `timestamp` is in whole seconds since the epoch. */
export function signatureHeader(secret: string, messageId: string, timestamp: number, body: string): string {
  const mac = createHmac('sha256', keyOf(secret)).update(`${messageId}.${timestamp}.${body}`, 'utf8').digest('base64');
  return `v1,${mac}`;
}
