// The origin script against REAL GRE: what test/unit/origin-scripts.test.ts cannot check on a host kernel
// without ip_gre. A QEMU guest of this file's own (test/vm/vm.ts) wires the lab (test/vm/guest/start.sh);
// the edge end of the tunnel is built by hand in its edge namespace, as the agent would build it, and the
// script the gateway hands buyers runs in its origin namespace:
// set up, run again (idempotent: same link, same state), drift repaired (a deleted policy rule comes back),
// a GRE key change followed (the link recreated with the new key), and --remove, twice.
//
// Skips (saying why) where QEMU cannot run; with TUNNELGATE_VM=require or CI set, that is a failure instead.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderOriginScripts } from '../../server/domain/origin-scripts.ts';
import { LAB } from './protocol.ts';
import { TestVm, buildAssets, vmRequired, vmUnavailable } from './vm.ts';
import { ORIGIN_SCRIPT_PARAMS } from '../helpers/origin-script-params.ts';

const unavailable = vmUnavailable();
if (unavailable) process.stderr.write(`test/vm: ${vmRequired ? 'REQUIRED (TUNNELGATE_VM=require or CI) but cannot run' : 'skipping the origin-script VM test'}: ${unavailable}\n`);

const base = ORIGIN_SCRIPT_PARAMS;
const ORIGIN = 'origin';
const EDGE = 'edge';
/**
 * A probe source on the edge outside the inner /30: the origin's reply to it comes back only through the
 * policy route (its main table sends it to the lab's router, which hands it to the client's network).
 */
const PROBE_SRC = '198.51.100.77';
const PORT = 8080;

const count = (text: string, needle: string) => text.split(needle).length - 1;

