// bench:flood's labs (docs/BENCHMARKS.md "Flood"), each in namespaces of its own:
//   attacker 198.51.101.10 ── up1 ┐
//   client   198.51.100.10 ── up0 ┴ edge ─┬ tunnel links of the two flood targets ≈≈ sink (counts, drops)
//                                         └ the legitimate client's tunnel link   ≈≈ origin (iperf3 -s)
// The edge's default route leads to a link that frees what it is given (what the SYN proxy answers spoofed sources
// with leaves there, as on a real edge where it leaves for the Internet), so no other namespace pays for it.
//   ours     the agent's dataplane with the flood targets, the legitimate client's tunnel and fillers up to N;
//   ceiling  only the attacker and the edge, whose table is ONE rule at the same hook and priority as the agent's
//            `early` chain (prerouting -450): `ip daddr { P1, P2 } counter name "hits" drop`.
// The edge's receive work is steered to one CPU (RPS on its upstream and tunnel links) and the generator is pinned to
// the other, so that CPU's softirq time is the edge's and no one else's (bench/flood.ts says why).
// This kernel has no GRE: tunnel links are the dataplane's veth stand-in, far ends moved into the origin and the sink.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDataplane, type DataplaneHandle, type TunnelSpec } from '../../agent/dataplane/index.ts';
import type { TunnelPolicy } from '../../common/tunnel-policy.ts';
import { moveStandinPeer } from '../../demo/standin-origin.ts';
import { Netns } from '../../demo/netns.ts';
import { ATTACKER, type Vector } from './flood-vectors.ts';
import { BENCH_POLICY, BENCH_EDGE_IP, benchTunnel } from './tunnels.ts';

export const CLIENT = '198.51.100.10';
export const IPERF_PORT = 5201;
export const TABLE = 'tunnelgate';

/** The SYN-proxied flood target: TCP 8080 only, fragments dropped, no per-source limit (the spoofed SYNs' meter would fill). */
const PROXIED: TunnelPolicy = { ports: [[8080, 8080]], protocol: 'tcp', syn_proxy: true, source_pps_limit: null, drop_fragments: true };
/** The rate-limited flood target: UDP 7000, 1,000 packets per second per source. */
const LIMITED: TunnelPolicy = { ports: [[7000, 7000]], protocol: 'udp', syn_proxy: false, source_pps_limit: 1000, drop_fragments: false };

/** The lab's tunnels: the two flood targets, the legitimate client's (the benchmarks' policy: 5201 is allowed), fillers. */
export function floodTunnels(n: number): { proxied: TunnelSpec; limited: TunnelSpec; legit: TunnelSpec; all: TunnelSpec[] } {
  if (n < 3) throw new Error('bench:flood needs at least 3 tunnels: two flood targets and the legitimate client\'s');
  const all = Array.from({ length: n }, (_, i) => ({ ...benchTunnel(i + 1), policy: i === 0 ? PROXIED : i === 1 ? LIMITED : BENCH_POLICY }));
  return { proxied: all[0]!, limited: all[1]!, legit: all[2]!, all };
}

class Ns extends Netns {
  constructor() {
    super(`tg-flood-${randomBytes(4).toString('hex')}`);
    this.run('ip', 'link', 'set', 'lo', 'up');
  }
}

/** Steers a link's receive work to `cpu` (RPS): the softirq that runs the edge's hooks for it then runs there. */
function steer(ns: Netns, link: string, cpu: number): void {
  ns.run('sh', '-c', `for q in /sys/class/net/${link}/queues/rx-*; do echo ${(1 << cpu).toString(16)} > $q/rps_cpus; done`);
}

/** One tunnel counter's packets, by name, in the edge's table. */
function counterPackets(ns: Netns, table: string, name: string): number {
  const j = JSON.parse(ns.run('nft', '-j', 'list', 'counter', 'ip', table, name)) as { nftables: { counter?: { packets: number } }[] };
  return j.nftables.find((o) => o.counter)?.counter?.packets ?? 0;
}

