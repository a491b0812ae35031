// One process of the fleet simulator's edges (bench/fleet.ts): several edge agents in one Node process, each
// the agent's own code from agent/main.ts (startAgent: the ssh2 server on its own loopback port with its own
// host key, job verification with jose against its own job-key configuration and replay cache, the status op,
// the events stream) over a DATAPLANE STAND-IN (fleet-standin-dataplane.ts: no kernel work), so that hundreds of
// edges fit on this host.
//
// What differs from a deployed agent, and why: the health checks run (startHealth's scheduler, over the
// stand-in's probes) but the per-second attack monitor and its traffic ring do not: they read the kernel's
// counters once a second per edge, which is the edge's own cost (bench:attack-monitor), not the gateway's;
// the `traffic` op therefore answers an empty ring. No watchdog thread (one per edge would be hundreds of
// threads). Logs at warn only.
//
// Input: TG_FLEET_EDGES_FILE, a JSON file ({ authorizedKey, jobKey, busyShare, healthIntervalS, edges: [{ nodeId,
// port, stateDir, edgeIp }] }). Output on stdout, one JSON object a line: { ready, edges } once every edge
// listens; { call, node, ids, at } for each apply and remove the dataplane answered (at: epoch ms) and
// { call: 'reconcile', node, at }; { status, node, req, ans } for each status op (request and answer, epoch ms).
import { readFileSync } from 'node:fs';
import { createLogger } from '../../common/log.ts';
import { loadConfig } from '../../agent/config.ts';
import { startAgent, startHealth, type RunningAgent, type RunningHealth } from '../../agent/main.ts';
import { FleetStandinDataplane, epochMs } from './fleet-standin-dataplane.ts';

interface EdgesFile {
  authorizedKey: string;
  jobKey: string;
  busyShare: number;
  healthIntervalS: number;
  edges: { nodeId: string; port: number; stateDir: string; edgeIp: string }[];
}

const file = process.env.TG_FLEET_EDGES_FILE;
if (!file) throw new Error('TG_FLEET_EDGES_FILE is required');
const spec = JSON.parse(readFileSync(file, 'utf8')) as EdgesFile;
const say = (o: object): void => void process.stdout.write(`${JSON.stringify(o)}\n`);
const log = createLogger('warn', { service: 'fleet-edge' }, (l) => process.stderr.write(l));

const running: { agent: RunningAgent; health: RunningHealth }[] = [];
for (const [i, e] of spec.edges.entries()) {
  const node = e.nodeId;
  const dataplane = new FleetStandinDataplane(spec.busyShare, (c) => say(c.op === 'reconcile' ? { call: c.op, node, at: c.at } : { call: c.op, node, ids: c.ids, at: c.at }));
  const health = startHealth(dataplane, { intervalS: spec.healthIntervalS, timer: false });
  // The checks on their timer, as the agent runs them; the attack monitor stays off (see above).
  health.scheduler.start();
  const config = loadConfig({
    AGENT_NODE_ID: node,
    AGENT_LISTEN: `127.0.0.1:${e.port}`,
    AGENT_STATE_DIR: e.stateDir,
    AGENT_AUTHORIZED_KEY: spec.authorizedKey,
    AGENT_JOB_KEY: spec.jobKey,
    AGENT_EDGE_IP: e.edgeIp,
    AGENT_LOG_LEVEL: 'warn',
  });
  const status = async () => {
    const req = epochMs();
    const r = await health.status();
    say({ status: i, node, req, ans: epochMs() });
    return r;
  };
  const agent = await startAgent(config, { dataplane, log: log.child({ node_id: node }), status, traffic: (ids, since) => health.traffic.answer(ids, since), events: health.events });
  running.push({ agent, health });
}
say({ ready: true, edges: running.length });

const stop = async (): Promise<void> => {
  await Promise.all(running.map(async (r) => {
    await r.agent.stop(0);
    await r.health.stop();
  }));
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
