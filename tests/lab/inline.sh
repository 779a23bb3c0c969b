#!/usr/bin/env bash
# Lab test of `weir run` in inline mode (root; network namespaces): weir forwards between the
# router's two interfaces itself (the kernel's forwarding is off), with static
# routes, one static neighbour and one learnt over ARP. Checks: ICMP and TCP (iperf3, masqueraded,
# across a reload under load) pass, what the ruleset drops is dropped, TTL is decremented, weir refuses to run beside the
# kernel's forwarding and names a missing interface; answers TTL 1 and unroutable packets with
# ICMP errors; answers `reject` with a TCP reset and ICMP errors; forwards fragmented datagrams, fragments or refuses packets larger than the
# next link's MTU; traces packets; offloads TCP connections to a flowtable (the fast path);
# prints weir's CPU time per packet. The traffic checks run four times: over AF_XDP, over
# AF_PACKET, over AF_PACKET with two workers (a fanout steers both directions of each
# connection, masqueraded ones included, to one worker), and over AF_XDP with two workers on
# two-queue veths (each worker reads one queue and hands the other's frames over).
#
# Usage: tests/lab/inline.sh [path/to/weir]
set -euo pipefail
C=weirin-c R=weirin-r S=weirin-s
NAMESPACES="$C $R $S" TOOLS="python3 ip iptables ip6tables iperf3 ping ethtool" PREFIX=weirin
. "$(dirname "$0")/common.sh"
# two queues each way (one per worker in the AF_XDP pass with two workers; one otherwise)
Q="numtxqueues 2 numrxqueues 2"
ip link add weirin-c0 netns $C address 02:77:69:00:00:02 $Q type veth peer name weirin-r0 netns $R address 02:77:69:00:00:01 $Q
ip link add weirin-s0 netns $S address 02:77:69:00:01:02 $Q type veth peer name weirin-r1 netns $R address 02:77:69:00:01:01 $Q
queues() {
  local n=$1
  for x in "$C weirin-c0" "$R weirin-r0" "$R weirin-r1" "$S weirin-s0"; do
    set -- $x; ip netns exec $1 ethtool -L $2 rx $n tx $n || fail "ethtool -L $2 rx $n tx $n"
  done
}
queues 1
ip -n $C addr add 198.18.30.2/24 dev weirin-c0; ip -n $C link set weirin-c0 up
ip -n $C route add default via 198.18.30.1
ip -n $R addr add 198.18.30.1/24 dev weirin-r0; ip -n $R link set weirin-r0 up
ip -n $R addr add 198.18.31.1/24 dev weirin-r1; ip -n $R link set weirin-r1 up
ip -n $S addr add 198.18.31.2/24 dev weirin-s0; ip -n $S addr add 198.18.31.3/24 dev weirin-s0
ip -n $S link set weirin-s0 up; ip -n $S route add default via 198.18.31.1
# a smaller MTU on the server's link: weir fragments, or tells the sender the MTU
ip -n $S link set weirin-s0 mtu 1400; ip -n $R link set weirin-r1 mtu 1400
# IPv6: no neighbour configured; weir learns both hosts from neighbour discovery
ip -n $C addr add 2001:db8:30::2/64 dev weirin-c0 nodad; ip -n $C -6 route add default via 2001:db8:30::1
ip -n $R addr add 2001:db8:30::1/64 dev weirin-r0 nodad; ip -n $R addr add 2001:db8:31::1/64 dev weirin-r1 nodad
ip -n $S addr add 2001:db8:31::2/64 dev weirin-s0 nodad; ip -n $S -6 route add default via 2001:db8:31::1
ip netns exec $R sysctl -qw net.ipv4.ip_forward=0
ip netns exec $R sysctl -qw net.ipv6.conf.all.forwarding=0
ip -n $R link set lo up
# the hosts keep their default offloads (as on every container host): their TCP and UDP
# leave with checksums for the device to finish, and TCP in super-frames of up to 64 KB
# (TSO/GSO) where the veth takes them; weir completes the checksums and cuts the super-frames
for x in "$C weirin-c0" "$S weirin-s0"; do
  set -- $x
  ip netns exec $1 ethtool -k $2 | grep -Eq "^tx-checksumming: on" || fail "$2: tx checksum offload is not on by default"
  ip netns exec $1 ethtool -k $2 | grep -Eq "^tcp-segmentation-offload: on" || fail "$2: TSO is not on by default"
