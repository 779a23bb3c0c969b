#!/usr/bin/env bash
# Lab test of `weir run` inline as an L4 load balancer on nftlb's benchmark testbed (root;
# network namespaces, all named weirlb*, addresses in 198.18.0.0/15): 2 HTTP load clients
# (wrk), the load balancer (weir inline between its front and back interfaces; the kernel's
# forwarding off), 3 nginx backends, joined by a "switch" namespace with two bridges, as
# ../shared/bench/lb-kernel-baseline.sh builds it for the kernel. Every host keeps its default
# offloads (tx checksum and TSO on, checked): their TCP reaches weir with checksums left to the
# device and in super-frames.
#
#   weirlb-c1 198.18.40.11 -+                                  +- weirlb-b1 198.18.41.11
#                           +- brf -- weirlb-lbf [weir] weirlb-lbb -- brb -+- weirlb-b2 198.18.41.12
#   weirlb-c2 198.18.40.12 -+         198.18.40.1        198.18.41.1       +- weirlb-b3 198.18.41.13
#                          (brf, brb: bridges weirlb-brf, weirlb-brb in weirlb-sw; LB: weirlb-lb)
#
# VIP 198.18.42.100:80, routed to the LB by the clients' default route (the LB does not own
# it); the backends' default route is the LB. Weir's configuration routes the two subnets and
# names the backends' MACs; it learns the clients' from their ARP. The ruleset is nftlb's DNAT
# farm (a verdict map on address and port in a nat prerouting chain, `goto vs01`; vs01 `dnat
# to numgen random mod 3 map {...}`, nftlb's default "weight" scheduler) or its SNAT farm (vs01
# also `ct mark set 0x00000100`, postrouting `ct mark 0x00000100 masquerade`; here with the
# hash scheduler on source address and port, `jhash ip saddr . tcp sport mod 3`), plus a table
# of ours counting each backend's new connections in the forward hook.
#
# Four passes, each on a freshly built lab: AF_XDP and AF_PACKET, DNAT and SNAT. Each starts
# weir, checks one request from each client, runs wrk from both clients at once (WRK_SECONDS,
# default 3; WRK_CONNS connections each, default 8; `Connection: close`: one TCP connection per
# request) and checks: requests made, no socket error, no non-2xx answer, every backend served
# requests (weir's counters and nginx's stub_status), the backends saw the clients (DNAT) or
# the LB's address (SNAT), no drop in weir's status, the XDP program and kernel rules gone
# after exit. Printed, not checked: requests/s, weir's CPU time per request (from `weir ctl
# status` around the load; it includes what the kernel does in weir's send calls, which on a
# veth is the receiving side's work too) and per packet.
#
# LB_RUNS picks passes (e.g. "afpacket-snat"). One lab serves all passes (LB_KEEP_LAB=0 builds
# it afresh for each): the backends then still hold the previous passes' connections in
# TIME_WAIT (60 s) while the restarted weir has forgotten them, so a later SNAT pass reuses
# tuples the backends answer with a challenge ACK; the client's RST to it must get through
# (weir-conntrack: rst_answering_challenge_ack_in_syn_sent; see docs/inline.md).
#
# Usage: tests/lab/lb.sh [path/to/weir]
set -euo pipefail
C1=weirlb-c1 C2=weirlb-c2 LB=weirlb-lb SW=weirlb-sw B1=weirlb-b1 B2=weirlb-b2 B3=weirlb-b3
NAMESPACES="$C1 $C2 $LB $SW $B1 $B2 $B3" TOOLS="ip ethtool nginx wrk curl ss" PREFIX=weirlb
. "$(dirname "$0")/common.sh"
WRK_SECONDS=${WRK_SECONDS:-3} WRK_CONNS=${WRK_CONNS:-8}
VIP=198.18.42.100
CLIENTS=(198.18.40.11 198.18.40.12) BACKENDS=(198.18.41.11 198.18.41.12 198.18.41.13)
LBF=198.18.40.1 LBB=198.18.41.1
# nginx masters and wrk runs, killed by their PID at the end (then common.sh's cleanup)
WP=""   # the wrk runs of a pass, until they are waited for
trap 'for p in $WP; do kill -TERM $p 2>/dev/null || true; done; lab_down; cleanup' EXIT

