#!/usr/bin/env bash
# Lab test of nftables' `synproxy` statement and `synproxy NAME {}` objects with real clients
# and servers through a router (root; network namespaces, all named weirsp*, addresses in
# 198.18.0.0/15 and 2001:db8::/32), first with the kernel as the router (the reference), then
# with `weir run` inline as the router (the kernel's forwarding off), same ruleset, same checks:
#
#   weirsp-c 198.18.70.2/24 -- weirsp-r 198.18.70.1 | 198.18.71.1 -- weirsp-s 198.18.71.2/24
#            2001:db8:70::2/64          2001:db8:70::1 | 2001:db8:71::1        2001:db8:71::2/64
#   (sp_peer.py client, forged ACK)     (router)                  (sp_peer.py server)
#
# The ruleset, a usual SYN-flood protection (table inet sp): in prerouting at raw priority the
# client's SYNs to tcp 8080 and 8081 are notrack; the forward chain answers what conntrack
# calls invalid or untracked on 8080 with `synproxy mss 1460 wscale 7 timestamp sack-perm`, on
# 8081 with the object `synproxy web` (the same options) and on 8082 with `synproxy mss 1400`,
# each rule counted (the counter before the synproxy statement: the kernel's synproxy takes the
# SYN and the cookie ACK away, a counter after it never sees them); then `ct state invalid
# counter drop`. 8082 has no notrack rule: its SYN is a new connection, never proxied, the
# control (its SYN-ACK is the server's, with the server's MSS). The router runs with
# nf_conntrack_tcp_loose off (the kernel's sysctl; weir's `[conntrack] tcp_loose = false`), so
# the client's ACK with the cookie is invalid and goes to the synproxy rule.
#
# Checks, per router, over IPv4 and IPv6, on each port 8080, 8081 and 8082 (sp_peer.py):
# "data" sends 100 kB up and gets 200 kB down (both checked byte for byte: the sequence and
# acknowledgement numbers are translated between the cookie's ISN and the server's across
# many segments and windows), "cclose" is closed by the client first, "sclose" by the server.
# tcpdump captures at the client and at the server; check_sp.py reads both (see its header):
# at the client the SYN-ACK of 8080/8081 is the router's (window 0, MSS 1460, wscale 7,
# SACK-permitted and a timestamp as the client offered them), then a window update; 8082's is
# the server's own; every received checksum correct; the server's sequence numbers and
# timestamps continuous from the SYN-ACK. At the server the SYN arrives only after the
# client's handshake ACK, with the client's ISN, the cookie's MSS, the client's wscale and
# SACK-permitted, then a bare ACK before the data; every TSecr each end receives is a TSval it
# sent (the router shifts the server's timestamps by an offset). The synproxy rules of 8080 and
# 8081 counted packets, that of 8082 none. A forged bare ACK to 8080 (no SYN, no cookie, from
# a raw socket) must not reach the server. Cookies, ISNs and timestamps differ from run to run:
# check_sp.py prints a summary of kinds (flags, option values, window 0, who saw what in which
# order) per connection, and at the end weir's must equal the kernel's (both printed when not).
#
# Not compared: the TSecr of the router's own ACK to the server (the kernel shifts the server's
# TSval there by the offset once more, which the server ignores), the SYN's acknowledgement
# field and window (the kernel passes the cookie and the client's unscaled window there).
#
# Checksums: the hosts keep their default offloads, so the kernel forwards and sends segments
# over veth with the checksum still to be finished (CHECKSUM_PARTIAL: the capture shows the
# pseudo-header's sum); that is accepted from the kernel, weir must send every checksum whole.
#
# SP_ROUTERS picks the routers (default "kernel weir"), SP_IO weir's io (default afpacket),
# SP_WORKERS its workers (default 1);
# SP_KEEP=1 keeps the scratch folder (captures, summaries) in /tmp/weirsp-kept. Without
# tcpdump the capture checks are skipped (said so), the transfers and counters still checked.
# About 10 s when everything passes.
#
# Usage: tests/lab/synproxy.sh [path/to/weir]
set -euo pipefail
C=weirsp-c R=weirsp-r S=weirsp-s
NAMESPACES="$C $R $S" TOOLS="python3 ip nft ethtool ss timeout" PREFIX=weirsp
. "$(dirname "$0")/common.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
PEER="$HERE/synproxy/sp_peer.py" CHECK="$HERE/synproxy/check_sp.py"
ROUTERS=${SP_ROUTERS:-kernel weir} IO=${SP_IO:-afpacket}
CA=198.18.70.2 RA=198.18.70.1 RB=198.18.71.1 SA=198.18.71.2
CA6=2001:db8:70::2 RA6=2001:db8:70::1 RB6=2001:db8:71::1 SA6=2001:db8:71::2
PORTS="8080 8081 8082" MODES="data cclose sclose" FORGED=40999
# on exit: the servers and captures (stop_pids), weir, then common.sh's cleanup
trap 'stop_pids; stop_weir; [ -n "${SP_KEEP:-}" ] && rm -rf /tmp/weirsp-kept && cp -r "$DIR" /tmp/weirsp-kept; cleanup' EXIT
HAVE_TCPDUMP=1
command -v tcpdump >/dev/null || { HAVE_TCPDUMP=; echo "note: tcpdump is not installed: the capture checks (check_sp.py) are skipped"; }