done

# the ruleset; with "flow", established TCP connections go into a flowtable (the fast path:
# no chains, the route and NAT kept in the connection)
write_rules() {
  local ft="" fa=""
  if [ "${1:-}" = flow ]; then
    ft='flowtable ft { hook ingress priority 0; devices = { weirin-r0, weirin-r1 }; }'
    fa='meta l4proto tcp ct state established flow add @ft'
  fi
  cat > "$DIR/rules.nft" <<R
table inet filter {
  $ft
  chain forward {
    type filter hook forward priority 0; policy accept;
    $fa
    ip daddr 198.18.31.3 counter drop
    ip daddr 198.18.31.4 counter reject with icmpx admin-prohibited
    ip6 daddr 2001:db8:31::4 counter reject
    tcp dport 23 counter reject with tcp reset
    iifname "weirin-r1" udp sport 5202 ct state new counter drop
    udp dport 9999 counter drop
    icmp type echo-request ip ttl 63 counter
  }
}
table ip nat {
  chain post {
    type nat hook postrouting priority srcnat;
    oifname "weirin-r1" ip daddr 198.18.31.2 tcp dport 5201 masquerade
  }
}
R
}
write_rules
cat > "$DIR/weir.toml" <<T
ruleset = "rules.nft"
mode = "inline"
[control]
socket = "$DIR/weir.sock"
[metrics]
address = "127.0.0.1:9561"
[[interface]]
name = "weirin-r0"
address = ["198.18.30.1", "2001:db8:30::1"]
rp_filter = "strict"
[[interface]]
name = "weirin-r1"
address = ["198.18.31.1", "2001:db8:31::1"]
[[route]]
prefix = "198.18.30.0/24"
interface = "weirin-r0"
[[route]]
prefix = "198.18.31.0/24"
interface = "weirin-r1"
[[route]]
prefix = "2001:db8:30::/64"
interface = "weirin-r0"
[[route]]
prefix = "2001:db8:31::/64"
interface = "weirin-r1"
[[neighbour]]
address = "198.18.31.2"
mac = "02:77:69:00:01:02"
[[neighbour]]
address = "198.18.31.3"
mac = "02:77:69:00:01:02"
T
# the kernel must not forward: weir refuses to start otherwise
ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
if ip netns exec $R "$WEIR" run --config "$DIR/weir.toml" >"$DIR/refused.log" 2>&1; then fail "started while the kernel forwards"; fi
grep -q "ip_forward" "$DIR/refused.log" || fail "no reason given: $(cat $DIR/refused.log)"
ip netns exec $R sysctl -qw net.ipv4.ip_forward=0
# a missing interface is named
sed 's/name = "weirin-r1"/name = "weirin-nope"/; s/interface = "weirin-r1"/interface = "weirin-nope"/' "$DIR/weir.toml" > "$DIR/bad.toml"
if ip netns exec $R "$WEIR" run --config "$DIR/bad.toml" >"$DIR/bad.log" 2>&1; then fail "started without its interface"; fi
grep -q "weirin-nope" "$DIR/bad.log" || fail "missing interface not named: $(cat $DIR/bad.log)"
sed "s/^mode = .*/&\nio = \"xdp\"\nworkers = 2/" "$DIR/weir.toml" > "$DIR/xdp2.toml"
if ip netns exec $R "$WEIR" run --config "$DIR/xdp2.toml" >"$DIR/xdp2.log" 2>&1; then fail "started AF_XDP with two workers on one queue"; fi
grep -q "io = \"afpacket\"" "$DIR/xdp2.log" || fail "no reason given for AF_XDP with two workers: $(cat $DIR/xdp2.log)"
echo "ok: refuses to start beside kernel forwarding, names a missing interface, explains that two AF_XDP workers need two queues"