describe.skipIf(unavailable !== undefined && !vmRequired)('the origin script with real GRE, in a QEMU guest', () => {
  let vm: TestVm;

  /** Runs a bash script inside one of this file's namespaces (stdin `input`); never throws on a non-zero exit. */
  const ns = async (name: typeof ORIGIN | typeof EDGE, script: string, input?: string) => {
    const r = await vm.exec({ ns: name, argv: ['bash', '-c', script], ...(input === undefined ? {} : { input }), timeoutMs: 120_000 });
    return { status: r.code, stdout: r.stdout, stderr: r.stderr };
  };
  const nsOk = async (name: typeof ORIGIN | typeof EDGE, script: string): Promise<string> => {
    const r = await ns(name, `set -euo pipefail; ${script}`);
    if (r.status !== 0) throw new Error(`in ${name}: ${script}\n${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  /** The origin script piped into bash on the origin, as the README tells buyers to run it. */
  const originScript = (text: string, ...args: string[]) => ns(ORIGIN, `bash -s -- ${args.join(' ')}`, text);

  /** Everything the script may touch, as text: two equal snapshots mean the same kernel state (ifindexes included). */
  const snapshot = () =>
    nsOk(
      ORIGIN,
      [
        'ip -o link show',
        'ip -4 -o addr show',
        'ip -4 rule show',
        'ip -4 route show table all',
        'for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo "$f $(cat "$f")"; done',
        'nft list ruleset',
      ].join('; echo ---; '),
    );

  /**
   * One TCP connection from PROBE_SRC on the edge to the origin's inner address; the origin's socat answers
   * with the peer it saw. `attempts` fresh tries for a path that should work (a loaded, emulated guest can
   * be slow); the wait inside each is socat's own connect timeout, so a path that must NOT work is checked
   * with one attempt whose failure is the expected answer, never a timing.
   */
  const probe = async (attempts: number): Promise<string> => {
    let out = '';
    for (let i = 0; i < attempts && !out.includes('peer='); i++) {
      const r = await ns(EDGE, `socat -t10 -T10 - TCP4:100.64.0.2:${PORT},bind=${PROBE_SRC},connect-timeout=10 </dev/null`);
      out = r.stdout.trim();
    }
    return out;
  };

  beforeAll(async () => {
    if (unavailable) throw new Error(`the VM test is required here (TUNNELGATE_VM=require or CI) but cannot run: ${unavailable}`);
    vm = await TestVm.boot(buildAssets(), { echoConsole: process.env.TUNNELGATE_VM_CONSOLE === '1' });
    // The lab's edge (192.0.2.2) and origin (192.0.2.6) are the addresses the tunnel above names.
    await nsOk(EDGE, `ip link add tg-edge type gre local ${LAB.edge} remote ${LAB.origin} ttl 255 key 42
      ip link set tg-edge mtu 1476 up; ip addr add 100.64.0.1/30 dev tg-edge; ip addr add ${PROBE_SRC}/32 dev lo`);
    // The origin's service, answering every connection with the address it came from.
    await vm.spawn({ name: 'os-server', ns: ORIGIN, argv: ['socat', `TCP4-LISTEN:${PORT},reuseaddr,fork`, 'SYSTEM:echo peer=$SOCAT_PEERADDR'] });
    for (let i = 0; !(await nsOk(ORIGIN, 'ss -Hltn')).includes(`:${PORT} `); i++) {
      if (i > 100) throw new Error(`the origin's socat is not listening on ${PORT}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }, 300_000);

  afterAll(async () => {
    const code = await vm?.shutdown();
    if (vm) {
      const dir = resolve(import.meta.dirname, '../../test-results');
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'vm-origin-script-console.log'), vm.console);
    }
    process.stderr.write(`test/vm origin-script: boot ${vm?.bootMs} ms, guest exit ${code}\n`);
  }, 60_000);

  // One tunnel's life, step by step (each step starts where the one before left the origin). Each step
  // runs a few dozen processes in the emulated guest: generous per-step time for a loaded host.
  const script = renderOriginScripts(base).origin;
  const rekeyed = renderOriginScripts({ ...base, greKey: 43 }).origin;
  let once = '';

  it('sets the tunnel up; run again, it changes nothing (the link is not recreated)', async () => {
    const first = await originScript(script);
    expect(first.stderr).toBe('');
    expect(first.status).toBe(0);
    expect(first.stdout).toContain('POST /api/dedicated/3f0c2a4e-1b2c-4d5e-8f90-123456789abc/activate');
    once = await snapshot();
    const link = await nsOk(ORIGIN, 'ip -d -o link show dev tg-3k9x0a1b');
    expect(link).toContain(' mtu 1476 ');
    expect(link).toContain(' gre remote 192.0.2.2 local 192.0.2.6 ttl 255 ikey 0.0.0.42 okey 0.0.0.42 ');
    expect(count(once, 'from 100.64.0.2 lookup 1000123')).toBe(1);

    const second = await originScript(script);
    expect(second.status).toBe(0);
    expect(second.stdout).toContain('GRE link tg-3k9x0a1b already points at 192.0.2.2');
    expect(await snapshot()).toBe(once); // the snapshot holds the link's ifindex too
  }, 300_000);

  it('replies leave through the tunnel by the policy route; deleted by hand, the script run again puts it back', async () => {
    expect(await probe(3)).toContain(`peer=${PROBE_SRC}`);
    await nsOk(ORIGIN, 'ip rule del from 100.64.0.2 lookup 1000123');
    expect(await probe(1)).not.toContain('peer=');
    expect((await originScript(script)).status).toBe(0);
    expect(await snapshot()).toBe(once);
    expect(await probe(3)).toContain(`peer=${PROBE_SRC}`);
  }, 300_000);

  it('a new GRE key (the tunnel re-keyed): the link is recreated with it, the policy rule stays single', async () => {
    const third = await originScript(rekeyed);
    expect(third.status).toBe(0);
    expect(third.stdout).toContain('recreating it');
    expect(await nsOk(ORIGIN, 'ip -d -o link show dev tg-3k9x0a1b')).toContain(' ikey 0.0.0.43 okey 0.0.0.43 ');
    expect(count(await snapshot(), 'from 100.64.0.2 lookup 1000123')).toBe(1);
  }, 300_000);

  it('--remove takes it all down, and a second --remove finds nothing to do', async () => {
    for (let i = 0; i < 2; i++) {
      const removed = await originScript(rekeyed, '--remove');
      expect(removed.stderr).toBe('');
      expect(removed.status).toBe(0);
      const after = await snapshot();
      expect(after).not.toContain('tg-3k9x0a1b');
      expect(after).not.toContain('1000123');
      expect(after).not.toContain('tunnelgate_origin');
    }
  }, 300_000);
});
