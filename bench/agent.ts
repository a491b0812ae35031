// Edge agent dataplane benchmark: apply and remove N tunnels (default 10,000) through our netlink layer,
// beside `ip -batch` + `nft -f` doing the same kernel work in the same run, each in a fresh namespace.
// This kernel has no GRE, so BOTH sides create veth pairs (the dataplane's 'veth-standin' link kind)
// instead of GRE links: the figures compare the two paths over the same link type, not GRE itself.
//
//   node --import ./loader/register.mjs bench/agent.ts          (root; TG_BENCH_N=2000 for a quicker run)
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { standinPeerName, type ChangeCounts, type TunnelSpec } from '../agent/dataplane/index.ts';
import { AGENT_NODE_FLAGS } from '../agent/bin/runtime.mjs';
import { ROOT } from './lib/process.ts';
import { rulesetNftText, tunnelsAddNftText, tunnelsDeleteNftText } from '../test/netns/ruleset-text.ts';
import { BENCH_EDGE_IP, BENCH_POLICY, benchTunnel } from './lib/tunnels.ts';
import { report } from './lib/report.ts';

const N = Number(process.env.TG_BENCH_N ?? 10_000);
const SAMPLE_JOBS = Number(process.env.TG_BENCH_JOBS ?? 50);
/**
 * TG_BENCH_SKIP_REMOVE=1: no timed removal on either side (deleting 20,000 veths takes minutes here). For
 * memory figures only: the kernel then tears the command line's namespace down while ours applies, which
 * holds the RTNL lock and makes our timings meaningless.
 */
const SKIP_REMOVE = process.env.TG_BENCH_SKIP_REMOVE === '1';
/**
 * Every tunnel carries bench/lib/tunnels.ts's policy, on both sides (the policy's cost is part of what is measured); TG_BENCH_POLICY=default
 * gives them the default one instead (everything allowed, no proxy, no limit: ~10 elements per tunnel, not ~81).
 */
const POLICY = process.env.TG_BENCH_POLICY === 'default' ? undefined : BENCH_POLICY;
const EDGE = BENCH_EDGE_IP;
const TABLE = 'tunnelgate';

if (process.getuid?.() !== 0) {
  console.error('bench/agent.ts needs root (network namespaces)');
  process.exit(2);
}

const tun = (i: number): TunnelSpec => ({ ...benchTunnel(i), ...(POLICY ? { policy: POLICY } : {}) });

class Netns {
  readonly name = `tg-bench-${randomBytes(4).toString('hex')}`;
  constructor() {
    execFileSync('ip', ['netns', 'add', this.name]);
    this.run('ip', 'link', 'set', 'lo', 'up');
    this.run('ip', 'addr', 'add', `${EDGE}/32`, 'dev', 'lo');
  }
  run(cmd: string, ...args: string[]): string {
    return execFileSync('ip', ['netns', 'exec', this.name, cmd, ...args], { encoding: 'utf8', maxBuffer: 1 << 30 });
  }
  /** Wall time of one command (process start included, as an operator's script would pay it). */
  timed(cmd: string, ...args: string[]): number {
    const t = performance.now();
    const r = spawnSync('ip', ['netns', 'exec', this.name, cmd, ...args], { encoding: 'utf8', maxBuffer: 1 << 30 });
    const ms = performance.now() - t;
    if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
    return ms;
  }
  ruleCount(): number {
    return (JSON.parse(this.run('nft', '-j', 'list', 'ruleset')) as { nftables: Record<string, unknown>[] }).nftables.filter((o) => o.rule).length;
  }
  delete(): void {
    spawnSync('ip', ['netns', 'del', this.name]);
  }
}

const RULESET = (prefix: string): string => rulesetNftText({ table: TABLE, ifnamePrefix: prefix });

interface Answer {
  ok: boolean;
  result: ChangeCounts;
  ms: number;
  rss: number;
  peak: number;
  /** The highest of each of process.memoryUsage()'s parts during the command (bench/lib/agent-dataplane.mjs). */
  parts?: { heapTotal: number; heapUsed: number; external: number; arrayBuffers: number };
  /** A reconcile's longest stretch without an event-loop turn, ms (SSH and probes wait that long). */
  stallMs?: number;
  error?: string;
}

/** The measured agent: bench/lib/agent-dataplane.mjs started with the agent's own flags, from its bundle. */
class AgentProcess {
  private readonly proc: ChildProcess;
  private readonly answers: ((a: Answer) => void)[] = [];
  readonly ready: Promise<void>;

