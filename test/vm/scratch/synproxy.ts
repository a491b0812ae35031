// SCRATCH (not committed): does the STACK.md synproxy+DNAT recipe work over real GRE on Debian's 6.1?
import { renderOriginScripts } from '../../../server/domain/origin-scripts.ts';
import { routeTableFor } from '../../../server/domain/tunnels/index.ts';
import type { TunnelSpec } from '../../../agent/dataplane/types.ts';
import { LAB } from '../protocol.ts';
import { TestVm, buildAssets } from '../vm.ts';

const t: TunnelSpec = { id: '0a1b2c3d-0000-4000-8000-000000000001', tunnel_name: 'tg-vmplain', protected_ip: '203.0.113.10', origin_ip: LAB.origin, edge_ip: LAB.edge, edge_inner: '100.127.0.1/30', origin_inner: '100.127.0.2/30', mtu: 1476 };
const script = renderOriginScripts({ tunnelId: t.id, tunnelName: t.tunnel_name, protectedIp: t.protected_ip, originIp: t.origin_ip, edgeIp: t.edge_ip, edgeInner: t.edge_inner, originInner: t.origin_inner, mtu: t.mtu, greKey: null, routeTable: routeTableFor(t.id) }).origin;
const vm = await TestVm.boot(buildAssets(), {});
const log = (...a: unknown[]) => console.log(...a);
try {
  await vm.dataplane({ op: 'open', edgeIp: LAB.edge, nftTable: 'tg_vm', stateDir: '/run/tg' });
  log(await vm.dataplane({ op: 'apply', tunnel: t }));
  log((await vm.run('origin', ['bash', '-s'], script)).split('\n').slice(-3).join('\n'));
  await vm.spawn({ name: 'srv', ns: 'origin', argv: ['socat', '-t10', 'TCP4-LISTEN:8080,reuseaddr,fork', 'SYSTEM:read -r l; echo "peer=$SOCAT_PEERADDR local=$SOCAT_SOCKADDR got=$l"'] });
  // SYN counter in the origin, before anything else sees the packet
  await vm.run('origin', ['nft', '-f', '-'], 'table ip o { counter syns { }\n chain pre { type filter hook prerouting priority -300; policy accept;\n tcp dport 8080 tcp flags & (fin|syn|rst|ack) == syn counter name "syns"\n }\n}\n');
  const c = async () => (await vm.exec({ ns: 'client', argv: ['socat', '-t10', '-T10', '-', `TCP4:${t.protected_ip}:8080,connect-timeout=10`], input: 'hi\n', timeoutMs: 60_000 })).stdout.trim();
  log('before synproxy:', await c());
  for (const s of ['net.netfilter.nf_conntrack_tcp_loose=0', 'net.ipv4.tcp_syncookies=1', 'net.ipv4.tcp_timestamps=1']) log(await vm.run('edge', ['sysctl', '-w', s]));
  await vm.run('edge', ['nft', '-f', '-'], `table ip spx {
  chain raw { type filter hook prerouting priority raw; policy accept;
    ip daddr ${t.protected_ip} tcp flags & (fin|syn|rst|ack) == syn notrack
  }
  chain fw { type filter hook forward priority filter; policy accept;
    ip daddr ${t.protected_ip} ct state invalid,untracked synproxy mss 1436 wscale 7 timestamp sack-perm
    ip daddr ${t.protected_ip} ct state invalid counter drop
  }
  chain natout { type nat hook output priority -100; policy accept;
    ip daddr ${t.protected_ip} dnat to 100.127.0.2
  }
}
`);
  log(await vm.run('origin', ['nft', 'reset', 'counter', 'ip', 'o', 'syns']));
  log('with synproxy:', await c());
  log(await vm.run('origin', ['nft', 'list', 'counter', 'ip', 'o', 'syns']));
  log(await vm.run('edge', ['cat', '/proc/net/stat/synproxy']));
  // spoofed SYN flood: hping3 if present
  const h = await vm.exec({ ns: 'client', argv: ['hping3', '-S', '--rand-source', '-c', '200', '-i', 'u2000', '-p', '8080', t.protected_ip], timeoutMs: 60_000 });
  log('hping3', h.code, h.stderr.slice(-300));
  log(await vm.run('origin', ['nft', 'list', 'counter', 'ip', 'o', 'syns']));
  log('after flood:', await c());
  log(await vm.run('origin', ['nft', 'list', 'counter', 'ip', 'o', 'syns']));
} catch (e) {
  console.error(e);
  console.error(vm.consoleTail(40));
} finally {
  await vm.shutdown();
}
