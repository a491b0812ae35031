// Timing probe for the gateway processes of bench:fleet, loaded with `--import` before server/main.ts: it wraps
// (never replaces) the status collector's round and per-node poll and the status ingest on their prototypes,
// so the real code runs and this only times it. Nothing of the gateway is changed for the benchmark; the
// gateway logs no such timings itself. Each timing is one stderr line `FLEET-PROBE {json}`, which bench/fleet.ts
// reads. A method that is not there any more (the code moved) is announced once as `missing`, and the figure
// it fed is then reported as not measured rather than as zero.
import { Collector } from '../../server/health/collector.ts';
import { StatusIngest } from '../../server/health/ingest.ts';
import { PROBE_PREFIX } from './fleet-probe-prefix.ts';
const emit = (o: object): void => void process.stderr.write(`${PROBE_PREFIX}${JSON.stringify(o)}\n`);

type AnyFn = (...args: unknown[]) => Promise<unknown>;

function wrap(proto: object, method: string, probe: string, fields: (args: unknown[], result: unknown) => object = () => ({})): void {
  const p = proto as Record<string, AnyFn | undefined>;
  const original = p[method];
  if (typeof original !== 'function') {
    emit({ probe: 'missing', what: `${probe}: ${method}` });
    return;
  }
  p[method] = async function timed(this: unknown, ...args: unknown[]) {
    const t0 = performance.now();
    const result = await original.apply(this, args);
    emit({ probe, ms: performance.now() - t0, ...fields(args, result) });
    return result;
  };
}

wrap(Collector.prototype, 'round', 'round', (_a, r) => {
  const nodes = Object.values((r as { nodes?: Record<string, string> } | undefined)?.nodes ?? {});
  return { polled: nodes.filter((n) => n !== 'skipped').length, skipped: nodes.filter((n) => n === 'skipped').length };
});
wrap(Collector.prototype, 'pollNode', 'poll', (_a, r) => ({ outcome: r }));
wrap(StatusIngest.prototype, 'ingestStatus', 'ingest', (args) => ({ tunnels: (args[1] as { tunnels?: unknown[] } | undefined)?.tunnels?.length ?? 0 }));
