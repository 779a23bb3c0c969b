#!/usr/bin/env bash
# Lab test of local delivery in `weir run` inline mode (root; network namespaces): the router
# serves its own services through weir. Packets for the router's addresses cross weir's input
# chain and are handed to the kernel's stack; what the kernel sends is tracked by weir as it
# leaves, so that the replies are `established`. Checks, over AF_XDP, AF_PACKET and AF_PACKET
# with two workers, with the hosts' default offloads:
#   - an SSH-like TCP service on the router (a banner, then an echo) answers a client;
#   - a BGP session between bird on the router and bird on a neighbour namespace gets
#     established (either side may open it);
#   - a TCP connection the router itself opens to a host behind it works (its replies are
#     established in weir's table, the input chain admits nothing else);
#   - the input chain drops what it should: a connection to a port the router listens on but
#     the ruleset does not admit gets no answer at all (weir drops it, the kernel never sees
#     it), and is counted;
#   - forwarding through the router still works beside it.
#
# Usage: tests/lab/local.sh [path/to/weir]
set -euo pipefail
C=weirlo-c R=weirlo-r S=weirlo-s
NAMESPACES="$C $R $S" TOOLS="ip iptables ip6tables python3 bird birdc ethtool ping" PREFIX=weirlo
. "$(dirname "$0")/common.sh"
Q="numtxqueues 2 numrxqueues 2"
ip link add weirlo-c0 netns $C address 02:77:6f:00:00:02 $Q type veth peer name weirlo-r0 netns $R address 02:77:6f:00:00:01 $Q
ip link add weirlo-s0 netns $S address 02:77:6f:00:01:02 $Q type veth peer name weirlo-r1 netns $R address 02:77:6f:00:01:01 $Q
for x in "$C weirlo-c0" "$R weirlo-r0" "$R weirlo-r1" "$S weirlo-s0"; do
  set -- $x; ip netns exec $1 ethtool -L $2 rx 1 tx 1 >/dev/null 2>&1 || true
done
ip -n $C addr add 198.18.50.2/24 dev weirlo-c0; ip -n $C link set weirlo-c0 up
ip -n $C route add default via 198.18.50.1
ip -n $R addr add 198.18.50.1/24 dev weirlo-r0; ip -n $R link set weirlo-r0 up
ip -n $R addr add 198.18.51.1/24 dev weirlo-r1; ip -n $R link set weirlo-r1 up
ip -n $S addr add 198.18.51.2/24 dev weirlo-s0; ip -n $S link set weirlo-s0 up
ip -n $S route add default via 198.18.51.1
ip netns exec $R sysctl -qw net.ipv4.ip_forward=0
ip netns exec $R sysctl -qw net.ipv6.conf.all.forwarding=0

cat > "$DIR/rules.nft" <<'R'
table inet filter {
  chain input {
    type filter hook input priority 0; policy drop;
    ct state established,related accept
    ct state invalid counter drop
    tcp dport { 22, 179 } accept
    icmp type echo-request accept
    tcp dport 23 counter drop
    counter
  }
  chain forward {
    type filter hook forward priority 0; policy accept;
  }
  chain output {
    type filter hook output priority 0; policy accept;
    tcp sport 22 counter
    tcp dport 8080 counter
  }
}
R
cat > "$DIR/weir.toml" <<T
ruleset = "rules.nft"
mode = "inline"
[control]
socket = "$DIR/weir.sock"
[metrics]
address = ""
[[interface]]
name = "weirlo-r0"
address = ["198.18.50.1/24"]
[[interface]]
name = "weirlo-r1"
address = ["198.18.51.1/24"]
[[route]]
prefix = "198.18.50.0/24"
interface = "weirlo-r0"
[[route]]
prefix = "198.18.51.0/24"
interface = "weirlo-r1"
T

# the router's services: an SSH-like TCP service on 22 (a banner, then an echo of a line),
# the same on 23 (which the ruleset does not admit)
cat > "$DIR/service.py" <<'PY'
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("198.18.50.1", port)); s.listen(16)
    while True:
        c, _ = s.accept()
        def one(c):
            try:
                c.sendall(b"SSH-2.0-weirlab\r\n")
                c.sendall(c.recv(100))
            finally:
                c.close()
        threading.Thread(target=one, args=(c,), daemon=True).start()
for p in (22, 23):
    threading.Thread(target=serve, args=(p,), daemon=True).start()
threading.Event().wait(600)
PY
# a host behind the router: a TCP service on 8080 the router connects to
cat > "$DIR/behind.py" <<'PY'
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.51.2", 8080)); s.listen(16)
s.settimeout(600)
while True:
    c, _ = s.accept()
    c.sendall(b"behind\r\n"); c.sendall(c.recv(100)); c.close()
PY
# a client of a TCP service: prints what it got, or "none" when nothing answered in time
cat > "$DIR/client.py" <<'PY'
import socket, sys
host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    c = socket.create_connection((host, port), timeout=timeout)
    c.settimeout(timeout)
    got = b""
    while b"\n" not in got:
        b = c.recv(100)
        if not b:
            break
        got += b
    c.sendall(b"hello\n")
    got += c.recv(100)
    print(got.decode().replace("\r\n", "|").replace("\n", "|"))
except (socket.timeout, OSError) as e:
    print("none", e)
