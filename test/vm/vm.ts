// The host side of the GRE test VM: is QEMU usable here, build (or find cached) the kernel assets, boot
// the guest, and talk to its control server (test/vm/guest/control.ts) through forwarded loopback ports.
//
// The guest boots Debian's kernel (this host's kernel has no GRE) with the host's own root filesystem
// read-only over 9p, so it runs this very checkout and node_modules. Software emulation (TCG): the
// hosts this runs on expose only a nested KVM that cannot run an unmodified kernel. What keeps TCG
// fast enough: the microvm machine, booting the uncompressed vmlinux directly, and no AVX in the
// guest CPU (V8's AVX paths are much slower under TCG). The guest is told the TSC rate instead of
// measuring it: on a busy host the measurement fails and, microvm having no other clock, boot hangs.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ChangeCounts, ProbeResult, ReconcileResult } from '../../agent/dataplane/types.ts';
import type { DropReason } from '../../common/tunnel-status.ts';
import { freePort } from '../helpers/ports.ts';
import { LAB, type DataplaneRequest, type ExecRequest, type ExecResult, type Netns, type ProcessOutput, type SpawnRequest } from './protocol.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
export const VM_CACHE = process.env.TUNNELGATE_VM_CACHE ?? '/var/cache/tunnelgate-vm';

function onPath(cmd: string): boolean {
  return (process.env.PATH ?? '').split(':').some((d) => d && existsSync(join(d, cmd)));
}

/** Why the VM cannot run on this machine, or undefined when it can. */
export function vmUnavailable(): string | undefined {
  if (process.env.TUNNELGATE_VM === 'skip') return 'TUNNELGATE_VM=skip';
  if (process.platform !== 'linux' || process.arch !== 'x64') return `needs Linux on x86_64 (this is ${process.platform}/${process.arch})`;
  if (process.getuid?.() !== 0) return 'needs root (the guest shares the host root filesystem; the lab needs namespaces)';
  if (!onPath('qemu-system-x86_64')) return 'qemu-system-x86_64 is not installed (Debian: apt-get install qemu-system-x86)';
  if (!existsSync(join(VM_CACHE, 'current'))) {
    for (const [cmd, pkg] of [['apt-get', 'apt'], ['cpio', 'cpio'], ['depmod', 'kmod']] as const) {
      if (!onPath(cmd) && !existsSync(`/usr/sbin/${cmd}`) && !existsSync(`/sbin/${cmd}`)) return `no cached kernel in ${VM_CACHE} and ${cmd} (${pkg}) is missing to build it`;
    }
    if (!existsSync('/bin/busybox')) return `no cached kernel in ${VM_CACHE} and busybox-static is not installed`;
  }
  return undefined;
}

/** With TUNNELGATE_VM=require (.ci/run sets it) or in CI (CI set), a machine that cannot run the VM is a failure, not a skip. */
export const vmRequired = process.env.TUNNELGATE_VM === 'require' || (Boolean(process.env.CI) && process.env.TUNNELGATE_VM !== 'skip');

export interface VmAssets {
  kver: string;
  vmlinux: string;
  initrd: string;
  hz: number;
}

