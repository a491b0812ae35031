// The admin CLI's webhook commands (docs/CONTRACTS.md "Admin CLI"): `webhook list`, `webhook create`,
// `webhook enable`, `webhook delete`, thin adapters over server/webhooks/service.ts, validated as REST and GraphQL validate.
// The secret-encryption key is loaded only by `webhook create` (it encrypts the new secret).
import { findUserByEmail } from '../domain/accounts.ts';
import { ApiError } from '../domain/errors.ts';
import { WEBHOOK_EVENTS } from '../webhooks/events.ts';
import { validateWebhookInput, WebhookService } from '../webhooks/service.ts';
import type { ParsedOptions } from './args.ts';
import type { Command, CommandContext } from './command.ts';

const str = (o: ParsedOptions, name: string): string => o[name] as string;
const list = (o: ParsedOptions, name: string): string[] => (o[name] as string[] | undefined) ?? [];

const serviceOf = (ctx: CommandContext) =>
  new WebhookService(ctx.db, { allowPrivate: ctx.config.allowPrivateWebhooks, adminSshPort: ctx.config.adminSshPort, encryptionKey: () => ctx.secrets().then((s) => s.secretEncryptionKey) });

async function accountOf(ctx: CommandContext, email: string): Promise<string> {
  const user = await findUserByEmail(ctx.db, email);
  if (!user) throw new ApiError('not_found', `no user with email ${email}.`);
  return user.account_id;
}

/** `--event` may repeat, `--events` takes a comma-separated list (either may); none means every event. */
function eventsOf(o: ParsedOptions): string[] | undefined {
  const commaList = o['events'] as string | undefined;
  const given = [...list(o, 'event'), ...(commaList === undefined ? [] : [commaList])].flatMap((e) => e.split(',')).map((e) => e.trim()).filter(Boolean);
  return given.length ? given : undefined;
}

export const WEBHOOK_COMMANDS: readonly Command[] = [
  {
    name: 'webhook list',
    read: true,
    summary: "A user's account's webhooks, oldest first (never their secrets).",
    prints: '{items: [{id, url, events, include_origin, created_by, created_at, disabled_at, disabled_reason}], next_cursor}',
    options: [{ name: 'email', value: 'EMAIL', help: 'the user whose account is listed', required: true }],
    async run(ctx, o) {
      return { items: await serviceOf(ctx).listFor(await accountOf(ctx, str(o, 'email'))), next_cursor: null };
    },
  },
  {
    name: 'webhook create',
    summary: "Register a webhook for a user's account, recorded as the operator's (created_by kind operator). The whsec_ signing secret is shown once and stored encrypted.",
    prints: '{id, url, events, include_origin, created_by, created_at, disabled_at, disabled_reason, secret}',
    options: [
      { name: 'email', value: 'EMAIL', help: 'the user whose account receives the events', required: true },
      { name: 'url', value: 'URL', help: 'https; must resolve to public addresses when deliveries are sent (unless ALLOW_PRIVATE_WEBHOOKS=true)', required: true },
      { name: 'event', value: WEBHOOK_EVENTS.join('|'), help: 'an event to receive; repeat for more; default every event', multiple: true },
      { name: 'events', value: 'T1,T2', help: 'the events to receive, comma-separated (the same as repeating --event)' },
      { name: 'include-origin', value: '', help: "deliveries carry each tunnel's origin_ip (left out by default)", flag: true },
    ],
    async run(ctx, o) {
      // Refuse bad input before the secrets are loaded (and, on a fresh database, generated).
      const service = serviceOf(ctx);
      const input = validateWebhookInput({ url: str(o, 'url'), events: eventsOf(o), include_origin: o['include-origin'] === 'true' }, service.allowPrivate);
      const accountId = await accountOf(ctx, str(o, 'email'));
      const { webhook, secret } = await service.createFor(accountId, input);
      return { ...webhook, secret };
    },
  },
  {
    name: 'webhook enable',
    summary:
      'Enable a disabled webhook (of any account) again: deliveries resume with the next event. One disabled because its credential was revoked is refused (invalid_state): register a new one.',
    prints: '{id, url, events, include_origin, created_by, created_at, disabled_at: null, disabled_reason: null}',
    options: [{ name: 'id', value: 'ID', help: 'the webhook id printed by webhook create or list', required: true }],
    async run(ctx, o) {
      const id = str(o, 'id');
      const webhook = await serviceOf(ctx).enableAny(id);
      if (!webhook) throw new ApiError('not_found', `no webhook with id ${id}.`);
      return { ...webhook };
    },
  },
  {
    name: 'webhook delete',
    summary: 'Delete a webhook (of any account) and whatever it still had to deliver.',
    prints: '{id, deleted: true}',
    options: [{ name: 'id', value: 'ID', help: 'the webhook id printed by webhook create or list', required: true }],
    async run(ctx, o) {
      const id = str(o, 'id');
      if (!(await serviceOf(ctx).deleteAny(id))) throw new ApiError('not_found', `no webhook with id ${id}.`);
      return { id: id.toLowerCase(), deleted: true };
    },
  },
];
