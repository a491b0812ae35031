#!/usr/bin/env bash
# The VM's job (test/vm/init runs it): wires the lab, then serves the host's test over HTTP until told
# to stop. Four network namespaces, as in test/netns/nat.test.ts, but the tunnel is real GRE here:
#
#  client 198.51.100.10/24 ── router ── 192.0.2.2/30 edge   (203.0.113.0/24 is routed to the edge, as BGP would)
#                               │                eth0 10.0.2.15/24: QEMU user networking; the host's
#                               │                forwarded ports reach the control server and the agent here
#                               ├──────── 192.0.2.10/30 edge2  (a second edge: 203.0.113.64/26 is routed here;
#                               │                               its agent is reached through a relay in edge)
#                               └──────── 192.0.2.6/30 origin  (its GRE links and policy routes come from
#                                                               the real origin script, run by the test)
set -euo pipefail
cd "$(dirname "$0")/../../.."
t0=$(cut -d' ' -f1 /proc/uptime)

for ns in client router edge edge2 origin; do ip netns add "$ns"; done
ip link add c0 netns client type veth peer name r-c netns router
ip link add e0 netns edge type veth peer name r-e netns router
ip link add e0 netns edge2 type veth peer name r-e2 netns router
ip link add o0 netns origin type veth peer name r-o netns router
ip link set eth0 netns edge

ip -n client -batch - <<'EOF'
link set lo up
link set c0 up
addr add 198.51.100.10/24 dev c0
route add default via 198.51.100.1
EOF
ip -n router -batch - <<'EOF'
link set lo up
link set r-c up
link set r-e up
link set r-o up
link set r-e2 up
addr add 198.51.100.1/24 dev r-c
addr add 192.0.2.1/30 dev r-e
addr add 192.0.2.5/30 dev r-o
addr add 192.0.2.9/30 dev r-e2
route add 203.0.113.0/24 via 192.0.2.2
route add 203.0.113.64/26 via 192.0.2.10
EOF
ip -n edge -batch - <<'EOF'
link set lo up
link set e0 up
link set eth0 up
addr add 192.0.2.2/30 dev e0
addr add 10.0.2.15/24 dev eth0
route add default via 192.0.2.1
EOF
ip -n edge2 -batch - <<'EOF'
link set lo up
link set e0 up
addr add 192.0.2.10/30 dev e0
route add default via 192.0.2.9
EOF
ip -n origin -batch - <<'EOF'
link set lo up
link set o0 up
addr add 192.0.2.6/30 dev o0
route add default via 192.0.2.5
EOF
ip netns exec router sysctl -qw net.ipv4.ip_forward=1
echo "tg-vm: lab wired in $(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN{printf "%.2f", b-a}') s"

exec ip netns exec edge node_modules/.bin/node --import ./loader/register.mjs test/vm/guest/control.ts
