// The lines of the `events` stream (docs/CONTRACTS.md "Events stream"): what an agent pushes to the gateway as it
// happens, one JSON object per line, on the exec channel of one signed `events` job (job version 2, agents whose
// hello lists the feature `events`). The pull (`status` every EDGE_STATUS_SECONDS) stays the reconciling path,
// so a lost line costs latency, never a record: the gateway's ingest is idempotent across both (an attack is
// stored by its id). Encoder and decoder, pure; the agent writes with encodeEventLine, the gateway reads with
// decodeEventLine and refuses a bad line with a reason. No I/O here.
import { checkAttackRecord, type AttackRecord } from './attacks.ts';
import { HEALTHS, type Health } from './tunnel-status.ts';
import { isUuid } from './names.ts';

/** The op, version 2 and later (common/job-contract.ts OPS_BY_VERSION): no body. */
export const EVENTS_OP = 'events';
/** The hello feature of an agent that takes op `events`; an agent without it is only pulled. */
export const FEATURE_EVENTS = 'events';
/** The agent writes a keep-alive line at least this often, so the gateway notices a stream that died silently. */
export const KEEPALIVE_MS = 10_000;
/** The gateway closes (and reopens) a stream that sent nothing for this long: three keep-alives missed. */
export const STREAM_SILENCE_MS = 3 * KEEPALIVE_MS;
/** A line longer than this (bytes, newline excluded) is refused: an attack record is well under 1 KiB. */
export const MAX_EVENT_LINE = 16 * 1024;

export type EdgeEvent =
  | { type: 'attack_started'; attack: AttackRecord }
  | { type: 'attack_ended'; attack: AttackRecord }
  | { type: 'health_changed'; tunnel_id: string; health: Health; checked_at: string }
  /** `at`: the agent's clock (ISO 8601) when it wrote the line; says only that the stream is alive. */
  | { type: 'keepalive'; at: string };

export type EdgeEventType = EdgeEvent['type'];
export const EVENT_TYPES: readonly EdgeEventType[] = ['attack_started', 'attack_ended', 'health_changed', 'keepalive'];

/**
 * A decoded line: an event, or why it is not one. `refused`: the line is the agent's result line refusing the
 * job (docs/CONTRACTS.md "Results"; e.g. `expired`), its last line before it closes the channel.
 */
export type DecodedLine = { ok: true; event: EdgeEvent } | { ok: false; reason: string; refused?: string };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;
const isTime = (v: unknown): v is string => typeof v === 'string' && ISO.test(v) && !Number.isNaN(Date.parse(v));

/** An event's shape. Undefined when right, else a sentence. Extra keys are allowed (a newer agent). */
export function checkEdgeEvent(v: unknown): string | undefined {
  if (!isObject(v)) return 'an event line must be a JSON object';
  switch (v.type) {
    case 'attack_started':
    case 'attack_ended': {
      const why = checkAttackRecord(v.attack, 'attack');
      if (why) return why;
      const ended = (v.attack as AttackRecord).ended_at !== null;
      if (v.type === 'attack_started' && ended) return 'attack_started carries an attack that has ended (attack.ended_at is set)';
      if (v.type === 'attack_ended' && !ended) return 'attack_ended carries an attack without ended_at';
      return undefined;
    }
    case 'health_changed':
      if (!isUuid(v.tunnel_id)) return 'tunnel_id must be a UUID';
      if (!(HEALTHS as readonly unknown[]).includes(v.health)) return `health must be one of ${HEALTHS.join(', ')}`;
      if (!isTime(v.checked_at)) return 'checked_at must be an ISO 8601 time';
      return undefined;
    case 'keepalive':
      return isTime(v.at) ? undefined : 'at must be an ISO 8601 time';
    default:
      return `type must be one of ${EVENT_TYPES.join(', ')}, got ${JSON.stringify(v.type ?? null)}`;
  }
}

/** One event as the line the agent writes (newline included). Throws on an event that breaks the contract. */
export function encodeEventLine(e: EdgeEvent): string {
  const why = checkEdgeEvent(e);
  if (why) throw new TypeError(`not an event line: ${why}`);
  return `${JSON.stringify(e)}\n`;
}

/** One line as read (without its newline). A line of another newer type is refused too: the caller skips it. */
export function decodeEventLine(line: string): DecodedLine {
  if (Buffer.byteLength(line) > MAX_EVENT_LINE) return { ok: false, reason: `the line is longer than ${MAX_EVENT_LINE} bytes` };
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return { ok: false, reason: 'the line is not JSON' };
  }
  if (isObject(v) && v.ok === false && typeof v.error === 'string') {
    return { ok: false, refused: v.error, reason: `the agent refused the stream: ${v.error}: ${String(v.error_description ?? '')}` };
  }
  const why = checkEdgeEvent(v);
  return why ? { ok: false, reason: why } : { ok: true, event: v as EdgeEvent };
}

/**
 * Splits a byte stream into lines: push() each chunk as it comes and get the complete lines it finished. A line
 * that grows past MAX_EVENT_LINE without a newline is handed on as `overflow` once (and dropped), so a peer that
 * never sends a newline cannot grow the buffer without bound.
 */
export class LineSplitter {
  private rest = '';
  private skipping = false;

  push(chunk: string): { lines: string[]; overflow: boolean } {
    const parts = (this.rest + chunk).split('\n');
    this.rest = parts.pop()!;
    let overflow = false;
    const lines: string[] = [];
    for (const p of parts) {
      if (this.skipping) {
        this.skipping = false; // the rest of the oversized line ends here
        continue;
      }
      lines.push(p);
    }
    if (Buffer.byteLength(this.rest) > MAX_EVENT_LINE) {
      if (!this.skipping) overflow = true;
      this.skipping = true;
      this.rest = '';
    }
    return { lines, overflow };
  }
}
