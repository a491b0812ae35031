// The agent's `events` op over real SSH (docs/CONTRACTS.md "Events stream"), from the gateway's own connection pool
// and line channel (server/edge/connections.ts, line-channel.ts) to the production startAgent() and its hub: hello
// lists the feature; a verified job keeps the channel open with a keep-alive first, then each event as the hub gets
// it, and the agent stops writing when the gateway closes it; the job's token is verified like any other (another
// node's audience, an expired token and a replayed one each get their refusal line and the channel closes with
// exit 1). The dataplane is a recording stand-in (agent SSH tests need no kernel); the real dataplane and
// gateway are test/integration/events-stream.test.ts's.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { createLogger } from '../../common/log.ts';
import { startAgent, startHealth, type RunningAgent, type RunningHealth } from '../../agent/main.ts';
import { signEventsJob } from '../../server/edge/job-signing.ts';
import type { EdgeConnections, EdgeNode } from '../../server/edge/connections.ts';
import { decodeEventLine, type DecodedLine } from '../../common/edge-events.ts';
import { KID, NODE, RecordingDataplane, cleanup, configFor, jobSigning, pool, tmp } from '../helpers/agent-ssh.ts';
import { until } from '../helpers/wait.ts';

let agent: RunningAgent;
let health: RunningHealth;
let node: EdgeNode;
let conns: EdgeConnections;
const logs: Record<string, unknown>[] = [];

beforeAll(async () => {
  const dataplane = new RecordingDataplane();
  health = startHealth(dataplane, { intervalS: 30, timer: false, keepaliveMs: 1000 });
  const log = createLogger('debug', {}, (l) => logs.push(JSON.parse(l) as Record<string, unknown>));
  agent = await startAgent(configFor(tmp()), { dataplane, log, status: health.status, events: health.events });
  node = { id: NODE, host: '127.0.0.1', port: agent.address.port, hostKeyFingerprint: agent.hostKey.fingerprint };
  conns = pool();
});

afterAll(async () => {
  await conns?.close();
  await agent?.stop(100);
  await health?.stop();
  await cleanup();
});

/** Opens a stream with `jws` on the pool's session; its decoded lines and its end. */
async function open(jws: (version: 2 | 3) => Promise<string>) {
  const session = await conns.session(node, 10_000);
  const lines: DecodedLine[] = [];
  const ch = await session.stream(await jws(session.version as 2 | 3), { silenceMs: 10_000, onLine: (l) => lines.push(decodeEventLine(l)) });
  return { ch, lines, session };
}

describe('op events on the agent', () => {
  it('hello lists the feature; the stream carries a keep-alive first, then the events as they happen, until the gateway closes it', async () => {
    const { ch, lines, session } = await open((version) => signEventsJob(jobSigning.privateKey, KID, NODE, { version }));
    expect(session.hello.features).toEqual(['attacks', 'events', 'status_delta']);
    await until('the first keep-alive', () => lines.length >= 1);
    expect(lines[0]).toMatchObject({ ok: true, event: { type: 'keepalive' } });
    const tunnel = randomUUID();
    health.events.health(tunnel, 'down', Date.parse('2026-11-29T02:00:00.000Z'));
    await until('the health change', () => lines.some((l) => l.ok && l.event.type === 'health_changed'));
    expect(lines.find((l) => l.ok && l.event.type === 'health_changed')).toEqual({
      ok: true,
      event: { type: 'health_changed', tunnel_id: tunnel, health: 'down', checked_at: '2026-11-29T02:00:00.000Z' },
    });
    await until('keep-alives on the timer', () => lines.filter((l) => l.ok && l.event.type === 'keepalive').length >= 3);
    expect(lines.every((l) => l.ok)).toBe(true);
    expect(health.events.streams).toBe(1);
    ch.close('the test is done');
    expect(await ch.closed).toBe('the test is done');
    await until('the agent stopped writing to it', () => health.events.streams === 0);
    expect(logs.filter((l) => l.msg === 'events stream opened' || l.msg === 'events stream closed').map((l) => l.msg)).toEqual(['events stream opened', 'events stream closed']);
  });

  it('a stream silent for longer than the gateway allows is closed by the gateway (keep-alives every 1 s here, 100 ms allowed)', async () => {
    const session = await conns.session(node, 10_000);
    const lines: string[] = [];
    const ch = await session.stream(await signEventsJob(jobSigning.privateKey, KID, NODE, { version: session.version as 2 | 3 }), { silenceMs: 100, onLine: (l) => lines.push(l) });
    expect(await ch.closed).toBe('nothing from the agent within 100 ms');
    expect(lines.length).toBeGreaterThanOrEqual(1);
    await until('the agent stopped writing to it', () => health.events.streams === 0);
  });

  it("another node's token, an expired one and a replayed one are refused like any job's, and the channel closes with exit 1", async () => {
    const refused = async (jws: (version: 2 | 3) => Promise<string>) => {
      const { ch, lines } = await open(jws);
      const why = await ch.closed;
      expect(why).toBe('the agent closed the stream (exit status 1)');
      expect(lines).toHaveLength(1);
      const l = lines[0]!;
      return l.ok ? 'accepted' : l.refused;
    };
    expect(await refused((version) => signEventsJob(jobSigning.privateKey, KID, randomUUID(), { version }))).toBe('wrong_audience');
    expect(await refused((version) => signEventsJob(jobSigning.privateKey, KID, NODE, { version, now: Date.now() / 1000 - 600 }))).toBe('expired');
    let once: string | undefined;
    const replay = async (version: 2 | 3) => (once ??= await signEventsJob(jobSigning.privateKey, KID, NODE, { version }));
    const first = await open(replay);
    await until('the first stream open', () => first.lines.length >= 1);
    expect(await refused(replay)).toBe('replayed');
    first.ch.close('done');
    await first.ch.closed;
    expect(health.events.streams).toBe(0);
  });
});
