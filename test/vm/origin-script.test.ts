// The origin script against REAL GRE: what test/unit/origin-script-netns.test.ts cannot check on a host kernel
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
import { ORIGIN_SCRIPT_PARAMS, ORIGIN_STATE_SNAPSHOT } from '../helpers/origin-script-params.ts';

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
  /** The origin script piped into bash on the origin, as docs/BUYER.md tells buyers to run it. */
  const originScript = (text: string, ...args: string[]) => ns(ORIGIN, `bash -s -- ${args.join(' ')}`, text);

  /** Everything the script may touch, as text: two equal snapshots mean the same kernel state (ifindexes included). */
  const snapshot = () => nsOk(ORIGIN, ORIGIN_STATE_SNAPSHOT);

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

  // A link flap: `ip link set <tunnel> down; up` makes the kernel drop the policy table's default route, and
  // nothing put it back until the buyer ran the script again. --install keeps it applied. The guest has no
  // systemd (its init is test/vm/init), so the units are not enabled here: the test checks the files
  // --install writes and runs the repair unit's own ExecStart command, as its timer would
  // (test/unit/origin-scripts.test.ts checks the units' content and runs systemd-analyze verify on them).
  const BOOT = '/etc/systemd/system/tunnelgate-tg-3k9x0a1b.service';
  const REPAIR = '/etc/systemd/system/tunnelgate-tg-3k9x0a1b-repair.service';
  const TIMER = '/etc/systemd/system/tunnelgate-tg-3k9x0a1b-repair.timer';
  const INSTALLED = '/usr/local/sbin/tunnelgate-tg-3k9x0a1b.sh';

  it('--install copies the script and writes its units; piped, it refuses and changes nothing', async () => {
    const piped = await originScript(script, '--install');
    expect(piped.status).toBe(1);
    expect(piped.stderr).toContain('--install copies this script from its file: save it first');
    expect(await snapshot()).toBe(once);
    expect((await ns(ORIGIN, `ls ${BOOT} ${REPAIR} ${TIMER} ${INSTALLED}`)).status).not.toBe(0);

    await ns(ORIGIN, 'cat > /tmp/origin.sh', script);
    const r = await ns(ORIGIN, 'bash /tmp/origin.sh --install');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('GRE link tg-3k9x0a1b already points at 192.0.2.2');
    expect(r.stdout).toContain(`+ install -D -m 0755 -- /tmp/origin.sh ${INSTALLED}\n`);
    for (const path of [BOOT, REPAIR, TIMER]) expect(r.stdout).toContain(`+ write ${path}\n`);
    // No systemd in the guest: said, not hidden.
    expect(r.stderr).toContain('systemd is not running here: the units are written but not enabled');
    expect(await snapshot()).toBe(once);
    expect(await nsOk(ORIGIN, `cat ${INSTALLED}`)).toBe(script);
    expect(await nsOk(ORIGIN, `stat -c %a ${INSTALLED}`)).toBe('755\n');
    expect(await nsOk(ORIGIN, `cat ${BOOT}`)).toBe(renderOriginScripts(base).systemd_origin);
    expect(await nsOk(ORIGIN, `cat ${TIMER}`)).toContain('\nOnUnitActiveSec=45s\n');
  }, 300_000);

  it('link down + up drops the policy route; the repair unit\'s command (what its timer runs) puts it back', async () => {
    await nsOk(ORIGIN, 'ip link set dev tg-3k9x0a1b down; ip link set dev tg-3k9x0a1b up');
    // The failure the buyer saw: the table is empty, the reply has no way back through the tunnel.
    expect(await nsOk(ORIGIN, 'ip -4 route show table 1000123')).toBe('');
    expect(await probe(1)).not.toContain('peer=');
    // The repair unit's ExecStart and Environment lines, run as systemd would run them.
    const unit = await nsOk(ORIGIN, `cat ${REPAIR}`);
    const execStart = /^ExecStart=(.+)$/m.exec(unit)?.[1];
    const environment = /^Environment=TUNNELGATE_UNIT=(.+)$/m.exec(unit)?.[1];
    expect(execStart).toBe(`/bin/bash ${INSTALLED} up`);
    expect(environment).toBe('%n');
    const repaired = await ns(ORIGIN, `TUNNELGATE_UNIT=tunnelgate-tg-3k9x0a1b-repair.service ${execStart} >/dev/null`);
    expect(repaired.stderr).toBe('');
    expect(repaired.status).toBe(0);
    expect(await nsOk(ORIGIN, 'ip -4 route show table 1000123')).toMatch(/^default dev tg-3k9x0a1b scope link\s*$/);
    expect(await snapshot()).toBe(once);
    expect(await probe(3)).toContain(`peer=${PROBE_SRC}`);
  }, 300_000);

  it("the boot unit's ExecStop takes the tunnel down and leaves the installed units; its ExecStart brings it back", async () => {
    const unit = await nsOk(ORIGIN, `cat ${BOOT}`);
    const line = (key: string) => new RegExp(`^${key}=(.+)$`, 'm').exec(unit)?.[1];
    expect(line('Environment')).toBe('TUNNELGATE_UNIT=%n');
    const asUnit = 'TUNNELGATE_UNIT=tunnelgate-tg-3k9x0a1b.service';
    const stopped = await ns(ORIGIN, `${asUnit} ${line('ExecStop')}`);
    expect(stopped.stderr).toBe('');
    expect(stopped.status).toBe(0);
    expect(await snapshot()).not.toContain('tg-3k9x0a1b');
    // Under a unit, --remove must not uninstall (systemctl would wait on the job running it).
    expect(await nsOk(ORIGIN, `ls ${BOOT} ${REPAIR} ${TIMER} ${INSTALLED} | wc -l`)).toBe('4\n');
    const started = await ns(ORIGIN, `${asUnit} ${line('ExecStart')}`);
    expect(started.status).toBe(0);
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
      // What --install wrote goes too (the first run removes it, the second finds nothing).
      expect(removed.stdout.includes(`+ rm -f ${TIMER} ${REPAIR} ${BOOT} ${INSTALLED}`)).toBe(i === 0);
      expect(await nsOk(ORIGIN, `ls /etc/systemd/system /usr/local/sbin | grep -c tunnelgate || true`)).toBe('0\n');
    }
  }, 300_000);
});
