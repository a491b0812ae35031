// Thin adapters over the domain services: authenticate, validate with the same functions REST uses,
// call the service, map the REST wire shape to the GraphQL type. Errors are ApiErrors from the domain;
// errors.ts turns them into GraphQL errors carrying the REST code.
import 'reflect-metadata';
import { Arg, Ctx, ID, Int, Mutation, Query, Resolver, Root, Subscription, type SubscribeResolverData } from 'type-graphql';
import { getAccount } from '../domain/accounts.ts';
import { WATCH_MANY_MAX, validateIdempotencyKey, validatePurchase, validateUpdate, type LifecycleResult, type TunnelView } from '../domain/tunnels/index.ts';
import type { GraphqlContext } from './context.ts';
import { TUNNELS_DEFAULT_LIMIT, TUNNELS_MAX_LIMIT } from './limits.ts';
import {
  Account,
  Pricing,
  PurchaseResult,
  PurchaseTunnelInput,
  Tunnel,
  TunnelPage,
  TunnelSetup,
  UpdateTunnelInput,
  settingsFields,
  toAccount,
  toPricing,
  toPurchase,
  toSetup,
  toTunnel,
  toTunnelPage,
  updateFields,
} from './types.ts';
import { WebhookResolver } from './webhooks.ts';
import { TunnelTrafficResolver } from './health.ts';
import { LiveTrafficResolver } from './live-traffic.ts';
import { TunnelHealthChangesResolver } from './health-changes.ts';
import { TunnelAttacksResolver } from './attacks.ts';
import { ApplicationResolver } from './applications.ts';
import { LedgerResolver } from './ledger.ts';
import { releasing } from './subscriptions.ts';

/**
 * provision, activate, delete and update: GraphQL returns the tunnel. Its status tells a settled move from a
 * waiting one; an update moves no status, so its settingsApplied tells REST's 200 from its 202.
 */
function tunnelOf(result: LifecycleResult): Tunnel {
  return toTunnel(result.tunnel);
}

@Resolver()
export class PricingResolver {
  @Query(() => Pricing, { description: 'The price list and live stock. Needs no credential.' })
  async pricing(@Ctx() ctx: GraphqlContext): Promise<Pricing> {
    return toPricing(await ctx.services.pricing.get());
  }
}

@Resolver()
export class AccountResolver {
  @Query(() => Account, { description: 'The account of this credential, with its balance.' })
  async me(@Ctx() ctx: GraphqlContext): Promise<Account> {
    const principal = await ctx.principal();
    return toAccount(await getAccount(ctx.services.db, principal.accountId, principal.userId), principal.permission);
  }
}

@Resolver()
export class TunnelResolver {
  @Query(() => TunnelPage, { description: 'Tunnels of this account, newest first, without deleted ones.' })
  async tunnels(
    @Ctx() ctx: GraphqlContext,
    @Arg('limit', () => Int, { defaultValue: TUNNELS_DEFAULT_LIMIT, description: `1 to ${TUNNELS_MAX_LIMIT}.` }) limit: number,
    @Arg('cursor', () => String, { nullable: true, description: '`nextCursor` of the previous page.' }) cursor: string | null,
  ): Promise<TunnelPage> {
    const principal = await ctx.principal();
    return toTunnelPage(await ctx.services.tunnels.list(principal, { limit, cursor }));
  }