# --- the lab -------------------------------------------------------------------------------
ip link add weirsp-c0 netns $C address 02:77:73:70:00:02 type veth peer name weirsp-r0 netns $R address 02:77:73:70:00:01
ip link add weirsp-s0 netns $S address 02:77:73:70:01:02 type veth peer name weirsp-r1 netns $R address 02:77:73:70:01:01
ip -n $C addr add $CA/24 dev weirsp-c0; ip -n $C addr add $CA6/64 dev weirsp-c0 nodad
ip -n $C link set weirsp-c0 up; ip -n $C route add default via $RA; ip -n $C -6 route add default via $RA6
ip -n $R addr add $RA/24 dev weirsp-r0; ip -n $R addr add $RA6/64 dev weirsp-r0 nodad; ip -n $R link set weirsp-r0 up
ip -n $R addr add $RB/24 dev weirsp-r1; ip -n $R addr add $RB6/64 dev weirsp-r1 nodad; ip -n $R link set weirsp-r1 up
ip -n $S addr add $SA/24 dev weirsp-s0; ip -n $S addr add $SA6/64 dev weirsp-s0 nodad
ip -n $S link set weirsp-s0 up; ip -n $S route add default via $RB; ip -n $S -6 route add default via $RB6
# the hosts keep their default offloads: their TCP leaves with checksums to finish
for x in "$C weirsp-c0" "$S weirsp-s0"; do
  set -- $x
  ip netns exec $1 ethtool -k $2 | grep -q "^tx-checksumming: on" || fail "$2: tx checksum offload is not on by default"
done
# the client offers every option the synproxy can carry (Linux's defaults, made sure)
ip netns exec $C sysctl -qw net.ipv4.tcp_timestamps=1 net.ipv4.tcp_sack=1 net.ipv4.tcp_window_scaling=1

cat > "$DIR/rules.nft" <<'N'
table inet sp {
  synproxy web {
    mss 1460
    wscale 7
    timestamp sack-perm
  }
  chain pre {
    type filter hook prerouting priority raw; policy accept;
    iifname "weirsp-r0" tcp dport { 8080, 8081 } tcp flags syn notrack
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname "weirsp-r0" tcp dport 8080 ct state invalid,untracked counter synproxy mss 1460 wscale 7 timestamp sack-perm
    iifname "weirsp-r0" tcp dport 8081 ct state invalid,untracked counter synproxy name "web"
    iifname "weirsp-r0" tcp dport 8082 ct state invalid,untracked counter synproxy mss 1400
    ct state invalid counter drop
  }
}
N
WORKERS=${SP_WORKERS:-1}
weir_toml "weirsp-r0 $RA,$RA6 198.18.70.0/24,2001:db8:70::/64" \
  "weirsp-r1 $RB,$RB6 198.18.71.0/24,2001:db8:71::/64"
cat >>"$DIR/weir.toml" <<T
[conntrack]
tcp_loose = false
[[neighbour]]
address = "$CA"
mac = "02:77:73:70:00:02"
[[neighbour]]
address = "$SA"
mac = "02:77:73:70:01:02"
T

# packets counted by the forward chain's rule for tcp dport $1 (8080, 8081, 8082) or, with
# "drop", by its last rule
counted() {
  local want="tcp dport $1 "
  [ "$1" = drop ] && want="^ct state invalid counter"
  if [ "$ROUTER" = kernel ]; then
    ip netns exec $R nft list chain inet sp forward | sed 's/^[[:space:]]*//' | grep -E "$want" |
      grep -o "packets [0-9]*" | awk '{ print $2 }' || true
  else
    ctl counters | awk -v w="$want" '$3 == "inet" && $4 == "sp" && $5 == "forward" {
      r = $0; sub(/^ *[0-9]+ +[0-9]+ +inet +sp +forward +/, "", r); if (r ~ w) print $1 }' || true
  fi
}

diagnose() {
  echo "-- the server's log:"; sed 's/^/  /' "$DIR/server.log" 2>/dev/null || true
  if [ "$ROUTER" = kernel ]; then
    echo "-- kernel: nft list ruleset, conntrack -L in $R:"
    ip netns exec $R nft list ruleset | sed 's/^/  /' || true
    ip netns exec $R conntrack -L 2>/dev/null | sed 's/^/  /' || true
  else
    echo "-- weir ctl counters, ct list:"; ctl counters 2>&1 | sed 's/^/  /' || true; ctl ct list 2>&1 | sed 's/^/  /' || true
  fi
}
sfail() { diagnose; fail "$ROUTER: $*"; }

