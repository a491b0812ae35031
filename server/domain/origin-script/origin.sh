#!/usr/bin/env bash
# Tunnelgate origin script, as it lives in the repository (server/domain/origin-script/origin.sh).
#
# The gateway serves it to buyers (GET /api/dedicated/{id}/setup, scripts.origin) with everything above
# the "end of the stand-in header" line replaced by a header it renders for the tunnel: comments naming
# the tunnel, `set -euo pipefail`, and one `readonly NAME='value'` line per name declared below
# (server/domain/origin-scripts.ts). Only that header carries values; from the line after the marker on,
# this file is served byte for byte, so edit the script here, as a shell script.
#
# This stand-in header declares the same names, empty, so that shellcheck checks the file as it is
# (test/unit/origin-script-file.test.ts also keeps the two lists of names equal), and it stops the
# template from running as if it were a tunnel's script.
set -euo pipefail

readonly TUNNEL_ID=''
readonly TUNNEL_NAME=''
readonly PROTECTED_IP=''
readonly ORIGIN_IP=''
readonly EDGE_IP=''
readonly EDGE_INNER_IP=''
readonly ORIGIN_INNER=''
readonly ORIGIN_INNER_IP=''
readonly TUNNEL_MTU=''
readonly GRE_KEY=''
readonly GRE_KEY_DOTTED=''
readonly ROUTE_TABLE=''
readonly SCRIPT_PATH=''
readonly UNIT_NAME=''
readonly BOOT_UNIT=''
if [[ -z $TUNNEL_ID ]]; then
  printf 'tunnelgate: error: %s\n' "this is the template, not a tunnel's script: fetch yours with GET /api/dedicated/{id}/setup" >&2
  exit 1
fi
# ---- end of the stand-in header: the gateway serves every line below as it is ----
readonly GRE_TTL=255
# One nftables table for all Tunnelgate tunnels on this host: a tunnel is an element of its set.
readonly NFT_TABLE=tunnelgate_origin
LOCAL_IP=''
# What --install writes (docs/CONTRACTS.md "Origin side"). GRE has no keepalive, and the kernel deletes
# the policy table's route when the link goes down: a periodic, idempotent "up" is what brings it back.
readonly UNIT_DIR=/etc/systemd/system
readonly REPAIR_SERVICE=${UNIT_NAME%.service}-repair.service
readonly REPAIR_TIMER=${UNIT_NAME%.service}-repair.timer
readonly REPAIR_SECONDS=45

# What this script does: the origin's end of the tunnel (the GRE link to the edge, this server's inner
# address, a routing table so replies from the inner address go back through the tunnel, loose reverse-path
# filtering, an MSS clamp). It does not filter anything: the tunnel's protection runs on the edge, before
# traffic uses this server's bandwidth, and is set with PATCH /api/dedicated/{id} (or GraphQL updateTunnel),
# never here. Those settings, for reference:
#   ports              "*" (every port) or the destination ports that may reach this server, e.g.
#                      "22,80,443,25565-25575" (at most 32 ports or ranges); anything else is dropped.
#   protocol           "both", "tcp" or "udp": the other protocol is dropped.
#   protection.syn_proxy
#                      the edge completes each TCP handshake itself and opens the connection to this server
#                      only after the client answered, so a SYN flood from spoofed addresses never reaches
#                      it; this server still sees each client's real address. Worth it for any TCP service.
#   protection.source_pps_limit
#                      packets per second one client address may send to the protected IP (10 to 1000000,
#                      or null: no limit); the excess is dropped. Pick it from the service's own traffic:
#                      the peak packet rate of one legitimate client (measure it, e.g. the packets of one
#                      player's session per second), times 2 to 5 for headroom, and higher when many users
#                      share one address (offices, carrier NAT). Too low drops real clients' packets.
#   protection.drop_fragments
#                      drops IP fragments at the edge (fragment floods). TCP never needs fragments here (the
#                      MSS is clamped to the tunnel's MTU); leave it off for a UDP service whose clients
#                      send datagrams larger than the path's MTU (they arrive as fragments).
# UDP services should bind to this server's inner address ($ORIGIN_INNER_IP), not 0.0.0.0: clients' packets
# arrive addressed to it, and a UDP socket bound to 0.0.0.0 answers from whichever address the main routing
# table picks (the public one), so the reply leaves outside the tunnel, never reaches the client, and shows
# this server's real address. The routing table above only catches packets sent from the inner address.
# TCP answers from the address it was reached on, so TCP services may listen on 0.0.0.0.

