#!/usr/bin/env bash
# Golden outputs of a running weir (root; network namespaces): what users see and scripts
# read — `weir ctl status`, `counters`, `ct list`, `ct count`, `set list` and the Prometheus
# metrics (names, labels, values) — in inline mode (AF_PACKET, one worker) and in NFQUEUE
# mode, after a fixed, deterministic exchange of packets (static neighbours, no IPv6 on the
# hosts: nothing else crosses the router). The outputs are written to OUT (the first
# argument after weir), with what varies from run to run (times, CPU, timeouts) masked;
# crates/weir/tests/live_lab.rs compares them with crates/weir/tests/golden/.
#
# Usage: tests/lab/golden.sh path/to/weir OUT_DIR
set -euo pipefail
C=weirgo-c R=weirgo-r S=weirgo-s
NAMESPACES="$C $R $S" TOOLS="ip iptables ping python3" PREFIX=weirgo
. "$(dirname "$0")/common.sh"
OUT=${2:?an output folder}
mkdir -p "$OUT"
ip link add weirgo-c0 netns $C address 02:77:67:00:00:02 type veth peer name weirgo-r0 netns $R address 02:77:67:00:00:01
ip link add weirgo-s0 netns $S address 02:77:67:00:01:02 type veth peer name weirgo-r1 netns $R address 02:77:67:00:01:01
for n in $C $R $S; do
  ip netns exec $n sysctl -qw net.ipv6.conf.all.disable_ipv6=1
  ip netns exec $n sysctl -qw net.ipv6.conf.default.disable_ipv6=1
done
for x in "$C weirgo-c0" "$R weirgo-r0" "$R weirgo-r1" "$S weirgo-s0"; do
  set -- $x; ip netns exec $1 sysctl -qw net.ipv6.conf.$2.disable_ipv6=1
done
ip -n $C addr add 198.18.40.2/24 dev weirgo-c0; ip -n $C link set weirgo-c0 up
ip -n $C route add default via 198.18.40.1
ip -n $R addr add 198.18.40.1/24 dev weirgo-r0; ip -n $R link set weirgo-r0 up
ip -n $R addr add 198.18.41.1/24 dev weirgo-r1; ip -n $R link set weirgo-r1 up
ip -n $S addr add 198.18.41.2/24 dev weirgo-s0; ip -n $S link set weirgo-s0 up
ip -n $S route add default via 198.18.41.1
# static neighbours everywhere: no ARP crosses the links
ip -n $C neigh add 198.18.40.1 lladdr 02:77:67:00:00:01 dev weirgo-c0 nud permanent
ip -n $S neigh add 198.18.41.1 lladdr 02:77:67:00:01:01 dev weirgo-s0 nud permanent
ip -n $R neigh add 198.18.40.2 lladdr 02:77:67:00:00:02 dev weirgo-r0 nud permanent
ip -n $R neigh add 198.18.41.2 lladdr 02:77:67:00:01:02 dev weirgo-r1 nud permanent
for x in "$C weirgo-c0" "$S weirgo-s0"; do
  set -- $x; ip netns exec $1 ethtool -K $2 tx off tso off gso off >/dev/null 2>&1 || true
done

cat > "$DIR/rules.nft" <<'R'
table inet filter {
  counter seen { }
  set blocked { type ipv4_addr; flags timeout; }
  chain forward {
    type filter hook forward priority 0; policy accept;
    ct state established,related counter accept
    ip saddr @blocked counter drop
    udp dport 9999 counter name seen drop
    icmp type echo-request counter accept
    tcp dport 23 counter reject with tcp reset
  }
}
R
cat > "$DIR/inline.toml" <<T
ruleset = "rules.nft"
mode = "inline"
io = "afpacket"
[control]
socket = "$DIR/weir.sock"
[metrics]
address = "127.0.0.1:9562"
[[interface]]
name = "weirgo-r0"
address = ["198.18.40.1"]
[[interface]]
name = "weirgo-r1"
address = ["198.18.41.1"]
[[route]]
prefix = "198.18.40.0/24"
interface = "weirgo-r0"
[[route]]
prefix = "198.18.41.0/24"
interface = "weirgo-r1"
[[neighbour]]
address = "198.18.40.2"
mac = "02:77:67:00:00:02"
[[neighbour]]
address = "198.18.41.2"
mac = "02:77:67:00:01:02"
T
cat > "$DIR/nfqueue.toml" <<T
ruleset = "rules.nft"
mode = "nfqueue"
[nfqueue]
queue = 7
[control]
socket = "$DIR/weir.sock"
[metrics]
address = "127.0.0.1:9562"
T