# the same checks over AF_XDP (an XDP program hands weir the IP frames) and over AF_PACKET
for RUN in xdp afpacket afpacket-2 xdp-2; do
IO=${RUN%-*}; WORKERS=1
case $RUN in *-2) WORKERS=2 ;; esac
# AF_XDP with two workers: each reads one of the two queues of every interface, and hands
# what belongs to the other worker over (the sending veth picks the queue by its own hash)
[ "$RUN" = xdp-2 ] && queues 2
# the flowtable fast path in the AF_XDP and two-worker passes; the chains for every packet in
# the other
FLOW=flow; [ "$RUN" = afpacket ] && FLOW=""
write_rules $FLOW
echo "-- io = $IO, workers = $WORKERS${FLOW:+, flowtable}"
sed "s/^mode = .*/&\nio = \"$IO\"\nworkers = $WORKERS/" "$DIR/weir.toml" > "$DIR/weir-$IO.toml"
ip -n $C neigh flush all; ip -n $S neigh flush all
ip netns exec $R "$WEIR" run --config "$DIR/weir-$IO.toml" >"$DIR/weir.log" 2>&1 &
WPID=$!
for i in $(seq 50); do grep -q ready "$DIR/weir.log" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$DIR/weir.log" || fail "weir did not start"
ctl() { "$WEIR" ctl --socket "$DIR/weir.sock" "$@"; }

ip netns exec $C ping -c 3 -i 0.2 -W 1 198.18.31.2 >"$DIR/ping" || fail "ping through weir: $(cat $DIR/ping)"
grep -q "ttl=63" "$DIR/ping" || fail "TTL not decremented: $(cat $DIR/ping)"
if ip netns exec $C ping -c 2 -i 0.2 -W 1 198.18.31.3 >/dev/null; then fail "ping to the dropped address passed"; fi
echo "ok: ICMP forwarded by weir (TTL decremented) and dropped as the ruleset says"
# the client's MAC is not in the configuration: weir learnt it from the client's ARP traffic
echo "ok: a neighbour learnt over ARP (the client's MAC is not configured)"
ip netns exec $C ping -6 -c 3 -i 0.2 -W 1 2001:db8:31::2 >"$DIR/ping6" || fail "IPv6 ping through weir: $(cat $DIR/ping6)"
grep -q "ttl=63" "$DIR/ping6" || fail "hop limit not decremented: $(cat $DIR/ping6)"
echo "ok: IPv6 forwarded, both neighbours learnt from neighbour discovery"
# reject answers the sender: a TCP reset and ICMP errors from the router, IPv4 and IPv6
check_reject_answers $C 198.18.31.2 198.18.31.4 198.18.30.1 2001:db8:31::4 2001:db8:30::1
echo "ok: reject answers with a TCP reset and ICMP errors"
# fragmented datagrams (3000-byte echoes, both ways): the first fragment crosses the chains,
# the later ones follow it (virtual reassembly); the client's 1500-byte fragments are cut
# again by weir for the server's link (the path MTU learnt in an earlier pass forgotten)
pmtu_forget() {
  ip netns exec $C ip route flush cache >/dev/null 2>&1 || true
  ip netns exec $C ip -6 route flush cache >/dev/null 2>&1 || true
}
pmtu_forget
ip netns exec $C ping -c 2 -i 0.2 -W 1 -s 3000 198.18.31.2 >"$DIR/pingf" || fail "fragmented ping through weir: $(cat $DIR/pingf)"
ip netns exec $C ping -6 -c 2 -i 0.2 -W 1 -s 3000 2001:db8:31::2 >"$DIR/pingf6" || fail "fragmented IPv6 ping through weir: $(cat $DIR/pingf6)"
echo "ok: fragmented IPv4 and IPv6 datagrams forwarded (virtual reassembly)"
# fragments out of order (the last one first): weir holds it until the first has passed
ip netns exec $S python3 - "$DIR/frag-rx" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.18.31.2", 7777))
s.settimeout(3)
try:
    d, _ = s.recvfrom(4096)
    open(sys.argv[1], "w").write(str(len(d)))
