// Named network namespaces and `ip`/`nft` run inside them: what the demo's edge and origin live in, and
// what the kernel tests build theirs on (test/netns/netns.ts adds random names and waits). Linux, root.
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

/** Where `ip netns add` puts a namespace's handle. */
export const NETNS_DIR = '/run/netns';

export class Netns {
  readonly path: string;

  /** Creates the namespace `name` (`ip netns add`; it must not exist yet), or with `create: false` names one that exists. */
  constructor(readonly name: string, opts: { create?: boolean } = {}) {
    this.path = `${NETNS_DIR}/${name}`;
    if (opts.create !== false) execFileSync('ip', ['netns', 'add', name]);
  }

  /** Runs a command inside the namespace; returns stdout. Throws with stderr on failure. */
  run(cmd: string, ...args: string[]): string {
    return execFileSync('ip', ['netns', 'exec', this.name, cmd, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 256 * 1024 * 1024 });
  }

  /** run() without blocking the event loop (a process that also answers jobs or requests meanwhile). */
  async runAsync(cmd: string, ...args: string[]): Promise<string> {
    return (await execFileP('ip', ['netns', 'exec', this.name, cmd, ...args], { encoding: 'utf8' })).stdout;
  }

  /** `nft -f -` of a script inside the namespace: one commit. */
  nft(script: string): string {
    return execFileSync('ip', ['netns', 'exec', this.name, 'nft', '-f', '-'], { input: script, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
  }

  /** `ip -j ...` parsed. */
  ipJson<T = unknown>(...args: string[]): T {
    const out = this.run('ip', '-j', ...args).trim();
    return (out === '' ? [] : JSON.parse(out)) as T;
  }

  /** Deletes the namespace, and with it every link in it; nothing happens if it is gone already. */
  delete(): void {
    deleteNetns(this.name);
  }
}

/** Deletes a namespace by name (its links go with it); false when there was none. */
export function deleteNetns(name: string): boolean {
  try {
    execFileSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Whether a namespace of that name exists. */
export function netnsExists(name: string): boolean {
  return existsSync(`${NETNS_DIR}/${name}`);
}

/** The names of the namespaces that start with `prefix`. */
export function netnsNamed(prefix: string): string[] {
  if (!existsSync(NETNS_DIR)) return [];
  return readdirSync(NETNS_DIR).filter((n) => n.startsWith(prefix));
}
