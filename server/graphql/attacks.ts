// Attacks in GraphQL (docs/CONTRACTS.md "Attacks"): `Tunnel.attacks(from, to)`, the same query and rules as
// GET /api/dedicated/{id}/attacks (server/attacks/index.ts AttackService.list). Counts are Float: bits per
// second and packet totals pass 2^31 (GraphQL's Int) in one large attack.
import 'reflect-metadata';
import { Arg, Ctx, Field, FieldResolver, Float, GraphQLISODateTime, ID, Int, ObjectType, Resolver, Root, registerEnumType } from 'type-graphql';
import type { AttackProtocol as AttackProtocolValue, AttackRecord } from '../../common/attacks.ts';
import type { DropReason as DropReasonValue } from '../../common/tunnel-status.ts';
import type { GraphqlContext } from './context.ts';
import { Tunnel, type Same } from './types.ts';

export enum AttackProtocol {
  TCP = 'tcp',
  UDP = 'udp',
  ICMP = 'icmp',
  OTHER = 'other',
  MIXED = 'mixed',
}
registerEnumType(AttackProtocol, { name: 'AttackProtocol', description: 'What most packets of an attack were; MIXED: no protocol carried 80% of them.' });
const _protocolsCovered: Same<`${AttackProtocol}`, AttackProtocolValue> = true;
void _protocolsCovered;

export enum DropReason {
  NOT_ALLOWED = 'not_allowed',
  RATE_LIMITED = 'rate_limited',
  SPOOFED = 'spoofed',
  INVALID = 'invalid',
  FRAGMENT = 'fragment',
}
registerEnumType(DropReason, { name: 'DropReason', description: 'Why the edge dropped a packet of a tunnel (docs/CONTRACTS.md "Dataplane").' });
const _reasonsCovered: Same<`${DropReason}`, DropReasonValue> = true;
void _reasonsCovered;

@ObjectType({ description: 'What an attack was made of.' })
export class AttackVector {
  @Field(() => AttackProtocol, { nullable: true, description: 'What at least 80% of its metered packets were (MIXED: none); null: not known (an edge agent without the vector meter, or a start decided before the meter counted).' })
  protocol!: AttackProtocol | null;
  @Field(() => [Int], { nullable: true, description: 'The busiest destination ports of its TCP and UDP packets (at most 5), most packets first, empty when it had none; null: not known, as for protocol.' })
  ports!: number[] | null;
  @Field(() => DropReason, { nullable: true, description: 'The reason most of its dropped packets were dropped for; null when none was.' })
  topDropReason!: DropReason | null;
}

@ObjectType({ description: 'An attack on a tunnel, as its edge detected it: inbound packets or drops per second above the alert threshold for 2 seconds in a row, until 60 seconds below.' })
export class Attack {
  @Field(() => ID)
  id!: string;
  @Field(() => ID)
  tunnelId!: string;
  @Field(() => GraphQLISODateTime, { description: 'The start of the first second above the threshold.' })
  startedAt!: Date;
  @Field(() => GraphQLISODateTime, { nullable: true, description: 'The end of the last second above the threshold; null while it goes on.' })
  endedAt!: Date | null;
  @Field(() => Float, { description: 'The highest inbound packets per second of one second.' })
  peakPps!: number;
  @Field(() => Float, { description: 'The highest inbound bits per second of one second.' })
  peakBps!: number;
  @Field(() => AttackVector)
  vector!: AttackVector;
  @Field(() => Float, { description: 'Packets of the tunnel the edge dropped during the attack.' })
  packetsDropped!: number;
  @Field(() => Float, { description: 'Packets toward the origin the edge let through during the attack.' })
  packetsPassed!: number;
}

export function toAttack(a: AttackRecord): Attack {
  return {
    id: a.id,
    tunnelId: a.tunnel_id,
    startedAt: new Date(a.started_at),
    endedAt: a.ended_at === null ? null : new Date(a.ended_at),
    peakPps: a.peak_pps,
    peakBps: a.peak_bps,
    vector: { protocol: a.vector.protocol as AttackProtocol | null, ports: a.vector.ports, topDropReason: a.vector.top_drop_reason as DropReason | null },
    packetsDropped: a.packets_dropped,
    packetsPassed: a.packets_passed,
  };
}

@Resolver(() => Tunnel)
export class TunnelAttacksResolver {
  @FieldResolver(() => [Attack], {
    description:
      'Attacks going on at some time from `from` (included) to `to` (excluded), oldest start first: `to` defaults to now, `from` to 7 days before `to`. Kept 90 days after they end; a `from` older than that or not before `to` is invalid_request. At most 1,000, the oldest of the range: when 1,000 come back, ask again from the last one\'s `startedAt`. tunnelStatus fires when one starts or ends.',
  })
  async attacks(
    @Root() tunnel: Tunnel,
    @Ctx() ctx: GraphqlContext,
    @Arg('from', () => GraphQLISODateTime, { nullable: true }) from: Date | null,
    @Arg('to', () => GraphQLISODateTime, { nullable: true }) to: Date | null,
  ): Promise<Attack[]> {
    const principal = await ctx.principal();
    const view = await ctx.services.attacks.list(principal, tunnel.id, { from: from?.toISOString() ?? null, to: to?.toISOString() ?? null });
    return view.attacks.map(toAttack);
  }
}
