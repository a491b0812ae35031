// The agent must keep serving through reconciles of a couple of hundred tunnels on Debian 12's kernel (6.1),
// while its health checks run at a short interval and floods hit a tunnel. In the QEMU guest (test/vm/vm.ts)
// the real agent (agent/main.ts, GRE) runs in the edge namespace; this file is the gateway: it signs jobs
// with its own job key and sends them over SSH, a fresh connection (a full handshake) for every job.
//
// Each round reconciles a different set of ~200 tunnels (the window slides and its size changes, so the
// plan has adds and removes; every other round carries policies, the next none, so the rest change), while
// a bounded hping3 flood (fixed packet count) hits the one tunnel whose origin is set up. A round passes
// when the reconcile answers ok and a fresh SSH handshake then answers `hello`. A job left unanswered
// within JOB_BOUND_MS (far above a loaded host's slowest reconcile) fails the test; before it fails, the
// agent's threads are read in the guest (/proc/PID/task/*: state, wchan, kernel stack) and the guest's
// kernel log, which say where it is stuck (test-results/reconcile-stress-*.log).
//
// First, the wedge's cause on its own: a probe of a tunnel whose link is gone must not make the kernel request a
// module named after the link (the guest kernel's module_request tracepoint counts every request). The probe
// looked its link up with ioctls by name, and for a missing name the kernel runs modprobe, twice, and waits for
// it in the calling thread: the agent's main thread, in D state. Tunnels of the desired state whose links are not
// made yet are exactly that, ~200 of them checked every 2 s: the event loop barely turned. The rounds end with the
// same count over all of them (the trace instance lives as long as the throw-away guest).
//
// TUNNELGATE_STRESS_ROUNDS (default 6) sets the rounds; TUNNELGATE_STRESS_TUNNELS (default 200) the set's
// size. Skips (saying why) where QEMU cannot run; with TUNNELGATE_VM=require or CI set, that is a failure.
import { createHash, generateKeyPairSync } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TunnelSpec } from '../../agent/dataplane/types.ts';
import type { TunnelPolicy } from '../../common/tunnel-policy.ts';
import type { JobVersion, ResultLine } from '../../common/job-contract.ts';
import { EdgeConnections, type EdgeNode } from '../../server/edge/connections.ts';
import { signJob } from '../../server/edge/job-signing.ts';
import { generateSecret, parseSecret } from '../../server/secrets.ts';
import { tunnelNameFor } from '../../server/domain/tunnels/index.ts';
import { labClient, labServe, originScript } from './lab.ts';
import { LAB } from './protocol.ts';
import { TestVm, buildAssets, vmRequired, vmUnavailable } from './vm.ts';

const unavailable = vmUnavailable();
if (unavailable) process.stderr.write(`test/vm: ${vmRequired ? 'REQUIRED (TUNNELGATE_VM=require or CI) but cannot run' : 'skipping the reconcile stress test'}: ${unavailable}\n`);

const envInt = (name: string, dflt: number): number => {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(v)}`);
  return n;
};
const ROUNDS = envInt('TUNNELGATE_STRESS_ROUNDS', 6);
const TUNNELS = envInt('TUNNELGATE_STRESS_TUNNELS', 200);
/** The product's short end of the health interval: ~100 probes a second over 200 tunnels. */
const HEALTH_INTERVAL_S = 2;
/**
 * A job (or a handshake) that has no answer within this is a wedged agent, not a slow one: a reconcile of 200
 * tunnels under a flood takes tens of seconds in the emulated guest on a loaded host. A liveness bound only.
 */
const JOB_BOUND_MS = 240_000;

const ARTIFACTS = resolve(import.meta.dirname, '../../test-results');
function writeArtifact(name: string, text: string): void {
  mkdirSync(ARTIFACTS, { recursive: true });
  writeFileSync(join(ARTIFACTS, name), text);
}

/** A UUID (v4 layout) from a number: the same tunnel keeps its id, name and addresses from round to round. */
function idFor(n: number): string {
  const h = createHash('sha256').update(`reconcile-stress ${n}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

const ipOf = (base: number, n: number): string => [24, 16, 8, 0].map((s) => ((base + n) >>> s) & 255).join('.');
const BENCH_BASE = (198 << 24) | (18 << 16); // 198.18.0.0/15: protected IPs nothing routes, for the crowd
const INNER_BASE = (100 << 24) | (100 << 16); // 100.100.0.0/16: inner /30s of the crowd

