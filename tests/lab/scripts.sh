#!/usr/bin/env bash
# Lab test of per-flow scripts (root; network namespaces): a client, weir's router (NFQUEUE
# mode), a DPI stand-in and a TLS-like server. The DPI resets any connection to port 443 in
# which it sees "iana.org" whole in one packet (iptables' string match, per packet, as a
# DPI box that does not reassemble). The client sends a real TLS ClientHello for iana.org
# (zapret2's fake payload) and waits for the server's answer, which carries a hash of what
# the server received.
#
# Checks: without a strategy the DPI resets the connection; with weir's profile
# (`multisplit:pos=1,midsld` and a `fake` with TTL 1 and a bad checksum, on the ClientHello)
# the connection completes and the server received exactly the ClientHello (no fake bytes,
# nothing lost); weir counts what it sent; what it sends is not queued again; a Lua function
# behind another queue can drop a connection's data; the scripts' counters show in `weir ctl
# status` and the metrics. Then a ruleset that only queues to scripts gets kernel rules that
# queue the first packets of each connection only (an iperf3 transfer queues at most N + 3
# per connection and direction), and the same profile runs in inline mode.
#
# Usage: tests/lab/scripts.sh [path/to/weir]
set -euo pipefail
C=weirsc-c R=weirsc-r D=weirsc-d S=weirsc-s
NAMESPACES="$C $R $D $S" TOOLS="ip iptables python3" PREFIX=weirsc
. "$(dirname "$0")/common.sh"
HELLO="$(dirname "$0")/../../../shared/zapret2/files/fake/tls_clienthello_iana_org.bin"
[ -f "$HELLO" ] || { echo "SKIP: ../shared/zapret2/files/fake is not there"; exit 0; }
HELLO=$(readlink -f "$HELLO")
ip link add weirsc-c0 netns $C type veth peer name weirsc-r0 netns $R
ip link add weirsc-r1 netns $R type veth peer name weirsc-d0 netns $D
ip link add weirsc-d1 netns $D type veth peer name weirsc-s0 netns $S
ip -n $C addr add 198.18.40.2/24 dev weirsc-c0; ip -n $C link set weirsc-c0 up
ip -n $C route add default via 198.18.40.1
ip -n $R addr add 198.18.40.1/24 dev weirsc-r0; ip -n $R link set weirsc-r0 up
ip -n $R addr add 198.18.41.1/24 dev weirsc-r1; ip -n $R link set weirsc-r1 up
ip -n $R route add 198.18.42.0/24 via 198.18.41.2
ip -n $D addr add 198.18.41.2/24 dev weirsc-d0; ip -n $D link set weirsc-d0 up
ip -n $D addr add 198.18.42.1/24 dev weirsc-d1; ip -n $D link set weirsc-d1 up
ip -n $D route add 198.18.40.0/24 via 198.18.41.1
ip -n $S addr add 198.18.42.2/24 dev weirsc-s0; ip -n $S link set weirsc-s0 up
ip -n $S route add default via 198.18.42.1
ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
ip netns exec $D sysctl -qw net.ipv4.ip_forward=1
# the DPI stand-in: a packet to port 443 carrying the name whole gets the connection reset
ip netns exec $D iptables -A FORWARD -p tcp --dport 443 -m string --string iana.org --algo bm \
  -j REJECT --reject-with tcp-reset || { echo "SKIP: iptables' string match is not available"; exit 0; }

# the server: reads what the client sends for up to 2 s (or until it has the ClientHello's
# length), answers with the length and hash of what it got
cat > "$DIR/server.py" <<'P'
import hashlib, socket, sys
want = int(sys.argv[1])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.42.2", 443)); s.listen(8); s.settimeout(60)
while True:
    try:
        c, _ = s.accept()
    except socket.timeout:
        break
    c.settimeout(2); got = b""
    try:
        while len(got) < want:
            b = c.recv(65536)
            if not b: break
            got += b
    except (socket.timeout, ConnectionError):
        pass
    try:
        c.sendall(b"GOT %d %s\n" % (len(got), hashlib.sha256(got).hexdigest().encode())); c.close()
    except OSError:
        pass