export interface FloodResult {
  sent: number;
  /** The generator's own CPU time and elapsed time, ns. */
  genCpuNs: number;
  ns: number;
}

export abstract class FloodLab {
  readonly attacker = new Ns();
  readonly edge = new Ns();
  protected readonly spaces: Ns[] = [this.attacker, this.edge];

  constructor(readonly label: string, readonly edgeCpu: number, readonly genCpu: number) {
    const e = this.edge;
    e.run('ip', 'link', 'add', 'up1', 'type', 'veth', 'peer', 'name', 'a0', 'netns', this.attacker.name);
    e.run('ip', 'addr', 'add', '198.51.101.1/24', 'dev', 'up1');
    e.run('ip', 'link', 'set', 'up1', 'up');
    e.run('ip', 'addr', 'add', `${BENCH_EDGE_IP}/32`, 'dev', 'lo');
    // The default route: a gateway on a veth whose peer is down, so what leaves there is freed at once (this kernel
    // has no dummy links). One gateway, one neighbour entry: the SYN proxy's answers to 65,536 spoofed sources share it.
    e.run('ip', 'link', 'add', 'sink0', 'type', 'veth', 'peer', 'name', 'sink0p');
    e.run('ip', 'link', 'set', 'sink0', 'up');
    e.run('ip', 'neigh', 'add', '192.0.2.254', 'lladdr', '02:00:00:00:00:01', 'dev', 'sink0', 'nud', 'permanent');
    e.run('ip', 'route', 'add', 'default', 'via', '192.0.2.254', 'dev', 'sink0', 'onlink');
    e.run('sysctl', '-q', '-w', 'net.ipv4.ip_forward=1');
    // Loose reverse-path filtering on the upstream links, as docs/OPERATOR.md asks of an edge.
    e.run('sysctl', '-q', '-w', 'net.ipv4.conf.up1.rp_filter=2');
    steer(e, 'up1', edgeCpu);
    this.attacker.run('ip', 'addr', 'add', `${ATTACKER}/24`, 'dev', 'a0');
    this.attacker.run('ip', 'link', 'set', 'a0', 'up');
    this.attacker.run('ip', 'route', 'add', 'default', 'via', '198.51.101.1');
  }

  /** Packets the edge dropped so far of `v`'s flood (the counter that vector's drop reaches). */
  abstract dropped(v: Vector): Promise<number>;
  /** The protected IP `v` floods. */
  abstract targetOf(v: Vector): string;

  /** The generator's command line for `v`: pinned to the generator's CPU, inside the attacker's namespace. */
  generatorArgv(bin: string, v: Vector, count: number, seconds: number): string[] {
    return ['ip', 'netns', 'exec', this.attacker.name, 'taskset', '-c', String(this.genCpu), bin, v.kind, this.targetOf(v), String(v.dport), String(count), String(seconds), v.src, String(v.sources)];
  }

  /** Waits until the attacker's link carries packets (a new link drops everything until linkwatch attaches its qdisc). */
  async waitForPath(bin: string, v: Vector): Promise<void> {
    for (let i = 0; i < 900; i++) {
      const before = await this.dropped(v);
      execFileSync(this.generatorArgv(bin, v, 10, 5)[0]!, this.generatorArgv(bin, v, 10, 5).slice(1), { stdio: 'ignore' });
      if ((await this.dropped(v)) > before) return;
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`${this.label}: no flood packet reaches the edge's table`);
  }

