// A tunnel's health history in GraphQL (docs/CONTRACTS.md "Health and traffic"):
// `Tunnel.healthChanges(from, to)`, the same query and rules as GET /api/dedicated/{id}/health-changes
// (server/health/index.ts HealthService.healthChanges), for marking changes on the traffic chart.
import 'reflect-metadata';
import { Arg, Ctx, Field, FieldResolver, GraphQLISODateTime, ObjectType, Resolver, Root } from 'type-graphql';
import type { HealthChange as HealthChangeView } from '../health/index.ts';
import type { GraphqlContext } from './context.ts';
import { Tunnel, TunnelHealth } from './types.ts';

@ObjectType({ description: "One change of a tunnel's health." })
export class HealthChange {
  @Field(() => GraphQLISODateTime, {
    description: "When: the edge's check that saw it for UP and DOWN, the collection round that found the tunnel missing or its edge silent for UNKNOWN. Never before the previous change.",
  })
  at!: Date;
  @Field(() => TunnelHealth, { description: 'The health before the change.' })
  previous!: TunnelHealth;
  @Field(() => TunnelHealth, { description: 'The health from then on.' })
  health!: TunnelHealth;
}

const toChange = (c: HealthChangeView): HealthChange => ({ at: new Date(c.at), previous: c.previous as TunnelHealth, health: c.health as TunnelHealth });

@Resolver(() => Tunnel)
export class TunnelHealthChangesResolver {
  @FieldResolver(() => [HealthChange], {
    description:
      "Changes of `health` from `from` (included) to `to` (excluded), oldest first: `to` defaults to now, `from` to a day before `to`. Kept 90 days; a `from` older than that or not before `to` is invalid_request. At most 1,000, the oldest of the range: when 1,000 come back, ask again from the last one's `at` (changes at that time come again). Leaving the edge (deleting, failed) is a status change, not one of these.",
  })
  async healthChanges(
    @Root() tunnel: Tunnel,
    @Ctx() ctx: GraphqlContext,
    @Arg('from', () => GraphQLISODateTime, { nullable: true }) from: Date | null,
    @Arg('to', () => GraphQLISODateTime, { nullable: true }) to: Date | null,
  ): Promise<HealthChange[]> {
    const principal = await ctx.principal();
    const view = await ctx.services.health.healthChanges(principal, tunnel.id, { from: from?.toISOString() ?? null, to: to?.toISOString() ?? null });
    return view.changes.map(toChange);
  }
}