# the lab, built once (LB_KEEP_LAB=0: afresh for each pass, as the kernel baseline does for
# each run): the backends remember the connections of a pass in TIME_WAIT for 60 s, a
# restarted weir does not
BODY=$(head -c 74 /dev/zero | tr '\0' x)
port() { # ns dev mac switch-port bridge
  ip link add "$2" netns "$1" address "$3" type veth peer name "$4" netns $SW
  ip -n $SW link set "$4" master "$5"; ip -n $SW link set "$4" up; ip -n "$1" link set "$2" up
}
lab_down() { stop_pids; }
lab_up() {
  local n i d
  lab_down
  for n in $NAMESPACES; do
    ip netns del $n 2>/dev/null || true; ip netns add $n; ip -n $n link set lo up
    ip netns exec $n sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  done
  # the switch: two bridges, one port (a veth) per box; the LB has two, weir's ports
  ip link add weirlb-brf netns $SW type bridge stp_state 0 forward_delay 0
  ip link add weirlb-brb netns $SW type bridge stp_state 0 forward_delay 0
  ip -n $SW link set weirlb-brf up; ip -n $SW link set weirlb-brb up
  port $C1 weirlb-c1e 02:77:6c:62:00:0b weirlb-pc1 weirlb-brf
  port $C2 weirlb-c2e 02:77:6c:62:00:0c weirlb-pc2 weirlb-brf
  port $LB weirlb-lbf 02:77:6c:62:00:01 weirlb-plf weirlb-brf
  port $LB weirlb-lbb 02:77:6c:62:01:01 weirlb-plb weirlb-brb
  port $B1 weirlb-b1e 02:77:6c:62:01:0b weirlb-pb1 weirlb-brb
  port $B2 weirlb-b2e 02:77:6c:62:01:0c weirlb-pb2 weirlb-brb
  port $B3 weirlb-b3e 02:77:6c:62:01:0d weirlb-pb3 weirlb-brb
  for i in 0 1; do
    n=weirlb-c$((i + 1))
    ip -n $n addr add ${CLIENTS[$i]}/24 dev ${n}e; ip -n $n route add default via $LBF
  done
  ip -n $LB addr add $LBF/24 dev weirlb-lbf; ip -n $LB addr add $LBB/24 dev weirlb-lbb
  ip netns exec $LB sysctl -qw net.ipv4.ip_forward=0
  for i in 0 1 2; do
    n=weirlb-b$((i + 1))
    ip -n $n addr add ${BACKENDS[$i]}/24 dev ${n}e; ip -n $n route add default via $LBB
  done
  # every host keeps its default offloads
  for n in $C1 $C2 $B1 $B2 $B3; do
    k=$(ip netns exec $n ethtool -k ${n}e)
    grep -q "^tx-checksumming: on" <<<"$k" || fail "${n}e: tx checksum offload is not on by default"
    grep -q "^tcp-segmentation-offload: on" <<<"$k" || fail "${n}e: TSO is not on by default"
  done
  # the backends: nginx, 1 worker, no access log, a fixed 74-byte body for every GET (210
  # bytes with the headers); its stub_status on 127.0.0.1:8080 in the backend's namespace;
  # configuration, pid file, logs and temp paths in the scratch dir
  for i in 1 2 3; do
    d="$DIR/nginx-b$i"; mkdir -p "$d/tmp"
    cat > "$d/nginx.conf" <<N
worker_processes 1;
daemon off;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  server_tokens off;
  keepalive_timeout 0;
  default_type text/plain;
  client_body_temp_path $d/tmp/body; proxy_temp_path $d/tmp/proxy; fastcgi_temp_path $d/tmp/fcgi;
  uwsgi_temp_path $d/tmp/uwsgi; scgi_temp_path $d/tmp/scgi;
  server { listen 80 backlog=4096; location / { return 200 "$BODY"; } }
  server { listen 127.0.0.1:8080; location / { stub_status; } }
}
N
    ip netns exec weirlb-b$i nginx -e "$d/error.log" -p "$d" -c "$d/nginx.conf" </dev/null >"$d/out.log" 2>&1 &
    PIDS="$PIDS $!"
  done
  for i in 1 2 3; do
    for _ in $(seq 50); do ip netns exec weirlb-b$i ss -Hltn 'sport = :80' | grep -q LISTEN && break; sleep 0.1; done
    ip netns exec weirlb-b$i ss -Hltn 'sport = :80' | grep -q LISTEN ||
      fail "nginx in weirlb-b$i did not start: $(cat $DIR/nginx-b$i/error.log $DIR/nginx-b$i/out.log 2>/dev/null)"
  done
}
accepts() { ip netns exec weirlb-b$1 curl -s -m 2 http://127.0.0.1:8080/ | awk 'NR == 3 { print $1 }'; }

write_rules() { # dnat | snat
  local mark="" sel="numgen random mod 3"
  [ "$1" = snat ] && { mark="ct mark set 0x00000100 "; sel="jhash ip saddr . tcp sport mod 3 seed 0"; }
  cat > "$DIR/rules.nft" <<R
table ip nftlb {
  map tcp-services {
    type ipv4_addr . inet_service : verdict
    elements = { $VIP . http : goto vs01 }
  }
  chain prerouting {
    type nat hook prerouting priority 0; policy accept;
    ip daddr . tcp dport vmap @tcp-services
  }
  chain postrouting {
    type nat hook postrouting priority 100; policy accept;
    ct mark 0x00000100 masquerade
  }
  chain vs01 {
    ${mark}dnat to $sel map { 0 : ${BACKENDS[0]}, 1 : ${BACKENDS[1]}, 2 : ${BACKENDS[2]} }
  }
}
table ip weirlb {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ip daddr ${BACKENDS[0]} tcp dport 80 ct state new counter
    ip daddr ${BACKENDS[1]} tcp dport 80 ct state new counter
    ip daddr ${BACKENDS[2]} tcp dport 80 ct state new counter
  }
}
R
  "$WEIR" check "$DIR/rules.nft" >"$DIR/check.out" 2>&1 || fail "weir check: $(cat $DIR/check.out)"
}
# routes for the two subnets; the backends' MACs configured, the clients' learnt over ARP
cat > "$DIR/weir.toml" <<T
ruleset = "rules.nft"
mode = "inline"
[control]
socket = "$DIR/weir.sock"
[metrics]
address = ""
[[interface]]
name = "weirlb-lbf"
address = ["$LBF"]
[[interface]]
name = "weirlb-lbb"
address = ["$LBB"]
[[route]]
prefix = "198.18.40.0/24"
interface = "weirlb-lbf"
[[route]]
prefix = "198.18.41.0/24"
interface = "weirlb-lbb"
[[neighbour]]
address = "${BACKENDS[0]}"
mac = "02:77:6c:62:01:0b"
[[neighbour]]
address = "${BACKENDS[1]}"
mac = "02:77:6c:62:01:0c"
[[neighbour]]
address = "${BACKENDS[2]}"
mac = "02:77:6c:62:01:0d"
T
ctl() { "$WEIR" ctl --socket "$DIR/weir.sock" "$@"; }
cpu_s() { ctl status | awk '/^cpu / { print $2, $8 }'; }   # "total system", seconds
parse_wrk() { # file -> requests errors non2xx requests/s
  awk '/ requests in / { req = $1 } /Socket errors:/ { gsub(/,/, ""); err = $4 + $6 + $8 + $10 }
       /Non-2xx/ { n2 = $NF } /^Requests\/sec:/ { rps = $2 }
       END { printf "%d %d %d %.0f\n", req, err, n2, rps }' "$1"
}