  /** Runs the generator to the end (bounded by count and seconds); `wrap` puts a command in front (perf). */
  flood(bin: string, v: Vector, count: number, seconds: number, wrap: string[] = []): FloodResult {
    const argv = [...wrap, ...this.generatorArgv(bin, v, count, seconds)];
    const out = execFileSync(argv[0]!, argv.slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    const r = JSON.parse(out.trim().split('\n').at(-1)!) as { sent: number; ns: number; cpu_ns: number };
    return { sent: r.sent, genCpuNs: r.cpu_ns, ns: r.ns };
  }

  /** Starts the generator without waiting (a flood beside the legitimate client). */
  floodInBackground(bin: string, v: Vector, count: number, seconds: number): ChildProcess {
    const argv = this.generatorArgv(bin, v, count, seconds);
    return spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
  }

  async close(): Promise<void> {
    for (const n of this.spaces) n.delete();
  }
}

/** The ceiling: one drop rule at the agent's earliest hook and priority, nothing else. */
export class CeilingLab extends FloodLab {
  constructor(edgeCpu: number, genCpu: number, private readonly targets: { proxied: string; limited: string }) {
    super('ceiling', edgeCpu, genCpu);
    this.edge.nft(
      [
        'table ip ceiling {',
        '  counter hits { }',
        '  chain early {',
        '    type filter hook prerouting priority -450; policy accept;',
        `    ip daddr { ${targets.proxied}, ${targets.limited} } counter name "hits" drop`,
        '  }',
        '}',
        '',
      ].join('\n'),
    );
  }
  dropped(): Promise<number> {
    return Promise.resolve(counterPackets(this.edge, 'ceiling', 'hits'));
  }
  targetOf(v: Vector): string {
    return v.target === 'proxied' ? this.targets.proxied : this.targets.limited;
  }
}

/** The agent's dataplane with N tunnels, a client and the legitimate client's origin. */
export class OurLab extends FloodLab {
  readonly client = new Ns();
  readonly origin = new Ns();
  readonly sink = new Ns();
  dp?: DataplaneHandle;
  private stateDir?: string;
  private iperf?: ChildProcess;
  private t!: ReturnType<typeof floodTunnels>;

