// The origin script is checked three ways: as text (values, validation), statically (bash -n,
// shellcheck) and by running it against the real kernel in throw-away network namespaces (that third way is
// origin-script-netns.test.ts; the shared pieces are origin-script-rig.ts).
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { renderOriginScripts, type OriginScriptParams } from '../../server/domain/origin-scripts.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { base, cleanupOriginRig, has, run, scriptFile, work } from './origin-script-rig.ts';

afterAll(cleanupOriginRig);

describe('renderOriginScripts', () => {
  it("puts this tunnel's values into both texts", () => {
    const { origin, systemd_origin } = renderOriginScripts(base);
    for (const line of [
      "readonly TUNNEL_ID='3f0c2a4e-1b2c-4d5e-8f90-123456789abc'",
      "readonly TUNNEL_NAME='tg-3k9x0a1b'",
      "readonly PROTECTED_IP='203.0.113.10'",
      "readonly ORIGIN_IP='192.0.2.6'",
      "readonly EDGE_IP='192.0.2.2'",
      "readonly EDGE_INNER_IP='100.64.0.1'",
      "readonly ORIGIN_INNER='100.64.0.2/30'",
      "readonly ORIGIN_INNER_IP='100.64.0.2'",
      "readonly TUNNEL_MTU='1476'",
      "readonly GRE_KEY='42'",
      "readonly GRE_KEY_DOTTED='0.0.0.42'",
      "readonly ROUTE_TABLE='1000123'",
    ]) {
      expect(origin).toContain(`\n${line}\n`);
    }
    expect(origin.startsWith('#!/usr/bin/env bash\n')).toBe(true);
    expect(origin).toContain('\nset -euo pipefail\n');
    expect(origin).toContain('POST /api/dedicated/$TUNNEL_ID/activate');
    expect(origin).toContain('Bind UDP services to $ORIGIN_INNER_IP, not 0.0.0.0');
    // The served script's comments tell the buyer what each edge setting does, how to pick
    // the rate limit, and why UDP services bind to the inner address.
    const comments = origin.split('\n').filter((l) => l.startsWith('#')).join('\n');
    for (const setting of ['ports', 'protocol', 'protection.syn_proxy', 'protection.source_pps_limit', 'protection.drop_fragments']) expect(comments).toContain(`#   ${setting}`);
    expect(comments).toMatch(/peak packet rate of one legitimate client/);
    expect(comments).toMatch(/UDP services should bind to this server's inner address \(\$ORIGIN_INNER_IP\), not 0\.0\.0\.0/);
    expect(comments).toMatch(/reply leaves outside the tunnel/);
    expect(systemd_origin).toContain('ExecStart=/bin/bash /usr/local/sbin/tunnelgate-tg-3k9x0a1b.sh up\n');
    expect(systemd_origin).toContain('ExecStop=/bin/bash /usr/local/sbin/tunnelgate-tg-3k9x0a1b.sh --remove\n');
    expect(systemd_origin).toContain('systemctl enable --now tunnelgate-tg-3k9x0a1b.service');
    expect(systemd_origin).toContain('Description=Tunnelgate GRE tunnel tg-3k9x0a1b to edge 192.0.2.2\n');
  });

  it('leaves the key empty when there is none', () => {
    for (const greKey of [null, undefined]) {
      const { origin } = renderOriginScripts({ ...base, greKey });
      expect(origin).toContain("\nreadonly GRE_KEY=''\n");
      expect(origin).toContain("\nreadonly GRE_KEY_DOTTED=''\n");
    }
    expect(renderOriginScripts({ ...base, greKey: 0 }).origin).toContain("\nreadonly GRE_KEY_DOTTED='0.0.0.0'\n");
    expect(renderOriginScripts({ ...base, greKey: 2 ** 32 - 1 }).origin).toContain("\nreadonly GRE_KEY_DOTTED='255.255.255.255'\n");
  });

  it('carries values only in the header: the script body is the same for every tunnel', () => {
    const other = renderOriginScripts({
      ...base,
      tunnelId: 'AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE',
      tunnelName: 'tg-other',
      originIp: '198.51.100.7',
      edgeIp: '198.51.100.1',
      edgeInner: '100.64.7.0/31',
      originInner: '100.64.7.1/31',
      greKey: null,
      routeTable: 7,
    }).origin;
    const body = (s: string) => s.slice(s.indexOf('readonly GRE_TTL=255'));
    expect(body(other)).toBe(body(renderOriginScripts(base).origin));
    expect(body(other).length).toBeGreaterThan(5000);
    expect(other).toContain("readonly TUNNEL_ID='aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee'");
  });

  const invalid: [keyof OriginScriptParams, unknown][] = [
    ['tunnelId', 'not-a-uuid'],
    ['tunnelId', '3f0c2a4e-1b2c-4d5e-8f90-123456789abc; reboot'],
    ['tunnelId', 42],
    ['tunnelName', 'tg$(id)'],
    ['tunnelName', 'tg-`id`'],
    ['tunnelName', "tg'x"],
    ['tunnelName', 'tg x'],
    ['tunnelName', 'tg\nx'],
    ['tunnelName', 'tg/x'],
    ['tunnelName', 'tg.x'],
    ['tunnelName', 'tg-0123456789abc'],
    ['tunnelName', ''],
    ['tunnelName', '-tg'],
    ['tunnelName', 'all'],
    ['tunnelName', 'gre0'],
    ['protectedIp', '1.2.3.4; rm -rf /'],
    ['protectedIp', '256.1.1.1'],
    ['protectedIp', '01.2.3.4'],
    ['protectedIp', '1.2.3'],
    ['protectedIp', ' 1.2.3.4'],
    ['protectedIp', '0.0.0.0'],
    ['originIp', '$(reboot)'],
    ['originIp', '224.0.0.1'],
    ['originIp', '127.0.0.1'],
    ['originIp', '192.0.2.2'],
    ['originIp', null],
    ['edgeIp', '1.2.3.4\n'],
    ['edgeIp', '255.255.255.255'],
    ['edgeIp', '1.2.3.4/32'],
    ['edgeInner', '100.64.0.1'],
    ['edgeInner', '100.64.0.1/33'],
    ['edgeInner', '100.64.0.1/030'],
    ['edgeInner', '100.64.0.1/30 '],
    ['edgeInner', '100.64.0.0/30'],
    ['originInner', '$(id)/30'],
    ['originInner', '100.64.0.2/29'],
    ['originInner', '100.64.0.6/30'],
    ['originInner', '100.64.0.1/30'],
    ['originInner', '100.64.0.3/30'],
    ['mtu', 67],
    ['mtu', 9001],
    ['mtu', 1476.5],
    ['mtu', Number.NaN],
    ['mtu', '1476'],
    ['greKey', -1],
    ['greKey', 2 ** 32],
    ['greKey', 1.5],
    ['greKey', '42'],
    ['routeTable', 0],
    ['routeTable', 253],
    ['routeTable', 254],
    ['routeTable', 255],
    ['routeTable', 2 ** 31 + 1],
    ['routeTable', 1.5],
  ];
  it.each(invalid)('rejects %s = %j with a TypeError naming the field', (field, value) => {
    const params = { ...base, [field]: value } as unknown as OriginScriptParams;
    expect(() => renderOriginScripts(params)).toThrow(TypeError);
    expect(() => renderOriginScripts(params)).toThrow(field === 'originIp' && value === '192.0.2.2' ? 'edgeIp' : field);
  });

  it('accepts the ends of every range', () => {
    for (const p of [
      { mtu: 68 },
      { mtu: 9000 },
      { greKey: 0 },
      { greKey: 2 ** 32 - 1 },
      { routeTable: 1 },
      { routeTable: 252 },
      { routeTable: 256 },
      { routeTable: 2 ** 31 },
      { tunnelName: 'a' },
      { tunnelName: 'tg-0123456789a_' },
      { edgeInner: '100.64.0.0/31', originInner: '100.64.0.1/31' },
    ]) {
      expect(renderOriginScripts({ ...base, ...p }).origin).toContain('set -euo pipefail');
    }
  });
});

describe('origin script, static checks', () => {
  const variants = { keyed: renderOriginScripts(base).origin, unkeyed: renderOriginScripts({ ...base, greKey: null }).origin };

  it.each(Object.entries(variants))('%s: bash -n parses it', (_name, text) => {
    const r = run('bash', ['-n', scriptFile(text)]);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  // shellcheck is required, not optional: skipping it would let a broken script pass unnoticed.
  it.each(Object.entries(variants))('%s: shellcheck -S style finds nothing', (_name, text) => {
    expect(has('shellcheck'), 'shellcheck is missing: apt-get install shellcheck').toBe(true);
    const r = run('shellcheck', ['-s', 'bash', '-S', 'style', '-f', 'gcc', scriptFile(text)]);
    expect(r.stdout + r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('runs when piped into bash, and refuses unknown arguments', () => {
    const piped = run('bash', ['-s', '--', '--help'], variants.keyed);
    expect(piped.status).toBe(0);
    expect(piped.stdout).toContain('usage: /usr/local/sbin/tunnelgate-tg-3k9x0a1b.sh [up | --remove]');
    const path = scriptFile(variants.keyed);
    const bogus = run('bash', [path, 'sideways']);
    expect(bogus.status).toBe(2);
    expect(bogus.stderr).toContain('usage:');
    expect(run('bash', [path, 'up', 'extra']).status).toBe(2);
  });

  it.skipIf(skipUnless(process.getuid?.() === 0 && has('setpriv'), 'root and setpriv (util-linux), to drop to an ordinary user'))('refuses to run as an ordinary user', () => {
    const r = run('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', 'bash', '-s'], variants.keyed);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('tunnelgate: error: run this script as root');
  });
});

describe('origin script reads GRE parameters from real `ip -d -o link show` output', () => {
  // Captured in the grevm guest (Debian 6.1 kernel, iproute2 6.1) with
  //   ip link add tg-3k9x0a1b type gre local 192.0.2.6 remote 192.0.2.2 ttl 255 key 42   (keyed)
  //   ... remote 192.0.2.3 ttl 255 (nokey); remote 192.0.2.4 ... key 0 (k0); remote 192.0.2.5 ... key 4294967295 (kmax)
  //   ip -d -o link show dev <name> > test/unit/fixtures/ip-d-o-link-gre-<case>.txt
  const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/ip-d-o-link-gre-${name}.txt`, import.meta.url));
  const cases: [string, Partial<OriginScriptParams>, string, boolean][] = [
    ['keyed', { edgeIp: '192.0.2.2', greKey: 42 }, '192.0.2.6', true],
    ['keyed', { edgeIp: '192.0.2.2', greKey: 43 }, '192.0.2.6', false],
    ['keyed', { edgeIp: '192.0.2.2', greKey: null }, '192.0.2.6', false],
    ['keyed', { edgeIp: '192.0.2.9', greKey: 42 }, '192.0.2.6', false],
    ['keyed', { edgeIp: '192.0.2.2', greKey: 42 }, '192.0.2.7', false],
    ['nokey', { edgeIp: '192.0.2.3', greKey: null }, '192.0.2.6', true],
    ['nokey', { edgeIp: '192.0.2.3', greKey: 0 }, '192.0.2.6', false],
    ['k0', { edgeIp: '192.0.2.4', greKey: 0 }, '192.0.2.6', true],
    ['k0', { edgeIp: '192.0.2.4', greKey: null }, '192.0.2.6', false],
    ['kmax', { edgeIp: '192.0.2.5', greKey: 2 ** 32 - 1 }, '192.0.2.6', true],
  ];
  it('the captures are GRE links as the guest printed them', () => {
    for (const name of ['keyed', 'nokey', 'k0', 'kmax']) {
      expect(readFileSync(fixture(name), 'utf8')).toMatch(/ link\/gre 192\.0\.2\.6 peer 192\.0\.2\.\d .* gre remote 192\.0\.2\.\d local 192\.0\.2\.6 ttl 255 /);
    }
  });

  it.each(cases)('%s against %j from %s: match=%s', (name, params, local, match) => {
    const path = scriptFile(renderOriginScripts({ ...base, ...params }).origin);
    // Sourcing runs nothing (main only runs when executed); link_details is replaced by the capture.
    const r = run('bash', [
      '-c',
      `capture=$2 local_ip=$3; source "$1"; link_details() { cat "$capture"; }; LOCAL_IP=$local_ip; link_is_gre || exit 3; if gre_params_match; then echo match; else echo differ; fi`,
      'test',
      path,
      fixture(name),
      local,
    ]);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout.trim()).toBe(match ? 'match' : 'differ');
  });
});

describe('systemd unit', () => {
  const unit = renderOriginScripts(base).systemd_origin;

  /** Minimal unit-file reader: sections of key=value lines, repeated keys kept in order. */
  function sections(text: string): Map<string, [string, string][]> {
    const out = new Map<string, [string, string][]>();
    let current: [string, string][] | null = null;
    for (const raw of text.split('\n')) {
      const line = raw.trim();
      if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
      const head = /^\[([A-Za-z]+)\]$/.exec(line);
      if (head) {
        current = [];
        out.set(head[1]!, current);
        continue;
      }
      const kv = /^([A-Za-z]+)=(.*)$/.exec(line);
      if (!kv || !current) throw new Error(`not a unit-file line: ${JSON.stringify(line)}`);
      current.push([kv[1]!, kv[2]!]);
    }
    return out;
  }
  const get = (s: Map<string, [string, string][]>, section: string, key: string) =>
    (s.get(section) ?? []).filter(([k]) => k === key).map(([, v]) => v);

  it('is a oneshot service after network-online that runs the script up and down', () => {
    const s = sections(unit);
    expect([...s.keys()]).toEqual(['Unit', 'Service', 'Install']);
    expect(get(s, 'Unit', 'Wants')).toEqual(['network-online.target']);
    expect(get(s, 'Unit', 'After')).toEqual(['network-online.target']);
    expect(get(s, 'Service', 'Type')).toEqual(['oneshot']);
    expect(get(s, 'Service', 'RemainAfterExit')).toEqual(['yes']);
    expect(get(s, 'Service', 'ExecStart')).toEqual(['/bin/bash /usr/local/sbin/tunnelgate-tg-3k9x0a1b.sh up']);
    expect(get(s, 'Service', 'ExecStop')).toEqual(['/bin/bash /usr/local/sbin/tunnelgate-tg-3k9x0a1b.sh --remove']);
    expect(get(s, 'Install', 'WantedBy')).toEqual(['multi-user.target']);
  });

  it('tells where to save both files and how to enable the unit', () => {
    const comments = unit.split('\n').filter((l) => l.startsWith('#')).join('\n');
    expect(comments).toContain('/usr/local/sbin/tunnelgate-tg-3k9x0a1b.sh');
    expect(comments).toContain('/etc/systemd/system/tunnelgate-tg-3k9x0a1b.service');
    expect(comments).toContain('systemctl daemon-reload && systemctl enable --now tunnelgate-tg-3k9x0a1b.service');
    // The script names the same path and unit, so the two texts agree.
    const { origin } = renderOriginScripts(base);
    expect(origin).toContain("readonly SCRIPT_PATH='/usr/local/sbin/tunnelgate-tg-3k9x0a1b.sh'");
    expect(origin).toContain("readonly UNIT_NAME='tunnelgate-tg-3k9x0a1b.service'");
  });

  it.skipIf(skipUnless(has('systemd-analyze'), 'systemd-analyze (apt-get install systemd)'))('passes systemd-analyze verify', () => {
    const dir = mkdtempSync(join(work, 'unit-'));
    const path = join(dir, 'tunnelgate-tg-3k9x0a1b.service');
    writeFileSync(path, unit);
    const r = run('systemd-analyze', ['verify', path]);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  // What --install writes (a link flap drops the policy route; the timer's "up" puts it back).
  // Printed by the script's own functions, sourced: these are the texts the buyer's host gets.
  const installed = () => {
    const path = scriptFile(renderOriginScripts(base).origin);
    const part = (fn: string) => {
      const r = run('bash', ['-c', `source "$1"; ${fn}`, 'installed', path]);
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      return r.stdout;
    };
    return { boot: part(`printf '%s' "$BOOT_UNIT"`), service: part('repair_service'), timer: part('repair_timer') };
  };

  it('--install writes the served unit byte for byte, and a repair timer that re-runs "up" every 45 s', () => {
    const { boot, service, timer } = installed();
    expect(boot).toBe(unit);
    // Under a unit the script leaves the units alone (the boot unit's ExecStop would wait on itself).
    expect(get(sections(unit), 'Service', 'Environment')).toEqual(['TUNNELGATE_UNIT=%n']);
    const svc = sections(service);
    expect(get(svc, 'Service', 'Type')).toEqual(['oneshot']);
    expect(get(svc, 'Service', 'ExecStart')).toEqual(['/bin/bash /usr/local/sbin/tunnelgate-tg-3k9x0a1b.sh up']);
    expect(get(svc, 'Service', 'Environment')).toEqual(['TUNNELGATE_UNIT=%n']);
    expect(get(svc, 'Service', 'ExecStop')).toEqual([]);
    const t = sections(timer);
    expect(get(t, 'Unit', 'PartOf')).toEqual(['tunnelgate-tg-3k9x0a1b.service']);
    expect(get(t, 'Timer', 'OnActiveSec')).toEqual(['45s']);
    expect(get(t, 'Timer', 'OnUnitActiveSec')).toEqual(['45s']);
    expect(get(t, 'Install', 'WantedBy')).toEqual(['timers.target']);
  });

  it.skipIf(skipUnless(has('systemd-analyze'), 'systemd-analyze (apt-get install systemd)'))('the units --install writes pass systemd-analyze verify together', () => {
    const { boot, service, timer } = installed();
    const dir = mkdtempSync(join(work, 'units-'));
    const paths = [
      [boot, 'tunnelgate-tg-3k9x0a1b.service'],
      [service, 'tunnelgate-tg-3k9x0a1b-repair.service'],
      [timer, 'tunnelgate-tg-3k9x0a1b-repair.timer'],
    ].map(([text, name]) => {
      writeFileSync(join(dir, name!), text!);
      return join(dir, name!);
    });
    const r = run('systemd-analyze', ['verify', ...paths]);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});
