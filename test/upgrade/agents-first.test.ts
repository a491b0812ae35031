// The upgrade in the order the README gives operators, agents first (docs/RELEASES.md "The upgrade test"),
// with the previous release's own code (test/upgrade/previous-release.ts): the window between upgrading
// the agents and upgrading the gateways, where the previous release's gateway drives this release's agent.
//
//   1. The previous release: its gateway (`server/main.ts` of its tree, its edge worker and status
//      collector) migrates a fresh database; its admin CLI makes the node and a buyer with a balance and a
//      key; its agent (the previous tree's agent code, health checks on, so it answers `status`) carries the
//      tunnels its REST API bought: one activated with a TCP connection through it from then on, one
//      provisioned with a policy (ports, syn_proxy), one pending.
//   2. The agent upgrade: the agent is replaced by this release's (SIGTERM, a new process on the same state
//      directory and port, as `systemctl restart` does). Its restore adds, removes and fails nothing, every
//      link is the same link (ifindex), the DNAT map the same, and the connection flows on.
//   3. The window: the previous release's gateway drives this agent. Its hello lists more job versions and
//      features than that gateway knows; the gateway picks the newest it speaks, and every job of the
//      agent's log carries that version: a new tunnel provisioned, a tunnel's ports changed, one deleted,
//      the node reconciled and its status rounds answered, none refused or failed.
//   4. The gateway upgrade: this release's gateway on the same database finds every tunnel as it was, its
//      reconcile keeps every link, and the connection, open since step 1, never closed or reconnected.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { JOB_VERSIONS } from '../../common/job-contract.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { isRoot } from '../netns/netns.ts';
import { PREVIOUS, START_BOUND_MS, UpgradeRig, VERSION, type Tunnel } from './rig.ts';

/** How often the gateways ask the node for `status` (and the agents run health checks): rounds keep coming during the test. */
const STATUS_SECONDS = 2;
/** The messages with which the agent logs a job it did not carry out. */
const JOB_TROUBLE = ['job refused', 'job failed', 'tunnel failed in reconcile', 'job refused: replay cache write failed'];