except socket.timeout:
    pass
PY
RXPID=$!
sleep 0.3
ip netns exec $C python3 - <<'PY'
import socket, struct
src, dst = socket.inet_aton("198.18.30.2"), socket.inet_aton("198.18.31.2")
payload = b"w" * 1000
udp = struct.pack("!HHHH", 40000, 7777, 8 + len(payload), 0) + payload  # no UDP checksum
def frag(off8, more, data):
    flags = (0x2000 if more else 0) | off8
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(data), 4242, flags, 64, 17, 0, src, dst) + data
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
s.sendto(frag(64, False, udp[512:]), ("198.18.31.2", 0))
s.sendto(frag(0, True, udp[:512]), ("198.18.31.2", 0))
PY
wait $RXPID || true
[ "$(cat "$DIR/frag-rx" 2>/dev/null)" = 1000 ] || fail "a datagram whose fragments came out of order was not delivered"
rm -f "$DIR/frag-rx"
echo "ok: a later fragment that came first waited for its first and followed it"
# a spoofed source (no route back out of weirin-r0) is dropped by the reverse path filter
ip netns exec $C python3 - <<'PY'
import socket, struct
src, dst = socket.inet_aton("198.18.99.9"), socket.inet_aton("198.18.31.2")
udp = struct.pack("!HHHH", 40001, 7779, 9, 0) + b"s"
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 4243, 0, 64, 17, 0, src, dst)
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for _ in range(3):
    s.sendto(ip + udp, ("198.18.31.2", 0))
PY
sleep 0.3
ctl status | grep -q "rp-filter=[1-9]" || fail "spoofed source not dropped by rp_filter: $(ctl status)"
echo "ok: a spoofed source dropped by the reverse path filter (rp_filter = strict)"
# larger than the server link's MTU (1400): with "don't fragment", the sender is told the MTU
# (ICMP fragmentation needed, ICMPv6 packet too big); without, weir sends it in fragments
pmtu_forget
ip netns exec $C ping -c 2 -i 0.3 -W 1 -M do -s 1450 198.18.31.2 >"$DIR/pmtu" 2>&1 || true
grep -Eq "From 198.18.30.1 .*mtu ?= ?1400" "$DIR/pmtu" || fail "no fragmentation needed with the MTU: $(cat $DIR/pmtu)"
ip netns exec $C ping -6 -c 2 -i 0.3 -W 1 -M do -s 1450 2001:db8:31::2 >"$DIR/pmtu6" 2>&1 || true
grep -Eq "From 2001:db8:30::1 .*mtu ?= ?1400" "$DIR/pmtu6" || fail "no packet too big with the MTU: $(cat $DIR/pmtu6)"
pmtu_forget
ip netns exec $C ping -c 2 -i 0.3 -W 1 -M dont -s 1450 198.18.31.2 >"$DIR/pmtuf" 2>&1 || fail "a 1478-byte packet without DF not forwarded in fragments: $(cat $DIR/pmtuf)"
echo "ok: MTU 1400 on the way: fragmentation needed, packet too big, IPv4 fragmented by weir"
# an MTU changed while weir runs is read again within a second
ip -n $R link set weirin-r1 mtu 1300
sleep 1.5
pmtu_forget
ip netns exec $C ping -c 2 -i 0.3 -W 1 -M do -s 1350 198.18.31.2 >"$DIR/pmtu2" 2>&1 || true
ip -n $R link set weirin-r1 mtu 1400
grep -Eq "From 198.18.30.1 .*mtu ?= ?1300" "$DIR/pmtu2" || fail "the new MTU was not used: $(cat $DIR/pmtu2)"
sleep 1.5
echo "ok: an MTU changed at run time is used"
# as in Linux, the forward hook sees the TTL already decremented
ctl counters | grep "ip ttl 63 counter" | awk '{ exit !($1 >= 3) }' || fail "forward did not see TTL 63: $(ctl counters)"
# the router answers a TTL of 1 with time exceeded, and a destination without a route with
# net unreachable, from its address on the sender's side
ip netns exec $C ping -c 1 -t 1 -W 1 198.18.31.2 >"$DIR/ttl" 2>&1 || true
grep -q "From 198.18.30.1.*Time to live exceeded" "$DIR/ttl" || fail "no time exceeded: $(cat $DIR/ttl)"
ip netns exec $C ping -c 1 -W 1 198.18.99.1 >"$DIR/unr" 2>&1 || true
grep -q "From 198.18.30.1.*Unreachable" "$DIR/unr" || fail "no unreachable: $(cat $DIR/unr)"
echo "ok: ICMP time exceeded and net unreachable from the router"
# a host on the server's link that never answers ARP: weir asks three times, a second apart,
# then drops what waited and says host unreachable, as Linux's neighbour code does
ip netns exec $C ping -c 1 -W 6 198.18.31.77 >"$DIR/hunr" 2>&1 || true
grep -q "From 198.18.30.1.*Destination Host Unreachable" "$DIR/hunr" ||
  fail "no host unreachable for a next hop that never answered: $(cat $DIR/hunr)"
