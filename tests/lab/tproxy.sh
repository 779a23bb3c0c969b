#!/usr/bin/env bash
# Lab test of nftables' `tproxy` statement and `socket` expression with a real transparent
# proxy (root; network namespaces named weirtp*, addresses in 198.18.0.0/15 and
# 2001:db8::/32), first with the kernel as the router (the reference), then with `weir run`
# inline as the router (the kernel's forwarding off), same ruleset, same checks:
#
#   weirtp-c 198.18.90.2/24 -- weirtp-r 198.18.90.1 | 198.18.91.1 -- weirtp-s 198.18.91.2/24
#            2001:db8:90::2/64          2001:db8:90::1 | 2001:db8:91::1         2001:db8:91::2/64
#
# In the router's namespace a transparent proxy (tproxy/proxy.py: IP_TRANSPARENT listeners on
# TCP 8080 and UDP 5353, each family) answers with the original destination it saw; the
# server (tproxy/server.py) answers TCP 80, 81 and UDP 53 itself. The ruleset is the recipe of
# nftables' wiki: established packets of a transparent socket (`socket transparent 1`) and new
# ones given to the proxy (`tcp dport 80 tproxy to :8080`) are marked, and a policy route
# delivers what is marked locally (`ip rule fwmark 1 lookup 100`, `local default dev lo`).
# Port 81 and UDP 54 name targets nobody listens on: the rule stops, the packets are forwarded.
#
# Checks, per router and family: what the client gets back (tproxy/client.py: TCP to 80 with 5
# bytes, 100 kB and 1 MB is answered by the proxy with the original destination and the byte
# count; TCP to 81 by the server; UDP to 53 by the proxy, from the original destination; UDP to
# 54 not at all) and what the server and the proxy served; then weir's outcome must equal the
# kernel's line for line, and weir counts packets delivered to the router's stack.
#
# TP_ROUTERS picks the routers (default "kernel weir"), TP_IO weir's io (default afpacket),
# TP_WORKERS weir's workers (default 1); TP_TIMING=1 has the client say when each step starts.
# About 10 s.
#
# Usage: tests/lab/tproxy.sh [path/to/weir]
set -euo pipefail
C=weirtp-c R=weirtp-r S=weirtp-s
NAMESPACES="$C $R $S" TOOLS="python3 ip nft iptables timeout" PREFIX=weirtp
. "$(dirname "$0")/common.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
ROUTERS=${TP_ROUTERS:-kernel weir} IO=${TP_IO:-afpacket} WORKERS=${TP_WORKERS:-1}
CA=198.18.90.2 RA=198.18.90.1 RB=198.18.91.1 SA=198.18.91.2
CA6=2001:db8:90::2 RA6=2001:db8:90::1 RB6=2001:db8:91::1 SA6=2001:db8:91::2
trap 'stop_pids; stop_weir; cleanup' EXIT

ip link add weirtp-c0 netns $C address 02:77:74:70:00:02 type veth peer name weirtp-r0 netns $R address 02:77:74:70:00:01
ip link add weirtp-s0 netns $S address 02:77:74:70:01:02 type veth peer name weirtp-r1 netns $R address 02:77:74:70:01:01
ip -n $C addr add $CA/24 dev weirtp-c0; ip -n $C addr add $CA6/64 dev weirtp-c0 nodad
ip -n $C link set weirtp-c0 up; ip -n $C route add default via $RA; ip -n $C -6 route add default via $RA6
ip -n $R addr add $RA/24 dev weirtp-r0; ip -n $R addr add $RA6/64 dev weirtp-r0 nodad; ip -n $R link set weirtp-r0 up
ip -n $R addr add $RB/24 dev weirtp-r1; ip -n $R addr add $RB6/64 dev weirtp-r1 nodad; ip -n $R link set weirtp-r1 up
ip -n $S addr add $SA/24 dev weirtp-s0; ip -n $S addr add $SA6/64 dev weirtp-s0 nodad
ip -n $S link set weirtp-s0 up; ip -n $S route add default via $RB; ip -n $S -6 route add default via $RB6
# the user's policy route for what the ruleset marks (the kernel needs it; weir delivers
# what tproxy took itself, and leaves it as it is)
for f in -4 -6; do ip -n $R $f rule add fwmark 1 lookup 100; done
ip -n $R route add local 0.0.0.0/0 dev lo table 100
ip -n $R -6 route add local ::/0 dev lo table 100

