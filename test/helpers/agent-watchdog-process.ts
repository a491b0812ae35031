// A real agent process for the watchdog's tests (test/integration/agent-watchdog.test.ts): the production
// startWatchdog(), createDataplane(), startHealth() and startAgent() as agent/main.ts wires them, configured from
// the environment like `npm run agent`, except that the dataplane lives in the network namespace TG_TEST_NETNS
// with the veth stand-in for GRE (this kernel has no GRE) while the SSH port stays on the host's loopback.
// The first line on stdout is {"ready": true, "port", "fingerprint"}; the log (the watchdog thread's line
// included) goes to stderr.
//
// TG_TEST_HANG_AT=OP:STEP: the dataplane's TEST-ONLY seam (DataplaneOptions.testOnlyHang): the first operation OP
// (apply, remove, reconcile) that reaches STEP (kernel/context.ts step(): "nftables commit"...) hangs there, as one the
// kernel never answers would, until the test writes {"release_hang": true} on stdin; with TG_TEST_HANG_BLOCK=1 it
// holds the event loop itself, for good. SIGTERM/SIGINT stop it as agent/main.ts does: bounded by STOP_BOUND_S.
import { createInterface } from 'node:readline';
import { loadConfig } from '../../agent/config.ts';
import { restoreAtStart, startAgent, startHealth, startWatchdog } from '../../agent/main.ts';
import { createDataplane } from '../../agent/dataplane/index.ts';
import { createLogger } from '../../common/log.ts';

const config = loadConfig(process.env);
const netns = process.env.TG_TEST_NETNS;
if (!netns) throw new Error('TG_TEST_NETNS is required');
const hangAt = process.env.TG_TEST_HANG_AT;
if (hangAt !== undefined && !/^(apply|remove|reconcile):.+$/.test(hangAt)) throw new Error(`TG_TEST_HANG_AT must be OP:STEP, not ${hangAt}`);
let releaseHang: () => void = () => undefined;
const hangReleased = new Promise<void>((r) => (releaseHang = r));
createInterface({ input: process.stdin }).on('line', (line) => {
  if ((JSON.parse(line) as { release_hang?: boolean }).release_hang) releaseHang();
});

const log = createLogger(config.logLevel, { service: 'agent' }, (l) => process.stderr.write(l));
// As agent/main.ts does, before the dataplane; its thread's line goes to stderr with the log's.
const watchdog = startWatchdog(config.watchdogS, log, { service: 'agent' }, 2);
const dataplane = await createDataplane({
  edgeIp: config.edgeIp,
  nftTable: config.nftTable,
  stateDir: config.stateDir,
  netns,
  linkKind: 'veth-standin',
  ...(hangAt
    ? { testOnlyHang: { op: hangAt.slice(0, hangAt.indexOf(':')), step: hangAt.slice(hangAt.indexOf(':') + 1), release: hangReleased, blockEventLoop: process.env.TG_TEST_HANG_BLOCK === '1' } }
    : {}),
});
await restoreAtStart(dataplane, log, config);
const health = startHealth(dataplane, { intervalS: config.healthIntervalS });
const agent = await startAgent(config, { dataplane, log, status: health.status });
process.stdout.write(`${JSON.stringify({ ready: true, port: agent.address.port, fingerprint: agent.hostKey.fingerprint })}\n`);

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  // As agent/main.ts does: whatever hangs, the process ends within the stop's bound.
  watchdog.stopping();
  log.info('shutting down; the dataplane stays as it is');
  await agent.stop();
  await health.stop();
  await dataplane.close();
  await watchdog.stop();
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
