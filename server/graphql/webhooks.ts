// Webhooks in GraphQL (docs/CONTRACTS.md "Webhooks"): `webhooks`, `createWebhook` and
// `deleteWebhook`, `testWebhook`, thin adapters over server/webhooks/service.ts, validated by the same function REST uses.
import 'reflect-metadata';
import { Arg, Ctx, Field, GraphQLISODateTime, ID, InputType, Mutation, ObjectType, Query, Resolver, registerEnumType } from 'type-graphql';
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
}
registerEnumType(WebhookEventType, {
  name: 'WebhookEventType',
  description: 'What a webhook receives: a tunnel status change, a tunnel health change, or the start or end of an attack on a tunnel.',
});
const _eventsCovered: Same<`${WebhookEventType}`, WebhookEvent> = true;
void _eventsCovered;

@ObjectType({ description: 'An endpoint that receives signed event deliveries (Standard Webhooks). Its secret is shown only by createWebhook.' })
export class Webhook {
  @Field(() => ID)
  id!: string;

  @Field({ description: 'Where deliveries are POSTed.' })
  url!: string;

  @Field(() => [WebhookEventType])
  events!: WebhookEventType[];

  @Field(() => GraphQLISODateTime)
  createdAt!: Date;
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
}

const toWebhook = (w: WebhookView): Webhook => ({ id: w.id, url: w.url, events: w.events as string[] as WebhookEventType[], createdAt: new Date(w.created_at) });

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
    const checked = validateWebhookInput({ url: input.url, events: input.events ?? undefined }, webhooks.allowPrivate);
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

  @Mutation(() => Boolean, { description: "Deletes one of this account's webhooks (write permission); another account's is not_found. Returns true." })
  async deleteWebhook(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<boolean> {
    const principal = await ctx.principal();
    await ctx.services.webhooks.delete(principal, id);
    return true;
  }
}
