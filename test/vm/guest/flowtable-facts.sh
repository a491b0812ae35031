#!/usr/bin/env bash
# The kernel facts the fast path's design rests on (docs/FLOWTABLE.md), checked in the VM's kernel (Debian's 6.1,
# the one with flowtables) with a hand-written table of the chosen shape: an `inet` table whose ingress chain on the
# upstream link counts, judges and meters every packet to a protected IP ahead of the flowtable, and whose
# prerouting chain skips the packets that ingress chain already saw (by interface index). Run as the VM's job
# (bench/flowtable-facts.ts boots it); prints one `FACT ok|FAIL <what>` line per check and exits 1 if any failed.
#
#  client 198.51.100.10 ── e-c  edge  e-o 192.0.2.2 ── 192.0.2.6 origin
#                                tg-f1 100.64.0.1 ═══ GRE ═══ 100.64.0.2 gre-e (policy route back)
# P = 203.0.113.10 is DNAT-ed to 100.64.0.2. Counts are read after the sender exited; nothing waits on time
# except bounded polls for a path to come up.
set -uo pipefail
FLOOD=${TG_FACTS_FLOOD:?the udp-flood binary (bench/lib/udp-flood.c), built on the host}
P=203.0.113.10
fails=0
fact() { if eval "$2"; then echo "FACT ok   $1"; else echo "FACT FAIL $1"; fails=$((fails + 1)); fi; }
e() { ip netns exec edge "$@"; }
c() { ip netns exec client "$@"; }
o() { ip netns exec origin "$@"; }
counter() { ip netns exec "$1" nft -j list counter "$2" "$3" "$4" | grep -o '"packets": [0-9]*' | grep -o '[0-9]*$'; }

for ns in client edge origin; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip link add c0 netns client type veth peer name e-c netns edge
ip link add o-e netns origin type veth peer name e-o netns edge
ip -n client addr add 198.51.100.10/24 dev c0; ip -n client link set c0 up; ip -n client route add default via 198.51.100.1
ip -n edge addr add 198.51.100.1/24 dev e-c; ip -n edge link set e-c up
ip -n edge addr add 192.0.2.2/30 dev e-o; ip -n edge link set e-o up
ip -n origin addr add 192.0.2.6/30 dev o-e; ip -n origin link set o-e up
# the /30 is 192.0.2.4/30 on the origin's side: route each end to the other explicitly
ip -n edge route add 192.0.2.6/32 dev e-o; ip -n origin route add 192.0.2.2/32 dev o-e
e sysctl -qw net.ipv4.ip_forward=1
e ip link add tg-f1 type gre local 192.0.2.2 remote 192.0.2.6 ttl 255
e ip link set tg-f1 mtu 1476 up; e ip addr add 100.64.0.1/30 dev tg-f1
o ip link add gre-e type gre local 192.0.2.6 remote 192.0.2.2 ttl 255
o ip link set gre-e mtu 1476 up; o ip addr add 100.64.0.2/30 dev gre-e
o ip rule add from 100.64.0.2 lookup 100; o ip route add default dev gre-e table 100
for ns in edge origin; do for i in all default tg-f1 gre-e; do ip netns exec "$ns" sysctl -qw "net.ipv4.conf.$i.rp_filter=2" 2>/dev/null; done; done
o nft -f - <<'EOF'
table ip sink {
  counter got { }
  chain pre { type filter hook prerouting priority -300; policy accept; udp dport 9000 counter name "got" drop; }
}
EOF

e nft -f - <<EOF
table inet tg {
  flowtable fastpath { hook ingress priority -10; devices = { "e-c" }; counter; }
  counter p_in { }
  counter p_not_allowed { }
  counter p_rate_limited { }
  map tunnel_counters { type ipv4_addr : counter; elements = { $P : "p_in" } }
  set allowed_1 { type ipv4_addr . inet_proto . inet_service; elements = { $P . udp . 9000, $P . udp . 9001, $P . tcp . 5201 } }
  set upstream_links { type iface_index; elements = { "e-c" } }
  set srcmeter { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 1s; }
  map rate_limits { type ipv4_addr : verdict; }
  chain ratelimit_p {
    update @srcmeter { ip saddr limit rate 1000/second } return
    counter name "p_rate_limited" drop
  }
  chain early_in {
    type filter hook ingress devices = { "e-c" } priority -500; policy accept;
    counter name ip daddr map @tunnel_counters jump inbound
  }
  chain early {
    type filter hook prerouting priority -450; policy accept;
    meta iif @upstream_links return
    counter name ip daddr map @tunnel_counters jump inbound
  }
  chain inbound {
    ip daddr . meta l4proto . th dport @allowed_1 goto policed
    counter name "p_not_allowed" drop
  }
  chain policed {
    ip daddr vmap @rate_limits
  }
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    ip daddr $P dnat ip to 100.64.0.2
  }
  chain guard {
    type filter hook forward priority filter; policy accept;
    ct status & dnat != 0 iifname != "tg-*" flow add @fastpath accept
  }
}
EOF
fact "an inet table with an ingress chain on named devices and a flowtable loads (nft 1.0.6, kernel $(uname -r))" '[ $? -eq 0 ] && e nft list flowtable inet tg fastpath >/dev/null'