echo "ok: host unreachable for a next hop that never answered"
# a trace shows the rules a packet hit and where it went
ctl trace 2 proto icmp > "$DIR/trace" &
TP=$!
sleep 0.3
ip netns exec $C ping -c 3 -i 0.2 -W 1 198.18.31.2 >/dev/null || true
wait $TP || true
grep -q "ip ttl 63 counter" "$DIR/trace" && grep -q "verdict forward out weirin-r1" "$DIR/trace" ||
  fail "trace: $(cat $DIR/trace)"
echo "ok: trace in inline mode"

ip netns exec $S iperf3 -s -1 -D -B 198.18.31.2 --logfile "$DIR/iperf-s.log"
sleep 0.3
# several connections: with two workers, both get some
ip netns exec $C iperf3 -c 198.18.31.2 -t 3 -P $((WORKERS * 4 - 3)) >"$DIR/iperf.out" 2>&1 &
IPID=$!
# a reload under load (one rule more): every worker takes the new ruleset, the connections and
# their NAT bindings stay
sleep 1
grep -q "udp dport 9998" "$DIR/rules.nft" ||
  sed -i 's/udp dport 9999 counter drop/&\n    udp dport 9998 counter drop/' "$DIR/rules.nft"
ctl reload | grep -q reloaded || fail "reload under load"
wait $IPID || fail "iperf3 TCP through weir (across a reload): $(cat $DIR/iperf.out)"
ctl counters | grep -q "udp dport 9998" || fail "the reloaded ruleset is not running"
grep -q "Accepted connection from 198.18.31.1" "$DIR/iperf-s.log" || fail "masquerade: the server saw $(grep Accepted $DIR/iperf-s.log)"
echo "ok: TCP through weir, masqueraded: $(grep -E 'receiver$' "$DIR/iperf.out" | tail -1 | awk '{print $(NF-2), $(NF-1)}')"

# UDP answers in fragments (3000-byte datagrams from the server, cut for its 1400-byte link),
# which the ruleset lets in only for connections the client opened: each datagram's fragments
# follow its first, and with two workers reach the worker of their connection (they are
# steered by their addresses alone)
ip netns exec $S iperf3 -s -1 -D -p 5202 -B 198.18.31.2 --logfile "$DIR/iperf-u.log"
sleep 0.3
ip netns exec $C iperf3 -c 198.18.31.2 -p 5202 -u -R -l 3000 -b 4M -t 2 -P 8 >"$DIR/iperfu.out" 2>&1 ||
  fail "iperf3 UDP in fragments: $(cat $DIR/iperfu.out)"
