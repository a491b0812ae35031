// The agent repairs its table at once when another program touches it (agent/dataplane/commit-watch.ts hears the
// commit; edge-dataplane.ts scheduleHeal reconciles the desired state, debounced), instead of leaving the drift to
// the gateway's next periodic reconcile: a rule deleted, an element deleted, the whole ruleset flushed (as Debian's
// nftables.service does at every start and reload). Nothing here calls reconcile after a touch: the test waits, with
// a deadline, for the kernel to hold the table again. In a fresh namespace, `nft` by hand as the drift and the oracle.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDataplane, type DataplaneHandle } from '../../agent/dataplane/index.ts';
import { EXPECTED_RULES } from '../../agent/dataplane/kernel/table.ts';
import { meterChainName } from '../../agent/netlink/ruleset.ts';
import { DYNAMIC_CHAIN_RULES } from '../../agent/netlink/ruleset-chains.ts';
import { ruleHandle } from '../helpers/nft-observe.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { DataplaneEdge, EDGE_IP, NFT_TABLE as T, numberedTunnels } from './dataplane-edge.ts';
import { isRoot } from './netns.ts';

const tun = numberedTunnels('tg-h', 130);

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('a table touched by another program is repaired at once', () => {
  let edge: DataplaneEdge;
  let dp: DataplaneHandle;
  const events: { event: string; fields: Record<string, unknown> }[] = [];
  const desired = [tun(1, { policy: { ports: [[80, 80]], protocol: 'tcp', syn_proxy: false, source_pps_limit: 200, drop_fragments: true } }), tun(2)];
  const [P1, P2] = desired.map((t) => t.protected_ip) as [string, string];
  const rules = (): number =>
    edge
      .run('nft', '-a', 'list', 'table', 'ip', T)
      .split('\n')
      .filter((l) => l.includes('# handle') && !l.includes('{ # handle')).length;
  const whole = EXPECTED_RULES.length + DYNAMIC_CHAIN_RULES.flows.length + DYNAMIC_CHAIN_RULES.meter.length;
  const healed = (): number => events.filter((e) => e.event === 'dataplane.healed').length;

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-heal');
    dp = await createDataplane({ edgeIp: EDGE_IP, nftTable: T, stateDir: edge.stateDir, netns: edge.name, linkKind: 'veth-standin', log: (event, fields) => void events.push({ event, fields: fields ?? {} }) });
    expect(await dp.reconcile(desired)).toMatchObject({ added: 2, failed: [] });
    expect(rules()).toBe(whole);
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
  });

  it('a rule deleted by hand (the allowlist\'s jump) is back without a reconcile from the gateway', async () => {
    const before = healed();
    const listing = edge.run('nft', '-a', 'list', 'chain', 'ip', T, 'inbound');
    edge.run('nft', 'delete', 'rule', 'ip', T, 'inbound', 'handle', ruleHandle(listing, 'jump allowlist'));
    expect(rules()).toBe(whole - 1);
    await until('the rule back', () => rules() === whole && edge.run('nft', 'list', 'chain', 'ip', T, 'inbound').includes('jump allowlist'), 30_000);
    await until('the repair logged', () => healed() > before, 30_000);
    expect(events.find((e) => e.event === 'dataplane.heal')?.fields).toMatchObject({ why: 'touched' });
  });

  it('an element deleted by hand (a mapping) and a tunnel\'s meter rule deleted by hand are back', async () => {
    const before = healed();
    edge.run('nft', 'delete', 'element', 'ip', T, 'protected', `{ ${P2} }`);
    const meter = meterChainName(desired[0]!.tunnel_name, 200);
    edge.run('nft', 'delete', 'rule', 'ip', T, meter, 'handle', ruleHandle(edge.run('nft', '-a', 'list', 'chain', 'ip', T, meter), 'update @'));
    await until('the mapping and the meter back', () => edge.protectedMap().some(([ip]) => ip === P2) && rules() === whole, 30_000);
    expect(edge.run('nft', 'list', 'chain', 'ip', T, meter)).toContain(`update @${meter} { ip saddr limit rate 200/second }`);
    // The kernel holds it again from the repair's commit; the repair is done (and logged) once its records are.
    await until('the repair logged', () => healed() > before, 30_000);
  });

  it('`nft flush ruleset` (nftables.service at every start) takes the table: it is built again and filled', async () => {
    edge.run('nft', 'flush', 'ruleset');
    expect(edge.run('nft', 'list', 'tables')).not.toContain(T);
    await until('the table back, whole', () => edge.run('nft', 'list', 'tables').includes(T) && rules() === whole && edge.protectedMap().length === 2, 30_000);
    expect(edge.protectedMap().map(([ip]) => ip).sort()).toEqual([P1, P2].sort());
    expect(events.some((e) => e.event === 'dataplane.table_restored')).toBe(true);
    // And the agent is back on its own generation: the next reconcile of the same set takes the short cut.
    await until('a reconcile with nothing to do', async () => {
      events.length = 0;
      await dp.reconcile(desired);
      return events.some((e) => e.event === 'dataplane.reconcile.unchanged');
    }, 30_000);
  });
});
