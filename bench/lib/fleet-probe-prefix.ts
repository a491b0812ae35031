// The prefix of the timing lines bench/lib/fleet-probe.ts writes on a gateway's stderr and bench/fleet.ts reads:
// its own module, so the reader does not import (and so run) the probe itself.
export const PROBE_PREFIX = 'FLEET-PROBE ';
