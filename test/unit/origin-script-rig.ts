// The origin script's unit tests' world (origin-scripts.test.ts: text, static checks, GRE parameters, systemd;
// origin-script-netns.test.ts: the script against the kernel in namespaces): the script written to a file,
// commands run and checked, and throw-away network namespaces. Each test file calls cleanupOriginRig() after all
// its tests: the files and namespaces made here go with it.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ORIGIN_SCRIPT_PARAMS, ORIGIN_STATE_SNAPSHOT } from '../helpers/origin-script-params.ts';

export const base = ORIGIN_SCRIPT_PARAMS;

export interface Result {
  status: number | null;
  stdout: string;
  stderr: string;
}

export function run(cmd: string, args: string[], input?: string): Result {
  const r = spawnSync(cmd, args, { encoding: 'utf8', input, timeout: 60_000 });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

export const has = (bin: string) => run('bash', ['-c', 'command -v "$1"', 'has', bin]).status === 0;

export const work = mkdtempSync(join(tmpdir(), 'tg-origin-'));
let files = 0;
export function scriptFile(text: string): string {
  const path = join(work, `origin-${files++}.sh`);
  writeFileSync(path, text);
  return path;
}

const namespaces: string[] = [];
export function netns(): string {
  const name = `tgo-${process.pid}-${namespaces.length}`;
  const r = run('ip', ['netns', 'add', name]);
  if (r.status !== 0) throw new Error(`ip netns add ${name}: ${r.stderr}`);
  namespaces.push(name);
  nsOk(name, 'ip link set lo up');
  return name;
}
export function ns(name: string, script: string): Result {
  return run('ip', ['netns', 'exec', name, 'bash', '-c', script]);
}
export function nsOk(name: string, script: string): string {
  const r = ns(name, `set -euo pipefail; ${script}`);
  if (r.status !== 0) throw new Error(`in ${name}: ${script}\n${r.stdout}${r.stderr}`);
  return r.stdout;
}

/**
 * Network namespaces, probed once by the file that needs them, so its skip conditions are known before its tests
 * run. The CI host's kernel has no GRE; on a kernel that has GRE the "without GRE" case cannot be staged, and
 * the GRE case itself runs in the VM (test/vm/origin-script.test.ts).
 */
export function probeNetns(): { canNetns: boolean; greInKernel: boolean } {
  const canNetns = process.getuid?.() === 0 && has('ip') && (() => {
    try {
      netns();
      return true;
    } catch {
      return false;
    }
  })();
  const greInKernel = canNetns && ns(netns(), 'ip link add gre-probe type gre local 192.0.2.1 remote 192.0.2.9').status === 0;
  return { canNetns, greInKernel };
}

export function cleanupOriginRig(): void {
  for (const name of namespaces) run('ip', ['netns', 'del', name]);
  rmSync(work, { recursive: true, force: true });
}

/** A veth pair whose ends are both in NAME, so it has carrier; waits until the kernel says so. */
export function vethUp(name: string, dev: string, peer: string, cidr?: string): void {
  nsOk(
    name,
    `ip link add ${dev} type veth peer name ${peer}; ip link set ${peer} up; ip link set ${dev} up;` +
      (cidr ? ` ip addr add ${cidr} dev ${dev};` : '') +
      // Carrier (and with it "state UP" and the routes' linkdown flag) settles asynchronously.
      ` for _ in $(seq 100); do [[ $(cat /sys/class/net/${dev}/operstate) == up ]] && break; sleep 0.05; done`,
  );
}

/** Everything the script may touch, as text: two equal snapshots mean the same kernel state. */
export function snapshot(name: string): string {
  return nsOk(name, ORIGIN_STATE_SNAPSHOT);
}

export const count = (text: string, needle: string) => text.split(needle).length - 1;