/** Tunnel n of the crowd (n >= 1): its far end is never set up, so its probes fail (health `down`). */
function crowd(n: number, policy?: TunnelPolicy): TunnelSpec {
  const id = idFor(n);
  return {
    id,
    tunnel_name: tunnelNameFor(id),
    protected_ip: ipOf(BENCH_BASE, n),
    origin_ip: LAB.origin,
    edge_ip: LAB.edge,
    edge_inner: `${ipOf(INNER_BASE, 4 * n + 1)}/30`,
    origin_inner: `${ipOf(INNER_BASE, 4 * n + 2)}/30`,
    mtu: 1472,
    // Every tunnel goes to the one origin from the one edge address: GRE tells them apart by key only.
    gre_key: 10_000 + n,
    ...(policy ? { policy } : {}),
  };
}

/** Assorted policies: allowlists, SYN proxies, a few shared per-source limits, fragment drops. */
function policyFor(n: number, round: number): TunnelPolicy {
  const k = (n + round) % 5;
  if (k === 0) return { ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: false };
  if (k === 1) return { ports: [[80, 80], [443, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: null, drop_fragments: false };
  if (k === 2) return { ports: [[25565, 25575]], protocol: 'both', syn_proxy: false, source_pps_limit: 100 * (1 + (n % 3)), drop_fragments: true };
  if (k === 3) return { ports: [[53, 53], [1000, 2000], [8080, 8080]], protocol: 'udp', syn_proxy: false, source_pps_limit: 50, drop_fragments: false };
  return { ports: [[22, 22]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 1000, drop_fragments: true };
}

/** The tunnel the floods hit: its origin is set up (the real origin script), so it carries traffic. */
const FLOODED_ID = idFor(0);
const flooded = (policy?: TunnelPolicy): TunnelSpec => ({
  id: FLOODED_ID,
  tunnel_name: tunnelNameFor(FLOODED_ID),
  protected_ip: '203.0.113.50',
  origin_ip: LAB.origin,
  edge_ip: LAB.edge,
  edge_inner: '100.126.0.1/30',
  origin_inner: '100.126.0.2/30',
  mtu: 1472,
  gre_key: 9_999,
  ...(policy ? { policy } : {}),
});
const FLOODED_POLICY: TunnelPolicy = { ports: [[8080, 8080], [5353, 5353]], protocol: 'both', syn_proxy: true, source_pps_limit: 200, drop_fragments: false };

/**
 * Round r's desired state: the flooded tunnel and a window of the crowd that slides by 15 and whose size
 * cycles through TUNNELS - 20, TUNNELS, TUNNELS + 20 (so each plan adds, removes and, with the policies
 * flipping every round, changes). Even rounds carry policies (job version 2), odd rounds none.
 */
function roundSet(r: number): { tunnels: TunnelSpec[]; version: JobVersion } {
  const withPolicy = r % 2 === 0;
  const size = TUNNELS + ((r % 3) - 1) * 20;
  const start = 1 + ((r * 15) % 60);
  const tunnels = [flooded(withPolicy ? FLOODED_POLICY : undefined)];
  for (let n = start; n < start + size - 1; n++) tunnels.push(crowd(n, withPolicy ? policyFor(n, r) : undefined));
  return { tunnels, version: withPolicy ? 2 : 1 };
}

describe.skipIf(unavailable !== undefined && !vmRequired)('the agent keeps serving through reconciles of ~200 tunnels under health checks and floods (QEMU guest, Debian 12 kernel)', () => {
  let vm: TestVm;
  let node: EdgeNode;
  let agentPid: number;
  const jobKey = generateKeyPairSync('ed25519');
  const KID = 'stress';
  const gatewayKey = parseSecret('gateway_ssh_key', generateSecret('gateway_ssh_key'));
  const NODE_ID = '5e1f0c1a-0000-4000-8000-00000000c0de';
  const timings: Record<string, number | string> = {};
  const rounds: { round: number; tunnels: number; v: number; ms: number; counts?: unknown }[] = [];

  /** One job on a fresh connection (a full SSH handshake), bounded by JOB_BOUND_MS. */
  async function job(jws: string): Promise<ResultLine> {
    const pool = new EdgeConnections(gatewayKey.privateKey, { connectTimeoutMs: JOB_BOUND_MS });
    try {
      return await pool.run(node, jws, JOB_BOUND_MS);
    } finally {
      await pool.close();
    }
  }

  /** A fresh handshake and `hello`: the agent's event loop and its SSH server still serve. */
  async function hello(): Promise<void> {
    const pool = new EdgeConnections(gatewayKey.privateKey, { connectTimeoutMs: JOB_BOUND_MS });
    try {
      const s = await pool.session(node, JOB_BOUND_MS);
      expect(s.hello.versions).toContain(2);
    } finally {
      await pool.close();
    }
  }

  /** A shell script in the guest's own namespace (tracefs); its stdout, or an error with its stderr. */
  async function inGuest(script: string): Promise<string> {
    const r = await vm.exec({ argv: ['bash', '--norc', '--noprofile', '-c', script] });
    if (r.code !== 0) throw new Error(`guest: ${script} exited ${r.code ?? r.signal}: ${r.stderr}`);
    return r.stdout;
  }

  /**
   * The module requests the agent's threads made since boot (the guest kernel's module_request tracepoint, in a trace
   * instance of this test's own; a line starts with the thread's comm-tid). Others' are not counted: the origin
   * script's `ip` asks for its link by name before creating it.
   */
  const TRACED = '/sys/kernel/tracing/instances/tg_stress';
  async function moduleRequests(): Promise<string[]> {
    const out = await inGuest(`ls /proc/${agentPid}/task; echo --; cat ${TRACED}/trace`);
    const [tids, trace] = out.split('\n--\n');
    const agent = new Set(tids!.split('\n').filter(Boolean));
    return trace!.split('\n').filter((l) => l.includes('module_request:') && agent.has(/^\s*\S+-(\d+)\s/.exec(l)?.[1] ?? ''));
  }

  /** Where the agent's threads are (state, wchan, kernel stack) and the guest kernel's last words. */
  async function diagnose(why: string): Promise<string> {
    const script = `
      p=${agentPid}
      echo "== $(date +%T) agent pid $p: threads (tid comm state wchan)"
      for t in /proc/$p/task/*; do
        echo "-- $(basename $t) $(cat $t/comm) $(cut -d' ' -f3 $t/stat) $(cat $t/wchan)"
        cat $t/stack 2>/dev/null | head -25
      done
      echo "== fds"; ls -l /proc/$p/fd 2>/dev/null | wc -l
      echo "== sockets"; ss -xanp 2>/dev/null | grep -c "pid=$p," || true
      echo "== dmesg"; dmesg | tail -80`;
    const r = await vm.exec({ ns: 'edge', argv: ['bash', '--norc', '--noprofile', '-c', script], timeoutMs: 120_000 }).catch((e: unknown) => ({ stdout: `diagnosis failed: ${String(e)}`, stderr: '' }));
    const agentLog = (await vm.output('agent').catch(() => undefined))?.output ?? '';
    const text = `${why}\n${r.stdout}\n${r.stderr}\n== agent log (tail)\n${agentLog.split('\n').slice(-80).join('\n')}`;
    writeArtifact('reconcile-stress-diagnosis.log', text);
    return text;
  }

  beforeAll(async () => {
    if (unavailable) throw new Error(`the VM test is required here (TUNNELGATE_VM=require or CI) but cannot run: ${unavailable}`);
    const t0 = performance.now();
    vm = await TestVm.boot(buildAssets(), { cpus: envInt('TUNNELGATE_STRESS_CPUS', 2), echoConsole: process.env.TUNNELGATE_VM_CONSOLE === '1' });
    timings.boot = vm.bootMs;
    const env = {
      AGENT_LISTEN: `0.0.0.0:${LAB.agentPort}`,
      AGENT_STATE_DIR: '/run/tg-stress',
      AGENT_AUTHORIZED_KEY: gatewayKey.publicKey,
      AGENT_JOB_KEY: JSON.stringify({ ...jobKey.publicKey.export({ format: 'jwk' }), kid: KID }),
      AGENT_EDGE_IP: LAB.edge,
      AGENT_NODE_ID: NODE_ID,
      AGENT_HEALTH_INTERVAL_S: String(HEALTH_INTERVAL_S),
      AGENT_LOG_LEVEL: 'info',
    };
    await inGuest(`mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing; mkdir -p ${TRACED} && echo 1 > ${TRACED}/events/module/module_request/enable`);
    const fp = await vm.exec({ ns: 'edge', argv: ['node_modules/.bin/node', '--import', './loader/register.mjs', 'agent/main.ts', 'fingerprint'], env, timeoutMs: 180_000 });
    expect(fp.stdout.trim(), fp.stderr).toMatch(/^SHA256:/);
    node = { id: NODE_ID, host: '127.0.0.1', port: vm.agentPort, hostKeyFingerprint: fp.stdout.trim() };
    agentPid = (
      await vm.spawn({
        name: 'agent',
        ns: 'edge',
        argv: ['node_modules/.bin/node', '--enable-source-maps', '--import', './loader/register.mjs', 'agent/main.ts'],
        env,
        readyText: 'host key fingerprint',
        readyTimeoutMs: 180_000,
      })
    ).pid;
    // The flooded tunnel first, alone, with its far end set up by the real origin script and a server behind it.
    const first = await job(await signJob(jobKey.privateKey, KID, NODE_ID, 'apply', { tunnel: flooded() }, { version: 1 }));
    expect(first, JSON.stringify(first)).toMatchObject({ ok: true });
    expect(await vm.run('origin', ['bash', '-s'], originScript(flooded()))).toContain('is up');
    await labServe(vm, 'tcp-8080', 'tcp', { port: 8080 });
    expect(await labClient(vm, 'tcp', flooded().protected_ip, { port: 8080 })).toContain(`peer=${LAB.client}`);
    timings.setup = Math.round(performance.now() - t0);
  }, 600_000);

  afterAll(async () => {
    const agentLog = (await vm?.output('agent').catch(() => undefined))?.output;
    if (agentLog) writeArtifact('reconcile-stress-agent.log', agentLog);
    await vm?.stop('agent').catch(() => undefined);
    const code = await vm?.shutdown();
    if (vm) writeArtifact('reconcile-stress-console.log', vm.console);
    process.stderr.write(`test/vm reconcile stress: ${JSON.stringify({ rounds, timings, kernelBootS: vm?.kernelBootSeconds, guestExit: code })}\n`);
  }, 120_000);

  // The cause of the wedge, pinned on its own: a health check of a tunnel whose link does not exist (a desired tunnel
  // not made yet, or deleted behind the agent's back) must not make the kernel run modprobe. The ioctls the probe
  // used to look its link up by name (SIOCGIFINDEX) do for a missing name: dev_load() requests modules
  // "netdev-<name>" and "<name>" and waits for modprobe in the calling thread, the agent's main thread. The guest
  // kernel's module_request tracepoint counts every such request (a trace instance of this test's own).
  it('a probe of a tunnel whose link is gone answers unreachable without the kernel being asked to load a module named after the link', async () => {
    const gone = crowd(1_000);
    const applied = await job(await signJob(jobKey.privateKey, KID, NODE_ID, 'apply', { tunnel: gone }, { version: 1 }));
    expect(applied, JSON.stringify(applied)).toMatchObject({ ok: true, result: { added: 1 } });
    await vm.run('edge', ['ip', 'link', 'del', 'dev', gone.tunnel_name]);
    // The job's probe and the health checks look the link up the same way (agent/dataplane/probe.ts).
    const probed = await job(await signJob(jobKey.privateKey, KID, NODE_ID, 'probe', { tunnel: gone }, { version: 1 }));
    expect(probed, JSON.stringify(probed)).toMatchObject({ ok: true, result: { reachable: false } });
    expect((await moduleRequests()).filter((l) => l.includes(gone.tunnel_name))).toEqual([]);
  }, 3 * JOB_BOUND_MS);

  it(`${ROUNDS} rounds: every reconcile answers ok, and a fresh SSH handshake is served after it`, { timeout: ROUNDS * 2 * JOB_BOUND_MS + 120_000 }, async () => {
    const t0 = performance.now();
    for (let r = 0; r < ROUNDS; r++) {
      const { tunnels, version } = roundSet(r);
      // The flood: bounded (a fixed count), UDP from one source (metered per source) or spoofed SYNs (the proxy).
      const flood =
        r % 2 === 0
          ? ['hping3', '-q', '-S', '--rand-source', '-c', '3000', '-i', 'u1000', '-p', '8080', flooded().protected_ip]
          : ['hping3', '-q', '--udp', '-c', '3000', '-i', 'u1000', '-p', '5353', flooded().protected_ip];
      await vm.spawn({ name: `flood-${r}`, ns: 'client', argv: flood });
      const started = performance.now();
      const jws = await signJob(jobKey.privateKey, KID, NODE_ID, 'reconcile', { tunnels }, { version });
      let answer: ResultLine;
      try {
        answer = await job(jws);
        await hello();
      } catch (e) {
        throw new Error(`round ${r + 1} of ${ROUNDS} (${tunnels.length} tunnels, v${version}): ${String(e)}\n${await diagnose(`round ${r + 1}: ${String(e)}`)}`);
      }
      const ms = Math.round(performance.now() - started);
      rounds.push({ round: r + 1, tunnels: tunnels.length, v: version, ms, counts: answer.ok ? answer.result : answer });
      process.stderr.write(`test/vm reconcile stress: round ${r + 1}/${ROUNDS}: ${tunnels.length} tunnels v${version} in ${ms} ms: ${JSON.stringify(answer)}\n`);
      expect(answer, JSON.stringify(answer)).toMatchObject({ ok: true, result: { failed: [] } });
      await vm.stop(`flood-${r}`).catch(() => undefined);
    }
    timings.rounds = Math.round(performance.now() - t0);
    // Through every round, hundreds of tunnels checked while their links were not made yet: no module requested for any.
    expect((await moduleRequests()).filter((l) => l.includes(': netdev-tg-') || l.includes(': tg-'))).toEqual([]);
    // The flooded tunnel still carries traffic after all of it.
    expect(await labClient(vm, 'tcp', flooded().protected_ip, { port: 8080 })).toContain(`peer=${LAB.client}`);
  });
});