  @Query(() => Tunnel, { description: "One tunnel of this account; another account's tunnel is not_found." })
  async tunnel(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<Tunnel> {
    const principal = await ctx.principal();
    return toTunnel(await ctx.services.tunnels.get(principal, id));
  }

  @Query(() => TunnelSetup, { description: "The origin scripts of a tunnel, filled with this tunnel's values." })
  async tunnelSetup(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<TunnelSetup> {
    const principal = await ctx.principal();
    return toSetup(await ctx.services.tunnels.setup(principal, id));
  }

  @Mutation(() => PurchaseResult, {
    description:
      'Buys a tunnel: debits the price, takes a protected IP; ports, protocol and protection are optional (the defaults forward everything). With an idempotencyKey, a retry with the same input replays the purchase without charging again; the same key with other input is invalid_request. Refusals (insufficient_balance, out_of_stock, invalid_promocode) are not remembered: the same input with the same key tries again. Keys are shared with the REST Idempotency-Key header of the same account.',
  })
  async purchaseTunnel(
    @Ctx() ctx: GraphqlContext,
    @Arg('input', () => PurchaseTunnelInput) input: PurchaseTunnelInput,
    @Arg('idempotencyKey', () => String, { nullable: true, description: '1 to 255 visible ASCII characters.' }) idempotencyKey: string | null,
  ): Promise<PurchaseResult> {
    const principal = await ctx.principal();
    const { tunnels } = ctx.services;
    const purchase = validatePurchase({ name: input.name, origin_ip: input.originIp, promocode: input.promocode, ...settingsFields(input) }, tunnels.allowPrivateOrigins);
    const key = validateIdempotencyKey(idempotencyKey);
    // A replay returns the first purchase, as REST does.
    const outcome = await tunnels.purchase(principal, purchase, key);
    return toPurchase(outcome.purchase);
  }

  @Mutation(() => Tunnel, {
    description: 'Applies the tunnel on its edge router (GRE plus NAT); waits a few seconds for the agent. The status is PROVISIONED when it answered, PROVISIONING while the job keeps retrying.',
  })
  async provisionTunnel(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<Tunnel> {
    const principal = await ctx.principal();
    return tunnelOf(await ctx.services.tunnels.provision(principal, id));
  }

  @Mutation(() => Tunnel, {
    description:
      'Changes a tunnel\'s name, origin and settings (PATCH /api/dedicated/{id}). A pending or failed tunnel just stores them (the next provision carries them); on the edge, the change is applied like a provision and the mutation waits a few seconds for the agent: settingsApplied is true when it applied the change, false while its job retries (tunnelStatus fires once it is applied). A new origin stops the edge forwarding to the tunnel at once (until an activation probed the new origin) and moves an ACTIVE tunnel back to PROVISIONED once applied; originIp may change at most 10 times per tunnel in any hour, beyond that rate_limited (extensions.retry_after: seconds). Deleted or deleting: invalid_state.',
  })
  async updateTunnel(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string, @Arg('input', () => UpdateTunnelInput) input: UpdateTunnelInput): Promise<Tunnel> {
    const principal = await ctx.principal();
    const { tunnels } = ctx.services;
    return tunnelOf(await tunnels.update(principal, id, validateUpdate(updateFields(input), tunnels.allowPrivateOrigins)));
  }

  @Mutation(() => Tunnel, {
    description:
      'Marks a provisioned tunnel active once the origin answers through it; only then does the edge forward traffic to the origin (settingsApplied turns true once it does). invalid_state when the origin does not answer, or when originIp changed while the probe ran.',
  })
  async activateTunnel(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<Tunnel> {
    const principal = await ctx.principal();
    return tunnelOf(await ctx.services.tunnels.activate(principal, id));
  }

  @Mutation(() => Tunnel, {
    description: 'Deletes a tunnel: removed from its edge router, then its protected IP returns to the pool (DELETED); DELETING while the agent has not answered yet. Not refunded.',
  })
  async deleteTunnel(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<Tunnel> {
    const principal = await ctx.principal();
    return tunnelOf(await ctx.services.tunnels.delete(principal, id));
  }
}

@Resolver()
export class TunnelStatusResolver {
  @Subscription(() => Tunnel, {
    description:
      'The tunnel now, then again each time its status changes (provisioning, provisioned, active, deleting, deleted ...), its health changes, the edge applies its settings (settingsApplied turns true) or an attack on it starts or ends (select Tunnel.attacks to see it), from whichever gateway replica changed it. Over graphql-ws at /graphql; the credential goes in connectionParams.Authorization. At most 10 running subscriptions per WebSocket and 50 per credential: more are refused with code rate_limited.',
    subscribe: async ({ args, context }: SubscribeResolverData<unknown, { id: string }, GraphqlContext>) => {
      const principal = await context.principal();
      // Over a cap (subscriptions.ts): refused before anything is read or listened to.
      const release = context.subscriptions?.acquire(principal) ?? (() => {});
      try {
        // Refuse another account's or a missing tunnel now, as a subscription error, not mid-stream.
        await context.services.tunnels.get(principal, args.id);
        return releasing(context.services.tunnels.watch(principal, args.id), release);
      } catch (e) {
        release();
        throw e;
      }
    },
  })
  tunnelStatus(@Root() tunnel: TunnelView, @Arg('id', () => ID) _id: string): Tunnel {
    return toTunnel(tunnel);
  }

  @Subscription(() => Tunnel, {
    description: `Changes of many tunnels on one subscription (a dashboard's list): each time one of \`ids\` (1 to ${WATCH_MANY_MAX} of this account's tunnels) changes status or health, or an attack on it starts or ends, that tunnel now. No first snapshot: read the list, then follow it. One id not of this account: not_found. Counts as one subscription against the caps of tunnelStatus.`,
    subscribe: async ({ args, context }: SubscribeResolverData<unknown, { ids: string[] }, GraphqlContext>) => {
      const principal = await context.principal();
      const release = context.subscriptions?.acquire(principal) ?? (() => {});
      try {
        return releasing(await context.services.tunnels.watchMany(principal, args.ids), release);
      } catch (e) {
        release();
        throw e;
      }
    },
  })
  tunnelsStatus(@Root() tunnel: TunnelView, @Arg('ids', () => [ID]) _ids: string[]): Tunnel {
    return toTunnel(tunnel);
  }
}

export const resolvers = [PricingResolver, AccountResolver, TunnelResolver, TunnelStatusResolver, LiveTrafficResolver, TunnelTrafficResolver, TunnelHealthChangesResolver, TunnelAttacksResolver, WebhookResolver, LedgerResolver, ApplicationResolver] as const;
