// The gateway's stream keeper (server/events/streams.ts) over FAKE channels (the test plays the agent's side; the
// real SSH channel and agent are test/integration/events-stream.test.ts's): events go to `apply` in the agent's
// order and keep-alives do not; a bad line is refused and counted, the stream goes on; a stream that ends is opened
// again; a node whose agent does not take the op is asked again, never streamed; a node that leaves the list is
// closed.
import { describe, expect, it } from 'vitest';
import { EventStreams } from '../../../server/events/streams.ts';
import type { LineChannel, LineChannelOptions } from '../../../server/edge/line-channel.ts';
import type { EdgeNode } from '../../../server/edge/connections.ts';
import { createLogger } from '../../../common/log.ts';
import { encodeEventLine, type EdgeEvent } from '../../../common/edge-events.ts';
import { until } from '../../helpers/wait.ts';

const node = (id: string): EdgeNode => ({ id, host: '127.0.0.1', port: 22, hostKeyFingerprint: 'SHA256:x' });
const A = '11111111-1111-4111-8111-111111111111';
const B = '22222222-2222-4222-8222-222222222222';
const TUNNEL = '6f1c2a4e-8b7d-4c3e-9a2f-1d5e7b9c0a11';

/** A FAKE channel: the test writes the agent's lines and closes it. */
class FakeChannel implements LineChannel {
  readonly closed: Promise<string>;
  private done!: (why: string) => void;
  constructor(readonly o: LineChannelOptions) {
    this.closed = new Promise((r) => (this.done = r));
  }
  line(s: string) {
    this.o.onLine(s.replace(/\n$/, ''));
  }
  close(why: string) {
    this.done(why);
  }
}

function rig(opts: { features: Record<string, boolean>; nodes: EdgeNode[] }) {
  const channels: Record<string, FakeChannel[]> = {};
  const applied: [string, EdgeEvent][] = [];
  const logs: { msg: string; fields: Record<string, unknown> }[] = [];
  let nodes = opts.nodes;
  const asked: string[] = [];
  const streams = new EventStreams({
    nodes: async () => nodes,
    open: async (n, o) => {
      asked.push(n.id);
      if (!opts.features[n.id]) return null;
      const ch = new FakeChannel(o);
      (channels[n.id] ??= []).push(ch);
      return ch;
    },
    apply: async (id, e) => void applied.push([id, e]),
    log: createLogger('info', {}, (l) => {
      const { msg, ...fields } = JSON.parse(l) as { msg: string };
      logs.push({ msg, fields });
    }),
    refreshMs: 20,
    backoffMs: 5,
    maxBackoffMs: 20,
  });
  return { streams, channels, applied, logs, asked, setNodes: (n: EdgeNode[]) => (nodes = n) };
}

const health = (h: 'up' | 'down'): EdgeEvent => ({ type: 'health_changed', tunnel_id: TUNNEL, health: h, checked_at: '2026-11-29T02:00:00.000Z' });

describe('EventStreams', () => {
  it('events reach apply in order, keep-alives do not, a bad line is refused with its reason and the stream goes on', async () => {
    const r = rig({ features: { [A]: true }, nodes: [node(A)] });
    r.streams.start();
    const ch = await until('the stream opened', () => r.channels[A]?.[0]);
    expect(r.streams.state(A)).toBe('open');
    ch.line(encodeEventLine({ type: 'keepalive', at: '2026-11-29T02:00:00.000Z' }));
    ch.line(encodeEventLine(health('down')));
    ch.line('{"type":"reboot"}');
    ch.line(encodeEventLine(health('up')));
    await until('both events applied', () => r.applied.length === 2);
    expect(r.applied).toEqual([
      [A, health('down')],
      [A, health('up')],
    ]);
    expect(r.streams.stats.refusedLines).toBe(1);
    expect(r.logs.find((l) => l.msg === 'events stream: line refused')?.fields).toMatchObject({ node_id: A, reason: expect.stringContaining('"reboot"') });
    await r.streams.stop();
  });

  it('a stream that ends is opened again after the backoff, and the new one carries events', async () => {
    const r = rig({ features: { [A]: true }, nodes: [node(A)] });
    r.streams.start();
    const first = await until('the stream opened', () => r.channels[A]?.[0]);
    first.close('the agent closed the stream');
    const second = await until('the stream opened again', () => r.channels[A]?.[1]);
    expect(r.logs.some((l) => l.msg === 'events stream ended' && l.fields.why === 'the agent closed the stream')).toBe(true);
    second.line(encodeEventLine(health('down')));
    await until('the event of the second stream applied', () => r.applied.length === 1);
    expect(r.streams.stats).toMatchObject({ opened: 2, ended: 1, events: 1 });
    await r.streams.stop();
  });

  it('a node whose agent does not take the op is asked again (its hello) and never streamed; a node that leaves is closed', async () => {
    const r = rig({ features: { [A]: true, [B]: false }, nodes: [node(A), node(B)] });
    r.streams.start();
    await until('B asked more than once', () => r.asked.filter((id) => id === B).length >= 3);
    expect(r.streams.state(B)).toBe('unsupported');
    expect(r.channels[B]).toBeUndefined();
    expect(r.logs.filter((l) => l.msg === 'edge agent has no events stream: its events come with the status pull')).toHaveLength(1);
    const a = await until('A open', () => r.channels[A]?.[0]);
    r.setNodes([node(B)]);
    expect(await a.closed).toBe('the node is no longer contactable');
    await until('A forgotten', () => r.streams.state(A) === undefined);
    await r.streams.stop();
    expect(r.channels[A]).toHaveLength(1);
  });
});