say() { printf 'tunnelgate: %s\n' "$*"; }
warn() { printf 'tunnelgate: warning: %s\n' "$*" >&2; }
die() {
  printf 'tunnelgate: error: %s\n' "$*" >&2
  exit 1
}
# Every change is echoed before it is made, so the buyer sees exactly what was done to the host.
run() {
  say "+ $*"
  "$@"
}
have() { command -v "$1" >/dev/null 2>&1; }

usage() {
  cat <<EOF
usage: $SCRIPT_PATH [up | --remove]
       $SCRIPT_PATH --install
  up          (default) create or repair GRE tunnel $TUNNEL_NAME to the edge $EDGE_IP
  --remove    remove what "up" set up (also: down, remove), and what --install installed
  --install   "up", then keep it applied with systemd: copies this script to $SCRIPT_PATH,
              writes $UNIT_NAME (runs "up" at boot, once the network is online) and
              $REPAIR_TIMER (runs "up" again every ${REPAIR_SECONDS} s, so a link flap
              or a deleted route is repaired without you), and enables both.
              Run it from a file (sudo bash origin.sh --install), not piped.
All are safe to run again.
EOF
}

preflight() {
  [[ $EUID -eq 0 ]] || die "run this script as root (sudo bash $SCRIPT_PATH)"
  have ip || die "the 'ip' command is missing: install iproute2"
}

