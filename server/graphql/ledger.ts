// The account's ledger in GraphQL: `ledger(limit, cursor)`, a thin adapter over server/domain/ledger.ts
// (the function GET /api/ledger calls), mapped field for field to camelCase.
import 'reflect-metadata';
import { Arg, Ctx, Field, Float, GraphQLISODateTime, ID, Int, ObjectType, Query, Resolver, registerEnumType } from 'type-graphql';
import { LEDGER_DEFAULT_LIMIT, LEDGER_MAX_LIMIT, listLedger, type LedgerEntryView, type LedgerPage as LedgerPageView } from '../domain/ledger.ts';
import type { GraphqlContext } from './context.ts';
import type { Same } from './types.ts';

export enum LedgerEntryKind {
  TOPUP = 'topup',
  PURCHASE = 'purchase',
}
registerEnumType(LedgerEntryKind, { name: 'LedgerEntryKind', description: 'TOPUP (balance credited) or PURCHASE (a tunnel bought).' });
const _kindsCovered: Same<`${LedgerEntryKind}`, LedgerEntryView['kind']> = true;
void _kindsCovered;

@ObjectType({ description: 'The tunnel a purchase bought (also once deleted).' })
export class LedgerTunnel {
  @Field(() => ID)
  id!: string;

  @Field(() => String, { nullable: true })
  name!: string | null;
}

@ObjectType({ description: 'One change of the balance (GET /api/ledger).' })
export class LedgerEntry {
  @Field(() => ID, { description: "The entry's sequence number." })
  id!: string;

  @Field(() => LedgerEntryKind)
  kind!: LedgerEntryKind;

  @Field(() => Float, { description: 'Signed USD, exact to the cent: positive for a top-up, negative for a purchase.' })
  amountUsd!: number;

  @Field(() => Float, { description: 'The balance in USD right after this entry.' })
  balanceAfter!: number;

  @Field(() => LedgerTunnel, { nullable: true, description: 'The tunnel a purchase bought; null for a top-up.' })
  tunnel!: LedgerTunnel | null;

  @Field(() => String, { nullable: true, description: 'The promocode a purchase used.' })
  promocode!: string | null;

  @Field(() => GraphQLISODateTime)
  createdAt!: Date;
}

@ObjectType({ description: 'One page of the ledger, newest first.' })
export class LedgerPage {
  @Field(() => [LedgerEntry])
  entries!: LedgerEntry[];

  @Field(() => String, { nullable: true, description: 'Pass as `cursor` for the next page; null on the last page.' })
  nextCursor!: string | null;
}

const toEntry = (e: LedgerEntryView): LedgerEntry => ({
  id: e.id,
  kind: e.kind as LedgerEntryKind,
  amountUsd: e.amount_usd,
  balanceAfter: e.balance_after,
  tunnel: e.tunnel,
  promocode: e.promocode,
  createdAt: new Date(e.created_at),
});

const toPage = (p: LedgerPageView): LedgerPage => ({ entries: p.entries.map(toEntry), nextCursor: p.next_cursor });

@Resolver()
export class LedgerResolver {
  @Query(() => LedgerPage, { description: "The account's top-ups and purchases, newest first (read permission)." })
  async ledger(
    @Ctx() ctx: GraphqlContext,
    @Arg('limit', () => Int, { defaultValue: LEDGER_DEFAULT_LIMIT, description: `1 to ${LEDGER_MAX_LIMIT}.` }) limit: number,
    @Arg('cursor', () => String, { nullable: true, description: '`nextCursor` of the previous page.' }) cursor: string | null,
  ): Promise<LedgerPage> {
    const principal = await ctx.principal();
    return toPage(await listLedger(ctx.services.db, principal, { limit, cursor }));
  }
}