  constructor(env: Record<string, string>) {
    this.proc = spawn(process.execPath, [...AGENT_NODE_FLAGS, 'bench/lib/agent-dataplane.mjs'], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.ready = new Promise((resolve, reject) => {
      this.answers.push(() => resolve());
      this.proc.once('exit', (code) => reject(new Error(`agent process exited ${code}`)));
    });
    createInterface({ input: this.proc.stdout! }).on('line', (line) => this.answers.shift()?.(JSON.parse(line) as Answer));
  }

  call(cmd: object): Promise<Answer> {
    return new Promise((resolve, reject) => {
      this.answers.push((a) => (a.ok ? resolve(a) : reject(new Error(`agent: ${a.error}`))));
      this.proc.stdin!.write(`${JSON.stringify(cmd)}\n`);
    });
  }

  stop(): Promise<void> {
    if (this.proc.exitCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      this.proc.once('exit', () => resolve());
      this.proc.stdin!.end();
    });
  }
}

interface Quantiles {
  p50: number;
  p99: number;
  mean: number;
}

/** Nearest-rank p50 and p99 of a sample, and its mean (ms, one decimal). */
function quantiles(xs: readonly number[]): Quantiles {
  const s = [...xs].sort((a, b) => a - b);
  const at = (p: number): number => s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))] ?? Number.NaN;
  const r = (x: number): number => +x.toFixed(1);
  return { p50: r(at(0.5)), p99: r(at(0.99)), mean: r(s.reduce((a, b) => a + b, 0) / s.length) };
}

