// Traffic in GraphQL (docs/CONTRACTS.md "Health and traffic"): `Tunnel.traffic(from, to, step)`, the
// same query and rules as GET /api/dedicated/{id}/traffic (server/health/index.ts trafficRange).
// Counts are Float: bytes pass 2^31 (GraphQL's Int) within a day of a busy tunnel.
import 'reflect-metadata';
import { Arg, Ctx, Field, FieldResolver, Float, GraphQLISODateTime, ID, ObjectType, Resolver, Root } from 'type-graphql';
import type { DropReason } from '../../common/tunnel-status.ts';
import type { TrafficPoint as TrafficPointView, TrafficView } from '../health/index.ts';
import type { GraphqlContext } from './context.ts';
import { Tunnel, type Same } from './types.ts';

@ObjectType({ description: 'Packets the edge dropped for this tunnel, by reason.' })
export class TrafficDropped {
  @Field(() => Float, { description: 'To a port or protocol the tunnel does not forward.' })
  notAllowed!: number;
  @Field(() => Float, { description: 'Over the per-source packet rate limit.' })
  rateLimited!: number;
  @Field(() => Float, { description: 'With a source address that cannot be genuine.' })
  spoofed!: number;
  @Field(() => Float, { description: 'Invalid (conntrack state, malformed).' })
  invalid!: number;
  @Field(() => Float, { description: 'IP fragments, when the tunnel drops them.' })
  fragment!: number;
}
const DROPPED_FIELDS = { not_allowed: 'notAllowed', rate_limited: 'rateLimited', spoofed: 'spoofed', invalid: 'invalid', fragment: 'fragment' } as const;
const _dropsCovered: Same<keyof typeof DROPPED_FIELDS, DropReason> = true;
void _dropsCovered;

@ObjectType({ description: 'Traffic of one step (minute or hour) starting at `t`; `in` is toward the origin.' })
export class TrafficPoint {
  @Field(() => GraphQLISODateTime)
  t!: Date;
  @Field(() => Float)
  bytesIn!: number;
  @Field(() => Float)
  bytesOut!: number;
  @Field(() => Float)
  packetsIn!: number;
  @Field(() => Float)
  packetsOut!: number;
  @Field(() => TrafficDropped)
  dropped!: TrafficDropped;
}

@ObjectType({ description: 'Traffic history of a tunnel, one point per step, oldest first.' })
export class Traffic {
  @Field(() => ID)
  tunnelId!: string;
  @Field({ description: '1m or 1h.' })
  step!: string;
  @Field(() => [TrafficPoint])
  points!: TrafficPoint[];
}

function toPoint(p: TrafficPointView): TrafficPoint {
  const dropped = Object.fromEntries(Object.entries(DROPPED_FIELDS).map(([r, f]) => [f, p.dropped[r as DropReason]])) as unknown as TrafficDropped;
  return { t: new Date(p.t), bytesIn: p.bytes_in, bytesOut: p.bytes_out, packetsIn: p.packets_in, packetsOut: p.packets_out, dropped };
}

function toTraffic(v: TrafficView): Traffic {
  return { tunnelId: v.tunnel_id, step: v.step, points: v.points.map(toPoint) };
}

@Resolver(() => Tunnel)
export class TunnelTrafficResolver {
  @FieldResolver(() => Traffic, {
    description:
      'Traffic history: step 1m (kept 48 hours, the default) or 1h (kept 90 days); `to` defaults to now (at most one step after it), `from` to an hour (1m) or a day (1h) before `to`. A range outside retention is invalid_request, and so is an operation whose traffic fields ask for more than 10,000 points together (each field\'s points times the tunnels it runs for), refused before anything is read.',
  })
  async traffic(
    @Root() tunnel: Tunnel,
    @Ctx() ctx: GraphqlContext,
    @Arg('from', () => GraphQLISODateTime, { nullable: true }) from: Date | null,
    @Arg('to', () => GraphQLISODateTime, { nullable: true }) to: Date | null,
    @Arg('step', () => String, { nullable: true, description: '1m or 1h (default 1m).' }) step: string | null,
  ): Promise<Traffic> {
    const principal = await ctx.principal();
    return toTraffic(await ctx.services.health.traffic(principal, tunnel.id, { from: from?.toISOString() ?? null, to: to?.toISOString() ?? null, step }));
  }
}
