// The `tunnelTraffic` subscription (docs/CONTRACTS.md "Live traffic"): a tunnel's traffic one point a second while
// watched, the first event carrying the last 5 minutes (the agent's window) so a graph opens full. Access and
// caps as tunnelStatus: another account's tunnel is not_found, and it holds one of the subscription slots
// (subscriptions.ts). The polling is server/traffic-live/poller.ts's.
import 'reflect-metadata';
import { Field, Float, GraphQLISODateTime, ID, ObjectType, Resolver, Root, Subscription, Arg, type SubscribeResolverData } from 'type-graphql';
import { DROP_REASONS, type DropReason } from '../../common/drop-reasons.ts';
import type { LivePoint } from '../../common/traffic-live.ts';
import type { LiveEvent } from '../traffic-live/poller.ts';
import type { GraphqlContext } from './context.ts';
import { TrafficDropped } from './health.ts';
import { releasing } from './subscriptions.ts';

@ObjectType({ description: 'One second of a tunnel\'s traffic at the edge: `t` the second of the counter read that counted it (the traffic of the second before it); `in` is toward the origin.' })
export class LiveTrafficPoint {
  @Field(() => GraphQLISODateTime)
  t!: Date;
  @Field(() => Float, { description: 'Packets per second toward the origin (after the edge\'s filters).' })
  ppsIn!: number;
  @Field(() => Float, { description: 'Bits per second toward the origin.' })
  bpsIn!: number;
  @Field(() => Float, { description: 'Packets per second from the origin back to clients.' })
  ppsOut!: number;
  @Field(() => Float, { description: 'Bits per second from the origin back to clients.' })
  bpsOut!: number;
  @Field(() => TrafficDropped, { description: 'Packets per second the edge dropped, by reason.' })
  dropped!: TrafficDropped;
}

@ObjectType({ description: 'An event of tunnelTraffic: the backfill first, then the points that came since the previous event (usually one).' })
export class LiveTraffic {
  @Field(() => ID)
  tunnelId!: string;
  @Field({ description: 'True for the first event only: the last 5 minutes the edge kept (fewer for a tunnel or agent that started since).' })
  backfill!: boolean;
  @Field(() => [LiveTrafficPoint], { description: 'Oldest first, one per second.' })
  points!: LiveTrafficPoint[];
}

const DROPPED_FIELD: Record<DropReason, keyof TrafficDropped> = { not_allowed: 'notAllowed', rate_limited: 'rateLimited', spoofed: 'spoofed', invalid: 'invalid', fragment: 'fragment' };

function toPoint(p: LivePoint): LiveTrafficPoint {
  const dropped = { notAllowed: 0, rateLimited: 0, spoofed: 0, invalid: 0, fragment: 0 } as TrafficDropped;
  for (const r of DROP_REASONS) dropped[DROPPED_FIELD[r]] = p.dropped[r] ?? 0;
  return { t: new Date(p.t), ppsIn: p.pps_in, bpsIn: p.bps_in, ppsOut: p.pps_out, bpsOut: p.bps_out, dropped };
}

@Resolver()
export class LiveTrafficResolver {
  @Subscription(() => LiveTraffic, {
    description:
      'A tunnel\'s traffic at its edge while watched: the first event carries the last 5 minutes, one point a second (backfill true), then each event the new seconds (about one a second; at large tunnel counts the edge reads its counters every few seconds and those seconds hold the average). Another account\'s tunnel: not_found; a tunnel not on an edge: invalid_state; an edge that does not answer, or whose agent is too old to keep per-second traffic: edge_unavailable (read Tunnel.traffic, one point a minute). Counts against the caps of tunnelStatus (10 per WebSocket, 50 per credential).',
    subscribe: async ({ args, context }: SubscribeResolverData<unknown, { id: string }, GraphqlContext>) => {
      const principal = await context.principal();
      const release = context.subscriptions?.acquire(principal) ?? (() => {});
      try {
        return releasing(await context.services.health.liveTraffic(principal, args.id), release);
      } catch (e) {
        release();
        throw e;
      }
    },
  })
  tunnelTraffic(@Root() e: LiveEvent, @Arg('id', () => ID) _id: string): LiveTraffic {
    return { tunnelId: e.tunnelId, backfill: e.backfill, points: e.points.map(toPoint) };
  }
}