P
# the client: sends the ClientHello in one write, prints the answer or the error
cat > "$DIR/client.py" <<'P'
import socket, sys
data = open(sys.argv[1], "rb").read()
s = socket.create_connection(("198.18.42.2", 443), timeout=3)
try:
    s.sendall(data)
    print(s.recv(200).decode().strip() or "EOF")
except ConnectionResetError:
    print("RESET")
except socket.timeout:
    print("TIMEOUT")
P
ip netns exec $S python3 "$DIR/server.py" "$(stat -c %s "$HELLO")" >"$DIR/server.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2>/dev/null || true; cleanup' EXIT
WANT="GOT $(stat -c %s "$HELLO") $(sha256sum "$HELLO" | cut -d' ' -f1)"
# listening before the first connection (labs run side by side on a loaded machine)
listening() { # PROTO PORT
  for i in $(seq 100); do
    ip netns exec $S ss -Hln$1 "sport = :$2" | grep -q . && return 0
    sleep 0.1
  done
  fail "nothing listens on $1 port $2 in the server's namespace"
}
listening t 443

cat > "$DIR/rules.nft" <<'R'
table inet z {
  chain post {
    type filter hook postrouting priority 101; policy accept;
    tcp dport 443 counter queue num 200
    udp dport 9 counter queue num 201
  }
}
R
cat > "$DIR/strategy.lua" <<'L'
-- drops a UDP datagram whose payload starts with "X", counts the flow's datagrams
function drop_x(pkt, args)
  pkt.state.n = (pkt.state.n or 0) + 1
  if pkt.payload:sub(1, 1) == "X" then return "drop" end
end
L
cat > "$DIR/weir.toml" <<T
ruleset = "rules.nft"
mode = "nfqueue"
[nfqueue]
queue = 9
[control]
socket = "$DIR/weir.sock"
[metrics]
address = "127.0.0.1:9561"
[scripts]
lua = ["strategy.lua"]
[[scripts.profile]]
queue = 200
name = "split"
filter_tcp = "443"
[[scripts.profile.instance]]
desync = "multisplit:pos=1,midsld"
[[scripts.profile.instance]]
desync = "fake:ip_ttl=1:badsum:blob=0x10000000"
[[scripts.profile]]
queue = 201
name = "lua"
filter_udp = "9"
[[scripts.profile.instance]]
desync = "drop_x:payload=all"
T
ctl() { "$WEIR" ctl --socket "$DIR/weir.sock" "$@"; }
# weir with configuration $1 (default weir.toml), until it says it is ready
start() {
  ip netns exec $R "$WEIR" run --config "$DIR/${1:-weir.toml}" >"$DIR/weir.log" 2>&1 &
  WPID=$!
  for i in $(seq 300); do grep -q ready "$DIR/weir.log" 2>/dev/null && break; sleep 0.1; done
  echo "(weir ready after about $((i / 10)) s)"
  grep -q ready "$DIR/weir.log" || fail "weir did not start (${1:-weir.toml})"
}
stop() { kill $WPID; wait $WPID 2>/dev/null || true; WPID=; }

# 1. no strategy: the queue bypasses (nobody listens), the DPI sees the name and resets
sed 's/queue num 200/queue num 200 bypass/; /queue num 201/d' "$DIR/rules.nft" > "$DIR/plain.nft"
sed 's/^ruleset = "rules.nft"/ruleset = "plain.nft"/; /^\[scripts\]/,$d' "$DIR/weir.toml" > "$DIR/plain.toml"
start plain.toml
got=$(ip netns exec $C python3 "$DIR/client.py" "$HELLO" 2>&1 || true)
[ "$got" = RESET ] || fail "without a strategy the DPI should reset the connection, got: $got"
echo "ok: without a strategy the DPI stand-in resets the connection"
stop

# 2. the profile splits the ClientHello inside the name and sends a fake first
start
for i in 1 2 3; do
  got=$(ip netns exec $C python3 "$DIR/client.py" "$HELLO" 2>&1 || true)
  [ "$got" = "$WANT" ] || fail "with the profile, connection $i: got '$got', want '$WANT'"
