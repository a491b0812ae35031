// An attack on a tunnel as the edge agent records it and the gateway stores and shows it (docs/CONTRACTS.md
// "Attacks"; DESIGN 3.11): the record's one shape, which the agent's `status` answer carries (`attacks`, from
// agents that detect them) and the REST API, GraphQL and the `tunnel.attack_*` webhook events show as is, and
// its shape check, which both ends use. No I/O here.
import { DROP_REASONS, type DropReason } from './drop-reasons.ts';
import { isUuid } from './names.ts';

/**
 * What an attack's packets mostly were. `mixed`: no protocol carried 80% of them. Null: not known (an agent that
 * does not meter them, or an attack seen for one observation only: agent/attacks/detector.ts).
 */
export const ATTACK_PROTOCOLS = ['tcp', 'udp', 'icmp', 'other', 'mixed'] as const;
export type AttackProtocol = (typeof ATTACK_PROTOCOLS)[number];

/**
 * A `status` answer carries at most this many records. One that carries fewer carries every attack its agent
 * holds open, so the gateway may close an open attack it does not list; a full one may have left some out.
 */
export const MAX_REPORTED_ATTACKS = 1_000;

/** At most this many destination ports in a vector, the busiest first. */
export const MAX_VECTOR_PORTS = 5;

export interface AttackVector {
  /** null: the edge does not know (an older agent without the vector meter). */
  protocol: AttackProtocol | null;
  /**
   * The busiest destination ports of the attack's TCP and UDP packets, most packets first ([] when it had none);
   * null: the edge does not know (an older agent without the vector meter).
   */
  ports: number[] | null;
  /** The reason most of its dropped packets were dropped for; null when none was dropped. */
  top_drop_reason: DropReason | null;
}

export interface AttackRecord {
  /** A UUID the agent gives the attack when it starts; the gateway stores the record under it (idempotent). */
  id: string;
  tunnel_id: string;
  /** ISO 8601: the start of the first second above the threshold. */
  started_at: string;
  /** ISO 8601: the end of the last second above the threshold; null while the attack goes on. */
  ended_at: string | null;
  /** The highest inbound packets per second of one second of the attack. */
  peak_pps: number;
  /** The highest inbound bits per second of one second of the attack. */
  peak_bps: number;
  vector: AttackVector;
  /** Packets of the tunnel the edge dropped during the attack (every reason). */
  packets_dropped: number;
  /** Packets toward the origin the edge let through during the attack. */
  packets_passed: number;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;
const isTime = (v: unknown): v is string => typeof v === 'string' && ISO.test(v) && !Number.isNaN(Date.parse(v));

/** One attack record's shape. Undefined when right, else a sentence prefixed with `where`. Extra keys are allowed (a newer agent). */
export function checkAttackRecord(v: unknown, where = 'attack'): string | undefined {
  if (!isObject(v)) return `${where} must be an object`;
  if (!isUuid(v.id)) return `${where}.id must be a UUID`;
  if (!isUuid(v.tunnel_id)) return `${where}.tunnel_id must be a UUID`;
  if (!isTime(v.started_at)) return `${where}.started_at must be an ISO 8601 time`;
  if (v.ended_at !== null && !isTime(v.ended_at)) return `${where}.ended_at must be an ISO 8601 time or null`;
  if (v.ended_at !== null && Date.parse(v.ended_at) < Date.parse(v.started_at)) return `${where}.ended_at must not be before started_at`;
  for (const k of ['peak_pps', 'peak_bps', 'packets_dropped', 'packets_passed'] as const) if (!isCount(v[k])) return `${where}.${k} must be a non-negative integer`;
  const vec = v.vector;
  if (!isObject(vec)) return `${where}.vector must be an object`;
  if (vec.protocol !== null && !(ATTACK_PROTOCOLS as readonly unknown[]).includes(vec.protocol)) return `${where}.vector.protocol must be one of ${ATTACK_PROTOCOLS.join(', ')} or null`;
  if (vec.ports !== null) {
    if (!Array.isArray(vec.ports) || vec.ports.length > MAX_VECTOR_PORTS || !vec.ports.every((p) => Number.isInteger(p) && p >= 0 && p <= 65535)) {
      return `${where}.vector.ports must be null or at most ${MAX_VECTOR_PORTS} ports (0-65535)`;
    }
  }
  if (vec.top_drop_reason !== null && !(DROP_REASONS as readonly unknown[]).includes(vec.top_drop_reason)) return `${where}.vector.top_drop_reason must be a drop reason or null`;
  return undefined;
}

/** A list of records (a status answer's `attacks`): undefined when right, else a sentence. */
export function checkAttackRecords(v: unknown, where = 'attacks'): string | undefined {
  if (!Array.isArray(v)) return `${where} must be an array`;
  for (let i = 0; i < v.length; i++) {
    const why = checkAttackRecord(v[i], `${where}[${i}]`);
    if (why) return why;
  }
  return undefined;
}