cat > "$DIR/rules.nft" <<'N'
table inet tp {
  chain pre {
    type filter hook prerouting priority mangle; policy accept;
    meta l4proto tcp socket transparent 1 meta mark set 0x00000001 counter accept
    tcp dport 80 tproxy to :8080 meta mark set 0x00000001 counter accept
    tcp dport 81 tproxy to :8181 meta mark set 0x00000001 counter accept
    udp dport 53 tproxy to :5353 meta mark set 0x00000001 counter accept
    udp dport 54 tproxy to :5454 meta mark set 0x00000001 counter accept
  }
}
N
weir_toml "weirtp-r0 $RA/24,$RA6/64 198.18.90.0/24,2001:db8:90::/64" \
  "weirtp-r1 $RB/24,$RB6/64 198.18.91.0/24,2001:db8:91::/64"

ip netns exec $R python3 "$HERE/tproxy/proxy.py" "$DIR/proxy.log" >"$DIR/proxy.out" 2>&1 &
PIDS="$PIDS $!"
ip netns exec $S python3 "$HERE/tproxy/server.py" "$DIR/server.log" >"$DIR/server.out" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 50); do grep -q listening "$DIR/proxy.out" && grep -q listening "$DIR/server.out" && break; sleep 0.1; done
grep -q listening "$DIR/proxy.out" || fail "the proxy did not start: $(cat "$DIR/proxy.out")"
grep -q listening "$DIR/server.out" || fail "the server did not start: $(cat "$DIR/server.out")"

diagnose() {
  if [ "$ROUTER" = kernel ]; then
    echo "-- kernel: nft list ruleset in $R:"; ip netns exec $R nft list ruleset | sed 's/^/  /' || true
  else
    echo "-- weir ctl status, counters:"; ctl status 2>&1 | sed 's/^/  /' || true; ctl counters 2>&1 | sed 's/^/  /' || true
    echo "-- the kernel's rules weir installed:"; ip netns exec $R nft list table inet weir_tproxy 2>&1 | sed 's/^/  /' || true
  fi
  echo "-- proxy log:"; sed 's/^/  /' "$DIR/proxy.log" 2>/dev/null || true
  echo "-- server log:"; sed 's/^/  /' "$DIR/server.log" 2>/dev/null || true
}
dfail() { diagnose; fail "$ROUTER: $*"; }