done
ctl status > "$DIR/status"
grep -Eq "sent by scripts [0-9]+ \(not sent 0\)" "$DIR/status" || fail "scripts' packets not counted: $(cat $DIR/status)"
sent=$(grep -Eo "sent by scripts [0-9]+" "$DIR/status" | awk '{s += $4} END {print s}')
# each ClientHello: 3 segments and a fake
[ "$sent" -ge 12 ] || fail "weir sent $sent packets for 3 ClientHellos (want at least 12)"
# what weir sent was not queued again: the queue rule counted the client's packets only
ctl counters | grep "queue num 200" | awk '{ exit !($1 < 40) }' || fail "sent packets queued again? $(ctl counters)"
echo "ok: with the profile the connection completes, the server got the ClientHello exactly ($sent packets sent by weir)"

# 3. a Lua function behind queue 201 drops what starts with X, passes the rest
ip netns exec $S python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("198.18.42.2", 9)); s.settimeout(3)
with open("'"$DIR"'/udp.log", "w") as f:
    try:
        while True:
            f.write(s.recv(100).decode()); f.flush()
    except socket.timeout:
        pass
' &
UPID=$!
listening u 9
before=$(ctl status | grep -Eo "queue=[0-9]+" | cut -d= -f2)
for p in A X B; do ip netns exec $C bash -c "echo $p > /dev/udp/198.18.42.2/9" || true; sleep 0.1; done
wait $UPID || true
after=$(ctl status | grep -Eo "queue=[0-9]+" | cut -d= -f2)
[ "$(tr -d '\n' < "$DIR/udp.log")" = AB ] || fail "the server should get A and B, not X: '$(cat "$DIR/udp.log")'"
[ "$after" = $((before + 1)) ] || fail "the Lua function's drop not counted once: $before -> $after"
echo "ok: a Lua function drops one datagram of a flow, passes the others"
# the scripts' counters in `weir ctl status` and the metrics, per Lua function too
ctl status > "$DIR/status"
grep -Eq "^scripts: packets [1-9][0-9]* .* held [0-9]+ .* lua_calls [1-9]" "$DIR/status" || fail "no scripts line in the status: $(cat "$DIR/status")"
grep -Eq "^scripts: lua function drop_x: calls 3 errors 0" "$DIR/status" || fail "no per-function line in the status: $(cat "$DIR/status")"
ip netns exec $R bash -c 'exec 3<>/dev/tcp/127.0.0.1/9561; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' >"$DIR/metrics" || fail "metrics endpoint"
grep -Eq '^weir_scripts_sent_total [1-9]' "$DIR/metrics" || fail "metrics: no weir_scripts_sent: $(grep scripts "$DIR/metrics")"
grep -q '^weir_scripts_lua_function_calls_total{function="drop_x"} 3$' "$DIR/metrics" || fail "metrics: no per-function calls: $(grep scripts "$DIR/metrics")"
grep "^scripts" "$DIR/status"
echo "ok: the scripts' counters in weir ctl status and the metrics"
stop

# 4. a ruleset that only hands packets to scripts, with bounded ranges: the kernel queues
# only the first packets of each connection (connbytes), so a bulk transfer stays in the
# kernel; at most N + 3 packets per connection and direction reach weir (N = 4 here)
if command -v iperf3 >/dev/null; then
  cat > "$DIR/narrow.nft" <<'R'
table inet z {
  chain fwd {
    type filter hook forward priority 0; policy accept;
    tcp dport 5201 counter queue num 202
  }
}
R
  cat > "$DIR/narrow.toml" <<T