# the backends' TIME_WAIT sockets of port 80 by peer: "client=N lb=M"
tw_peers() {
  for i in 1 2 3; do ip netns exec weirlb-b$i ss -Htn state time-wait '( sport = :80 )'; done |
    awk -v lb=$LBB '{ split($NF, a, ":"); if (a[1] == lb) l++; else if (a[1] ~ /^198\.18\.40\./) c++ }
      END { printf "client=%d lb=%d\n", c, l }'
}
tw_count() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print $2 }'; }
SUMMARY=""
for RUN in ${LB_RUNS:-xdp-dnat xdp-snat afpacket-dnat afpacket-snat}; do
IO=${RUN%-*} NAT=${RUN#*-}
echo "-- io = $IO, $NAT"
if [ "${LB_KEEP_LAB:-1}" = 0 ] || [ -z "${BUILT:-}" ]; then
  lab_up; BUILT=1
  echo "ok: 7 namespaces, the hosts with their default offloads (tx checksum, TSO on), 3 nginx backends listening"
fi
write_rules $NAT
sed "s/^mode = .*/&\nio = \"$IO\"/" "$DIR/weir.toml" > "$DIR/weir-$IO.toml"
for n in $C1 $C2 $B1 $B2 $B3; do ip -n $n neigh flush all; done
ip netns exec $LB "$WEIR" run --config "$DIR/weir-$IO.toml" >"$DIR/weir.log" 2>&1 &
WPID=$!
# up to 30 s: its kernel rules wait for the xtables lock, which other labs may hold
for _ in $(seq 300); do grep -q ready "$DIR/weir.log" 2>/dev/null && break; kill -0 $WPID 2>/dev/null || break; sleep 0.1; done
grep -q ready "$DIR/weir.log" || fail "weir did not start: $(cat "$DIR/weir.log")"
case $IO in
  xdp) ctl status | grep -q "AF_XDP" || fail "not on AF_XDP: $(ctl status)" ;;
  afpacket) ctl status | grep -q "AF_PACKET" || fail "not on AF_PACKET: $(ctl status)" ;;
