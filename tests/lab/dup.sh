#!/usr/bin/env bash
# Lab test of nftables' `dup` statement with real traffic through a router (root; network
# namespaces, all named weirdup*, addresses in 198.18.0.0/15 and 2001:db8::/32), first with the
# kernel as the router (the reference), then with `weir run` inline as the router (the
# kernel's forwarding off), same ruleset, same checks:
#
#   weirdup-c 198.18.80.2/24 -- weirdup-r 198.18.80.1 | 198.18.81.1 -- weirdup-s 198.18.81.2/24
#             2001:db8:80::2/64           2001:db8:80::1 | 2001:db8:81::1          2001:db8:81::2/64
#                                              198.18.82.1 | 2001:db8:82::1
#                                                  |
#                                     weirdup-t 198.18.82.2/24, 2001:db8:82::2/64 (the monitor)
#
# The ruleset (tables ip dup4 and ip6 dup6) duplicates what the client sends to the monitor's
# address: its ICMP and ICMPv6 echo requests at prerouting (`dup to 198.18.82.2 device
# "weirdup-r2"`), its UDP datagrams to port 5353 at forward (the same form), and those to port
# 5354 at forward with the gateway from a map and no device (`dup to ip daddr map {
# 198.18.81.2 : 198.18.82.2 }`: the route to the gateway gives the port).
#
# Checks, per router, IPv4 and IPv6: the client's pings are answered (the originals reach the
# server and come back), tcpdump at the monitor and at the server; check_dup.py summarises,
# kind by kind, what each saw of the client's packets (addresses, TTL or hop limit, IPv4's
# don't-fragment bit (the client's IPv4 datagrams leave without it), payload length; at the monitor whether the frame came from the router's
# port to the monitor's MAC and carries the payload the server received), equal lines counted.
# Expected of both routers: every echo request and datagram at the server and one copy of each
# at the monitor; a copy made at prerouting has the TTL decremented once (63 from the client's
# 64, as the original after forwarding), one made at forward the TTL the packet has there (63:
# the forward path decremented it first); IPv4 copies have don't-fragment set. Then weir's
# summary must equal the kernel's (both printed when not), and weir counts its copies sent
# (`dup copies` in `weir ctl status`).
#
# DUP_ROUTERS picks the routers (default "kernel weir"), DUP_IO weir's io (default afpacket);
# DUP_KEEP=1 keeps the scratch folder (captures, summaries) in /tmp/weirdup-kept. Without
# tcpdump the capture checks are skipped (said so), the pings still checked. About 10 s.
#
# Usage: tests/lab/dup.sh [path/to/weir]
set -euo pipefail
C=weirdup-c R=weirdup-r S=weirdup-s T=weirdup-t
NAMESPACES="$C $R $S $T" TOOLS="python3 ip nft ping timeout" PREFIX=weirdup
. "$(dirname "$0")/common.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK="$HERE/dup/check_dup.py"
ROUTERS=${DUP_ROUTERS:-kernel weir} IO=${DUP_IO:-afpacket}
CA=198.18.80.2 RA=198.18.80.1 RB=198.18.81.1 SA=198.18.81.2 RT=198.18.82.1 TA=198.18.82.2
CA6=2001:db8:80::2 RA6=2001:db8:80::1 RB6=2001:db8:81::1 SA6=2001:db8:81::2 RT6=2001:db8:82::1 TA6=2001:db8:82::2
RTMAC=02:77:64:70:02:01 TMAC=02:77:64:70:02:02
# on exit: the captures (stop_pids), weir, then common.sh's cleanup
trap 'stop_pids; stop_weir; [ -n "${DUP_KEEP:-}" ] && rm -rf /tmp/weirdup-kept && cp -r "$DIR" /tmp/weirdup-kept; cleanup' EXIT
HAVE_TCPDUMP=1
command -v tcpdump >/dev/null || { HAVE_TCPDUMP=; echo "note: tcpdump is not installed: the capture checks (check_dup.py) are skipped"; }