LOSS=$(grep -E "^\[SUM\].*receiver" "$DIR/iperfu.out" | grep -o "([0-9.e+-]*%)" | tr -d '()%')
awk -v l="${LOSS:-100}" 'BEGIN { exit !(l <= 5) }' || fail "UDP in fragments: ${LOSS:-?}% lost: $(cat $DIR/iperfu.out)"
echo "ok: UDP answers in fragments through weir: ${LOSS}% lost"
for i in 1 2 3; do ip netns exec $C bash -c 'echo x > /dev/udp/198.18.31.2/9999' || true; done
sleep 0.3
ctl counters | grep "udp dport 9999 counter drop" | awk '{ exit !($1 >= 3) }' || fail "UDP to 9999 not dropped: $(ctl counters)"
echo "ok: UDP dropped by its rule"
ctl status > "$DIR/status"
sed 's/^/  /' "$DIR/status"
grep -q "forwarded in fragments [1-9]" "$DIR/status" || fail "no packet forwarded in fragments"
grep -q "TCP resets sent [1-9]" "$DIR/status" || fail "no TCP reset counted"
grep -Eq "routes 4 \(prefix lengths: IPv4 1, IPv6 1\), neighbours [1-9][0-9]* .*adjacencies [1-9]" "$DIR/status" ||
  fail "no routing state in the status"
FF=$(grep -o "fragments followed [0-9]*" "$DIR/status" | awk '{ n += $3 } END { print n + 0 }')
[ "$FF" -ge 8 ] || fail "$FF later fragments followed their first (8 sent each way)"
# the same counts in the Prometheus metrics (summed over the workers)
ip netns exec $R bash -c 'exec 3<>/dev/tcp/127.0.0.1/9561; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' >"$DIR/metrics" || fail "metrics endpoint"
for m in fragments_followed_total forwarded_in_fragments_total ${FLOW:+fast_path_total}; do
  grep -q "^weir_$m [1-9]" "$DIR/metrics" || fail "metrics: weir_$m: $(grep "weir_$m" $DIR/metrics)"
done
RW=$(grep -o "rewritten [0-9]*" "$DIR/status" | awk '{ n += $2 } END { print n + 0 }')
[ "$RW" -gt 1000 ] || fail "only $RW packets counted as rewritten (masqueraded)"
if [ -n "$FLOW" ]; then
  # With two workers each reports its own connections, and the flow hash may put every
  # iperf3 connection on one worker, so the figures are summed. A worker that offloaded
  # connections must have forwarded some of their packets on the fast path.
  grep -q "fast path" "$DIR/status" || fail "no flowtable in the status"
  FP=$(grep -o "fast path [0-9]*" "$DIR/status" | awk '{ n += $3 } END { print n + 0 }')
  [ "$FP" -gt 1000 ] || fail "the flowtable fast path forwarded $FP packets"
  while read -r _ _ off _ _ fp; do
    [ "$off" -eq 0 ] || [ "$fp" -gt 0 ] || fail "a worker offloaded $off connections but forwarded none on the fast path"
  done < <(grep -o "flowtable offloaded [0-9]* fast path [0-9]*" "$DIR/status")
  echo "ok: iperf3 connections offloaded to the flowtable (fast path, NAT kept, across the reload)"
fi
case $IO in
  xdp) grep -q "AF_XDP" "$DIR/status" || fail "not on AF_XDP" ;;
  afpacket) grep -q "AF_PACKET" "$DIR/status" || fail "not on AF_PACKET" ;;
esac
if [ "$WORKERS" = 2 ]; then
  for w in 0 1; do
    grep -E "^worker $w .*: packets [1-9]" "$DIR/status" >/dev/null || fail "worker $w handled no packet"
  done
  [ "$(grep -c 'NAT replies steered to another worker 0)' "$DIR/status")" = 2 ] || fail "NAT replies not steered to their worker"
  grep -o "[a-z]* handed to another worker [0-9]* (inbox full [0-9]*)" "$DIR/status" | sed 's/^/  /'
  echo "ok: two workers share the traffic, masqueraded replies steered to the worker of their connection"
fi
kill -TERM $WPID; wait $WPID || true; WPID=
# shut down cleanly: the XDP program is gone with weir (its link closed), the kernel rules too
if ip -n $R link show weirin-r0 | grep -q xdp; then fail "XDP program still attached after exit"; fi
if ip netns exec $R iptables -t raw -S | grep -q WEIR-INLINE; then fail "kernel rules left after exit"; fi
echo "ok: $IO: clean shutdown"
done
echo "PASS"