const fmt = (ms: number): string => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`);
const ms0 = (x: number | undefined): number | null => (x === undefined ? null : Math.round(x));
const mb = (b: number): string => `${(b / 1048576).toFixed(1)} MB`;
const partsMb = (p: Answer['parts']): Record<string, string> | null => (p ? Object.fromEntries(Object.entries(p).map(([k, v]) => [k, mb(v)])) : null);

async function main(): Promise<void> {
  const tunnels = Array.from({ length: N }, (_, i) => tun(i + 1));
  const out: Record<string, unknown> = { n: N, link: 'veth-standin (no GRE on this kernel; both sides use veth pairs)' };
  console.log(`edge agent dataplane benchmark: ${N} tunnels, ${POLICY ? `each with the policy ${JSON.stringify(POLICY)}` : 'default policy'}, veth pairs standing in for GRE on BOTH sides (this kernel has no GRE)`);
  out.policy = POLICY ?? 'default';

  // --- command line: ip -batch + nft -f ------------------------------------------------------------
  const cli = new Netns();
  const dir = mkdtempSync(join(tmpdir(), 'tg-bench-'));
  let cliApply: number;
  let cliRemove: number;
  let cliRead: number;
  try {
    writeFileSync(join(dir, 'ruleset.nft'), RULESET('tg-'));
    cli.run('nft', '-f', join(dir, 'ruleset.nft'));
    const ipAdd = tunnels.flatMap((t) => [
      `link add ${t.tunnel_name} type veth peer name ${standinPeerName(t.tunnel_name)}`,
      `link set ${t.tunnel_name} mtu ${t.mtu}`,
      `addr add ${t.edge_inner} dev ${t.tunnel_name}`,
      `link set ${t.tunnel_name} up`,
    ]);
    writeFileSync(join(dir, 'add.ip'), ipAdd.join('\n') + '\n');
    // The same kernel work as the agent's: each tunnel's counters, its elements in every set, its policy's shared objects.
    const nftAdd = tunnelsAddNftText(TABLE, tunnels);
    writeFileSync(join(dir, 'add.nft'), nftAdd.join('\n') + '\n');
    const ipDel = tunnels.map((t) => `link del ${t.tunnel_name}`);
    writeFileSync(join(dir, 'del.ip'), ipDel.join('\n') + '\n');
    const nftDel = tunnelsDeleteNftText(TABLE, tunnels);
    writeFileSync(join(dir, 'del.nft'), nftDel.join('\n') + '\n');

    const a1 = cli.timed('ip', '-batch', join(dir, 'add.ip'));
    const a2 = cli.timed('nft', '-f', join(dir, 'add.nft'));
    cliApply = a1 + a2;
    out.cli_rules_at_n = cli.ruleCount();
    console.log(`cli   apply  ${N}: ${fmt(cliApply)} (ip -batch ${fmt(a1)}, nft -f ${fmt(a2)})`);
    // What a reconcile reads back, read by the command line: every link and address, and the whole table (its
    // elements printed, not repaired: a floor for the drift repair rather than the same work).
    const l1 = cli.timed('sh', '-c', 'ip -d link show > /dev/null && ip addr show > /dev/null');
    const l2 = cli.timed('sh', '-c', `nft list table ip ${TABLE} > /dev/null`);
    cliRead = l1 + l2;
    console.log(`cli   read   ${N}: ${fmt(cliRead)} (ip link + ip addr ${fmt(l1)}, nft list table ${fmt(l2)})`);
    if (SKIP_REMOVE) {
      cliRemove = Number.NaN;
    } else {
      const r1 = cli.timed('nft', '-f', join(dir, 'del.nft'));
      const r2 = cli.timed('ip', '-batch', join(dir, 'del.ip'));
      cliRemove = r1 + r2;
      console.log(`cli   remove ${N}: ${fmt(cliRemove)} (nft -f ${fmt(r1)}, ip -batch ${fmt(r2)})`);
    }
  } finally {
    cli.delete();
    rmSync(dir, { recursive: true, force: true });
  }

  // --- ours: the dataplane through our netlink layer, in a process started as the agent is ---------------
  const ns = new Netns();
  const stateDir = mkdtempSync(join(tmpdir(), 'tg-bench-state-'));
  const agent = new AgentProcess({ TG_BENCH_NETNS: ns.name, TG_BENCH_STATE: stateDir, TG_BENCH_EDGE: EDGE, TG_BENCH_TABLE: TABLE });
  try {
    await agent.ready;
    await agent.call({ op: 'reconcile', tunnels: [tunnels[0]!] });
    const rules1 = ns.ruleCount();
    await agent.call({ op: 'reconcile', tunnels: [] });

    const applied = await agent.call({ op: 'reconcile', tunnels });
    const ourApply = applied.ms;
    if (applied.result.added !== N) throw new Error(`expected ${N} added, got ${JSON.stringify(applied.result)}`);
    const rulesN = ns.ruleCount();
    const rssApplied = applied.rss;
    const peakApply = applied.peak;
    console.log(`ours  apply  ${N}: ${fmt(ourApply)} (one reconcile job)`);

    const same = await agent.call({ op: 'reconcile', tunnels });
    const reconcileNoop = same.ms;
    if (same.result.unchanged !== N) throw new Error(`no-op reconcile changed something: ${JSON.stringify(same.result)}`);
    // Another program commits to a table of its own (a firewall manager banning 100 addresses): the generation id
    // moves, and the agent's watch of commits tells the reconcile that its table was not touched.
    const banned = Array.from({ length: 100 }, (_, i) => `192.0.2.${i + 1}`).join(', ');
    const fd = mkdtempSync(join(tmpdir(), 'tg-foreign-'));
    writeFileSync(join(fd, 'ban.nft'), `add table ip someone_else\nadd set ip someone_else banned { type ipv4_addr; }\nadd element ip someone_else banned { ${banned} }\n`);
    ns.run('nft', '-f', join(fd, 'ban.nft'));
    rmSync(fd, { recursive: true, force: true });
    const foreign = await agent.call({ op: 'reconcile', tunnels });
    if (foreign.result.unchanged !== N) throw new Error(`reconcile after another program's commit changed something: ${JSON.stringify(foreign.result)}`);
    ns.run('nft', 'delete', 'table', 'ip', 'someone_else');

    // 1% drift by hand: half the drifted tunnels lose their link, half their map element.
    // At least 2 (one of each kind), never more than there are tunnels (bench:all's curve starts at 1).
    const drift = Math.min(N, Math.max(2, Math.floor(N / 100)));
    const victims = tunnels.filter((_, i) => i % Math.floor(N / drift) === 0).slice(0, drift);
    const half = victims.slice(0, Math.ceil(drift / 2));
    const other = victims.slice(Math.ceil(drift / 2));
    const d = mkdtempSync(join(tmpdir(), 'tg-drift-'));
    writeFileSync(join(d, 'drift.ip'), half.map((v) => `link del ${v.tunnel_name}`).join('\n') + '\n');
    ns.run('ip', '-batch', join(d, 'drift.ip'));
    if (other.length > 0) {
      writeFileSync(join(d, 'drift.nft'), `delete element ip ${TABLE} protected { ${other.map((v) => v.protected_ip).join(', ')} }\n`);
      ns.run('nft', '-f', join(d, 'drift.nft'));
    }
    rmSync(d, { recursive: true, force: true });
    const repaired = await agent.call({ op: 'reconcile', tunnels });
    const reconcileDrift = repaired.ms;
    if (repaired.result.changed !== victims.length) throw new Error(`drift repair: ${JSON.stringify(repaired.result)}`);
    const rssReconciled = repaired.rss;

    // One-tunnel jobs at this scale (each reads the map and the tunnel's link back, as a job does).
    const extra = Array.from({ length: SAMPLE_JOBS }, (_, i) => tun(N + 1 + i));
    // Each answer's peak is that command's own VmHWM (the agent resets it before each command).
    const applyMs: number[] = [];
    let jobPeak = 0;
    for (const x of extra) {
      const a = await agent.call({ op: 'apply', tunnel: x });
      applyMs.push(a.ms);
      jobPeak = Math.max(jobPeak, a.peak);
    }
    const removeMs: number[] = [];
    for (const x of extra) {
      const a = await agent.call({ op: 'remove', tunnel: x });
      removeMs.push(a.ms);
      jobPeak = Math.max(jobPeak, a.peak);
    }
    // The target is a p50; on this shared host a mean is dragged by the odd stall.
    const jobApply = quantiles(applyMs);
    const jobRemove = quantiles(removeMs);
    const afterJobs = await agent.call({ op: 'stats' });
    const rssJobs = afterJobs.rss;
    // What the agent holds at rest: it gives memory back once idle for 2 s (agent/housekeeping/memory.ts).
    await new Promise((r) => setTimeout(r, 3_000));
    const rssIdle = (await agent.call({ op: 'stats' })).rss;
    // The highest RSS during apply, reconciles and single jobs.
    const peak = Math.max(applied.peak, same.peak, repaired.peak, jobPeak);

    let ourRemove = Number.NaN;
    if (!SKIP_REMOVE) {
      const removed = await agent.call({ op: 'reconcile', tunnels: [] });
      ourRemove = removed.ms;
      if (removed.result.removed !== N) throw new Error(`expected ${N} removed, got ${JSON.stringify(removed.result)}`);
      console.log(`ours  remove ${N}: ${fmt(ourRemove)} (one reconcile job)`);
    }

    Object.assign(out, {
      cli_apply_ms: Math.round(cliApply),
      cli_remove_ms: Math.round(cliRemove),
      ours_apply_ms: Math.round(ourApply),
      ours_remove_ms: Math.round(ourRemove),
      per_tunnel_apply_us: { ours: Math.round((ourApply / N) * 1000), cli: Math.round((cliApply / N) * 1000) },
      per_tunnel_remove_us: { ours: Math.round((ourRemove / N) * 1000), cli: Math.round((cliRemove / N) * 1000) },
      ratio_apply_vs_cli: +(ourApply / cliApply).toFixed(2),
      ratio_remove_vs_cli: +(ourRemove / cliRemove).toFixed(2),
      rules_at_1: rules1,
      rules_at_n: rulesN,
      reconcile_noop_ms: Math.round(reconcileNoop),
      reconcile_after_foreign_commit_ms: Math.round(foreign.ms),
      reconcile_1pct_drift_ms: Math.round(reconcileDrift),
      cli_read_ms: Math.round(cliRead),
      ratio_drift_vs_cli_read: +(reconcileDrift / cliRead).toFixed(2),
      drift_repaired: repaired.result.changed,
      single_job_apply_ms_at_n: jobApply,
      single_job_remove_ms_at_n: jobRemove,
      agent_node_flags: AGENT_NODE_FLAGS.join(' '),
      rss_after_apply: mb(rssApplied),
      rss_after_reconciles: mb(rssReconciled),
      rss_after_single_jobs: mb(rssJobs),
      rss_idle: mb(rssIdle),
      peak_rss_during_apply: mb(peakApply),
      peak_rss_by_step: { apply: mb(peakApply), noop_reconcile: mb(same.peak), drift_reconcile: mb(repaired.peak), single_jobs: mb(jobPeak) },
      // Where a reconcile's peak is: V8's heap or Buffers outside it.
      peak_parts: { noop_reconcile: partsMb(same.parts), drift_reconcile: partsMb(repaired.parts) },
      event_loop_stall_ms: { apply: ms0(applied.stallMs), noop_reconcile: ms0(same.stallMs), drift_reconcile: ms0(repaired.stallMs) },
      peak_rss_before_removal: mb(peak),
    });
    console.log('');
    console.log(`per tunnel apply      ours ${(ourApply / N).toFixed(3)} ms   cli ${(cliApply / N).toFixed(3)} ms   ratio ${(ourApply / cliApply).toFixed(2)}x (target <= 1.2x)`);
    console.log(`per tunnel remove     ours ${(ourRemove / N).toFixed(3)} ms   cli ${(cliRemove / N).toFixed(3)} ms   ratio ${(ourRemove / cliRemove).toFixed(2)}x (target <= 1.2x)`);
    console.log(`nft rules             ${rules1} at 1 tunnel, ${rulesN} at ${N} (command line: ${String(out.cli_rules_at_n)})`);
    console.log(`reconcile ${N}        no change ${fmt(reconcileNoop)}, no change after another program's commit ${fmt(foreign.ms)}, 1% drift (${victims.length} repaired) ${fmt(reconcileDrift)} (target < 5 s; ${(reconcileDrift / cliRead).toFixed(2)}x the command line only reading it all back)`);
    const q = (x: Quantiles): string => `p50 ${x.p50} ms, p99 ${x.p99} ms, mean ${x.mean} ms`;
    console.log(`one-tunnel job at ${N}: apply ${q(jobApply)}; remove ${q(jobRemove)} (${SAMPLE_JOBS} each; target p50 < 10 ms)`);
    console.log(`agent RSS             ${mb(rssApplied)} with ${N} tunnels, ${mb(rssReconciled)} after reconciles, ${mb(rssJobs)} after single jobs, ${mb(rssIdle)} idle 3 s later, peak (VmHWM) ${mb(peakApply)} during the apply, ${mb(same.peak)} during a no-change reconcile, ${mb(repaired.peak)} during the 1% drift repair, ${mb(jobPeak)} during single jobs (target < 150 MB; node ${AGENT_NODE_FLAGS.join(' ')})`);
    const stall = (x: number | undefined): string => (x === undefined ? 'not measured' : fmt(x));
    console.log(`event loop            longest stretch without a turn: ${stall(applied.stallMs)} in the apply, ${stall(same.stallMs)} in a no-change reconcile, ${stall(repaired.stallMs)} in the drift repair (SSH and probes wait that long)`);
    console.log(JSON.stringify(out));
    // bench:all's rows (bench/lib/report.ts), with their targets.
    report({ scenario: `apply ${N} tunnels`, rate: ourApply, unit: 'ms', ceiling: 'ip -batch + nft -f', ceiling_rate: cliApply, ratio: ourApply / cliApply, target: '<= 1.0x', pass: ourApply <= cliApply });
    report({ scenario: `reconcile ${N} unchanged`, rate: reconcileNoop, unit: 'ms', ceiling: null, ratio: null, target: '< 500 ms', pass: reconcileNoop < 500 });
    report({ scenario: `reconcile ${N} unchanged, after another program's nft commit`, rate: foreign.ms, unit: 'ms', ceiling: null, ratio: null, target: '< 500 ms', pass: foreign.ms < 500 });
    // Reported against the command line's read of the same kernel state (`ip` + `nft list table`), which repairs nothing.
    report({ scenario: `reconcile ${N} with 1% drift`, rate: reconcileDrift, unit: 'ms', ceiling: 'ip link/addr + nft list table (read only)', ceiling_rate: cliRead, ratio: reconcileDrift / cliRead, target: null, pass: null });
    // The per-job target holds for both kinds of job: a remove is reported on its own row, not hidden by the apply's.
    report({ scenario: `one-tunnel job p50 at ${N}`, rate: jobApply.p50, unit: 'ms', p99_ms: jobApply.p99, ceiling: null, ratio: null, target: '< 10 ms', pass: jobApply.p50 < 10 });
    report({ scenario: `one-tunnel remove p50 at ${N}`, rate: jobRemove.p50, unit: 'ms', p99_ms: jobRemove.p99, ceiling: null, ratio: null, target: '< 10 ms', pass: jobRemove.p50 < 10 });
    report({ scenario: `agent peak RSS at ${N}`, rate: peak / 1048576, unit: 'MB', ceiling: null, ratio: null, target: '< 150 MB', pass: peak < 150 * 1048576 });
  } finally {
    await agent.stop();
    ns.delete();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

await main();
