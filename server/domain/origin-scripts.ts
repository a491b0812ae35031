// The buyer-side half of a tunnel: a bash script the buyer runs as root on the hidden origin, and a
// systemd unit that runs it at boot (docs/CONTRACTS.md "Dataplane", "Origin side"). Pure text rendering:
// the script itself is a real file, origin-script/origin.sh, and the unit is origin-script/
// tunnelgate-origin.service (read once, origin-script/templates.ts); this module renders only the
// values, checked first by origin-script/validate.ts.
import { ORIGIN_BODY, UNIT_TEMPLATE, fillUnit } from './origin-script/templates.ts';
import { validateOriginScript, type OriginScriptParams, type OriginScriptValues } from './origin-script/validate.ts';

export type { OriginScriptParams } from './origin-script/validate.ts';

export interface OriginScripts {
  origin: string;
  systemd_origin: string;
}

/** Both texts for one tunnel; a TypeError ("origin script: <field> ...") when a value is refused. */
export function renderOriginScripts(p: OriginScriptParams): OriginScripts {
  const v = validateOriginScript(p);
  const unit = renderUnit(v);
  // The script carries the unit too, so --install writes byte for byte the unit served beside it.
  return { origin: renderHeader(v, unit) + ORIGIN_BODY, systemd_origin: unit };
}

/** Single-quoted for bash. Validated values never contain a quote; this is the second fence. */
function q(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

// The only part of the script that differs between tunnels. It declares the names origin.sh's stand-in
// header declares (test/unit/origin-script-file.test.ts keeps the two lists equal).
function renderHeader(v: OriginScriptValues, unit: string): string {
  return `#!/usr/bin/env bash
# Tunnelgate origin setup for tunnel ${v.tunnelId} (GRE link ${v.tunnelName}).
# Run as root on the origin server. Safe to run again: it only changes what differs.
#   bash ${v.scriptPath}            set up (or repair) the tunnel
#   bash ${v.scriptPath} --remove   take it down again
#   bash ${v.scriptPath} --install  keep it applied: a systemd unit (${v.unitName}) at boot
#                                   and a timer that repairs it every 45 s (see --help)
set -euo pipefail

readonly TUNNEL_ID=${q(v.tunnelId)}
readonly TUNNEL_NAME=${q(v.tunnelName)}
readonly PROTECTED_IP=${q(v.protectedIp)}
readonly ORIGIN_IP=${q(v.originIp)}
readonly EDGE_IP=${q(v.edgeIp)}
readonly EDGE_INNER_IP=${q(v.edgeInnerIp)}
readonly ORIGIN_INNER=${q(v.originInner)}
readonly ORIGIN_INNER_IP=${q(v.originInnerIp)}
readonly TUNNEL_MTU=${q(String(v.mtu))}
readonly GRE_KEY=${q(v.greKey === null ? '' : String(v.greKey))}
readonly GRE_KEY_DOTTED=${q(v.greKeyDotted)}
readonly ROUTE_TABLE=${q(String(v.routeTable))}
readonly SCRIPT_PATH=${q(v.scriptPath)}
readonly UNIT_NAME=${q(v.unitName)}
readonly BOOT_UNIT=${q(unit)}
`;
}

function renderUnit(v: OriginScriptValues): string {
  return fillUnit(UNIT_TEMPLATE, {
    TUNNEL_NAME: v.tunnelName,
    TUNNEL_ID: v.tunnelId,
    SCRIPT_PATH: v.scriptPath,
    UNIT_NAME: v.unitName,
    EDGE_IP: v.edgeIp,
  });
}
