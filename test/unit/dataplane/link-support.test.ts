// How the agent decides whether its kernel can make the tunnels' links (agent/dataplane/link-support.ts):
// the kernel's answer to a GRE request its validator must refuse, read into {kind, usable, reason}; the
// request itself, byte by byte; and the state that hello and status report, with its log lines.
// test/netns/link-support.test.ts asks this machine's real kernel.
import { constants as osConstants } from 'node:os';
import { describe, expect, it } from 'vitest';
import { greSupport, probeGreSupport, probeLinkName, TunnelLinksState } from '../../../agent/dataplane/link-support.ts';
import { FLAGS_CREATE, GRE_VERSION_MASK, RTM_NEWLINK, decodeLink, encodeGreSupportProbe } from '../../../agent/netlink/rtnetlink/index.ts';
import { parseMessages } from '../../../agent/netlink/message.ts';
import { checkTunnelLinks } from '../../../common/tunnel-links.ts';

const E = osConstants.errno;

describe('greSupport: the kernel answer, decided', () => {
  it('EINVAL (the GRE driver refused the version bits): usable', () => {
    expect(greSupport(E.EINVAL)).toEqual({ kind: 'gre', usable: true });
  });

  it('EOPNOTSUPP (no driver for kind gre): unusable, saying why and what to do', () => {
    const r = greSupport(E.EOPNOTSUPP);
    expect(r.kind).toBe('gre');
    expect(r.usable).toBe(false);
    expect(r.reason).toMatch(/cannot create GRE links \(EOPNOTSUPP/);
    expect(r.reason).toMatch(/modprobe ip_gre/);
    expect(r.reason).toMatch(/every tunnel job would fail/);
  });

  it('a kernel that made the link after all (answer 0; it was deleted again): usable', () => {
    expect(greSupport(0)).toEqual({ kind: 'gre', usable: true });
  });

  it('no permission, or anything unexpected: not known (null), never a guess either way', () => {
    expect(greSupport(E.EPERM)).toMatchObject({ kind: 'gre', usable: null, reason: expect.stringMatching(/EPERM.*CAP_NET_ADMIN/) });
    expect(greSupport(E.EACCES).usable).toBeNull();
    expect(greSupport(E.EEXIST)).toMatchObject({ usable: null, reason: expect.stringMatching(/EEXIST/) });
    expect(greSupport(E.ENOBUFS).usable).toBeNull();
  });

  it('every decision is a valid tunnel_links value (common/tunnel-links.ts)', () => {
    for (const errno of [0, E.EINVAL, E.EOPNOTSUPP, E.EPERM, E.EEXIST]) expect(checkTunnelLinks(greSupport(errno))).toBeUndefined();
  });
});

describe('the probe request', () => {
  it('is RTM_NEWLINK create-exclusive of kind gre with only the GRE version bits in its flags', () => {
    const [m] = parseMessages(encodeGreSupportProbe('tgq0123456789', 7));
    expect(m!.type).toBe(RTM_NEWLINK);
    expect(m!.flags).toBe(FLAGS_CREATE);
    const link = decodeLink(m!);
    expect(link.name).toBe('tgq0123456789');
    expect(link.kind).toBe('gre');
    expect(link.gre?.iflags).toBe(GRE_VERSION_MASK);
    // No addresses, key or outward flags: nothing a kernel could build a working link from.
    expect(link.gre?.oflags).toBeUndefined();
    expect(link.gre?.local).toBeUndefined();
    expect(link.gre?.remote).toBeUndefined();
  });

  it('names a link outside the tunnel prefix, a legal interface name, different each time', () => {
    const names = new Set(Array.from({ length: 20 }, () => probeLinkName()));
    expect(names.size).toBe(20);
    for (const n of names) {
      expect(n).toMatch(/^tgq[0-9a-f]{10}$/);
      expect(n.length).toBeLessThanOrEqual(15);
      expect(n.startsWith('tg-')).toBe(false);
    }
  });

  it('probeGreSupport turns the answer into the decision, and a socket failure into "not known"', async () => {
    const asked: string[] = [];
    expect(await probeGreSupport({ probeGreSupport: async (n) => (asked.push(n), E.EOPNOTSUPP) })).toMatchObject({ usable: false });
    expect(await probeGreSupport({ probeGreSupport: async () => E.EINVAL })).toEqual({ kind: 'gre', usable: true });
    const broken = await probeGreSupport({ probeGreSupport: async () => Promise.reject(new Error('socket closed')) });
    expect(broken).toMatchObject({ kind: 'gre', usable: null, reason: expect.stringMatching(/socket closed/) });
    expect(asked[0]).toMatch(/^tgq/);
  });
});

describe('TunnelLinksState', () => {
  const recorder = () => {
    const lines: { level: string; msg: string; fields?: Record<string, unknown> }[] = [];
    return {
      lines,
      log: {
        warn: (msg: string, fields?: Record<string, unknown>) => lines.push({ level: 'warn', msg, fields }),
        info: (msg: string, fields?: Record<string, unknown>) => lines.push({ level: 'info', msg, fields }),
      },
    };
  };

  it('warns at start when the links are unusable, with the reason; says nothing again until it changes', async () => {
    let answer = greSupport(E.EOPNOTSUPP);
    const { lines, log } = recorder();
    const state = new TunnelLinksState(async () => answer, log);
    expect(state.current()).toBeUndefined();
    expect(await state.refresh()).toEqual(answer);
    expect(state.current()).toEqual(answer);
    expect(lines).toEqual([{ level: 'warn', msg: expect.stringMatching(/^tunnel links unusable: this node cannot carry tunnels/), fields: { kind: 'gre', usable: false, reason: answer.reason } }]);
    await state.refresh();
    await state.refresh();
    expect(lines).toHaveLength(1);
    // The module loaded later: usable again, said once.
    answer = greSupport(E.EINVAL);
    await state.refresh();
    expect(state.current()).toEqual({ kind: 'gre', usable: true });
    expect(lines.slice(1)).toEqual([{ level: 'info', msg: 'tunnel links usable again', fields: { kind: 'gre', usable: true } }]);
  });

  it('usable at start is one info line; not known is a warning', async () => {
    const a = recorder();
    await new TunnelLinksState(async () => ({ kind: 'veth-standin', usable: true }), a.log).refresh();
    expect(a.lines).toEqual([{ level: 'info', msg: 'tunnel links usable', fields: { kind: 'veth-standin', usable: true } }]);
    const b = recorder();
    await new TunnelLinksState(async () => greSupport(E.EPERM), b.log).refresh();
    expect(b.lines[0]).toMatchObject({ level: 'warn', msg: expect.stringMatching(/could not tell/), fields: { usable: null } });
  });
});