# A UDP flow: its first packets build the connection (classic path), the flow is then offloaded.
path_up() { for _ in $(seq 1 100); do c "$FLOOD" $P 9000 10 18 >/dev/null; [ "$(counter origin ip sink got)" -gt 0 ] && return 0; sleep 0.2; done; return 1; }
fact "a client's datagrams reach the origin through GRE" path_up
e nft reset counter inet tg p_in >/dev/null; o nft reset counter ip sink got >/dev/null
c "$FLOOD" $P 9000 20000 18 >/dev/null
fact "the flow is offloaded (conntrack: [OFFLOAD])" 'e conntrack -L -p udp --dport 9000 2>/dev/null | grep -q "\[OFFLOAD\]"'
got=$(counter origin ip sink got); pin=$(counter edge inet tg p_in)
echo "  sent 20000, origin got $got, p_in $pin"
fact "the tunnel's traffic counter is exact to the packet for an offloaded flow (p_in = packets sent = packets the origin got)" '[ "$pin" -eq 20000 ] && [ "$got" -eq 20000 ]'

# The per-source limit metered at ingress, on an offloaded flow's source.
e nft add element inet tg rate_limits "{ $P : jump ratelimit_p }"
o nft reset counter ip sink got >/dev/null; e nft reset counter inet tg p_rate_limited >/dev/null
c "$FLOOD" $P 9000 20000 18 >/dev/null
got=$(counter origin ip sink got); rl=$(counter edge inet tg p_rate_limited)
echo "  sent 20000 with a 1000/s limit: origin got $got, rate_limited $rl"
fact "the per-source limit holds for an offloaded flow's source (most dropped, counted rate_limited; passed + dropped = sent)" '[ "$rl" -gt 10000 ] && [ $((got + rl)) -eq 20000 ]'
fact "the flow stays offloaded while limited" 'e conntrack -L -p udp --dport 9000 2>/dev/null | grep -q "\[OFFLOAD\]"'
e nft delete element inet tg rate_limits "{ $P }"

# A narrowed allowlist ends an offloaded flow at once: the ingress chain drops before the flowtable.
e nft delete element inet tg allowed_1 "{ $P . udp . 9000 }"
o nft reset counter ip sink got >/dev/null; e nft reset counter inet tg p_not_allowed >/dev/null
c "$FLOOD" $P 9000 5000 18 >/dev/null
got=$(counter origin ip sink got); na=$(counter edge inet tg p_not_allowed)
echo "  port closed: sent 5000, origin got $got, not_allowed $na"
fact "a narrowed ports list ends an offloaded flow: nothing more reaches the origin, every packet counted not_allowed" '[ "$got" -eq 0 ] && [ "$na" -eq 5000 ]'
e conntrack -D -p udp --dport 9000 >/dev/null 2>&1
gone() { for _ in $(seq 1 50); do e conntrack -L -p udp --dport 9000 2>/dev/null | grep -q 9000 || return 0; sleep 0.2; done; return 1; }
fact "deleting its connection (the agent's flushDisallowed) leaves no entry behind" gone

# TCP through GRE on the fast path: established connections offloaded, the bytes intact.
# (the namespaces share one filesystem: each end has files of its own)
o socat -u TCP4-LISTEN:5201,reuseaddr,bind=100.64.0.2 OPEN:/tmp/facts-recv,creat,trunc &
srv=$!
for _ in $(seq 1 50); do o ss -Hlnt | grep -q ':5201 ' && break; sleep 0.2; done
head -c 8388608 /dev/urandom > /tmp/facts-sent
c socat -u OPEN:/tmp/facts-sent TCP4:$P:5201,connect-timeout=20 &
cli=$!
offl=no
for _ in $(seq 1 100); do e conntrack -L -p tcp --dport 5201 2>/dev/null | grep -q "\[OFFLOAD\]" && { offl=yes; break; }; kill -0 $cli 2>/dev/null || break; sleep 0.1; done
wait $cli; wait $srv
fact "a TCP connection through GRE is offloaded once established" '[ "$offl" = yes ]'
fact "its 8 MiB arrive intact" 'cmp -s /tmp/facts-sent /tmp/facts-recv'

echo "FACTS: $fails failed"
[ "$fails" -eq 0 ]
