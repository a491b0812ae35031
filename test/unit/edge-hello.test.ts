// The gateway's half of job version 2 (docs/CONTRACTS.md "Edge jobs", "Versions"): reading the agent's
// answer to `tunnel-agent hello`, picking the version, and what the worker signs for an agent that speaks
// version 1 only (the tunnel without its policy, one `edge_policy_not_enforced` warning per connection).
// The sessions below are FAKES of the SSH connection pool (each stands for one connection and its hello);
// the signing and the worker are the real ones. The real agent and the real worker over real SSH are in
// test/integration/agent-ssh.test.ts ("hello") and test/integration/provisioning-versions.test.ts.
import { describe, expect, it } from 'vitest';
import type { Database } from '../../server/db/database.ts';
import { commonVersion, type EdgeConnections, type EdgeNode, type EdgeSession } from '../../server/edge/connections.ts';
import { EdgeSshError, parseHelloAnswer } from '../../server/edge/result-line.ts';
import type { ResultLine } from '../../server/edge/job-signing.ts';
import { createLogger } from '../../common/log.ts';
import { DEFAULT_POLICY, type TunnelPolicy } from '../../common/tunnel-policy.ts';
import type { TunnelSpec } from '../../common/tunnel-spec.ts';
import type { JobVersion } from '../../common/job-contract.ts';
import { parseSecret, generateSecret } from '../../server/secrets.ts';
import type { Transitions } from '../../server/provisioning/transitions.ts';
import { EdgeWorker, bodyFor } from '../../server/provisioning/worker.ts';
import { tunnelSpec } from '../helpers/tunnel-spec.ts';

