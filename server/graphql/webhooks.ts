// Webhooks in GraphQL (docs/CONTRACTS.md "Webhooks"): `webhooks`, `createWebhook` and
// `deleteWebhook`, `testWebhook`, `enableWebhook`, thin adapters over server/webhooks/service.ts, validated by the same function REST uses.
import 'reflect-metadata';
import { Arg, Ctx, Field, GraphQLISODateTime, ID, InputType, Mutation, ObjectType, Query, Resolver, registerEnumType } from 'type-graphql';
import type { WebhookCreatorKind } from '../db/entities.ts';
import type { WebhookEvent } from '../webhooks/events.ts';
import { validateWebhookInput, type WebhookView } from '../webhooks/service.ts';
import type { GraphqlContext } from './context.ts';
import type { Same } from './types.ts';

// Upper-case names; the values are the REST event names.
export enum WebhookEventType {
  TUNNEL_STATUS_CHANGED = 'tunnel.status_changed',
  TUNNEL_HEALTH_CHANGED = 'tunnel.health_changed',
  TUNNEL_ATTACK_STARTED = 'tunnel.attack_started',
  TUNNEL_ATTACK_ENDED = 'tunnel.attack_ended',
  WEBHOOK_DISABLED = 'webhook.disabled',
}
registerEnumType(WebhookEventType, {
  name: 'WebhookEventType',
  description: "What a webhook receives: a tunnel status change, a tunnel health change, the start or end of an attack on a tunnel, or another of the account's webhooks disabled.",
});
const _eventsCovered: Same<`${WebhookEventType}`, WebhookEvent> = true;
void _eventsCovered;

// Upper-case names; the values are the REST `created_by.kind` values.
export enum WebhookCreatorKindType {
  SESSION = 'session',
  API_KEY = 'api_key',
  OAUTH_CLIENT = 'oauth_client',
  OPERATOR = 'operator',
}
registerEnumType(WebhookCreatorKindType, {
  name: 'WebhookCreatorKind',
  description:
    'The credential that registered a webhook: SESSION (the owner signed in to the panel), API_KEY, OAUTH_CLIENT (a third-party application the user allowed) or OPERATOR (the admin CLI).',
});
const _creatorKindsCovered: Same<`${WebhookCreatorKindType}`, WebhookCreatorKind> = true;
void _creatorKindsCovered;

@ObjectType({ description: 'The credential that registered a webhook. Revoking an API key or an application (its grant withdrawn, its secret rotated, or deleted) disables the webhooks it registered.' })
export class WebhookCreator {
  @Field(() => WebhookCreatorKindType)
  kind!: WebhookCreatorKindType;

  @Field(() => String, { nullable: true, description: 'The user id (SESSION), API key id (API_KEY) or client id (OAUTH_CLIENT); null for OPERATOR.' })
  id!: string | null;
}

@ObjectType({ description: 'An endpoint that receives signed event deliveries (Standard Webhooks). Its secret is shown only by createWebhook.' })
export class Webhook {
  @Field(() => ID)
  id!: string;

  @Field({ description: 'Where deliveries are POSTed.' })
  url!: string;

  @Field(() => [WebhookEventType])
  events!: WebhookEventType[];

  @Field({ description: "Whether deliveries carry each tunnel's originIp (origin_ip); false unless asked for at registration." })
  includeOrigin!: boolean;

  @Field(() => WebhookCreator, { nullable: true, description: 'The credential that registered it; null for webhooks registered before this was recorded.' })
  createdBy!: WebhookCreator | null;

  @Field(() => GraphQLISODateTime)
  createdAt!: Date;

  @Field(() => GraphQLISODateTime, { nullable: true, description: 'When it stopped receiving deliveries; null while enabled. enableWebhook enables it again unless its credential was revoked.' })
  disabledAt!: Date | null;