/** Runs build-assets.sh (a no-op when cached; downloads the kernel .deb otherwise), progress on stderr. */
export function buildAssets(): VmAssets {
  const current = execFileSync('bash', [join(HERE, 'build-assets.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, TUNNELGATE_VM_CACHE: VM_CACHE },
  }).trim();
  const kv = Object.fromEntries(
    readFileSync(current, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
  return { kver: kv.KVER!, vmlinux: kv.VMLINUX!, initrd: kv.INITRD!, hz: Number(kv.HZ) || 250 };
}

/** The host TSC rate in kHz: what the kernel measured at boot, else /proc/cpuinfo. */
function tscKhz(): number | undefined {
  let mhz: string | undefined;
  try {
    mhz = /tsc: Detected ([\d.]+) MHz/.exec(execFileSync('dmesg', { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }))?.[1];
  } catch {
    // dmesg restricted: fall back
  }
  mhz ??= /^cpu MHz\s*:\s*([\d.]+)/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1];
  const khz = Math.round(Number(mhz) * 1000);
  return khz > 0 ? khz : undefined;
}

function hardwareVirt(): boolean {
  try {
    return existsSync('/dev/kvm') && /\b(vmx|svm)\b/.test(readFileSync('/proc/cpuinfo', 'utf8'));
  } catch {
    return false;
  }
}

export interface BootOptions {
  /**
   * vCPUs, default 1: under TCG each is a host thread, and the rest of the suite runs beside the VM on
   * the same cores; the lab's work is one process at a time anyway (measured: one vCPU was faster on a
   * loaded 2-core host, 70 s for the file against 126-230 s with two).
   */
  cpus?: number;
  memMb?: number;
  /** Until the control server answers. */
  bootTimeoutMs?: number;
  /** Echo the guest console on stderr as it comes. */
  echoConsole?: boolean;
}

/**
 * QEMU's command line for a guest running `job` (a bash script on the host's root, which the guest shares) as its
 * one task; with `netdev`, a virtio NIC on that user-mode network.
 */
export function qemuArgs(assets: VmAssets, opts: { job: string; cpus: number; memMb: number; netdev?: string }): string[] {
  const kvm = process.env.TUNNELGATE_VM_ACCEL ? process.env.TUNNELGATE_VM_ACCEL === 'kvm' : hardwareVirt();
  let append = `console=ttyS0 quiet loglevel=4 panic=-1 8250.nr_uarts=1 tg.job=${opts.job}`;
  const khz = tscKhz();
  if (!kvm && khz) append += ` tsc=reliable tsc_early_khz=${khz} lpj=${Math.round((khz * 1000) / assets.hz)}`;
  return [
    '-nodefaults', '-no-user-config', '-display', 'none', '-monitor', 'none', '-serial', 'stdio', '-no-reboot',
    '-machine', 'microvm,rtc=on',
    '-accel', kvm ? 'kvm' : 'tcg',
    '-cpu', kvm ? 'host' : 'max,-avx,-avx2,-fma,-bmi1,-bmi2',
    '-smp', String(opts.cpus),
    '-m', String(opts.memMb),
    '-kernel', assets.vmlinux,
    '-initrd', assets.initrd,
    '-append', append,
    '-fsdev', 'local,id=host,path=/,security_model=none,readonly=on,multidevs=remap',
    '-device', 'virtio-9p-device,fsdev=host,mount_tag=host',
    ...(opts.netdev ? ['-netdev', opts.netdev, '-device', 'virtio-net-device,netdev=net0'] : []),
  ];
}

/**
 * Runs `argv` (from the checkout's root) as the guest's one job, with `env`, its console on our stdout; answers
 * the job's exit status. For what needs the guest's kernel but no lab of start.sh's (bench:edge-vm).
 */
export async function runInVm(argv: string[], env: Record<string, string>, opts: { cpus?: number; memMb?: number } = {}): Promise<number> {
  const quote = (v: string): string => `'${v.replaceAll("'", `'\\''`)}'`;
  const dir = mkdtempSync(join(tmpdir(), 'tg-vm-job-'));
  const job = join(dir, 'job.sh');
  // The guest shares the host's root read-only: this script, the checkout and node_modules are where they are here.
  writeFileSync(job, ['#!/bin/bash', 'set -euo pipefail', `cd ${quote(join(HERE, '../..'))}`, ...Object.entries(env).map(([k, v]) => `export ${k}=${quote(v)}`), `exec ${argv.map(quote).join(' ')}`, ''].join('\n'));
  try {
    const args = qemuArgs(buildAssets(), { job, cpus: opts.cpus ?? 1, memMb: opts.memMb ?? 1536 });
    const qemu = spawn('qemu-system-x86_64', args, { stdio: ['ignore', 'pipe', 'inherit'] });
    const kill = () => qemu.kill('SIGKILL');
    process.once('exit', kill);
    let tail = '';
    qemu.stdout.on('data', (d: Buffer) => {
      const s = String(d).replaceAll('\r', '');
      tail = (tail + s).slice(-4096);
      process.stdout.write(s);
    });
    const code = await new Promise<number | null>((r) => qemu.on('exit', r));
    process.off('exit', kill);
    const m = /TG_VM_EXIT=(\d+)/.exec(tail);
    return m ? Number(m[1]) : code || 125;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export class VmError extends Error {
  override name = 'VmError';
}

export class TestVm {
  /** Host loopback port → the agent's SSH port in the guest's edge namespace. */
  readonly agentPort: number;
  /** Host loopback port → LAB.agent2RelayPort in the edge namespace (relayed to edge2's agent by the test). */
  readonly agent2Port: number;
  private console_ = '';
  private exited: Promise<number | null>;

  private constructor(
    private readonly qemu: ChildProcess,
    private readonly controlPort: number,
    agentPort: number,
    agent2Port: number,
    /** ms from starting QEMU until the guest's control server answered. */
    public bootMs = 0,
  ) {
    this.agentPort = agentPort;
    this.agent2Port = agent2Port;
    this.exited = new Promise((r) => qemu.on('exit', (code) => r(code)));
  }

  static async boot(assets: VmAssets, opts: BootOptions = {}): Promise<TestVm> {
    const t0 = performance.now();
    const [controlPort, agentPort, agent2Port] = [await freePort(), await freePort(), await freePort()];
    const fwd = (host: number, guest: number) => `hostfwd=tcp:127.0.0.1:${host}-${LAB.edgeMgmt}:${guest}`;
    const args = qemuArgs(assets, {
      job: join(HERE, 'guest', 'start.sh'),
      cpus: opts.cpus ?? 1,
      memMb: opts.memMb ?? 1536,
      // restrict=on: the guest reaches nothing outside; only these forwards come in.
      netdev: `user,id=net0,restrict=on,${fwd(controlPort, LAB.controlPort)},${fwd(agentPort, LAB.agentPort)},${fwd(agent2Port, LAB.agent2RelayPort)}`,
    });
    const qemu = spawn('qemu-system-x86_64', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const vm = new TestVm(qemu, controlPort, agentPort, agent2Port);
    const kill = () => qemu.kill('SIGKILL');
    process.once('exit', kill);
    void vm.exited.then(() => process.off('exit', kill));
    const take = (d: Buffer) => {
      const s = String(d).replaceAll('\r', '');
      vm.console_ += s;
      if (opts.echoConsole) process.stderr.write(s);
    };
    qemu.stdout!.on('data', take);
    qemu.stderr!.on('data', take);

    // A bound, not a measure: the guest answers in 20-60 s on a quiet host, over 120 s beside another VM under load.
    const until = Date.now() + (opts.bootTimeoutMs ?? 240_000);
    let gone = false;
    void vm.exited.then(() => (gone = true));
    for (;;) {
      if (gone) throw new VmError(`the VM stopped before its control server answered:\n${vm.consoleTail()}`);
      if (Date.now() > until) {
        kill();
        throw new VmError(`the VM's control server did not answer within ${opts.bootTimeoutMs ?? 240_000} ms:\n${vm.consoleTail()}`);
      }
      try {
        const r = await fetch(`http://127.0.0.1:${controlPort}/health`, { signal: AbortSignal.timeout(2000) });
        if (r.ok) break;
      } catch {
        // not up yet (slirp accepts the connection before the guest does, then drops it)
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    vm.bootMs = Math.round(performance.now() - t0);
    return vm;
  }

  /** Guest uptime when init handed over to the job (the kernel's own boot time). */
  get kernelBootSeconds(): number | undefined {
    const m = /tg-init: ready at ([\d.]+) s/.exec(this.console_);
    return m ? Number(m[1]) : undefined;
  }

  get console(): string {
    return this.console_;
  }

  consoleTail(lines = 60): string {
    return this.console_.split('\n').slice(-lines).join('\n');
  }

  private async call<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
    const r = await fetch(`http://127.0.0.1:${this.controlPort}${path}`, {
      method,
      ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    });
    const value = (await r.json()) as T & { error_description?: string };
    if (!r.ok) throw new VmError(`guest ${path}: ${value.error_description ?? r.status}`);
    return value;
  }

  exec(req: ExecRequest): Promise<ExecResult> {
    return this.call('POST', '/exec', req);
  }

  /** Runs a command in a namespace; its stdout, or a VmError with stderr when it fails. */
  async run(ns: Netns, argv: string[], input?: string): Promise<string> {
    const r = await this.exec({ ns, argv, ...(input === undefined ? {} : { input }) });
    if (r.code !== 0) throw new VmError(`[${ns}] ${argv.join(' ')} exited ${r.code ?? r.signal}:\n${r.stderr}${r.stdout}`);
    return r.stdout;
  }

  spawn(req: SpawnRequest): Promise<{ pid: number }> {
    return this.call('POST', '/spawn', req);
  }

  output(name: string): Promise<ProcessOutput> {
    return this.call('GET', `/output?name=${encodeURIComponent(name)}`);
  }

  stop(name: string): Promise<ProcessOutput> {
    return this.call('POST', '/stop', { name });
  }

  dataplane(req: Extract<DataplaneRequest, { op: 'apply' | 'remove' }>): Promise<ChangeCounts>;
  dataplane(req: Extract<DataplaneRequest, { op: 'probe' }>): Promise<ProbeResult>;
  dataplane(req: Extract<DataplaneRequest, { op: 'open' | 'close' }>): Promise<{ ok: true }>;
  dataplane(req: Extract<DataplaneRequest, { op: 'reconcile' }>): Promise<ReconcileResult>;
  dataplane(req: Extract<DataplaneRequest, { op: 'dropped' }>): Promise<Record<DropReason, number>>;
  dataplane(req: Extract<DataplaneRequest, { op: 'table' }>): Promise<{ table: 'created' | 'present' | 'rebuilt' }>;
  dataplane(req: DataplaneRequest): Promise<unknown> {
    return this.call('POST', '/dataplane', req);
  }

  /** Asks the guest to power off; kills QEMU if it has not within the timeout. Returns the exit marker. */
  async shutdown(timeoutMs = 30_000): Promise<number | undefined> {
    try {
      await this.call('POST', '/shutdown');
    } catch {
      // already gone
    }
    const t = setTimeout(() => this.qemu.kill('SIGKILL'), timeoutMs);
    await this.exited;
    clearTimeout(t);
    const m = /TG_VM_EXIT=(\d+)/.exec(this.console_);
    return m ? Number(m[1]) : undefined;
  }
}