esac
# one request from each client (weir learns the client from its ARP for the gateway)
for i in 1 2; do
  out=$(ip netns exec weirlb-c$i curl -s -m 3 -H 'Connection: close' http://$VIP/) ||
    fail "weirlb-c$i: no answer from http://$VIP/ through weir (curl exit $?)"
  [ "$out" = "$BODY" ] || fail "weirlb-c$i: wrong answer from http://$VIP/: $out"
done
echo "ok: one request from each client answered through weir"
A0=(); for i in 1 2 3; do A0[$i]=$(accepts $i); done
CPU0=$(cpu_s)
TW0=$(tw_peers)
for i in 1 2; do
  ip netns exec weirlb-c$i timeout -k 2 $((WRK_SECONDS + 10)) wrk -t1 -c$WRK_CONNS -d${WRK_SECONDS}s --timeout 2s \
    -H 'Connection: close' http://$VIP/ >"$DIR/wrk.$i" 2>&1 &
  WP="$WP $!"
done
for p in $WP; do
  rc=0; wait $p || rc=$?; WP=${WP/ $p/}
  [ $rc = 0 ] || fail "wrk exited with $rc (124: still running $((WRK_SECONDS + 10)) s later): $(cat $DIR/wrk.1 $DIR/wrk.2)"
done
CPU1=$(cpu_s)
REQ=0 RPS=0
for i in 1 2; do
  read -r req err n2 rps < <(parse_wrk "$DIR/wrk.$i")
  [ "$req" -gt 0 ] || fail "weirlb-c$i: wrk made no request: $(cat $DIR/wrk.$i)"
  [ "$err" = 0 ] || fail "weirlb-c$i: $err socket errors: $(cat $DIR/wrk.$i)"
  [ "$n2" = 0 ] || fail "weirlb-c$i: $n2 non-2xx answers: $(cat $DIR/wrk.$i)"
  REQ=$((REQ + req)) RPS=$((RPS + rps))
done
# every backend served requests: weir's counter of its new connections, nginx's accepts
ctl counters > "$DIR/counters"
HITS=""
for i in 1 2 3; do
  c=$(grep "ip daddr ${BACKENDS[$((i - 1))]} tcp dport 80 ct state new counter" "$DIR/counters" | awk '{ print $1 }')
  a=$(( $(accepts $i) - ${A0[$i]} ))
  [ "${c:-0}" -gt 0 ] || fail "weir counted no new connection to backend $i: $(cat $DIR/counters)"
  [ "$a" -gt 0 ] || fail "nginx on backend $i accepted no connection during the load"
  HITS="$HITS${HITS:+/}$a"
done
# who the backends see: the clients (DNAT) or the LB's back address (SNAT, masquerade); the
# backends' TIME_WAIT sockets (nginx closes first) counted by peer before and after the load
# (those of an earlier pass last 60 s)
TW1=$(tw_peers)
case $NAT in
  dnat) [ $(( $(tw_count "$TW1" client) - $(tw_count "$TW0" client) )) -gt 0 ] &&
        [ $(( $(tw_count "$TW1" lb) - $(tw_count "$TW0" lb) )) -le 0 ] ||
        fail "DNAT: the backends did not see the clients (TIME_WAIT peers before: $TW0, after: $TW1)" ;;
  snat) [ $(( $(tw_count "$TW1" lb) - $(tw_count "$TW0" lb) )) -gt 0 ] &&
        [ $(( $(tw_count "$TW1" client) - $(tw_count "$TW0" client) )) -le 0 ] ||
        fail "SNAT: the backends did not see the LB's address (TIME_WAIT peers before: $TW0, after: $TW1)" ;;
