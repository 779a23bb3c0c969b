#!/usr/bin/env bash
# Lab test of `weir run` in NFQUEUE mode (root; network namespaces). A client, a router and a
# server in three namespaces; the router forwards, weir (in the router's namespace) gives the
# verdicts. Checks: ICMP and TCP (iperf3) pass, what the ruleset drops is dropped, a reload
# under load keeps the TCP connection, a broken ruleset on reload is refused and traffic goes
# on, SIGTERM removes weir's kernel rules, `reject` answers with a TCP reset and ICMP / ICMPv6
# errors that weir sends itself. Prints weir's CPU time per packet.
#
# weir runs two workers (queues 7 and 8, `--queue-balance`).
#
# Usage: tests/lab/nfqueue.sh [path/to/weir]
set -euo pipefail
C=weirnq-c R=weirnq-r S=weirnq-s
NAMESPACES="$C $R $S" TOOLS="ip iptables ip6tables iperf3 ping" PREFIX=weirnq
. "$(dirname "$0")/common.sh"
ip link add weirnq-c0 netns $C type veth peer name weirnq-r0 netns $R
ip link add weirnq-s0 netns $S type veth peer name weirnq-r1 netns $R
ip -n $C addr add 198.18.20.2/24 dev weirnq-c0; ip -n $C link set weirnq-c0 up
ip -n $C route add default via 198.18.20.1
ip -n $R addr add 198.18.20.1/24 dev weirnq-r0; ip -n $R link set weirnq-r0 up
ip -n $R addr add 198.18.21.1/24 dev weirnq-r1; ip -n $R link set weirnq-r1 up
ip -n $S addr add 198.18.21.2/24 dev weirnq-s0; ip -n $S addr add 198.18.21.3/24 dev weirnq-s0
ip -n $S link set weirnq-s0 up; ip -n $S route add default via 198.18.21.1
ip -n $C addr add 2001:db8:20::2/64 dev weirnq-c0 nodad; ip -n $C -6 route add default via 2001:db8:20::1
ip -n $R addr add 2001:db8:20::1/64 dev weirnq-r0 nodad; ip -n $R addr add 2001:db8:21::1/64 dev weirnq-r1 nodad
ip -n $S addr add 2001:db8:21::2/64 dev weirnq-s0 nodad; ip -n $S -6 route add default via 2001:db8:21::1
ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
ip netns exec $R sysctl -qw net.ipv6.conf.all.forwarding=1

cat > "$DIR/rules.nft" <<'R'
table inet filter {
  set blocked { type ipv4_addr; flags timeout; }
  chain forward {
    type filter hook forward priority 0; policy accept;
    ip saddr @blocked counter drop
    ip daddr 198.18.21.3 counter drop
    udp dport 9999 counter drop
    tcp dport 23 counter reject with tcp reset
    ip daddr 198.18.21.4 counter reject with icmpx admin-prohibited
    ip6 daddr 2001:db8:21::4 counter reject
    ct state established,related counter accept
    tcp dport 5201 counter accept
  }
  chain output {
    type filter hook output priority 0; policy accept;
    tcp flags & rst == rst counter
    meta l4proto { icmp, ipv6-icmp } ct state related counter
  }
}
R
cat > "$DIR/weir.toml" <<T
ruleset = "rules.nft"
mode = "nfqueue"
[nfqueue]
queue = 7
workers = 2
[control]
socket = "$DIR/weir.sock"
T
ip netns exec $R "$WEIR" run --config "$DIR/weir.toml" >"$DIR/weir.log" 2>&1 &
WPID=$!
for i in $(seq 50); do grep -q ready "$DIR/weir.log" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$DIR/weir.log" || fail "weir did not start"
ip netns exec $R iptables -S FORWARD | grep -q WEIR-NFQ7 || fail "kernel rule not installed"
ip netns exec $R iptables -S WEIR-NFQ7 | grep -q -- "--queue-balance 7:8" || fail "queue balance: $(ip netns exec $R iptables -S WEIR-NFQ7)"

ctl() { "$WEIR" ctl --socket "$DIR/weir.sock" "$@"; }

