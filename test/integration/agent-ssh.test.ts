// Real SSH between the gateway side (the worker's server/edge/connections.ts and plain ssh2 clients) and the
// agent's SSH server (agent/main.ts startAgent) on 127.0.0.1: signed jobs end to end, exit statuses and result
// lines, oversize and unterminated input, `hello` and job version 2. Authentication, channels, the host key and
// shutdown are agent-ssh-access.test.ts. The dataplane is a FAKE (test/helpers/agent-ssh.ts RecordingDataplane):
// the kernel side has its own namespace tests.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { CompactSign } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signJob } from '../../server/edge/job-signing.ts';
import type { EdgeConnections } from '../../server/edge/connections.ts';
import { checkStatusResult } from '../../common/tunnel-status.ts';
import { MAX_INPUT_BYTES } from '../../common/job-contract.ts';
import { until } from '../helpers/wait.ts';
import { KID, NODE, cleanup, connect, exec, gatewayKey, jobSigning, oneLine, pool, sign, start, tmp, tunnel, withConnection, type Agent } from '../helpers/agent-ssh.ts';
let agent: Agent;
/** The gateway's connections to the shared agent. */
let edge: EdgeConnections;
beforeAll(async () => {
  agent = await start();
  edge = pool();
});
afterAll(async () => {
  await agent?.running.stop(1000);
  await cleanup();
});

describe('agent SSH: jobs', () => {
  it('runs signed jobs end to end through the worker\'s connection pool, which pins the host key', async () => {
    const t = tunnel();
    const apply = await edge.run(agent.node, await sign('apply', { tunnel: t }), 10_000);
    expect(apply).toMatchObject({ ok: true, op: 'apply', result: { added: 1, changed: 0, removed: 0, unchanged: 0 } });
    expect(agent.dataplane.calls.at(-1)).toEqual({ op: 'apply', arg: t });
    const probe = await edge.run(agent.node, await sign('probe', { tunnel: t }), 10_000);
    expect(probe).toMatchObject({ ok: true, op: 'probe', result: { reachable: true, rtt_ms: 2 } });
    const remove = await edge.run(agent.node, await sign('remove', { tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } }), 10_000);
    expect(remove).toMatchObject({ ok: true, op: 'remove', result: { added: 0, changed: 0, removed: 1, unchanged: 0 } });
    // An agent refusal is a result (exit 1), not a transport error.
    const unknown = await edge.run(agent.node, await sign('probe', { tunnel: t }), 10_000);
    expect(unknown).toMatchObject({ ok: false, error: 'unknown_tunnel' });
    const other = await edge.run(agent.node, await sign('apply', { tunnel: t }, randomUUID()), 10_000);
    expect(other).toMatchObject({ ok: false, error: 'wrong_audience' });
  });

  it('answers exactly one JSON line on stdout, exit status 0 for ok and 1 for a refusal', async () => {
    await withConnection(agent, async (conn) => {
      const jws = await sign('apply', { tunnel: tunnel() });
      const ok = await exec(conn, 'tunnel-agent job', jws);
      expect(ok.code).toBe(0);
      expect(oneLine(ok)).toMatchObject({ ok: true, op: 'apply' });
      // The same connection, the same JWS again: a replay.
      const again = await exec(conn, 'tunnel-agent job', jws);
      expect(again.code).toBe(1);
      expect(oneLine(again)).toMatchObject({ ok: false, error: 'replayed' });
      const bad = await exec(conn, 'tunnel-agent job', 'not a jws');
      expect(bad.code).toBe(1);
      expect(oneLine(bad)).toMatchObject({ ok: false, error: 'malformed' });
      const empty = await exec(conn, 'tunnel-agent job', '');
      expect(empty.code).toBe(1);
      expect(oneLine(empty)).toMatchObject({ ok: false, error: 'malformed' });
    });
  });

  it('allows one trailing newline after the JWS, not two', async () => {
    await withConnection(agent, async (conn) => {
      const one = await exec(conn, 'tunnel-agent job', `${await sign('apply', { tunnel: tunnel() })}\n`);
      expect(one.code).toBe(0);
      const two = await exec(conn, 'tunnel-agent job', `${await sign('apply', { tunnel: tunnel() })}\n\n`);
      expect(two.code).toBe(1);
      expect(oneLine(two)).toMatchObject({ ok: false, error: 'malformed' });
    });
  });

  it('any other exec command: exit 127 and unsupported_command, the job never runs', async () => {
    const before = agent.dataplane.calls.length;
    await withConnection(agent, async (conn) => {
      const jws = await sign('apply', { tunnel: tunnel() });
      for (const command of ['tunnel-agent job; ls', 'tunnel-agent job && id', 'tunnel-agent job ', ' tunnel-agent job', 'tunnel-agent  job', 'tunnel-agent', 'ls', 'sh -c "tunnel-agent job"', 'TUNNEL-AGENT JOB']) {
        const r = await exec(conn, command, jws);
        expect(r.code, command).toBe(127);
        expect(oneLine(r), command).toMatchObject({ ok: false, error: 'unsupported_command' });
      }
      expect(agent.dataplane.calls.length).toBe(before);
      expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'job refused', code: 'unsupported_command', command: 'tunnel-agent job; ls' }));
      // The JWS sent with the refused commands was never consumed: it still runs once.
      expect((await exec(conn, 'tunnel-agent job', jws)).code).toBe(0);
    });
  });

  it('refuses input over 16 MiB as malformed', async () => {
    await withConnection(agent, async (conn) => {
      const r = await exec(conn, 'tunnel-agent job', Buffer.alloc(MAX_INPUT_BYTES + 1, 0x41));
      expect(r.code).toBe(1);
      expect(oneLine(r)).toMatchObject({ ok: false, error: 'malformed', error_description: expect.stringContaining('16777216') });
    });
  });

  it('refuses as malformed a job whose input never ends', async () => {
    const slow = await start(tmp(), 300);
    const conn = await connect(slow);
    try {
      const r = await exec(conn, 'tunnel-agent job', await sign('apply', { tunnel: tunnel() }), true);
      expect(r.code).toBe(1);
      expect(oneLine(r)).toMatchObject({ ok: false, error: 'malformed', error_description: expect.stringContaining('no end of input') });
      expect(slow.dataplane.calls).toEqual([]);
    } finally {
      conn.end();
      await slow.running.stop(1000);
    }
  });
});