const NODE: EdgeNode = { id: '6f1c1c52-8d0b-4d36-9a43-2f7f4f0c1a10', host: '192.0.2.77', port: 52222, hostKeyFingerprint: 'SHA256:x' };
const POLICY: TunnelPolicy = { ports: [[443, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 1000, drop_fragments: true };

describe('parseHelloAnswer', () => {
  it('a hello line with exit 0: the versions and the agent\'s version (newer versions kept)', () => {
    expect(parseHelloAnswer('{"ok":true,"versions":[1,2],"agent":"0.1.0"}\n', 0)).toEqual({ versions: [1, 2], agent: '0.1.0', tunnelLinks: null });
    expect(parseHelloAnswer('{"ok":true,"versions":[1,2,3],"agent":"9.0.0"}\n', 0)).toEqual({ versions: [1, 2, 3], agent: '9.0.0', tunnelLinks: null });
  });

  it('tunnel_links, when the agent says it: kept as said (a kind this gateway does not know included)', () => {
    const noGre = { kind: 'gre', usable: false, reason: 'this kernel cannot create GRE links' };
    expect(parseHelloAnswer(`${JSON.stringify({ ok: true, versions: [1, 2], agent: '0.2.0', tunnel_links: noGre })}\n`, 0)).toEqual({ versions: [1, 2], agent: '0.2.0', tunnelLinks: noGre });
    const standin = { kind: 'veth-standin', usable: true };
    expect(parseHelloAnswer(`${JSON.stringify({ ok: true, versions: [1, 2], agent: '0.2.0', tunnel_links: standin })}\n`, 0).tunnelLinks).toEqual(standin);
    const future = { kind: 'ipip', usable: null, reason: 'x', extra: 1 };
    expect(parseHelloAnswer(`${JSON.stringify({ ok: true, versions: [1, 2], agent: '9.0.0', tunnel_links: future })}\n`, 0).tunnelLinks).toEqual(future);
  });

  it('exit 127, or an unsupported_command line: an agent from before hello, version 1 only', () => {
    const old = '{"ok":false,"error":"unsupported_command","error_description":"only \\"tunnel-agent job\\" is accepted"}\n';
    expect(parseHelloAnswer(old, 127)).toEqual({ versions: [1], agent: null, tunnelLinks: null });
    expect(parseHelloAnswer('', 127)).toEqual({ versions: [1], agent: null, tunnelLinks: null });
    expect(parseHelloAnswer(old, 1)).toEqual({ versions: [1], agent: null, tunnelLinks: null });
  });

  it('anything else is a contract error (protocol), never a guess', () => {
    for (const [stdout, code] of [
      ['', 0],
      ['not json\n', 0],
      ['{"ok":true,"versions":[1,2],"agent":"0.1.0"}', 0], // no newline
      ['{"ok":true,"versions":[1,2],"agent":"0.1.0"}\n{}\n', 0], // two lines
      ['{"ok":true,"versions":"1,2","agent":"0.1.0"}\n', 0],
      ['{"ok":true,"versions":[0],"agent":"0.1.0"}\n', 0],
      ['{"ok":true,"versions":[1,2]}\n', 0],
      ['{"ok":true,"versions":[1,2],"agent":"0.1.0","tunnel_links":{"kind":"gre","usable":"no"}}\n', 0],
      ['{"ok":true,"versions":[1,2],"agent":"0.1.0","tunnel_links":"gre"}\n', 0],
      ['{"ok":false,"error":"malformed","error_description":"x"}\n', 1],
      ['{"ok":true,"versions":[1,2],"agent":"0.1.0"}\n', 1],
      ['{"ok":true,"versions":[1,2],"agent":"0.1.0"}\n', undefined],
    ] as const) {
      expect(() => parseHelloAnswer(stdout, code), `${stdout} ${code}`).toThrow(EdgeSshError);
      try {
        parseHelloAnswer(stdout, code);
      } catch (e) {
        expect((e as EdgeSshError).kind).toBe('protocol');
      }
    }
  });
});

describe('commonVersion', () => {
  it('the newest version both ends speak; none when the agent lists none the gateway knows', () => {
    expect(commonVersion([1, 2, 3])).toBe(3);
    expect(commonVersion([1, 2])).toBe(2);
    expect(commonVersion([1])).toBe(1);
    expect(commonVersion([2, 1, 7])).toBe(2);
    expect(commonVersion([3, 1, 9])).toBe(3);
    expect(commonVersion([2])).toBe(2);
    expect(commonVersion([4, 5])).toBeUndefined();
    expect(commonVersion([])).toBeUndefined();
  });
});

describe('bodyFor', () => {
  it('version 2 carries the body unchanged; version 1 drops policy and names the tunnels whose policy was not the default', () => {
    const a = tunnelSpec({ policy: POLICY });
    const b = tunnelSpec({ policy: { ...DEFAULT_POLICY } });
    const c = tunnelSpec();
    expect(bodyFor('reconcile', { tunnels: [a, b, c] }, 2)).toEqual({ body: { tunnels: [a, b, c] }, unenforced: [], forwarded: [] });
    const v1 = bodyFor('reconcile', { tunnels: [a, b, c] }, 1);
    expect(v1.unenforced).toEqual([a.id]);
    expect(v1.forwarded).toEqual([]);
    expect(v1.body.tunnels.map((t) => 'policy' in t)).toEqual([false, false, false]);
    const withoutPolicy = ({ policy: _p, ...rest }: TunnelSpec): TunnelSpec => rest;
    expect(v1.body.tunnels).toEqual([withoutPolicy(a), withoutPolicy(b), c]);
    expect(bodyFor('apply', { tunnel: a }, 1)).toEqual({ body: { tunnel: withoutPolicy(a) }, unenforced: [a.id], forwarded: [] });
    expect(bodyFor('apply', { tunnel: c }, 1)).toEqual({ body: { tunnel: c }, unenforced: [], forwarded: [] });
    // A remove or a probe leaves nothing unprotected: the policy goes, nothing is reported.
    expect(bodyFor('remove', { tunnel: a }, 1)).toEqual({ body: { tunnel: withoutPolicy(a) }, unenforced: [], forwarded: [] });
    expect(bodyFor('probe', { tunnel: a }, 1)).toEqual({ body: { tunnel: withoutPolicy(a) }, unenforced: [], forwarded: [] });
    // The caller's spec is not changed.
    expect(a.policy).toEqual(POLICY);
  });

  it('version 3 carries forwarding; versions 1 and 2 drop it and name the tunnels an older agent forwards before their origin answered the probe', () => {
    const held = tunnelSpec({ policy: POLICY, forwarding: false });
    const on = tunnelSpec();
    expect(bodyFor('reconcile', { tunnels: [held, on] }, 3)).toEqual({ body: { tunnels: [held, on] }, unenforced: [], forwarded: [] });
    const { forwarding: _f, ...heldV2 } = held;
    expect(bodyFor('reconcile', { tunnels: [held, on] }, 2)).toEqual({ body: { tunnels: [heldV2, on] }, unenforced: [], forwarded: [held.id] });
    expect(bodyFor('apply', { tunnel: held }, 2)).toEqual({ body: { tunnel: heldV2 }, unenforced: [], forwarded: [held.id] });
    const { policy: _p, ...heldV1 } = heldV2;
    expect(bodyFor('apply', { tunnel: held }, 1)).toEqual({ body: { tunnel: heldV1 }, unenforced: [held.id], forwarded: [held.id] });
    // A remove or a probe forwards nothing: the field goes, nothing is reported.
    expect(bodyFor('probe', { tunnel: held }, 2)).toEqual({ body: { tunnel: heldV2 }, unenforced: [], forwarded: [] });
    expect(bodyFor('remove', { tunnel: held }, 2)).toEqual({ body: { tunnel: heldV2 }, unenforced: [], forwarded: [] });
    expect(held.forwarding).toBe(false);
  });
});

/** A worker over FAKE sessions (one per connection): what it signs, and its log lines. */
function workerOver() {
  const sent: Record<string, unknown>[] = [];
  const logs: Record<string, unknown>[] = [];
  let current: EdgeSession;
  const connect = (versions: number[], agent: string | null, version: JobVersion) => {
    current = {
      nodeId: NODE.id,
      hello: { versions, agent, tunnelLinks: null },
      version,
      stream: () => Promise.reject(new Error('this FAKE session opens no events stream')),
      run: async (jws: string): Promise<ResultLine> => {
        const claims = JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString('utf8')) as Record<string, unknown>;
        sent.push(claims);
        return { ok: true, jti: claims.jti as string, op: 'apply', result: { added: 1, changed: 0, removed: 0, unchanged: 0 } };
      },
    };
  };
  const connections = { session: async () => current } as unknown as EdgeConnections;
  const worker = new EdgeWorker({
    db: { query: async () => [] } as unknown as Database,
    connections,
    signingKey: parseSecret('job_signing_key', generateSecret('job_signing_key')),
    transitions: {} as Transitions,
    log: createLogger('debug', {}, (l) => logs.push(JSON.parse(l))),
    jobTimeoutMs: 1000,
  });
  return { worker, sent, logs, connect };
}

describe('EdgeWorker picks the job version from the connection\'s hello', () => {
  it('an agent that listed 2 gets v 2 with the policy; one that speaks 1 only gets v 1 without it, and one warning per connection', async () => {
    const { worker, sent, logs, connect } = workerOver();
    const t: TunnelSpec = tunnelSpec({ policy: POLICY });

    connect([1, 2], '0.1.0', 2);
    await worker.run(NODE, 'apply', { tunnel: t });
    expect(sent.at(-1)).toMatchObject({ v: 2, tunnel: { id: t.id, policy: POLICY } });
    expect(logs.filter((l) => l.msg === 'edge_policy_not_enforced')).toEqual([]);
    expect(logs).toContainEqual(expect.objectContaining({ msg: 'edge agent hello', node_id: NODE.id, agent: '0.1.0', agent_versions: [1, 2], job_version: 2 }));

    connect([1], null, 1); // a reconnect: the agent behind it speaks version 1 only
    await worker.run(NODE, 'apply', { tunnel: t });
    await worker.run(NODE, 'reconcile', { tunnels: [t] });
    const [v1Apply, v1Reconcile] = sent.slice(-2) as [Record<string, { policy?: unknown }>, { v: number; tunnels: { policy?: unknown }[] }];
    expect(v1Apply).toMatchObject({ v: 1 });
    expect('policy' in v1Apply.tunnel!).toBe(false);
    expect(v1Reconcile.v).toBe(1);
    expect(v1Reconcile.tunnels.every((x) => !('policy' in x))).toBe(true);
    const warnings = logs.filter((l) => l.msg === 'edge_policy_not_enforced');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: 'warn', node_id: NODE.id, node_host: NODE.host, agent_versions: [1], tunnel_ids: [t.id] });
    // No secret in it: neither the job key nor a token.
    expect(JSON.stringify(warnings[0])).not.toMatch(/"d":|eyJ|PRIVATE/);

    // A tunnel with the default policy to the v1 agent: nothing to warn about, and on a new connection
    // the warning comes again (once per connection).
    connect([1], null, 1);
    await worker.run(NODE, 'apply', { tunnel: tunnelSpec({ policy: { ...DEFAULT_POLICY } }) });
    expect(logs.filter((l) => l.msg === 'edge_policy_not_enforced')).toHaveLength(1);
    await worker.run(NODE, 'apply', { tunnel: t });
    expect(logs.filter((l) => l.msg === 'edge_policy_not_enforced')).toHaveLength(2);
    expect(sent.slice(-2).every((c) => c.v === 1)).toBe(true);
  });

  it('a tunnel held back (forwarding false) goes as v 3 to an agent that listed 3; to one that speaks 2 it goes without the field, with one warning per connection', async () => {
    const { worker, sent, logs, connect } = workerOver();
    const held: TunnelSpec = tunnelSpec({ forwarding: false });
    connect([1, 2, 3], '0.2.0', 3);
    await worker.run(NODE, 'apply', { tunnel: held });
    expect(sent.at(-1)).toMatchObject({ v: 3, tunnel: { id: held.id, forwarding: false } });
    expect(logs.filter((l) => l.msg === 'edge_forwarding_not_enforced')).toEqual([]);

    connect([1, 2], '0.1.0', 2); // a reconnect: the agent behind it is from before version 3
    await worker.run(NODE, 'apply', { tunnel: held });
    await worker.run(NODE, 'reconcile', { tunnels: [held, tunnelSpec({ tunnel_name: 'tg-other', protected_ip: '203.0.113.11' })] });
    const [v2Apply, v2Reconcile] = sent.slice(-2) as [{ v: number; tunnel: object }, { v: number; tunnels: object[] }];
    expect(v2Apply.v).toBe(2);
    expect('forwarding' in v2Apply.tunnel).toBe(false);
    expect(v2Reconcile.tunnels.every((x) => !('forwarding' in x))).toBe(true);
    const warnings = logs.filter((l) => l.msg === 'edge_forwarding_not_enforced');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: 'warn', node_id: NODE.id, node_host: NODE.host, agent_versions: [1, 2], tunnel_ids: [held.id] });
    // A tunnel that forwards anyway (active, verified) warns of nothing.
    connect([1, 2], '0.1.0', 2);
    await worker.run(NODE, 'apply', { tunnel: tunnelSpec() });
    expect(logs.filter((l) => l.msg === 'edge_forwarding_not_enforced')).toHaveLength(1);
  });

  it('a bad hello fails the contact as a protocol error and is logged with the node', async () => {
    const logs: Record<string, unknown>[] = [];
    const worker = new EdgeWorker({
      db: { query: async () => [] } as unknown as Database,
      connections: {
        session: async () => {
          throw new EdgeSshError('protocol', 'the agent\'s hello is not one JSON line');
        },
      } as unknown as EdgeConnections,
      signingKey: parseSecret('job_signing_key', generateSecret('job_signing_key')),
      transitions: {} as Transitions,
      log: createLogger('debug', {}, (l) => logs.push(JSON.parse(l))),
      jobTimeoutMs: 1000,
    });
    await expect(worker.run(NODE, 'apply', { tunnel: tunnelSpec() })).rejects.toMatchObject({ kind: 'protocol' });
    expect(logs).toContainEqual(expect.objectContaining({ level: 'warn', msg: 'edge hello failed: the agent broke the job contract', node_id: NODE.id }));
  });
});