for ROUTER in $ROUTERS; do
  LABEL=$ROUTER; [ "$ROUTER" = weir ] && LABEL="weir inline (io = $IO, workers = $WORKERS)"
  echo "-- router: $LABEL"
  for n in $C $S $R; do ip -n $n neigh flush all; done
  if [ "$ROUTER" = kernel ]; then start_kernel $R; else start_weir $R "the tproxy ruleset"; fi
  ok "$ROUTER routes"
  : >"$DIR/proxy.log"; : >"$DIR/server.log"
  for fam in 4 6; do
    dst=$SA; [ $fam = 6 ] && dst=$SA6
    ip netns exec $C timeout 30 python3 "$HERE/tproxy/client.py" $dst >"$DIR/client-$ROUTER-v$fam" 2>"$DIR/client-err" ||
      dfail "IPv$fam: the client: $(cat "$DIR/client-$ROUTER-v$fam")"
    sed 's/^/  /' "$DIR/client-$ROUTER-v$fam" "$DIR/client-err"
    c=$CA; [ $fam = 6 ] && c=$CA6
    d=$dst; [ $fam = 6 ] && d="[$dst]"
    for n in 5 100000 1000000; do
      grep -qxF "tcp 80 $n: proxy $d:80 from $c len $n" "$DIR/client-$ROUTER-v$fam" ||
        dfail "IPv$fam: TCP to port 80 with $n bytes was not answered by the proxy with the original destination"
    done
    grep -qxF "tcp 81 7: server 81 from $c len 7" "$DIR/client-$ROUTER-v$fam" ||
      dfail "IPv$fam: TCP to port 81 (no transparent socket on the target) did not reach the server"
    grep -qxF "udp 53 9: proxy-udp $d:53 from $c len 9 (answered from $dst:53)" "$DIR/client-$ROUTER-v$fam" ||
      dfail "IPv$fam: UDP to port 53 was not answered by the proxy from the original destination"
    grep -qxF "udp 54 3: (no answer)" "$DIR/client-$ROUTER-v$fam" || dfail "IPv$fam: UDP to port 54 was answered"
    ok "IPv$fam: port 80 and UDP 53 taken by the transparent proxy, 81 and UDP 54 forwarded"
  done
  sort "$DIR/proxy.log" >"$DIR/proxy-$ROUTER"; sort "$DIR/server.log" >"$DIR/server-$ROUTER"
  [ "$(grep -c '^tcp proxy' "$DIR/proxy-$ROUTER")" = 6 ] || dfail "the proxy did not serve 6 TCP connections"
  if grep -q "server 80" "$DIR/server-$ROUTER"; then dfail "a connection to port 80 reached the server"; fi
  if [ "$ROUTER" = kernel ]; then
    ip netns exec $R sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0
    ip netns exec $R nft flush ruleset
  else
    ctl status >"$DIR/status" 2>&1 || true
    grep -q "to the router's stack [1-9]" "$DIR/status" || dfail "no local delivery counted"
    ip netns exec $R nft list table inet weir_tproxy >"$DIR/weir_tproxy" 2>&1 || dfail "weir's tproxy table is not in the kernel"
    [ "$(grep -c ' tproxy to ' "$DIR/weir_tproxy")" = 8 ] || { cat "$DIR/weir_tproxy"; dfail "weir's tproxy table has not 4 targets x 2 protocols"; }
    # a reload that changes a target: the kernel's table follows (the rules file is the same
    # one, restored after)
    cp "$DIR/rules.nft" "$DIR/rules.orig"
    sed -i 's/tproxy to :8181/tproxy to :8282/' "$DIR/rules.nft"
    ctl reload | grep -q reloaded || dfail "reload with another tproxy target"
    ip netns exec $R nft list table inet weir_tproxy >"$DIR/weir_tproxy" 2>&1
    grep -q "tproxy to :8282" "$DIR/weir_tproxy" && ! grep -q "tproxy to :8181" "$DIR/weir_tproxy" ||
      { cat "$DIR/weir_tproxy"; dfail "the kernel's tproxy table did not follow the reload"; }
    ok "a reload's new tproxy target is in the kernel's table"
    cp "$DIR/rules.orig" "$DIR/rules.nft"
    stop_weir
    ip netns exec $R nft list table inet weir_tproxy >/dev/null 2>&1 && fail "weir left its tproxy table behind"
    ip -n $R rule | grep -q "lookup 30583" && fail "weir left its policy route behind"
  fi
done
if [[ " $ROUTERS " = *" kernel "* && " $ROUTERS " = *" weir "* ]]; then
  for fam in 4 6; do
    diff -u "$DIR/client-kernel-v$fam" "$DIR/client-weir-v$fam" ||
      fail "IPv$fam: the client's outcome through weir differs from the kernel's"
  done
  diff -u "$DIR/proxy-kernel" "$DIR/proxy-weir" || fail "the proxy served otherwise through weir"
  diff -u "$DIR/server-kernel" "$DIR/server-weir" || fail "the server served otherwise through weir"
  ok "the client, the proxy and the server saw through weir what they saw through the kernel"
fi
echo "total $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }')"
echo "PASS"
