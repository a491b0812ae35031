// The demo edge as its own process (demo/main.ts starts it): configured like `tunnel-agent` from AGENT_*
// variables, plus
//   DEMO_EDGE=agent       the real agent, its dataplane in namespace DEMO_EDGE_NETNS (veth stand-in for GRE),
//                         with the demo origin in DEMO_ORIGIN_NETNS wired to each tunnel it creates
//   DEMO_EDGE=simulated   the simulated edge (demo/simulated-dataplane.ts): no kernel work at all
// Its first stdout line is {"ready": true, "edge", "port", "fingerprint"}; its log lines go to stderr. It stops
// on SIGTERM/SIGINT, and when its standard input closes: the demo that started it is gone, even killed.
import { loadConfig } from '../agent/config.ts';
import type { Dataplane, DataplaneHandle, TunnelSpec } from '../agent/dataplane/index.ts';
import { createLogger, type Logger } from '../common/log.ts';
import { startSimulatedAgent, startStandinAgent, type DemoAgent } from './edge-agent.ts';
import { Netns } from './netns.ts';
import { DemoOrigin } from './origin.ts';

const kind = process.env.DEMO_EDGE;
if (kind !== 'agent' && kind !== 'simulated') throw new Error(`DEMO_EDGE must be agent or simulated, not ${kind}`);
const config = loadConfig(process.env);
const log = createLogger(config.logLevel, { service: kind === 'agent' ? 'demo edge agent' : 'simulated edge' }, (l) => process.stderr.write(l));

/**
 * The jobs' dataplane with the demo origin hooked in: each tunnel an apply or reconcile leaves on the edge gets
 * its origin end before the agent answers, so an `activate` right after `provision` finds the origin there.
 */
function withOrigin(inner: DataplaneHandle, origin: DemoOrigin, log: Logger): Dataplane {
  const connect = (ts: TunnelSpec[]) => {
    for (const t of ts) {
      try {
        origin.connect(t);
      } catch (e) {
        log.warn('demo origin: could not connect a tunnel', { tunnel_id: t.id, err: e });
      }
    }
  };
  return {
    apply: async (t) => {
      const r = await inner.apply(t);
      connect([t]);
      return r;
    },
    reconcile: async (ts) => {
      const r = await inner.reconcile(ts);
      const failed = new Set(r.failed.map((f) => f.id));
      connect(ts.filter((t) => !failed.has(t.id)));
      return r;
    },
    remove: (t) => inner.remove(t),
    probe: (t, o) => inner.probe(t, o),
    has: (id) => inner.has(id),
    close: () => inner.close(),
  };
}

let running: DemoAgent;
if (kind === 'agent') {
  const edgeNs = process.env.DEMO_EDGE_NETNS;
  const originNs = process.env.DEMO_ORIGIN_NETNS;
  if (!edgeNs || !originNs) throw new Error('DEMO_EDGE_NETNS and DEMO_ORIGIN_NETNS are required with DEMO_EDGE=agent');
  const origin = new DemoOrigin(new Netns(edgeNs, { create: false }), new Netns(originNs, { create: false }), log);
  running = await startStandinAgent(config, { netns: edgeNs, log, wrap: (inner) => withOrigin(inner, origin, log) });
} else {
  running = await startSimulatedAgent(config, { log });
}
process.stdout.write(`${JSON.stringify({ ready: true, edge: kind, port: running.agent.address.port, fingerprint: running.agent.hostKey.fingerprint })}\n`);

let stopping = false;
const stop = async (why: string) => {
  if (stopping) return;
  stopping = true;
  log.info('stopping', { why });
  await running.stop();
  process.exit(0);
};
process.on('SIGTERM', () => void stop('SIGTERM'));
process.on('SIGINT', () => void stop('SIGINT'));
process.stdin.on('end', () => void stop('the demo is gone (standard input closed)'));
process.stdin.on('error', () => void stop('the demo is gone (standard input failed)'));
process.stdin.resume();
