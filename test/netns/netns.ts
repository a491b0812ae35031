// Fresh network namespaces for the kernel tests, and `ip`/`nft` run inside them as oracles.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { until } from '../helpers/wait.ts';

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

  /** `nft -f -` of a script inside the namespace: one commit. */
  nft(script: string): string {
    return execFileSync('ip', ['netns', 'exec', this.name, 'nft', '-f', '-'], { input: script, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
  }

  /** `ip -j ...` parsed. */
  ipJson<T = unknown>(...args: string[]): T {
    const out = this.run('ip', '-j', ...args).trim();
    return (out === '' ? [] : JSON.parse(out)) as T;
  }

  /**
   * Waits until `ping` from this namespace gets an answer from `target`. A link that was just moved,
   * renamed or brought up can drop everything for seconds: its qdisc is only attached when the kernel's
   * linkwatch work runs, and that work waits for the RTNL lock, which other namespace tests on the same
   * host may hold for a long time. Tests wait for the path instead of timing out on the first packet.
   */
  async waitForPing(target: string, deadlineMs = 120_000): Promise<void> {
    await until(`${this.name}: an answer from ${target}`, () => {
      this.run('ping', '-n', '-q', '-c', '1', '-W', '1', target);
      return true;
    }, deadlineMs);
  }

  delete(): void {
    try {
      execFileSync('ip', ['netns', 'del', this.name]);
    } catch {
      // already gone
    }
  }
}
