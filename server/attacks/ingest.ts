// Attack records from a node's `status` answer into the database (docs/CONTRACTS.md "Attacks"): called by the
// status ingest (server/health/ingest.ts) inside the round's transaction, so the rows, their webhook events and
// the round's traffic commit together or not at all. After the commit, each start and end is published on the
// status bus (the `tunnelStatus` subscription fires) and counted for /metrics.
//
// What a round does with `attacks` (absent from agents that do not detect attacks: then nothing):
// - each record of a tunnel of this node is stored by its id (store.ts upsertAttacks); a new one is a
//   `tunnel.attack_started` event, one that ends (or is new and already ended: a start the gateway missed) a
//   `tunnel.attack_ended`, the start first; a record sent again changes counts and peaks, and no event;
// - an answer with fewer than MAX_REPORTED_ATTACKS records lists every attack its agent holds open: an attack
//   open here that it does not list is over (the agent restarted or forgot it) and ends at the last round that
//   listed it, with its `tunnel.attack_ended`. A full answer may have left some out, so nothing is closed then.
import type { Sql } from '../db/database.ts';
import { MAX_REPORTED_ATTACKS, type AttackRecord } from '../../common/attacks.ts';
import type { StatusResult } from '../../common/tunnel-status.ts';
import type { TunnelEventSink } from '../webhooks/events.ts';
import type { TunnelStatusBus } from '../provisioning/status-bus.ts';
import { closeUnlisted, upsertAttacks, type StoredAttack } from './store.ts';

export type AttackChangeKind = 'started' | 'ended';

/** One start or end a round stored. */
export interface AttackChange {
  kind: AttackChangeKind;
  attack: AttackRecord;
  status: StoredAttack['status'];
}

export interface AttackRound {
  changes: AttackChange[];
  /** Records of tunnels that are not this node's (left out). */
  ignored: number;
}

export class AttackIngest {
  private readonly observers = new Set<(kind: AttackChangeKind) => void>();

  constructor(
    private readonly events: Pick<TunnelEventSink, 'attackStarted' | 'attackEnded'>,
    private readonly bus: Pick<TunnelStatusBus, 'publish'>,
  ) {}

  /** In the round's transaction: stores the answer's records and writes their webhook events. */
  async record(sql: Pick<Sql, 'query'>, nodeId: string, result: StatusResult, at: Date): Promise<AttackRound> {
    const records = result.attacks;
    if (records === undefined) return { changes: [], ignored: 0 };
    const { stored, ignored } = await upsertAttacks(sql, nodeId, records, at);
    const closed = records.length < MAX_REPORTED_ATTACKS ? await closeUnlisted(sql, nodeId, records.map((r) => r.id)) : [];
    return { changes: await this.changesOf(sql, [...stored, ...closed]), ignored };
  }

  /**
   * In the caller's transaction: one record pushed on the events stream (docs/CONTRACTS.md "Events stream"), stored
   * by its id exactly as a round stores it, so a start seen by the push and later by the pull (or by two
   * replicas' streams) is one row and one webhook. Closes nothing: one record says nothing of the others.
   */
  async recordEvent(sql: Pick<Sql, 'query'>, nodeId: string, record: AttackRecord, at: Date): Promise<AttackRound> {
    const { stored, ignored } = await upsertAttacks(sql, nodeId, [record], at);
    return { changes: await this.changesOf(sql, stored), ignored };
  }

  private async changesOf(sql: Pick<Sql, 'query'>, stored: readonly StoredAttack[]): Promise<AttackChange[]> {
    const changes: AttackChange[] = [];
    for (const s of stored) {
      if (s.inserted) changes.push({ kind: 'started', attack: s.record, status: s.status });
      if (s.endedNow) changes.push({ kind: 'ended', attack: s.record, status: s.status });
    }
    for (const c of changes) {
      if (c.kind === 'started') await this.events.attackStarted(sql, c.attack.tunnel_id, c.attack);
      else await this.events.attackEnded(sql, c.attack.tunnel_id, c.attack);
    }
    return changes;
  }

  /** After the commit: the bus notice (subscriptions) and the metrics of each change. */
  async published(changes: readonly AttackChange[]): Promise<void> {
    for (const c of changes) {
      await this.bus.publish(c.attack.tunnel_id, c.status, undefined, { id: c.attack.id, kind: c.kind });
      for (const fn of this.observers) fn(c.kind);
    }
  }

  /** Each start and end stored by this process (the /metrics counters). Returns the unsubscribe. */
  onChange(fn: (kind: AttackChangeKind) => void): () => void {
    this.observers.add(fn);
    return () => this.observers.delete(fn);
  }
}