# a second weir on the same queue: refused with the reason, the first goes on
sed -e 's/weir.sock/weir2.sock/' -e 's/^queue = 7/queue = 7\ninstall = false/' "$DIR/weir.toml" > "$DIR/weir2.toml"
echo '[metrics]
address = ""' >> "$DIR/weir2.toml"
if ip netns exec $R "$WEIR" run --config "$DIR/weir2.toml" >"$DIR/weir2.log" 2>&1; then fail "a second weir bound the same queue"; fi
grep -q "bound by another process" "$DIR/weir2.log" || fail "busy queue message: $(cat $DIR/weir2.log)"
echo "ok: a busy queue is refused with its reason"

ip netns exec $C ping -c 3 -i 0.2 -W 1 198.18.21.2 >/dev/null || fail "ping through weir"
if ip netns exec $C ping -c 2 -i 0.2 -W 1 198.18.21.3 >/dev/null; then fail "ping to the dropped address passed"; fi
echo "ok: ICMP accepted and dropped as the ruleset says"
# reject: weir sends the answers itself (raw sockets; the kernel routes them)
check_reject_answers $C 198.18.21.2 198.18.21.4 198.18.20.1 2001:db8:21::4 2001:db8:20::1
# the reset passed weir's output hook once, in weir; its mark kept it out of the queue
ctl counters | grep "tcp flags & rst == rst counter" | awk '{ exit !($1 == 1) }' || fail "the reset did not pass the output hook exactly once: $(ctl counters)"
ctl status | grep -q "TCP resets sent 1" || fail "reset not counted: $(ctl status)"
# so did the two ICMP errors, carrying the connection of the packet they answer
ctl counters | grep "ct state related counter" | awk '{ exit !($1 == 2) }' || fail "the ICMP errors did not pass the output hook exactly once each: $(ctl counters)"
echo "ok: reject answers with a TCP reset and ICMP errors"