ruleset = "narrow.nft"
mode = "nfqueue"
[nfqueue]
queue = 9
[control]
socket = "$DIR/weir.sock"
[scripts]
[[scripts.profile]]
queue = 202
name = "bulk"
filter_tcp = "5201"
[[scripts.profile.instance]]
desync = "multisplit:pos=1:payload=all"
out_range = "-n4"
T
  "$WEIR" run --config "$DIR/narrow.toml" --print-kernel-rules > "$DIR/narrow.rules"
  grep -q -- "--connbytes 1:4 --connbytes-dir original" "$DIR/narrow.rules" || fail "no connbytes bound in the kernel rules: $(cat "$DIR/narrow.rules")"
  start narrow.toml
  grep -q "only hands packets to scripts" "$DIR/weir.log" || fail "weir did not narrow what the kernel queues: $(cat "$DIR/weir.log")"
  ip netns exec $R iptables -S WEIR-NFQ9 | grep -q connbytes || fail "the installed rules have no connbytes: $(ip netns exec $R iptables -S WEIR-NFQ9)"
  seqno() { ip netns exec $R awk '$1 == 9 {print $8}' /proc/net/netfilter/nfnetlink_queue; }
  q0=$(seqno)
  ip netns exec $S timeout 20 iperf3 -s -1 -B 198.18.42.2 >/dev/null 2>&1 &
  IPID=$!
  listening t 5201
  ip netns exec $C timeout 20 iperf3 -c 198.18.42.2 -t 2 -J > "$DIR/iperf.json" || fail "iperf3 through weir's narrowed queue failed: $(tail -5 "$DIR/iperf.json")"
  wait $IPID 2>/dev/null || true
  sleep 0.3
  q1=$(seqno)
  bytes=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["end"]["sum_received"]["bytes"]))' "$DIR/iperf.json")
  queued=$((q1 - q0))
  # iperf3 makes two connections (control and data); N + 3 packets per connection and direction
  [ "$queued" -le $((2 * 2 * (4 + 3))) ] || fail "the kernel queued $queued packets for 2 connections (at most $((2 * 2 * 7)))"
  [ "$queued" -ge 4 ] || fail "the kernel queued $queued packets: the scripts saw nothing"
  [ "$bytes" -gt 1000000 ] || fail "iperf3 moved only $bytes bytes"
  cpu=$(awk '{print $14 + $15}' /proc/$WPID/stat)
  echo "ok: a $bytes-byte transfer, $queued packets queued to weir for its 2 connections (weir's CPU: $cpu ticks since start)"
  # the kernel's rules stay narrowed: a reload to a ruleset that decides more is refused
  sed -i 's/tcp dport 5201/tcp dport 23 drop\n    tcp dport 5201/' "$DIR/narrow.nft"
  out=$(ctl reload 2>&1 || true)
  echo "$out" | grep -q "restart weir" || fail "a reload that needs every packet was not refused: $out"
  echo "ok: a reload to a ruleset that needs every packet is refused while the kernel queues only the scripts' packets"
  stop
else
  echo "SKIP (part 4): iperf3 is not installed"
fi

# 5. inline mode: weir forwards itself (the kernel's forwarding off) and sends what the
# profile makes out of its own port; the connection completes as in NFQUEUE mode
ip netns exec $R sysctl -qw net.ipv4.ip_forward=0
{
  cat <<T
ruleset = "rules.nft"
mode = "inline"
[control]
socket = "$DIR/weir.sock"
[[interface]]
name = "weirsc-r0"
address = ["198.18.40.1"]
[[interface]]
name = "weirsc-r1"
address = ["198.18.41.1"]
[[route]]
prefix = "198.18.40.0/24"
interface = "weirsc-r0"
[[route]]
prefix = "198.18.41.0/24"
interface = "weirsc-r1"
[[route]]
prefix = "198.18.42.0/24"
interface = "weirsc-r1"
via = "198.18.41.2"
T
  sed -n '/^\[scripts\]/,$p' "$DIR/weir.toml"
} > "$DIR/inline.toml"
start inline.toml
for i in 1 2 3; do
  got=$(ip netns exec $C python3 "$DIR/client.py" "$HELLO" 2>&1 || true)
  [ "$got" = "$WANT" ] || fail "inline mode with the profile, connection $i: got '$got', want '$WANT'"
done
ctl status > "$DIR/status"
sent=$(grep -Eo "sent by scripts [0-9]+" "$DIR/status" | awk '{s += $4} END {print s+0}')
[ "$sent" -ge 12 ] || fail "inline: weir sent $sent packets for 3 ClientHellos (want at least 12): $(cat "$DIR/status")"
grep -Eq "not sent 0\)" "$DIR/status" || fail "inline: scripts' packets not sent: $(cat "$DIR/status")"
echo "ok: inline mode: the profile's segments and fakes leave by weir's own port, the connection completes ($sent packets sent by weir)"
stop
echo "PASS: scripts lab"