  constructor(label: string, edgeCpu: number, genCpu: number) {
    super(label, edgeCpu, genCpu);
    this.spaces.push(this.client, this.origin, this.sink);
    const e = this.edge;
    e.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', this.client.name);
    e.run('ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'up0');
    e.run('ip', 'link', 'set', 'up0', 'up');
    e.run('sysctl', '-q', '-w', 'net.ipv4.conf.up0.rp_filter=2');
    steer(e, 'up0', edgeCpu);
    this.client.run('ip', 'addr', 'add', `${CLIENT}/24`, 'dev', 'c0');
    this.client.run('ip', 'link', 'set', 'c0', 'up');
    this.client.run('ip', 'route', 'add', 'default', 'via', '198.51.100.1');
    // The sink counts and drops whatever the edge forwards of a flood (a few over-limit packets pass the meter).
    this.sink.nft('table ip sink {\n  chain pre {\n    type filter hook prerouting priority -300; policy drop;\n  }\n}\n');
  }

  async build(n: number): Promise<void> {
    this.t = floodTunnels(n);
    this.stateDir = mkdtempSync(join(tmpdir(), 'tg-flood-'));
    // No heal on touch: nothing here touches the table, and a repair's work would land in a measured window.
    this.dp = await createDataplane({ edgeIp: BENCH_EDGE_IP, nftTable: TABLE, stateDir: this.stateDir, netns: this.edge.name, linkKind: 'veth-standin', healOnTouch: false });
    const r = await this.dp.reconcile(this.t.all);
    if (r.added !== n || r.failed.length) throw new Error(`${this.label}: reconcile ${JSON.stringify({ ...r, failed: r.failed.slice(0, 3) })}`);
    for (const t of [this.t.proxied, this.t.limited]) moveStandinPeer(this.edge, this.sink, t);
    moveStandinPeer(this.edge, this.origin, this.t.legit);
    this.origin.run('ip', 'route', 'add', 'default', 'dev', this.t.legit.tunnel_name);
    // The origin's answers (the iperf3 ACKs) are the edge's receive work too.
    steer(this.edge, this.t.legit.tunnel_name, this.edgeCpu);
  }

  targetOf(v: Vector): string {
    return v.target === 'proxied' ? this.t.proxied.protected_ip : this.t.limited.protected_ip;
  }

  /**
   * The counter each vector's drop reaches: the closed port's `not_allowed`, the fragments' `fragment`, the
   * over-limit sources' `rate_limited`; a spoofed SYN is consumed by the SYN proxy (it answers with a cookie and
   * drops the SYN, no counter of its own), so the target's traffic counter, which every packet to it passes, counts
   * those (nothing else is sent to it during that flood).
   */
  async dropped(v: Vector): Promise<number> {
    const t = v.target === 'proxied' ? this.t.proxied : this.t.limited;
    const name = v.name === 'closed' ? `${t.tunnel_name}.not_allowed` : v.name === 'frag' ? `${t.tunnel_name}.fragment` : v.name === 'overlimit' ? `${t.tunnel_name}.rate_limited` : t.tunnel_name;
    return this.read(name);
  }

  /** Packets the SYN-proxied target counted `invalid` (a SYN the proxy did not take would be). */
  invalid(): Promise<number> {
    return this.read(`${this.t.proxied.tunnel_name}.invalid`);
  }

  /**
   * One named counter, through the dataplane's GET of that object: `nft list counter` loads the whole table's cache
   * first, 15 s and more at 10,000 tunnels, far longer than a flood.
   */
  private async read(name: string): Promise<number> {
    return Number((await this.dp!.counterPackets([name])).get(name) ?? 0n);
  }

  /**
   * iperf3's server in the origin, on the edge CPU (the client's is there too: bench/flood.ts says why); then probes
   * until a run completes. Each probe is bounded: the SYN proxy completes the client's handshake itself, so while the
   * origin's link is not yet up (linkwatch, minutes after 10,000 new links) a client is connected and waits forever.
   */
  async startIperf(): Promise<void> {
    this.iperf = spawn('ip', ['netns', 'exec', this.origin.name, 'taskset', '-c', String(this.edgeCpu), 'iperf3', '-s', '-p', String(IPERF_PORT)], { stdio: 'ignore' });
    for (let i = 0; i < 150; i++) {
      const r = spawnSync('ip', ['netns', 'exec', this.client.name, 'iperf3', '-c', this.t.legit.protected_ip, '-p', String(IPERF_PORT), '-n', '100K', '--connect-timeout', '1000', '-J'], { encoding: 'utf8', timeout: 5000 });
      if (r.status === 0) return;
      await new Promise((res) => setTimeout(res, 200));
    }
    throw new Error(`${this.label}: iperf3 through ${this.t.legit.protected_ip} never connected`);
  }

  /** One iperf3 TCP run from the client through the legitimate tunnel's protected IP: bits per second received. */
  iperfRun(seconds: number): Promise<number> {
    return new Promise((resolve, reject) => {
      const c = spawn('ip', ['netns', 'exec', this.client.name, 'taskset', '-c', String(this.edgeCpu), 'iperf3', '-c', this.t.legit.protected_ip, '-p', String(IPERF_PORT), '-t', String(seconds), '--connect-timeout', '3000', '-J'], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      c.stdout.on('data', (d: Buffer) => (out += d));
      // A run that has not ended well after its length is stopped (this child only) and fails the bench.
      const stop = setTimeout(() => c.kill('SIGTERM'), (seconds + 20) * 1000);
      c.once('exit', (code) => {
        clearTimeout(stop);
        try {
          const j = JSON.parse(out) as { end?: { sum_received?: { bits_per_second: number } }; error?: string };
          if (code !== 0 || !j.end?.sum_received) throw new Error(j.error ?? `exit ${code}`);
          resolve(j.end.sum_received.bits_per_second);
        } catch (e) {
          reject(new Error(`${this.label}: iperf3: ${e instanceof Error ? e.message : String(e)}`));
        }
      });
    });
  }

  override async close(): Promise<void> {
    if (this.iperf?.pid) {
      this.iperf.kill('SIGTERM');
    }
    await this.dp?.close();
    await super.close();
    if (this.stateDir) rmSync(this.stateDir, { recursive: true, force: true });
  }
}