# Prints the word after KEY among the remaining arguments, or nothing. `ip -o` prints
# "key value" words on one line; they are parsed here because jq is not on every origin.
word_after() {
  local key=$1
  shift
  while (($# > 1)); do
    if [[ $1 == "$key" ]]; then
      printf '%s\n' "$2"
      return 0
    fi
    shift
  done
  # Success even when absent: callers assign the output, and a failing $(...) would trip set -e.
  return 0
}

link_exists() { ip link show dev "$TUNNEL_NAME" >/dev/null 2>&1; }
link_details() { ip -d -o link show dev "$TUNNEL_NAME" 2>/dev/null; }

link_is_gre() {
  local details
  details=$(link_details) || return 1
  [[ " $details " == *" link/gre "* ]]
}

# True when the existing link has this tunnel's endpoints, ttl and key.
gre_params_match() {
  local details
  local -a w
  details=$(link_details) || return 1
  read -r -a w <<<"$details"
  # Parse only from the "gre remote" kind section on, so an interface alias cannot fake a value.
  while ((${#w[@]} > 1)) && [[ ${w[0]} != gre || ${w[1]} != remote ]]; do
    w=("${w[@]:1}")
  done
  ((${#w[@]} > 1)) || return 1
  [[ $(word_after remote "${w[@]}") == "$EDGE_IP" &&
    $(word_after local "${w[@]}") == "$LOCAL_IP" &&
    $(word_after ttl "${w[@]}") == "$GRE_TTL" &&
    $(word_after ikey "${w[@]}") == "$GRE_KEY_DOTTED" &&
    $(word_after okey "${w[@]}") == "$GRE_KEY_DOTTED" ]]
}

# GRE's local end is ORIGIN_IP when this host has it. Behind 1:1 NAT (most clouds) the public address
# is not on any interface and packets sourced from it are dropped as spoofed, so the address this
# host reaches the edge from is used instead; NAT turns it into ORIGIN_IP on the way out.
resolve_local_ip() {
  local addrs route
  local -a w
  addrs=$(ip -4 -o addr show)
  if [[ $addrs == *" inet $ORIGIN_IP/"* ]]; then
    LOCAL_IP=$ORIGIN_IP
    return 0
  fi
  route=$(ip -4 route get "$EDGE_IP" 2>/dev/null) || die "this server has no route to the edge $EDGE_IP"
  read -r -a w <<<"$route"
  LOCAL_IP=$(word_after src "${w[@]}")
  [[ -n $LOCAL_IP ]] || die "cannot tell which local address reaches the edge $EDGE_IP"
  warn "$ORIGIN_IP is not an address of this server (1:1 NAT?): using $LOCAL_IP, the address it reaches the edge from, as the tunnel's local end; the edge still sends to $ORIGIN_IP"
}

create_link() {
  set -- ip link add name "$TUNNEL_NAME" type gre local "$LOCAL_IP" remote "$EDGE_IP" ttl "$GRE_TTL"
  if [[ -n $GRE_KEY ]]; then
    set -- "$@" key "$GRE_KEY"
  fi
  say "+ $*"
  local err
  if err=$("$@" 2>&1); then
    return 0
  fi
  # The kernel loads ip_gre on demand; still absent after a failed add means no GRE in this kernel.
  # Creating the link is the first change this script makes, so nothing is half-configured.
  if [[ ! -d /sys/module/ip_gre ]]; then
    die "this kernel has no GRE support (modprobe ip_gre): $err; nothing was changed"
  fi
  die "could not create $TUNNEL_NAME: $err"
}

ensure_link() {
  if ! link_exists; then
    create_link
  elif ! link_is_gre; then
    die "interface $TUNNEL_NAME exists and is not a GRE tunnel; rename or remove it, then run this again"
  elif gre_params_match; then
    say "GRE link $TUNNEL_NAME already points at $EDGE_IP"
  else
    say "GRE link $TUNNEL_NAME has other endpoints, ttl or key: recreating it"
    run ip link del dev "$TUNNEL_NAME"
    create_link
  fi
  run ip link set dev "$TUNNEL_NAME" mtu "$TUNNEL_MTU"
  run ip link set dev "$TUNNEL_NAME" up
}

ensure_address() {
  local addrs line cidr
  local -a w
  run ip addr replace "$ORIGIN_INNER" dev "$TUNNEL_NAME"
  # The link belongs to this tunnel alone: drop addresses an earlier inner subnet left behind.
  # A here-string, not < <(...): process substitution needs /dev/fd, which minimal systems lack.
  addrs=$(ip -4 -o addr show dev "$TUNNEL_NAME")
  while IFS= read -r line; do
    read -r -a w <<<"$line"
    cidr=$(word_after inet "${w[@]}")
    if [[ -n $cidr && $cidr != "$ORIGIN_INNER" ]]; then
      run ip addr del "$cidr" dev "$TUNNEL_NAME"
    fi
  done <<<"$addrs"
}

rule_present() {
  local rules
  rules=$(ip -4 rule show from "$ORIGIN_INNER_IP" lookup "$ROUTE_TABLE" 2>/dev/null) || return 1
  # The check on the text also guards against an old ip that ignores the selectors and lists all.
  [[ $rules == *"from $ORIGIN_INNER_IP "* ]]
}

# Replies from the inner address must go back through the tunnel: with the main table they would
# leave by the underlay, and the edge (and the client) would never see them.
ensure_routing() {
  run ip route replace default dev "$TUNNEL_NAME" table "$ROUTE_TABLE"
  if rule_present; then
    say "policy rule from $ORIGIN_INNER_IP lookup $ROUTE_TABLE already present"
  else
    run ip rule add from "$ORIGIN_INNER_IP" lookup "$ROUTE_TABLE"
  fi
}

# Loose reverse-path filtering on the tunnel: clients' addresses are routed via the underlay in the
# main table, so a strict check could drop their packets arriving through the tunnel. The kernel uses
# the larger of conf.all and conf.<link> (2 is the largest), so conf.all is left as the admin set it.
ensure_rp_filter() {
  if have sysctl; then
    run sysctl -q -w "net.ipv4.conf.$TUNNEL_NAME.rp_filter=2"
  else
    say "+ echo 2 > /proc/sys/net/ipv4/conf/$TUNNEL_NAME/rp_filter"
    printf '2\n' >"/proc/sys/net/ipv4/conf/$TUNNEL_NAME/rp_filter"
  fi
}

nft_usable() { have nft && nft list tables >/dev/null 2>&1; }

iptables_mss() {
  iptables -w -t mangle "$1" POSTROUTING -o "$TUNNEL_NAME" -p tcp --tcp-flags SYN,RST SYN \
    -j TCPMSS --clamp-mss-to-pmtu
}

# TCP leaving through the tunnel gets its MSS clamped to the tunnel's MTU (forwarded traffic, such as
# containers, does not get it from the local TCP stack).
ensure_mss_clamp() {
  if nft_usable; then
    say "+ nft: table ip $NFT_TABLE, clamp TCP MSS on $TUNNEL_NAME"
    # One atomic batch; flushing and re-adding the single rule keeps it idempotent.
    nft -f - <<EOF
add table ip $NFT_TABLE
add set ip $NFT_TABLE tunnels { type ifname; }
add chain ip $NFT_TABLE postrouting { type filter hook postrouting priority mangle; policy accept; }
flush chain ip $NFT_TABLE postrouting
add rule ip $NFT_TABLE postrouting oifname @tunnels tcp flags syn tcp option maxseg size set rt mtu
add element ip $NFT_TABLE tunnels { "$TUNNEL_NAME" }
EOF
  elif have iptables; then
    if iptables_mss -C 2>/dev/null; then
      say "iptables MSS clamp on $TUNNEL_NAME already present"
    else
      say "+ iptables -t mangle -A POSTROUTING -o $TUNNEL_NAME ... -j TCPMSS --clamp-mss-to-pmtu"
      iptables_mss -A
    fi
  else
    warn "neither nft nor iptables is installed: no TCP MSS clamp on $TUNNEL_NAME (large TCP transfers may stall)"
  fi
}

remove_mss_clamp() {
  if nft_usable && nft list table ip "$NFT_TABLE" >/dev/null 2>&1; then
    if nft get element ip "$NFT_TABLE" tunnels "{ \"$TUNNEL_NAME\" }" >/dev/null 2>&1; then
      run nft delete element ip "$NFT_TABLE" tunnels "{ \"$TUNNEL_NAME\" }"
    fi
    if [[ $(nft list set ip "$NFT_TABLE" tunnels 2>/dev/null) != *elements* ]]; then
      run nft delete table ip "$NFT_TABLE"
    fi
  fi
  if have iptables; then
    while iptables_mss -C 2>/dev/null; do
      say "+ iptables -t mangle -D POSTROUTING -o $TUNNEL_NAME ... -j TCPMSS --clamp-mss-to-pmtu"
      iptables_mss -D
    done
  fi
}

do_up() {
  resolve_local_ip
  say "tunnel $TUNNEL_NAME: $LOCAL_IP <-> edge $EDGE_IP, inner $ORIGIN_INNER, table $ROUTE_TABLE"
  ensure_link
  ensure_address
  ensure_routing
  ensure_rp_filter
  ensure_mss_clamp
  cat <<EOF

tunnelgate: done. GRE tunnel $TUNNEL_NAME is up on this server.
  Clients connect to $PROTECTED_IP; the edge forwards them through the tunnel to $ORIGIN_INNER_IP
  (this server's inner address), keeping the client's real source address.
  Bind UDP services to $ORIGIN_INNER_IP, not 0.0.0.0: a UDP reply from a socket bound to 0.0.0.0
  leaves from this server's own address through the normal route, outside the tunnel. That leaks
  this server's real IP and never reaches the client. TCP services may listen on 0.0.0.0.
  Edge end of the tunnel: $EDGE_INNER_IP (ping -I $ORIGIN_INNER_IP $EDGE_INNER_IP once provisioned).
  Next step: once the tunnel is provisioned, activate it with
    POST /api/dedicated/$TUNNEL_ID/activate
  To keep it applied (at boot, and repaired every $REPAIR_SECONDS s after a link flap), run this
  script again with --install (see --help).
EOF
}

# The repair unit: "up" again, its stdout (the same lines every run) dropped; warnings and errors still
# reach the journal (journalctl -u $REPAIR_SERVICE). TUNNELGATE_UNIT tells the script a unit runs it.
repair_service() {
  cat <<EOF
# Tunnelgate: re-applies GRE tunnel $TUNNEL_NAME (tunnel $TUNNEL_ID); started by $REPAIR_TIMER.
# Written by $SCRIPT_PATH --install; removed by $SCRIPT_PATH --remove.
[Unit]
Description=Tunnelgate: repair GRE tunnel $TUNNEL_NAME to edge $EDGE_IP
After=network-online.target

[Service]
Type=oneshot
Environment=TUNNELGATE_UNIT=%n
StandardOutput=null
ExecStart=/bin/bash $SCRIPT_PATH up
EOF
}

# Independent of the boot unit's result, so a tunnel that could not come up at boot is retried; PartOf
# stops it with the boot unit (systemctl stop $UNIT_NAME takes the tunnel down and keeps it down).
repair_timer() {
  cat <<EOF
# Tunnelgate: re-applies GRE tunnel $TUNNEL_NAME every $REPAIR_SECONDS s (the kernel drops its route
# when the link goes down, and GRE has no keepalive to notice). Written by $SCRIPT_PATH --install.
[Unit]
Description=Tunnelgate: repair GRE tunnel $TUNNEL_NAME every $REPAIR_SECONDS s
PartOf=$UNIT_NAME
After=$UNIT_NAME

[Timer]
OnActiveSec=${REPAIR_SECONDS}s
OnUnitActiveSec=${REPAIR_SECONDS}s
AccuracySec=5s

[Install]
WantedBy=timers.target
EOF
}

# Replaced whole (a temporary file renamed over it), so a unit is never read half written.
write_file() {
  local path=$1 mode=$2 text=$3
  say "+ write $path"
  printf '%s' "$text" >"$path.tunnelgate-new"
  chmod "$mode" "$path.tunnelgate-new"
  mv -f "$path.tunnelgate-new" "$path"
}

systemd_running() { have systemctl && [[ -d /run/systemd/system ]]; }

do_install() {
  # The copy comes from the file being run; piped into bash, there is no file to copy.
  local src=${BASH_SOURCE[-1]}
  [[ $src == "$0" && -f $src ]] ||
    die "--install copies this script from its file: save it first (e.g. as origin.sh), then run: sudo bash origin.sh --install"
  [[ -d $UNIT_DIR ]] || die "$UNIT_DIR is missing: --install needs systemd (without it, run this script at boot yourself, and again every minute or so)"
  do_up
  say "installing: $SCRIPT_PATH, $UNIT_DIR/$UNIT_NAME, $REPAIR_SERVICE, $REPAIR_TIMER"
  if [[ ! $src -ef $SCRIPT_PATH ]]; then
    run install -D -m 0755 -- "$src" "$SCRIPT_PATH"
  fi
  write_file "$UNIT_DIR/$UNIT_NAME" 0644 "$BOOT_UNIT"
  write_file "$UNIT_DIR/$REPAIR_SERVICE" 0644 "$(repair_service)
"
  write_file "$UNIT_DIR/$REPAIR_TIMER" 0644 "$(repair_timer)
"
  if systemd_running; then
    run systemctl daemon-reload
    # The tunnel is already up: starting the boot unit runs "up" once more and changes nothing.
    run systemctl enable --now "$UNIT_NAME" "$REPAIR_TIMER"
    say "installed: $UNIT_NAME runs \"up\" at boot, $REPAIR_TIMER every $REPAIR_SECONDS s; $SCRIPT_PATH --remove undoes it all"
  else
    warn "systemd is not running here: the units are written but not enabled; run $SCRIPT_PATH up at boot and every minute or so yourself"
  fi
}

# Undoes --install, unless a unit runs this (the boot unit's ExecStop): systemctl would then wait on
# the very job that runs it.
uninstall() {
  [[ -z ${TUNNELGATE_UNIT:-} ]] || return 0
  [[ -e $UNIT_DIR/$REPAIR_TIMER || -e $UNIT_DIR/$REPAIR_SERVICE ]] || return 0
  if systemd_running; then
    # Stopping the boot unit runs its ExecStop (the network half of --remove).
    run systemctl disable --now "$REPAIR_TIMER" "$UNIT_NAME" || warn "systemctl disable failed: removing the unit files anyway"
  fi
  run rm -f "$UNIT_DIR/$REPAIR_TIMER" "$UNIT_DIR/$REPAIR_SERVICE" "$UNIT_DIR/$UNIT_NAME" "$SCRIPT_PATH"
  if systemd_running; then
    run systemctl daemon-reload
  fi
}

do_remove() {
  uninstall
  remove_mss_clamp
  while rule_present; do
    run ip rule del from "$ORIGIN_INNER_IP" lookup "$ROUTE_TABLE"
  done
  # The table belongs to this tunnel; showing a table that never existed is an error, hence 2>/dev/null.
  if [[ -n $(ip -4 route show table "$ROUTE_TABLE" 2>/dev/null) ]]; then
    run ip route flush table "$ROUTE_TABLE"
  fi
  if link_exists; then
    if link_is_gre; then
      run ip link del dev "$TUNNEL_NAME"
    else
      warn "$TUNNEL_NAME is not a GRE tunnel, so it was not created by this script: left alone"
    fi
  fi
  say "tunnel $TUNNEL_NAME removed from this server"
}

main() {
  local action=up
  if (($# > 1)); then
    usage >&2
    exit 2
  fi
  if (($# == 1)); then
    case $1 in
      up | --up) action=up ;;
      down | --down | remove | --remove) action=remove ;;
      install | --install) action=install ;;
      -h | --help)
        usage
        exit 0
        ;;
      *)
        usage >&2
        exit 2
        ;;
    esac
  fi
  preflight
  case $action in
    remove) do_remove ;;
    install) do_install ;;
    *) do_up ;;
  esac
}

# Run unless sourced (the tests source it to drive single steps); works piped into bash too.
if ! (return 0 2>/dev/null); then
  main "$@"
fi