# --- the lab -------------------------------------------------------------------------------
ip link add weirdup-c0 netns $C address 02:77:64:70:00:02 type veth peer name weirdup-r0 netns $R address 02:77:64:70:00:01
ip link add weirdup-s0 netns $S address 02:77:64:70:01:02 type veth peer name weirdup-r1 netns $R address 02:77:64:70:01:01
ip link add weirdup-t0 netns $T address $TMAC type veth peer name weirdup-r2 netns $R address $RTMAC
ip -n $C addr add $CA/24 dev weirdup-c0; ip -n $C addr add $CA6/64 dev weirdup-c0 nodad
ip -n $C link set weirdup-c0 up; ip -n $C route add default via $RA; ip -n $C -6 route add default via $RA6
ip -n $R addr add $RA/24 dev weirdup-r0; ip -n $R addr add $RA6/64 dev weirdup-r0 nodad; ip -n $R link set weirdup-r0 up
ip -n $R addr add $RB/24 dev weirdup-r1; ip -n $R addr add $RB6/64 dev weirdup-r1 nodad; ip -n $R link set weirdup-r1 up
ip -n $R addr add $RT/24 dev weirdup-r2; ip -n $R addr add $RT6/64 dev weirdup-r2 nodad; ip -n $R link set weirdup-r2 up
ip -n $S addr add $SA/24 dev weirdup-s0; ip -n $S addr add $SA6/64 dev weirdup-s0 nodad
ip -n $S link set weirdup-s0 up; ip -n $S route add default via $RB; ip -n $S -6 route add default via $RB6
ip -n $T addr add $TA/24 dev weirdup-t0; ip -n $T addr add $TA6/64 dev weirdup-t0 nodad; ip -n $T link set weirdup-t0 up
# the hosts send with a TTL / hop limit of 64 (Linux's default, made sure)
ip netns exec $C sysctl -qw net.ipv4.ip_default_ttl=64 net.ipv6.conf.all.hop_limit=64 net.ipv6.conf.weirdup-c0.hop_limit=64

cat > "$DIR/rules.nft" <<'N'
table ip dup4 {
  chain pre {
    type filter hook prerouting priority filter; policy accept;
    iifname "weirdup-r0" icmp type echo-request dup to 198.18.82.2 device "weirdup-r2"
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname "weirdup-r0" udp dport 5353 dup to 198.18.82.2 device "weirdup-r2"
    iifname "weirdup-r0" udp dport 5354 dup to ip daddr map { 198.18.81.2 : 198.18.82.2 }
  }
}
table ip6 dup6 {
  chain pre {
    type filter hook prerouting priority filter; policy accept;
    iifname "weirdup-r0" icmpv6 type echo-request dup to 2001:db8:82::2 device "weirdup-r2"
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname "weirdup-r0" udp dport 5353 dup to 2001:db8:82::2 device "weirdup-r2"
    iifname "weirdup-r0" udp dport 5354 dup to ip6 daddr map { 2001:db8:81::2 : 2001:db8:82::2 }
  }
}
N
cat > "$DIR/weir.toml" <<T
ruleset = "rules.nft"
mode = "inline"
io = "$IO"
workers = 1
[control]
socket = "$DIR/weir.sock"
[metrics]
address = ""
[[interface]]
name = "weirdup-r0"
address = ["$RA", "$RA6"]
[[interface]]
name = "weirdup-r1"
address = ["$RB", "$RB6"]
[[interface]]
name = "weirdup-r2"
address = ["$RT", "$RT6"]
[[route]]
prefix = "198.18.80.0/24"
interface = "weirdup-r0"
[[route]]
prefix = "198.18.81.0/24"
interface = "weirdup-r1"
[[route]]
prefix = "198.18.82.0/24"
interface = "weirdup-r2"
[[route]]
prefix = "2001:db8:80::/64"
interface = "weirdup-r0"
[[route]]
prefix = "2001:db8:81::/64"
interface = "weirdup-r1"
[[route]]
prefix = "2001:db8:82::/64"
interface = "weirdup-r2"
[[neighbour]]
address = "$CA"
mac = "02:77:64:70:00:02"
[[neighbour]]
address = "$SA"
mac = "02:77:64:70:01:02"
[[neighbour]]
address = "$TA"
mac = "$TMAC"
[[neighbour]]
address = "$CA6"
mac = "02:77:64:70:00:02"
[[neighbour]]
address = "$SA6"
mac = "02:77:64:70:01:02"
[[neighbour]]
address = "$TA6"
mac = "$TMAC"
T

diagnose() {
  if [ "$ROUTER" = kernel ]; then
    echo "-- kernel: nft list ruleset, ip neigh in $R:"
    ip netns exec $R nft list ruleset | sed 's/^/  /' || true
    ip -n $R neigh | sed 's/^/  /' || true
  else
    echo "-- weir ctl status, counters:"; ctl status 2>&1 | sed 's/^/  /' || true; ctl counters 2>&1 | sed 's/^/  /' || true
  fi
}
dfail() { diagnose; fail "$ROUTER: $*"; }