esac
ctl status > "$DIR/status"
sed 's/^/  /' "$DIR/status"
grep -q " dropped 0" "$DIR/status" || fail "weir dropped packets: $(grep -o 'dropped [0-9]*[^;]*' $DIR/status)"
PK=$(awk '/^packets / { print $2, $4 }' "$DIR/status")   # packets, CPU us per packet (the whole run)
kill -TERM $WPID; wait $WPID || true; WPID=
grep -i "per packet" "$DIR/weir.log" | sed 's/^/  weir at exit: /' || true
if ip -n $LB link show weirlb-lbf | grep -q xdp; then fail "XDP program still attached after exit"; fi
if ip netns exec $LB iptables -t raw -S 2>/dev/null | grep -q WEIR-INLINE; then fail "kernel rules left after exit"; fi
FIG=$(awk -v r=$REQ -v rps=$RPS -v c0="$CPU0" -v c1="$CPU1" -v pk="$PK" -v h=$HITS 'BEGIN {
  split(c0, a, " "); split(c1, b, " "); split(pk, p, " "); cpu = b[1] - a[1]; sys = b[2] - a[2]
  printf "%d requests (%d/s), 0 errors, backends %s; weir %.1f us CPU per request (%.0f%% system), %.1f packets per request, %s us per packet",
    r, rps, h, cpu * 1e6 / r, (cpu > 0 ? sys / cpu * 100 : 0), p[1] / r, p[2] }')
echo "ok: $IO $NAT: $FIG"
SUMMARY="$SUMMARY  $IO $NAT: $FIG\n"
done
echo "figures (2 clients x wrk -t1 -c$WRK_CONNS -d${WRK_SECONDS}s, Connection: close):"; printf "%b" "$SUMMARY"
echo "PASS"