ip netns exec $S iperf3 -s -1 -D -B 198.18.21.2 --logfile "$DIR/iperf-s.log"
sleep 0.3
ip netns exec $C iperf3 -c 198.18.21.2 -t 4 >"$DIR/iperf.out" 2>&1 &
IPID=$!
sleep 1
# a reload under load: the same ruleset with one rule more
sed -i 's/udp dport 9999 counter drop/udp dport 9999 counter drop\n    udp dport 9998 counter drop/' "$DIR/rules.nft"
ctl reload | grep -q reloaded || fail "reload"
sleep 0.5
# a broken ruleset: refused, the running one stays
cp "$DIR/rules.nft" "$DIR/good.nft"
echo "this is not nft" >> "$DIR/rules.nft"
if ctl reload >"$DIR/reload.out"; then fail "a broken ruleset was accepted"; fi
grep -q "refused" "$DIR/reload.out" || fail "no refusal message"
kill -HUP $WPID   # SIGHUP with the broken file: refused too
wait $IPID || fail "iperf3 failed (the connection did not survive the reloads)"
grep -E "receiver$" "$DIR/iperf.out" >/dev/null || fail "iperf3 result: $(cat $DIR/iperf.out)"
echo "ok: TCP through weir across a reload and a refused reload: $(grep -E 'sender$' "$DIR/iperf.out" | awk '{print $7, $8, "retransmits", $9}')"
ip netns exec $C ping -c 2 -i 0.2 -W 1 198.18.21.2 >/dev/null || fail "traffic stopped after the refused reload"
# UDP: a flow iperf3 measures gets through; datagrams to port 9999 are dropped by their rule
ip netns exec $S iperf3 -s -1 -D -p 5202 -B 198.18.21.2 --logfile "$DIR/iperf-u.log"
sleep 0.3
ip netns exec $C iperf3 -c 198.18.21.2 -p 5202 -u -b 2M -t 1 >"$DIR/iperf-u.out" 2>&1 || fail "UDP through weir: $(cat $DIR/iperf-u.out)"
for i in 1 2 3; do ip netns exec $C bash -c 'echo x > /dev/udp/198.18.21.2/9999' || true; done
sleep 0.3
ctl counters | grep "udp dport 9999 counter drop" | awk '{ exit !($1 >= 3) }' || fail "UDP to 9999 not dropped by its rule: $(ctl counters)"
echo "ok: UDP accepted and dropped as the ruleset says"
# a block list filled at run time: the element works at once, survives a reload, goes away
ctl set add inet filter blocked 198.18.20.2 timeout 1h | grep -q added || fail "set add"
if ip netns exec $C ping -c 2 -i 0.2 -W 1 198.18.21.2 >/dev/null; then fail "ping from a blocked address passed"; fi
cp "$DIR/good.nft" "$DIR/rules.nft"
ctl reload | grep -q reloaded || fail "reload"
ctl set list inet filter blocked | grep -q "^198.18.20.2 expires" || fail "set element lost in the reload: $(ctl set list inet filter blocked)"
if ip netns exec $C ping -c 2 -i 0.2 -W 1 198.18.21.2 >/dev/null; then fail "ping from a blocked address passed after the reload"; fi
ctl set del inet filter blocked 198.18.20.2 | grep -q deleted || fail "set del"
ip netns exec $C ping -c 2 -i 0.2 -W 1 198.18.21.2 >/dev/null || fail "ping after the element was deleted"
if ctl set add inet filter blocked not-an-address >/dev/null; then fail "a bad element was accepted"; fi
echo "ok: set add/list/del at run time, kept across a reload"
# trace: the next two matching packets with the rules they hit and their verdicts
ctl trace 2 proto udp port 9999 >"$DIR/trace" &
TPID=$!
sleep 0.3
for i in 1 2; do ip netns exec $C bash -c 'echo x > /dev/udp/198.18.21.2/9999' || true; done
wait $TPID || fail "trace: $(cat $DIR/trace)"
grep -q "rule inet filter forward handle .*: udp dport 9999 counter drop" "$DIR/trace" || fail "trace: $(cat $DIR/trace)"
[ "$(grep -c 'verdict drop (rule)' "$DIR/trace")" = 2 ] || fail "trace verdicts: $(cat $DIR/trace)"
ctl ct list proto icmp addr 198.18.20.2 | grep -q "proto 1 198.18.20.2" || fail "ct list filter: $(ctl ct list)"
[ "$(ctl ct count proto udp port 5202)" -ge 1 ] || fail "ct count filter"
ctl ct flush proto udp port 5202 | grep -q "flushed [1-9]" || fail "ct flush filter"
[ "$(ctl ct count proto udp port 5202)" = 0 ] || fail "ct flush left entries"
echo "ok: trace and conntrack filters"
# Prometheus metrics on the router's loopback
ip netns exec $R bash -c 'exec 3<>/dev/tcp/127.0.0.1/9560; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' >"$DIR/metrics" || fail "metrics endpoint"
grep -q '^weir_packets_total [1-9]' "$DIR/metrics" || fail "metrics: $(head -c 600 $DIR/metrics)"
grep -q 'weir_rule_packets_total{.*udp dport 9999 counter drop' "$DIR/metrics" || fail "metrics: no rule counters"
grep -q 'weir_dropped_total{reason="rule"}' "$DIR/metrics" || fail "metrics: no drops by reason"
grep -q 'weir_worker_packets_total{worker="1",io="queue 8"}' "$DIR/metrics" || fail "metrics: no second worker"
echo "ok: metrics"
ctl status > "$DIR/status"
grep -q "reloads 2 (refused 2)" "$DIR/status" || fail "status: $(cat $DIR/status)"
ctl counters | grep -q "tcp dport 5201" || fail "counters"
sed 's/^/  /' "$DIR/status"

kill -TERM $WPID; wait $WPID || true; WPID=
if ip netns exec $R iptables -S | grep -q WEIR-NFQ; then fail "kernel rules left after SIGTERM"; fi
echo "ok: SIGTERM removed the kernel rules"
# with weir gone the queue is bypassed (--queue-bypass): nothing left behind blocks traffic
ip netns exec $C ping -c 1 -W 1 198.18.21.2 >/dev/null || fail "traffic after weir stopped"
echo "PASS"