describe('agent SSH: hello and job version 2 (docs/CONTRACTS.md "Versions")', () => {
  const AGENT_VERSION = (JSON.parse(readFileSync(new URL('../../agent/package.json', import.meta.url), 'utf8')) as { version: string }).version;
  const policy = { ports: [[80, 80], [443, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 200, drop_fragments: true };

  it('`tunnel-agent hello` answers one line with the versions and the agent\'s own version, exit 0, reading no stdin', async () => {
    const before = agent.dataplane.calls.length;
    await withConnection(agent, async (conn) => {
      const r = await exec(conn, 'tunnel-agent hello', '');
      expect(r.code).toBe(0);
      expect(oneLine(r)).toEqual({ ok: true, versions: [1, 2, 3], agent: AGENT_VERSION, features: ['attacks', 'status_delta'] });
      // stdin never closed, or something written to it: the same answer, at once.
      const open = await exec(conn, 'tunnel-agent hello', 'ignored', true);
      expect(open.code).toBe(0);
      expect(oneLine(open)).toEqual({ ok: true, versions: [1, 2, 3], agent: AGENT_VERSION, features: ['attacks', 'status_delta'] });
      for (const command of ['tunnel-agent hello ', 'tunnel-agent hello; ls', 'tunnel-agent  hello', 'TUNNEL-AGENT HELLO', 'tunnel-agent version']) {
        const no = await exec(conn, command, '');
        expect(no.code, command).toBe(127);
        expect(oneLine(no), command).toMatchObject({ ok: false, error: 'unsupported_command' });
      }
      expect(agent.dataplane.calls.length).toBe(before);
    });
  });

  it('status over SSH: a v 2 job answers the shape both ends check; a v 1 status is unsupported_command', async () => {
    const t = tunnel({ tunnel_name: 'tg-status' });
    expect(await edge.run(agent.node, await sign('apply', { tunnel: t }, NODE, 2), 10_000)).toMatchObject({ ok: true });
    // Signed here, not by the gateway's signer (server/edge/job-signing.ts, the gateway's side, another change):
    // the standard claims of a signed apply, with op status and no body.
    const statusJob = async (version: 1 | 2): Promise<string> => {
      const [h, p] = (await sign('apply', { tunnel: tunnel() }, NODE, version)).split('.');
      const claims: Record<string, unknown> = { ...(JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<string, unknown>), op: 'status' };
      delete claims.tunnel;
      return new CompactSign(Buffer.from(JSON.stringify(claims))).setProtectedHeader(JSON.parse(Buffer.from(h!, 'base64url').toString()) as { alg: string }).sign(jobSigning.privateKey);
    };
    const r = await edge.run(agent.node, await statusJob(2), 10_000);
    expect(r).toMatchObject({ ok: true, op: 'status' });
    const result = (r as { result: unknown }).result;
    expect(checkStatusResult(result)).toBeUndefined();
    expect(result).toMatchObject({ agent: { version: AGENT_VERSION, tunnels: agent.dataplane.tunnels.size } });
    expect((result as { tunnels: unknown[] }).tunnels).toContainEqual({
      id: t.id,
      health: 'unknown',
      checked_at: null,
      counters: { packets_in: 7, bytes_in: 700, packets_out: 0, bytes_out: 0, dropped: { not_allowed: 0, rate_limited: 0, spoofed: 0, invalid: 0, fragment: 0 } },
    });
    // A v 1 status: exit 1, unsupported_command.
    await withConnection(agent, async (conn) => {
      const v1 = await exec(conn, 'tunnel-agent job', await statusJob(1));
      expect(v1.code).toBe(1);
      expect(oneLine(v1)).toMatchObject({ ok: false, error: 'unsupported_command' });
    });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'job done', op: 'status', v: 2 }));
  });

  it('a v 2 job carrying a policy runs, and the dataplane gets the policy unchanged; v 1 with a policy is malformed', async () => {
    const t = tunnel({ policy } as never);
    const ok = await edge.run(agent.node, await sign('apply', { tunnel: t }, NODE, 2), 10_000);
    expect(ok).toMatchObject({ ok: true, op: 'apply' });
    expect(agent.dataplane.calls.at(-1)).toEqual({ op: 'apply', arg: t });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'job done', op: 'apply', tunnel_id: t.id, v: 2 }));
    // A v1 job with a policy, forged past the gateway's signer (which refuses to sign it).
    await withConnection(agent, async (conn) => {
      const forged = await signJob(jobSigning.privateKey, KID, NODE, 'apply', { tunnel: tunnel() }, { version: 1 });
      const [h, p] = forged.split('.');
      const claims = { ...(JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<string, unknown>), tunnel: tunnel({ policy } as never) };
      const jws = await new CompactSign(Buffer.from(JSON.stringify(claims))).setProtectedHeader(JSON.parse(Buffer.from(h!, 'base64url').toString()) as { alg: string }).sign(jobSigning.privateKey);
      const r = await exec(conn, 'tunnel-agent job', jws);
      expect(r.code).toBe(1);
      expect(oneLine(r)).toMatchObject({ ok: false, error: 'malformed', error_description: expect.stringContaining('policy') });
    });
  });

  it('the gateway\'s pool asks hello once per connection and signs for it: version 3 here', async () => {
    const p = pool();
    const s1 = await p.session(agent.node, 10_000);
    expect(s1).toMatchObject({ nodeId: NODE, version: 3, hello: { versions: [1, 2, 3], agent: AGENT_VERSION } });
    const hellos = () => agent.logs.filter((l) => l.msg === 'hello').length;
    const asked = hellos();
    // More jobs and sessions on the same connection: no new hello.
    expect(await p.session(agent.node, 10_000)).toBe(s1);
    expect(await s1.run(await sign('apply', { tunnel: tunnel() }, NODE, 2), 10_000)).toMatchObject({ ok: true });
    expect(await p.run(agent.node, await sign('apply', { tunnel: tunnel() }), 10_000)).toMatchObject({ ok: true });
    expect(hellos()).toBe(asked);
    // A new connection asks again; a job signed for the old one is not sent over the new one.
    p.disconnect(NODE);
    const s2 = await p.session(agent.node, 10_000);
    expect(s2).not.toBe(s1);
    expect(hellos()).toBe(asked + 1);
    await expect(s1.run(await sign('apply', { tunnel: tunnel() }, NODE, 2), 10_000)).rejects.toMatchObject({ kind: 'connect_failed' });
  });

  it('an agent with AGENT_JOB_VERSIONS=1 (stand-in for an agent from before version 2) answers hello with 127 and refuses v 2; the pool then signs version 1, and re-asks after the agent restarts upgraded', async () => {
    const stateDir = tmp();
    const old = await start(stateDir, undefined, { AGENT_JOB_VERSIONS: '1' });
    const port = old.node.port;
    const lost: string[] = [];
    const p = pool(gatewayKey.privateKey, 10_000, (id) => lost.push(id));
    try {
      await withConnection(old, async (conn) => {
        const h = await exec(conn, 'tunnel-agent hello', '');
        expect(h.code).toBe(127);
        expect(oneLine(h)).toMatchObject({ ok: false, error: 'unsupported_command' });
        const v2 = await exec(conn, 'tunnel-agent job', await sign('apply', { tunnel: tunnel() }, NODE, 2));
        expect(v2.code).toBe(1);
        expect(oneLine(v2)).toMatchObject({ ok: false, error: 'unsupported_version' });
        expect(old.dataplane.calls).toEqual([]);
      });
      const s = await p.session(old.node, 10_000);
      expect(s).toMatchObject({ version: 1, hello: { versions: [1], agent: null } });
      expect(await s.run(await sign('apply', { tunnel: tunnel() }, NODE, s.version), 10_000)).toMatchObject({ ok: true, op: 'apply' });
      expect(old.logs).toContainEqual(expect.objectContaining({ msg: 'job done', v: 1 }));
    } finally {
      await old.running.stop(1000);
    }
    // The agent is upgraded: the same host key, state and port, every version. The pool notices the
    // dropped connection, and on the next contact asks hello again.
    const upgraded = await start(stateDir, undefined, { AGENT_LISTEN: `127.0.0.1:${port}` });
    try {
      await until('the pool noticed the old agent\'s connection closed', () => lost.length > 0);
      expect(lost).toEqual([NODE]);
      const s = await p.session(upgraded.node, 10_000);
      expect(s).toMatchObject({ version: 3, hello: { versions: [1, 2, 3] } });
      expect(await s.run(await sign('apply', { tunnel: tunnel({ policy } as never) }, NODE, s.version), 10_000)).toMatchObject({ ok: true });
      expect(upgraded.logs).toContainEqual(expect.objectContaining({ msg: 'job done', v: 3 }));
    } finally {
      await upgraded.running.stop(1000);
    }
  });
});