PY
ip netns exec $R python3 "$DIR/service.py" & SVC=$!
ip netns exec $S python3 "$DIR/behind.py" & BEHIND=$!
bird_conf() { # $1 router id / local address, $2 local AS, $3 neighbour, $4 its AS
  cat <<B
router id $1;
protocol device {}
protocol bgp peer {
  local $1 as $2;
  neighbor $3 as $4;
  hold time 9;
  connect retry time 1;
  ipv4 { import all; export none; };
}
B
}
bird_conf 198.18.50.1 65001 198.18.50.2 65002 > "$DIR/bird-r.conf"
bird_conf 198.18.50.2 65002 198.18.50.1 65001 > "$DIR/bird-c.conf"
bird_start() { # $1 namespace, $2 name
  ip netns exec $1 bird -c "$DIR/bird-$2.conf" -s "$DIR/bird-$2.ctl" -P "$DIR/bird-$2.pid"
}
bird_stop() {
  for b in r c; do
    [ -f "$DIR/bird-$b.pid" ] && kill "$(cat "$DIR/bird-$b.pid")" 2>/dev/null || true
    rm -f "$DIR/bird-$b.pid"
  done
}
finish() { bird_stop; kill $SVC $BEHIND 2>/dev/null || true; }
trap 'finish; cleanup' EXIT

for RUN in xdp afpacket afpacket-2; do
IO=${RUN%-*}; WORKERS=1
case $RUN in *-2) WORKERS=2 ;; esac
echo "-- io = $IO, workers = $WORKERS"
sed "s/^mode = .*/&\nio = \"$IO\"\nworkers = $WORKERS/" "$DIR/weir.toml" > "$DIR/weir-$RUN.toml"
ip -n $C neigh flush all; ip -n $S neigh flush all; ip -n $R neigh flush all
ip netns exec $R "$WEIR" run --config "$DIR/weir-$RUN.toml" >"$DIR/weir.log" 2>&1 &
WPID=$!
# (up to 60 s: the other labs of the test run may load the machine; a weir that exits ends
# the wait)
for i in $(seq 600); do
  grep -q ready "$DIR/weir.log" 2>/dev/null && break
  kill -0 $WPID 2>/dev/null || break
  sleep 0.1
done
grep -q ready "$DIR/weir.log" || fail "weir did not start: $(cat "$DIR/weir.log")"
ctl() { "$WEIR" ctl --socket "$DIR/weir.sock" "$@"; }

ip netns exec $C ping -c 2 -i 0.2 -W 2 198.18.51.2 >/dev/null || fail "forwarding through weir"
ip netns exec $C ping -c 2 -i 0.2 -W 2 198.18.50.1 >"$DIR/ping" || fail "ping to the router: $(cat $DIR/ping)"
echo "ok: forwarded, and the router answers a ping through weir"
GOT=$(ip netns exec $C python3 "$DIR/client.py" 198.18.50.1 22 5)
[ "$GOT" = "SSH-2.0-weirlab|hello|" ] || fail "the SSH-like service on the router: $GOT"
echo "ok: an SSH-like TCP service on the router answers through weir"
GOT=$(ip netns exec $R python3 "$DIR/client.py" 198.18.51.2 8080 5)
[ "$GOT" = "behind|hello|" ] || fail "a connection the router opens to a host behind it: $GOT"
echo "ok: a TCP connection the router opens to a host behind it"
GOT=$(ip netns exec $C python3 "$DIR/client.py" 198.18.50.1 23 2)
case "$GOT" in none*) ;; *) fail "port 23 answered although the input chain drops it: $GOT" ;; esac
ctl counters | grep "tcp dport 23 counter drop" | awk '{ exit !($1 >= 1) }' || fail "the drop of port 23 not counted: $(ctl counters)"
echo "ok: the input chain drops what it should (port 23 gets no answer, the kernel never saw it)"
bird_start $R r
bird_start $C c
UP=""
for i in $(seq 60); do
  if ip netns exec $R birdc -s "$DIR/bird-r.ctl" show protocols peer 2>/dev/null | grep -q Established &&
     ip netns exec $C birdc -s "$DIR/bird-c.ctl" show protocols peer 2>/dev/null | grep -q Established; then
    UP=yes; break
  fi
  sleep 0.5
done
[ -n "$UP" ] || fail "BGP session not established: $(ip netns exec $R birdc -s "$DIR/bird-r.ctl" show protocols all peer 2>&1 | tail -5)"
echo "ok: a BGP session between the router and its neighbour is established through weir"
bird_stop
ctl status > "$DIR/status"
grep -q "to the router's stack [1-9]" "$DIR/status" || fail "no local delivery counted: $(cat $DIR/status)"
grep -Eq "from it [1-9]" "$DIR/status" || fail "nothing the router sent was tracked: $(cat $DIR/status)"
ctl counters | grep "tcp sport 22 counter" | awk '{ exit !($1 >= 1) }' || fail "the router's SSH answers did not cross weir's output chain: $(ctl counters)"
ctl counters | grep "tcp dport 8080 counter" | awk '{ exit !($1 >= 1) }' || fail "the router's own connection did not cross weir's output chain: $(ctl counters)"
echo "ok: $(grep -o "to the router's stack [0-9]* (from it [0-9]*)" "$DIR/status" | head -1)"
kill -TERM $WPID; wait $WPID || true; WPID=
if ip -n $R link show weirlo-r0 | grep -q xdp; then fail "XDP program still attached after exit"; fi
if ip netns exec $R iptables -t raw -S | grep -q WEIR-; then fail "kernel rules left after exit"; fi
echo "ok: $RUN: clean shutdown"
done
echo "PASS"