  @Field(() => String, {
    nullable: true,
    description:
      "Why it was disabled: 'failing' (nothing delivered for 24 hours while attempts kept failing; enableWebhook enables it again) or 'credential_revoked' (the API key or application that registered it was revoked; final: register a new webhook); null while enabled.",
  })
  disabledReason!: string | null;
}

@ObjectType({ description: 'A new webhook and its signing secret.' })
export class CreatedWebhook {
  @Field(() => Webhook)
  webhook!: Webhook;

  @Field({ description: 'The whsec_ signing secret, shown only here.' })
  secret!: string;
}

@InputType()
export class CreateWebhookInput {
  @Field({ description: 'An https URL that resolves to public addresses when deliveries are sent.' })
  url!: string;

  @Field(() => [WebhookEventType], { nullable: true, description: 'The events to receive; every event when absent.' })
  events?: WebhookEventType[] | null;

  @Field(() => Boolean, {
    nullable: true,
    description: "Deliveries carry each tunnel's origin_ip (default false). Only the account's own credentials may ask for it: a third-party application's token gets insufficient_scope.",
  })
  includeOrigin?: boolean | null;
}

const toWebhook = (w: WebhookView): Webhook => ({
  id: w.id,
  url: w.url,
  events: w.events as string[] as WebhookEventType[],
  includeOrigin: w.include_origin,
  createdBy: w.created_by && { kind: w.created_by.kind as WebhookCreatorKindType, id: w.created_by.id },
  createdAt: new Date(w.created_at),
  disabledAt: w.disabled_at === null ? null : new Date(w.disabled_at),
  disabledReason: w.disabled_reason,
});

@ObjectType({ description: 'A queued webhook.test event.' })
export class WebhookTestQueued {
  @Field({ description: 'The message id: the webhook-id header the delivery will carry.' })
  messageId!: string;
}

@Resolver()
export class WebhookResolver {
  @Query(() => [Webhook], { description: "This account's webhooks, oldest first." })
  async webhooks(@Ctx() ctx: GraphqlContext): Promise<Webhook[]> {
    const principal = await ctx.principal();
    return (await ctx.services.webhooks.list(principal)).map(toWebhook);
  }

  @Mutation(() => CreatedWebhook, { description: 'Registers a webhook (write permission); the answer carries its signing secret once. At most 10 per account.' })
  async createWebhook(@Ctx() ctx: GraphqlContext, @Arg('input', () => CreateWebhookInput) input: CreateWebhookInput): Promise<CreatedWebhook> {
    const principal = await ctx.principal();
    const { webhooks } = ctx.services;
    const checked = validateWebhookInput({ url: input.url, events: input.events ?? undefined, include_origin: input.includeOrigin }, webhooks.allowPrivate);
    const created = await webhooks.create(principal, checked);
    return { webhook: toWebhook(created.webhook), secret: created.secret };
  }

  @Mutation(() => WebhookTestQueued, {
    description: "Queues a webhook.test event for this webhook only (write permission), signed and delivered like any event; another account's webhook is not_found.",
  })
  async testWebhook(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<WebhookTestQueued> {
    const principal = await ctx.principal();
    return { messageId: (await ctx.services.webhooks.test(principal, id)).message_id };
  }

  @Mutation(() => Webhook, {
    description:
      "Enables one of this account's webhooks again after it was disabled for failing (write permission): deliveries resume with the next event. Enabling an enabled webhook changes nothing; another account's is not_found; one disabled because its credential was revoked is invalid_state (register a new webhook).",
  })
  async enableWebhook(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<Webhook> {
    const principal = await ctx.principal();
    return toWebhook(await ctx.services.webhooks.enable(principal, id));
  }

  @Mutation(() => Boolean, { description: "Deletes one of this account's webhooks (write permission); another account's is not_found. Returns true." })
  async deleteWebhook(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<boolean> {
    const principal = await ctx.principal();
    await ctx.services.webhooks.delete(principal, id);
    return true;
  }
}