ctl() { "$WEIR" ctl --socket "$DIR/weir.sock" "$@"; }
# what varies between runs: up time, CPU time, per-packet CPU, remaining timeouts, the
# identifier ping picks
mask() {
  sed -E \
    -e 's/up [0-9.]+ s/up N s/' \
    -e 's/cpu [0-9.]+ s \(user [0-9.]+ s, system [0-9.]+ s\)/cpu N s (user N s, system N s)/' \
    -e 's/cpu [0-9.]+ us per packet/cpu N us per packet/' \
    -e 's/timeout [0-9]+ s/timeout N s/' \
    -e 's/expires [0-9]+ s/expires N s/' \
    -e 's/^(proto 1 [0-9.]+):[0-9]+ (-> [0-9.]+:[0-9]+ \| reply [0-9.]+):[0-9]+/\1:ID \2:ID/' \
    -e 's/^(weir_cpu_seconds_total\{mode="(user|system)"\}) .*/\1 N/' \
    -e 's/queue batches [0-9]+ sends [0-9]+/queue batches N sends N/' \
    -e 's/^(weir_nfqueue_batches_total) .*/\1 N/'
}
scrape() {
  ip netns exec $R bash -c 'exec 3<>/dev/tcp/127.0.0.1/9562; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' |
    tr -d '\r' | sed '1,/^$/d'
}
traffic() {
  # two echoes (and their replies), a datagram the ruleset drops (and counts by name), a TCP
  # SYN it rejects with a reset, and a datagram from a blocked source
  ip netns exec $C ping -c 2 -i 0.2 -W 1 198.18.41.2 >/dev/null || fail "ping through weir"
  ip netns exec $C bash -c 'echo x > /dev/udp/198.18.41.2/9999' || true
  if ip netns exec $C timeout 3 bash -c 'exec 3<>/dev/tcp/198.18.41.2/23' 2>/dev/null; then fail "connected to a rejected port"; fi
  ctl set add inet filter blocked 198.18.40.2 timeout 1h >/dev/null || fail "set add"
  ip netns exec $C bash -c 'echo y > /dev/udp/198.18.41.2/5000' || true
  sleep 0.5
}
capture() {
  local mode=$1
  ctl status | mask >"$OUT/$mode-status.txt"
  ctl counters | mask >"$OUT/$mode-counters.txt"
  ctl ct list | mask | sort >"$OUT/$mode-ct-list.txt"
  ctl ct count >"$OUT/$mode-ct-count.txt"
  ctl set list inet filter blocked | mask >"$OUT/$mode-set-list.txt"
  scrape | mask >"$OUT/$mode-metrics.txt"
}
start() {
  ip netns exec $R "$WEIR" run --config "$DIR/$1.toml" >"$DIR/weir.log" 2>&1 &
  WPID=$!
  # (iptables waits for the xtables lock, which other labs on the machine may hold)
  for i in $(seq 600); do grep -q ready "$DIR/weir.log" 2>/dev/null && break; sleep 0.1; done
  grep -q ready "$DIR/weir.log" || { cat "$DIR/weir.log"; fail "weir did not start ($1)"; }
}
stop() {
  kill -TERM $WPID; wait $WPID || true; WPID=
}

ip netns exec $R sysctl -qw net.ipv4.ip_forward=0
start inline
traffic
capture inline
stop

ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
start nfqueue
traffic
capture nfqueue
stop
echo "PASS"
