// Fresh network namespaces for the kernel tests, and `ip`/`nft` run inside them as oracles.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export const isRoot = process.getuid?.() === 0;

export class TestNetns {
  readonly name = `tg-test-${randomBytes(4).toString('hex')}`;
  readonly path = `/run/netns/${this.name}`;

  constructor() {
    execFileSync('ip', ['netns', 'add', this.name]);
  }

  /** Runs a command inside the namespace; returns stdout. Throws with stderr on failure. */
  run(cmd: string, ...args: string[]): string {
    return execFileSync('ip', ['netns', 'exec', this.name, cmd, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 256 * 1024 * 1024 });
  }

  /** `ip -j ...` parsed. */
  ipJson<T = unknown>(...args: string[]): T {
    const out = this.run('ip', '-j', ...args).trim();
    return (out === '' ? [] : JSON.parse(out)) as T;
  }

  delete(): void {
    try {
      execFileSync('ip', ['netns', 'del', this.name]);
    } catch {
      // already gone
    }
  }
}