describe.skipIf(skipUnless(isRoot, 'the upgrade test: root (network namespaces)'))(`an upgrade from ${PREVIOUS.version} to ${VERSION}, agents first, with ${PREVIOUS.version}'s own gateway`, () => {
  const rig = new UpgradeRig(inject('adminDatabaseUrl'));
  const buyer = { email: `buyer-${randomBytes(3).toString('hex')}@example.test`, name: 'Agents First Buyer', password: `pw ${randomBytes(9).toString('base64url')}` };
  /** The tunnels by role: web (active, carries the connection), game (provisioned, a policy), later (pending); new and gone bought in the window. */
  const t: Record<'web' | 'game' | 'later' | 'new' | 'gone', Tunnel> = {} as never;
  let links: Record<string, number>;
  let mapped: string[];
  /** The gateway's job version for this agent: the newest both the previous gateway and this agent speak. */
  let spoken: number;

  /** This release's agent's log lines (the second start of the edge's agent). */
  const newAgentLogs = () => rig.edge.logs.filter((l) => l.run === 2);
  const jobsDone = (op: string) => newAgentLogs().filter((l) => l.msg === 'job done' && l.op === op);
  const nodePoll = async () =>
    (await rig.raw.query<{ polled_at: Date; reachable: boolean }>('select polled_at, reachable from traffic.node_poll where node_id = $1', [rig.edge.nodeId])).rows[0];

  /** The protected IPs the edge's SYN proxy guards (the nft set `synproxied`). */
  const synProxied = (): string[] => {
    const out = JSON.parse(rig.edge.netns.run('nft', '-j', 'list', 'set', 'ip', 'tunnelgate', 'synproxied')) as { nftables: { set?: { elem?: string[] } }[] };
    return out.nftables.flatMap((o) => o.set?.elem ?? []).sort();
  };

  beforeAll(async () => {
    await rig.open({ EDGE_STATUS_SECONDS: String(STATUS_SECONDS) });
  }, 60_000);

  afterAll(async () => {
    await rig.close();
  });

  it(`${PREVIOUS.version}: its gateway migrates a fresh database, its CLI, REST and agent make three tunnels, one carrying a connection`, async () => {
    await rig.startGateway('previous');
    await Promise.all([rig.registerPreviousEdge({ healthIntervalS: STATUS_SECONDS }), rig.makeBuyer(buyer)]);

    t.web = await rig.buy({ name: 'web', origin_ip: '8.8.4.4', ports: '8080', protocol: 'tcp', protection: { source_pps_limit: 1000 } });
    t.game = await rig.buy({ name: 'game', origin_ip: '8.8.8.8', ports: '27015,25565-25575', protocol: 'both', protection: { syn_proxy: true, source_pps_limit: 500 } });
    t.later = await rig.buy({ name: 'later', origin_ip: '1.1.1.1', protocol: 'udp' });
    for (const x of [t.web, t.game]) await rig.provision(x);
    await rig.openConnection(t.web);
    await rig.flows(50, `through ${PREVIOUS.version}'s agent`);

    // What the previous release's agent holds: the two tunnels' links, the activated one mapped (since 0.2.0
    // an edge forwards only to an origin that answered the activate probe: job version 3 `forwarding`), the
    // policy's ports and its SYN proxy.
    expect(rig.edge.links().sort()).toEqual([t.web.tunnel_name, t.game.tunnel_name].sort());
    expect(rig.edge.mapElements()).toEqual([t.web.protected_ip]);
    const table = rig.edge.netns.run('nft', 'list', 'table', 'ip', 'tunnelgate');
    for (const port of ['27015', '25565', '25575']) for (const proto of ['tcp', 'udp']) expect(table).toContain(`${t.game.protected_ip} . ${proto} . ${port}`);
    expect(synProxied()).toEqual([t.game.protected_ip]);
    // Its collector's status rounds reach its agent.
    await until(`${PREVIOUS.version}'s status round answered`, async () => (await nodePoll())?.reachable === true);
  }, START_BOUND_MS);

  it(`the agent upgrade: ${PREVIOUS.version}'s agent is replaced by ${VERSION}'s under a live connection, which keeps everything`, async () => {
    links = rig.linkIndexes();
    mapped = rig.edge.mapElements().sort();
    expect(Object.keys(links).sort()).toEqual([t.web.tunnel_name, t.game.tunnel_name].sort());
    await rig.flows(50, 'before the restart');

    await rig.restartAgentAsThisRelease({ log: true, healthIntervalS: STATUS_SECONDS });
    const restored = newAgentLogs().find((l) => l.msg === 'restored the last desired state');
    expect(restored, 'the new agent logs its restore').toBeDefined();
    expect({ added: restored!.added, removed: restored!.removed, failed: restored!.failed }).toEqual({ added: 0, removed: 0, failed: 0 });
    expect(Number(restored!.unchanged) + Number(restored!.changed)).toBe(2);
    expect(rig.linkIndexes()).toEqual(links);
    // The restore and the previous gateway's jobs agree on what is forwarded: the map is the same whether or
    // not one of its jobs came first.
    expect(rig.edge.mapElements().sort()).toEqual(mapped);
    expect(synProxied()).toEqual([t.game.protected_ip]);
    await rig.flows(50, `through ${VERSION}'s agent`);
  }, START_BOUND_MS);

  it(`the window: ${PREVIOUS.version}'s gateway drives ${VERSION}'s agent, every job in the version it speaks`, async () => {
    const pollBefore = (await nodePoll())!.polled_at;
    // A new tunnel, new ports on the policy's tunnel, one bought, provisioned and deleted.
    t.new = await rig.buy({ name: 'new', origin_ip: '8.26.56.26', ports: '443', protocol: 'tcp', protection: { syn_proxy: true } });
    await rig.provision(t.new);
    const patched = await rig.api('PATCH', `/api/dedicated/${t.game.id}`, { body: { ports: '25565-25575,27015,28000' } });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect((patched.body as { tunnel: Tunnel }).tunnel.ports).toBe('25565-25575,27015,28000');
    t.gone = await rig.buy({ name: 'gone', origin_ip: '9.9.9.9' });
    await rig.provision(t.gone);
    await rig.remove(t.gone);
    // The reconcile the previous release's CLI queues (what its periodic round queues too).
    const from = rig.edge.calls.length;
    await rig.admin(['node', 'reconcile', '--id', rig.edge.nodeId], { previous: true });
    const reconciled = await rig.edge.waitForCall((c) => c.call === 'reconcile' && c.run === 2, from);
    expect([...reconciled.ids].sort()).toEqual([t.web.id, t.game.id, t.new.id].sort());

    // Each reached this release's agent as a dataplane call.
    for (const [call, x] of [['apply', t.new], ['apply', t.game], ['apply', t.gone], ['remove', t.gone]] as const) {
      await rig.edge.waitForCall((c) => c.run === 2 && c.call === call && c.ids.includes(x.id));
    }
    // The hello: this agent lists every version it speaks (more than the previous gateway knows) and its
    // features; the gateway signed every job in the newest version it shares with the agent.
    const hello = await until('the new agent answered a hello', () => newAgentLogs().find((l) => l.msg === 'hello'));
    expect(hello.versions).toEqual([...JOB_VERSIONS]);
    const done = await until('the jobs done, a status round among them', () => {
      const all = newAgentLogs().filter((l) => l.msg === 'job done');
      return ['apply', 'remove', 'reconcile', 'status'].every((op) => all.some((l) => l.op === op)) ? all : null;
    });
    spoken = Number(done[0]!.v);
    // The newest version of the previous release's own job contract (its common/job-contract.ts).
    const theirs = /export const JOB_VERSIONS = \[([\d, ]+)\]/.exec(readFileSync(join(rig.prev.root, 'common/job-contract.ts'), 'utf8'));
    expect(theirs, `JOB_VERSIONS in ${PREVIOUS.version}'s common/job-contract.ts`).not.toBeNull();
    expect(spoken).toBe(Math.max(...theirs![1]!.split(',').map(Number)));
    expect(new Set(done.map((l) => l.v))).toEqual(new Set([spoken]));
    for (const x of [t.new, t.game, t.gone]) expect(jobsDone('apply').some((l) => l.tunnel_id === x.id), `apply ${x.name} done`).toBe(true);
    expect(jobsDone('remove').some((l) => l.tunnel_id === t.gone.id)).toBe(true);
    // Nothing refused or failed, and the gateway recorded the status rounds as answered.
    expect(newAgentLogs().filter((l) => JOB_TROUBLE.includes(String(l.msg)))).toEqual([]);
    await until(`a status round of ${PREVIOUS.version}'s gateway answered by ${VERSION}'s agent`, async () => {
      const p = await nodePoll();
      return p !== undefined && p.polled_at > pollBefore && p.reachable && jobsDone('status').length > 0;
    });

    // The dataplane: the new tunnel's link, the deleted one's gone, the old links the same links, every
    // activated tunnel alone mapped (the new one is provisioned, not activated), the new port in the policy's set.
    const onEdge = [t.web, t.game, t.new].map((x) => x.tunnel_name).sort();
    expect(rig.edge.links().sort()).toEqual(onEdge);
    const now = rig.linkIndexes();
    for (const [name, index] of Object.entries(links)) expect(now[name], name).toBe(index);
    links = now;
    expect(rig.edge.mapElements()).toEqual([t.web.protected_ip]);
    expect(rig.edge.netns.run('nft', 'list', 'table', 'ip', 'tunnelgate')).toContain(`${t.game.protected_ip} . udp . 28000`);
    expect(synProxied()).toEqual([t.game.protected_ip, t.new.protected_ip].sort());
    for (const x of [t.web, t.game, t.new, t.later, t.gone]) {
      expect(await rig.statusOf(x.id), x.name ?? x.id).toBe({ web: 'active', game: 'provisioned', new: 'provisioned', later: 'pending', gone: 'deleted' }[x.name!]);
    }
    await rig.flows(50, `while ${PREVIOUS.version}'s gateway drives ${VERSION}'s agent`);
  }, START_BOUND_MS);

  it(`the gateway upgrade: ${VERSION}'s gateway on the same database finds every tunnel, and the connection still flows`, async () => {
    const old = rig.gateways[0]!;
    old.kill('SIGTERM');
    expect(await old.exited).toBe(0);
    await rig.startGateway('this');
    for (const x of [t.web, t.game, t.new, t.later, t.gone]) {
      expect(await rig.statusOf(x.id), x.name ?? x.id).toBe({ web: 'active', game: 'provisioned', new: 'provisioned', later: 'pending', gone: 'deleted' }[x.name!]);
    }
    const game = (await rig.api('GET', `/api/dedicated/${t.game.id}`)).body as { tunnel: Tunnel };
    expect(game.tunnel.ports).toBe('25565-25575,27015,28000');

    // This gateway's reconcile, in the newest version (its hello from the agent names this release):
    // every link kept, the active tunnel's DNAT element kept, and still none for the tunnels nobody activated.
    const from = rig.edge.calls.length;
    const logsFrom = rig.edge.logs.length;
    await rig.admin(['node', 'reconcile', '--id', rig.edge.nodeId]);
    const reconciled = await rig.edge.waitForCall((c) => c.call === 'reconcile' && c.run === 2, from);
    expect([...reconciled.ids].sort()).toEqual([t.web.id, t.game.id, t.new.id].sort());
    const job = await until(`${VERSION}'s reconcile done`, () => rig.edge.logs.slice(logsFrom).find((l) => l.msg === 'job done' && l.op === 'reconcile'));
    expect(job.v).toBe(Math.max(...JOB_VERSIONS));
    expect(rig.linkIndexes()).toEqual(links);
    expect(rig.edge.mapElements()).toEqual([t.web.protected_ip]);
    expect(newAgentLogs().filter((l) => JOB_TROUBLE.includes(String(l.msg)))).toEqual([]);

    await rig.flows(50, `after ${VERSION}'s gateway took over`);
    const done = await rig.endConnection();
    process.stdout.write(`agents-first upgrade test: jobs in version ${spoken} from ${PREVIOUS.version}'s gateway; ${done.sent} lines (${done.bytes} bytes) over one connection, longest pause between echoes ${done.max_gap_ms} ms\n`);
  }, START_BOUND_MS);
});
