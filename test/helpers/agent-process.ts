// A real agent process for the provisioning tests and the provisioning benchmark: the production
// startAgent() and createDataplane(), configured from the environment like `npm run agent`, except
// that the dataplane lives in the network namespace TG_TEST_NETNS with the veth stand-in for GRE (this
// kernel has no GRE; TG_TEST_LINK_KIND=gre for an edge that cannot carry tunnels) while the SSH port stays
// on the host's loopback: the demo edge's agent (demo/edge-agent.ts startStandinAgent). Each dataplane call that reaches
// the kernel is reported as one JSON line on stdout ({"call": op, "ids": [...]}) so tests can count
// how many times a job was applied. The first line is {"ready": true, "port", "fingerprint"}.
//
// TG_TEST_HOLD=before|after: each call is announced with a number ({"call", "ids", "held": n}) and then held,
// before it reaches the kernel or after it did (before the job's answer goes back), until the test writes
// {"release": n} on stdin; so a test can kill the agent or cut its connection at an exact point of a job.
// When the held call has finished (its answer is on its way to the gateway), {"done": n} follows: between
// the two lines the call is in flight, which is how a test counts the jobs a node runs at once.
import { createInterface } from 'node:readline';
import { loadConfig } from '../../agent/config.ts';
import type { Dataplane, TunnelRef, TunnelSpec } from '../../agent/dataplane/index.ts';
import { createLogger } from '../../common/log.ts';
import { startStandinAgent } from '../../demo/edge-agent.ts';

const say = (o: object) => process.stdout.write(`${JSON.stringify(o)}\n`);

const holdAt = process.env.TG_TEST_HOLD as 'before' | 'after' | undefined;
if (holdAt !== undefined && holdAt !== 'before' && holdAt !== 'after') throw new Error(`TG_TEST_HOLD must be before or after, not ${holdAt}`);
const releases = new Map<number, () => void>();
if (holdAt) {
  createInterface({ input: process.stdin }).on('line', (line) => {
    const n = (JSON.parse(line) as { release: number }).release;
    releases.get(n)?.();
    releases.delete(n);
  });
}
let held = 0;
/** Reports one dataplane call and runs it; with TG_TEST_HOLD, waits for the test's release at that point. */
async function report<T>(call: string, ids: string[], run: () => Promise<T>): Promise<T> {
  if (!holdAt) {
    say({ call, ids });
    return run();
  }
  const n = ++held;
  const released = new Promise<void>((r) => releases.set(n, r));
  try {
    if (holdAt === 'before') {
      say({ call, ids, held: n });
      await released;
      return await run();
    }
    const result = await run();
    say({ call, ids, held: n });
    await released;
    return result;
  } finally {
    say({ done: n });
  }
}

const config = loadConfig(process.env);
const netns = process.env.TG_TEST_NETNS;
if (!netns) throw new Error('TG_TEST_NETNS is required');
// TG_TEST_LINK_KIND=gre: the production link driver, whose links this kernel cannot make (no GRE): an
// edge that really cannot carry tunnels, as the agent finds out and reports (dataplane/link-support.ts).
const linkKind = process.env.TG_TEST_LINK_KIND ?? 'veth-standin';
if (linkKind !== 'gre' && linkKind !== 'veth-standin') throw new Error(`TG_TEST_LINK_KIND must be gre or veth-standin, not ${linkKind}`);
const log = createLogger((process.env.AGENT_LOG_LEVEL as 'silent' | undefined) ?? 'silent', { service: 'agent' }, (l) => process.stderr.write(l));
// Each call a job makes is reported (restore and health checks use the dataplane directly: they are not
// calls). Health checks and the status op only when the test asks (AGENT_HEALTH_INTERVAL_S set): their
// probes would otherwise run beside every other test's jobs.
const running = await startStandinAgent(config, {
  netns,
  linkKind,
  log,
  health: Boolean(process.env.AGENT_HEALTH_INTERVAL_S),
  wrap: (inner): Dataplane => ({
    apply: (t: TunnelSpec) => report('apply', [t.id], () => inner.apply(t)),
    remove: (t: TunnelRef) => report('remove', [t.id], () => inner.remove(t)),
    reconcile: (ts: TunnelSpec[]) => report('reconcile', ts.map((t) => t.id), () => inner.reconcile(ts)),
    probe: (t: TunnelSpec) => report('probe', [t.id], () => inner.probe(t)),
    has: (id: string) => inner.has(id),
    close: () => inner.close(),
  }),
});
say({ ready: true, port: running.agent.address.port, fingerprint: running.agent.hostKey.fingerprint });
const stop = async () => {
  await running.stop();
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
