// Whether this kernel can make the tunnels' links (common/tunnel-links.ts, docs/CONTRACTS.md "Tunnel
// links"). A kernel without GRE (this development machine's, some container hosts') refuses every
// tunnel link with EOPNOTSUPP, so without this check an agent there starts cleanly and then fails every
// job. The agent asks once at start (a warning when it cannot), and again with every `status`.
//
// How it asks: one RTM_NEWLINK of kind "gre" that the GRE driver's own validator must refuse
// (rtnetlink/link.ts encodeGreSupportProbe: GRE version bits set). The kernel looks up the link kind (loading
// ip_gre on demand, as a real tunnel would) before it validates, and validates before it creates, so the
// answer tells the two cases apart with nothing made: EINVAL, the driver is there; EOPNOTSUPP, there is
// none. Rejected alternatives: a link made and deleted in a throwaway network namespace would leave the
// namespace (or the link) behind if the agent died in between, and needs a namespace mount; reading
// /proc/modules or /sys/module misses GRE built into the kernel and modules loaded on demand.
import { randomBytes } from 'node:crypto';
import { constants as osConstants } from 'node:os';
import type { TunnelLinks } from '../../common/tunnel-links.ts';
import { errnoName } from '../netlink/message.ts';
import type { Rtnl } from '../netlink/client.ts';

const E = osConstants.errno;

/** What the kernel's answer to the probe says (errno 0: a kernel that made the link, then deleted again). */
export function greSupport(errno: number): TunnelLinks {
  if (errno === E.EINVAL || errno === 0) return { kind: 'gre', usable: true };
  if (errno === E.EOPNOTSUPP) {
    return {
      kind: 'gre',
      usable: false,
      reason:
        'this kernel cannot create GRE links (EOPNOTSUPP for link kind gre): every tunnel job would fail; ' +
        'load the ip_gre module (modprobe ip_gre) or run the agent on a kernel with GRE (CONFIG_NET_IPGRE)',
    };
  }
  if (errno === E.EPERM || errno === E.EACCES) {
    return { kind: 'gre', usable: null, reason: `could not ask the kernel whether it has GRE (${errnoName(errno)}): the agent needs CAP_NET_ADMIN` };
  }
  return { kind: 'gre', usable: null, reason: `could not tell whether this kernel has GRE: the probe got ${errnoName(errno)}` };
}

/**
 * A name no link has: the probe must reach the kind's validator, and a link already holding the name
 * would answer EEXIST first on a kernel whose GRE module is not loaded yet. Outside the tunnel prefix.
 */
export function probeLinkName(): string {
  return `tgq${randomBytes(5).toString('hex')}`;
}

/** Asks the kernel behind `rtnl` (the dataplane's namespace) whether it can make GRE links. */
export async function probeGreSupport(rtnl: Pick<Rtnl, 'probeGreSupport'>): Promise<TunnelLinks> {
  try {
    return greSupport(await rtnl.probeGreSupport(probeLinkName()));
  } catch (e) {
    return { kind: 'gre', usable: null, reason: `could not tell whether this kernel has GRE: ${e instanceof Error ? e.message : String(e)}` };
  }
}

/** Where the agent keeps what it last found (TunnelLinksState): a log line when it changes. */
export interface LinkSupportLog {
  warn(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * What the agent last found about its tunnel links: asked at start (before the agent takes jobs) and
 * again by every `status`, so a module loaded later (modprobe ip_gre) shows without a restart; `hello`
 * answers the last value without asking. Logs a warning whenever the links are found unusable (at start
 * included) and a line when they become usable again.
 */
export class TunnelLinksState {
  private last: TunnelLinks | undefined;

  constructor(
    private readonly ask: () => Promise<TunnelLinks>,
    private readonly log?: LinkSupportLog,
  ) {}

  /** The last value found; undefined before the first refresh(). */
  current(): TunnelLinks | undefined {
    return this.last;
  }

  async refresh(): Promise<TunnelLinks> {
    const found = await this.ask();
    const before = this.last;
    this.last = found;
    const changed = before === undefined || before.usable !== found.usable || before.kind !== found.kind || before.reason !== found.reason;
    if (changed && this.log) {
      const fields = { kind: found.kind, usable: found.usable, ...(found.reason !== undefined ? { reason: found.reason } : {}) };
      if (found.usable === false) this.log.warn('tunnel links unusable: this node cannot carry tunnels, and the gateway sells none from it', fields);
      else if (found.usable === null) this.log.warn('tunnel links: could not tell whether this node can carry tunnels', fields);
      else if (before !== undefined) this.log.info('tunnel links usable again', fields);
      else this.log.info('tunnel links usable', fields);
    }
    return found;
  }
}
