// The agent of a demo edge, in the caller's process, from the agent's own modules (agent/main.ts): the same
// start as `tunnel-agent` (restore the last desired state, health checks, the SSH job endpoint), except where
// the dataplane lives.
// - startStandinAgent: the real dataplane in network namespace `netns` with the veth stand-in for GRE (this
//   kind of machine has no GRE; docs/CONTRACTS.md "Dataplane"), while the SSH port stays on the caller's
//   loopback. Linux and root only. The demo's edge runs it, and so do the provisioning tests
//   (test/helpers/agent-process.ts), which wrap the dataplane to watch and hold each call.
// - startSimulatedAgent: the simulated edge (demo/simulated-dataplane.ts), for the demo anywhere else.
import type { AgentConfig } from '../agent/config.ts';
import { createDataplane, type Dataplane, type DataplaneHandle } from '../agent/dataplane/index.ts';
import { TunnelLinksState } from '../agent/dataplane/link-support.ts';
import { restoreAtStart, startAgent, startHealth, type RunningAgent, type RunningHealth } from '../agent/main.ts';
import type { Logger } from '../common/log.ts';
import { SimulatedDataplane } from './simulated-dataplane.ts';

export interface DemoAgent {
  agent: RunningAgent;
  /** Stops the health checks, the SSH endpoint and the dataplane; the kernel keeps what it has. */
  stop(): Promise<void>;
}

export interface StandinAgentOptions {
  /** The namespace the dataplane works in (its name under /run/netns). */
  netns: string;
  /**
   * The links it makes: the veth stand-in (default), or the production GRE driver, whose links a kernel
   * without GRE cannot make (an edge that cannot carry tunnels, as the tests need one).
   */
  linkKind?: 'veth-standin' | 'gre';
  log: Logger;
  /**
   * What the jobs call instead of the dataplane itself (a wrapper around it). Restore and the health checks
   * use the dataplane directly: they are not jobs.
   */
  wrap?: (inner: DataplaneHandle) => Dataplane;
  /** Health checks and the status op (default on, at AGENT_HEALTH_INTERVAL_S). */
  health?: boolean;
}

async function serve(config: AgentConfig, log: Logger, jobs: Dataplane, health: RunningHealth | undefined, close: () => Promise<void>, tunnelLinks?: TunnelLinksState): Promise<DemoAgent> {
  let agent: RunningAgent;
  try {
    agent = await startAgent(config, { dataplane: jobs, log, ...(tunnelLinks ? { tunnelLinks } : {}), ...(health ? { status: health.status, traffic: (ids, since) => health.traffic.answer(ids, since), events: health.events } : {}) });
  } catch (e) {
    await health?.stop();
    await close();
    throw e;
  }
  return {
    agent,
    async stop() {
      await health?.stop();
      await agent.stop();
      await close();
    },
  };
}

export async function startStandinAgent(config: AgentConfig, opts: StandinAgentOptions): Promise<DemoAgent> {
  const inner = await createDataplane({ edgeIp: config.edgeIp, nftTable: config.nftTable, stateDir: config.stateDir, netns: opts.netns, linkKind: opts.linkKind ?? 'veth-standin' });
  // As agent/main.ts does: the last desired state is restored before any job can arrive, and whether the
  // links can be made is asked before the first job (said in hello and status).
  await restoreAtStart(inner, opts.log, config);
  const tunnelLinks = new TunnelLinksState(() => inner.tunnelLinks(), opts.log);
  await tunnelLinks.refresh();
  const health = opts.health === false ? undefined : startHealth(inner, { intervalS: config.healthIntervalS, tunnelLinks });
  return serve(config, opts.log, opts.wrap ? opts.wrap(inner) : inner, health, () => inner.close(), tunnelLinks);
}

export async function startSimulatedAgent(config: AgentConfig, opts: { log: Logger }): Promise<DemoAgent> {
  const dataplane = new SimulatedDataplane(opts.log);
  const health = startHealth(dataplane, { intervalS: config.healthIntervalS });
  return serve(config, opts.log, dataplane, health, () => dataplane.close());
}