CAP_FAIL=dfail

# the client's traffic of one family: 3 pings answered, 3 datagrams to 5353, 2 to 5354
traffic() { # 4 | 6
  local fam=$1 target=$SA
  [ "$fam" = 6 ] && target=$SA6
  ip netns exec $C timeout 10 ping -$fam -c 3 -i 0.2 -W 2 -s 56 $target >"$DIR/ping.log" 2>&1 ||
    dfail "IPv$fam: the pings through the router: $(cat "$DIR/ping.log")"
  grep -q "3 received" "$DIR/ping.log" || dfail "IPv$fam: not every ping answered: $(cat "$DIR/ping.log")"
  ip netns exec $C timeout 5 python3 - "$target" <<'P' || dfail "IPv$fam: the datagrams could not be sent"
import socket, sys, time
dst = sys.argv[1]
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
if fam == socket.AF_INET:
    # don't-fragment clear (IP_PMTUDISC_DONT): the copies have it set
    s.setsockopt(socket.IPPROTO_IP, 10, 0)
for port, n in ((5353, 3), (5354, 2)):
    for i in range(n):
        s.sendto(b"weir-dup %d %d" % (port, i) + b"." * (20 * i), (dst, port))
        time.sleep(0.05)
P
  ok "IPv$fam: 3 pings answered through the router, 5 datagrams sent"
}

# --- the passes ------------------------------------------------------------------------------
for ROUTER in $ROUTERS; do
  LABEL=$ROUTER; [ "$ROUTER" = weir ] && LABEL="weir inline (io = $IO)"
  echo "-- router: $LABEL"
  for n in $C $S $T; do ip -n $n neigh flush all; done
  if [ "$ROUTER" = kernel ]; then
    start_kernel $R
  else
    ip -n $R neigh flush all
    start_weir $R "the dup ruleset"
  fi
  ok "$ROUTER routes"
  for fam in 4 6; do
    TAG=$ROUTER-v$fam
    captures_start 'icmp or icmp6 or udp' "$T weirdup-t0" "$S weirdup-s0"
    traffic $fam
    captures_stop
    if [ -n "$HAVE_TCPDUMP" ]; then
      python3 "$CHECK" "$DIR/$T-$TAG.pcap" "$DIR/$S-$TAG.pcap" $CA $CA6 $RTMAC $TMAC >"$DIR/summary-$TAG" ||
        { sed 's/^/  /' "$DIR/summary-$TAG"; dfail "IPv$fam: the captures (check_dup.py)"; }
      sed 's/^/  /' "$DIR/summary-$TAG"
      # every packet at the server, one copy of each at the monitor, from the router's port
      n_srv=$(awk '$1 == "server" { sub(/^x/, "", $NF); n += $NF } END { print n + 0 }' "$DIR/summary-$TAG")
      n_tap=$(awk '$1 == "tap" && / macs router>tap payload as-at-server / { sub(/^x/, "", $NF); n += $NF } END { print n + 0 }' "$DIR/summary-$TAG")
      [ "$n_srv" = 8 ] || dfail "IPv$fam: the server saw $n_srv of the client's 8 packets"
      [ "$n_tap" = 8 ] || dfail "IPv$fam: the monitor saw $n_tap good copies of the 8 (see the summary)"
      grep -q "^tap .* ttl 63 " "$DIR/summary-$TAG" || dfail "IPv$fam: no copy with TTL 63"
      if grep "^tap " "$DIR/summary-$TAG" | grep -vq " ttl 63 "; then dfail "IPv$fam: a copy's TTL is not 63"; fi
      if grep "^tap v4 " "$DIR/summary-$TAG" | grep -vq " df 1 "; then dfail "IPv$fam: a copy without don't-fragment"; fi
      ok "IPv$fam: the captures: 8 originals at the server, 8 copies at the monitor (check_dup.py)"
    fi
  done
  if [ "$ROUTER" = kernel ]; then
    ip netns exec $R sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0
    ip netns exec $R nft flush ruleset
  else
    ctl status >"$DIR/status" 2>&1 || true
    grep -o "dup copies [0-9]* (not sent [0-9]*)" "$DIR/status" | sed 's/^/  weir: /' || dfail "weir's status has no dup counts"
    grep -q "dup copies 16 (not sent 0)" "$DIR/status" || dfail "weir did not count 16 copies sent"
    stop_weir
  fi
done
# weir's summaries are the kernel's
same_summaries "the same copies (TTL, addresses, payloads, MACs) and originals"
echo "total $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }')"
echo "PASS"