CAP_FAIL=sfail

# the connections of one family: each port, each mode, byte for byte (sp_peer.py checks)
connections() { # 4 | 6
  local fam=$1 target=$SA port mode
  [ "$fam" = 6 ] && target=$SA6
  : > "$DIR/conns-$TAG"
  for port in $PORTS; do
    for mode in $MODES; do
      ip netns exec $C timeout 10 python3 "$PEER" client $target $port $mode "$DIR/conns-$TAG" >"$DIR/client.log" 2>&1 ||
        sfail "IPv$fam port $port $mode: $(cat "$DIR/client.log")"
    done
  done
  ok "IPv$fam: ports $PORTS, each: 100 kB up and 200 kB down byte for byte, closed by the client, closed by the server"
}

# --- the passes ------------------------------------------------------------------------------
for ROUTER in $ROUTERS; do
  LABEL=$ROUTER; [ "$ROUTER" = weir ] && LABEL="weir inline (io = $IO)"
  echo "-- router: $LABEL"
  ip -n $C neigh flush all; ip -n $S neigh flush all
  if [ "$ROUTER" = kernel ]; then
    start_kernel $R
    ip netns exec $R sysctl -qw net.netfilter.nf_conntrack_tcp_loose=0
  else
    start_weir $R "the synproxy ruleset and [conntrack] tcp_loose = false"
  fi
  ok "$ROUTER routes"
  ip netns exec $S timeout 60 python3 "$PEER" server "$SA,$SA6" "${PORTS// /,}" 50 >"$DIR/server.log" 2>&1 &
  SPID=$!; PIDS="$PIDS $SPID"
  for _ in $(seq 50); do grep -q listening "$DIR/server.log" && break; sleep 0.1; done
  grep -q listening "$DIR/server.log" || sfail "the server did not start: $(cat "$DIR/server.log")"
  for fam in 4 6; do
    TAG=$ROUTER-v$fam
    captures_start 'tcp and (port 8080 or port 8081 or port 8082)' "$C weirsp-c0" "$S weirsp-s0"
    connections $fam
    # a forged bare ACK to 8080: no SYN before it, its acknowledgement number no cookie
    [ $fam = 4 ] && ip netns exec $C timeout 5 python3 "$PEER" forge $CA $SA 8080 $FORGED
    captures_stop
    if [ -n "$HAVE_TCPDUMP" ]; then
      ca=$CA sa=$SA fo=$FORGED cks=full
      [ $fam = 6 ] && ca=$CA6 sa=$SA6 fo=""
      [ "$ROUTER" = kernel ] && cks=partial-ok
      if ! python3 "$CHECK" "$DIR/$C-$TAG.pcap" "$DIR/$S-$TAG.pcap" "$DIR/conns-$TAG" $fam $ca $sa 8080,8081 1460 $cks $fo \
        >"$DIR/summary-$TAG"; then
        sed 's/^/  /' "$DIR/summary-$TAG"
        sfail "IPv$fam: the captures (check_sp.py above)"
      fi
      sed 's/^/  /' "$DIR/summary-$TAG"
      ok "IPv$fam: the captures at both ends (check_sp.py)"
    fi
  done
  # the counters: the synproxy rules of 8080 and 8081 matched, the control's never
  n80=$(counted 8080) n81=$(counted 8081) n82=$(counted 8082) nd=$(counted drop)
  echo "  counters: 8080 ${n80:-none}, 8081 ${n81:-none}, 8082 ${n82:-none}, ct state invalid drop ${nd:-none}"
  [ "${n80:-0}" -gt 0 ] || sfail "the synproxy rule of tcp dport 8080 counted nothing"
  [ "${n81:-0}" -gt 0 ] || sfail "the synproxy rule of tcp dport 8081 (synproxy name \"web\") counted nothing"
  [ "${n82:-x}" = 0 ] || sfail "the synproxy rule of tcp dport 8082 (no notrack: new connections) counted ${n82:-nothing}"
  ok "$ROUTER: the synproxy rules counted"
  kill -TERM $SPID 2>/dev/null || true; wait $SPID 2>/dev/null || true; PIDS=${PIDS/ $SPID/}
  if [ "$ROUTER" = kernel ]; then
    ip netns exec $R sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0
    ip netns exec $R nft flush ruleset
    ip netns exec $R conntrack -F >/dev/null 2>&1 || true
  else
    stop_weir
  fi
done
# weir's summaries are the kernel's
same_summaries "the same handshakes, options, order and closes"
echo "total $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }')"
echo "PASS"
