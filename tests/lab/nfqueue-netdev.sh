#!/usr/bin/env bash
# Lab test of `weir run` in NFQUEUE mode with a netdev table (root; network namespaces). A
# client (two addresses, one of them blocked), a router and a server; the router's kernel
# forwards and weir gives the verdicts of its inet forward chain, while the ruleset's netdev
# table runs in the kernel's own nftables, installed by weir as `table netdev weir_t` on the
# router's LAN veth. Checks: the blocked source is dropped by the kernel's ingress hook (weir's
# queue never sees it: weir's own rule for it stays at 0), other traffic passes through weir;
# `weir ctl counters` and the metrics show the kernel's drop counter; `set add|del` on the
# netdev set changes the kernel's set; a reload nft refuses is refused naming the table, chain
# and rule, and the old table keeps working; a good reload replaces it, one that leaves the
# netdev table as it was leaves the kernel's table (and counters) alone; a weir that was killed
# leaves its table, which the next weir removes; a kernel table of the same name that is not
# weir's is refused; with nfqueue.install = false nothing is installed and weir says so;
# SIGTERM removes the table.
#
# Usage: tests/lab/nfqueue-netdev.sh [path/to/weir]
set -euo pipefail
C=weirnd-c R=weirnd-r S=weirnd-s
NAMESPACES="$C $R $S" TOOLS="ip iptables ip6tables nft ping" PREFIX=weirnd
. "$(dirname "$0")/common.sh"
ip link add weirnd-c0 netns $C type veth peer name weirnd-r0 netns $R
ip link add weirnd-s0 netns $S type veth peer name weirnd-r1 netns $R
ip -n $C addr add 198.18.22.2/24 dev weirnd-c0; ip -n $C addr add 198.18.22.3/24 dev weirnd-c0
ip -n $C link set weirnd-c0 up; ip -n $C route add default via 198.18.22.1
ip -n $R addr add 198.18.22.1/24 dev weirnd-r0; ip -n $R link set weirnd-r0 up
ip -n $R addr add 198.18.23.1/24 dev weirnd-r1; ip -n $R link set weirnd-r1 up
ip -n $S addr add 198.18.23.2/24 dev weirnd-s0; ip -n $S link set weirnd-s0 up
ip -n $S route add default via 198.18.23.1
ip netns exec $R sysctl -qw net.ipv4.ip_forward=1

cat > "$DIR/rules.nft" <<'R'
table netdev t {
  set blocked { type ipv4_addr; elements = { 198.18.22.3 } }
  chain c {
    type filter hook ingress device "weirnd-r0" priority -500; policy accept;
    ip saddr @blocked counter drop
  }
}
table inet filter {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ip saddr 198.18.22.3 counter drop
    ct state established,related counter accept
    ip daddr 198.18.23.2 counter accept
  }
}
R
cp "$DIR/rules.nft" "$DIR/good.nft"
cat > "$DIR/weir.toml" <<T
ruleset = "rules.nft"
mode = "nfqueue"
[nfqueue]
queue = 9
[control]
socket = "$DIR/weir.sock"
T
rn() { ip netns exec $R "$@"; }
ctl() { "$WEIR" ctl --socket "$DIR/weir.sock" "$@"; }
# weir in the router's namespace, until it says ready (iptables may wait for the xtables lock
# of other labs on the machine; the queue of a killed weir may take a moment to be free)
start() {
  # (every try's log is kept: a try that removes a killed weir's table can still find the
  # queue busy, and the next try has nothing left to remove)
  : >"$DIR/weir.log"
  for try in $(seq 20); do
    ip netns exec $R "$WEIR" run --config "$DIR/weir.toml" >>"$DIR/weir.log" 2>&1 &
    WPID=$!
    for i in $(seq 600); do
      grep -q ready "$DIR/weir.log" 2>/dev/null && return 0
      kill -0 $WPID 2>/dev/null || break
      sleep 0.1
    done
    grep -q "bound by another process" "$DIR/weir.log" || break
    wait $WPID 2>/dev/null || true; WPID=
    sleep 0.5
  done
  fail "weir did not start"
}
ping_from() { ip netns exec $C ping -c ${3:-2} -i 0.2 -W 1 -I $1 $2 >/dev/null; }
# (into a file first: `nft ... | grep -q` fails under pipefail when grep stops reading early)
kernel_table() { rn nft list table netdev weir_t >"$DIR/kt" 2>/dev/null; local r=$?; cat "$DIR/kt"; return $r; }
in_table() { kernel_table >/dev/null; grep -q -- "$1" "$DIR/kt"; }
queueing() { rn iptables -S >"$DIR/ipt"; grep -q WEIR-NFQ "$DIR/ipt"; }
drops() { ctl counters | grep "netdev t c  ip saddr @blocked counter drop" | awk '{ print $1 }'; }

start
in_table 'comment "weir run, queue 9: removed when weir exits"' || fail "kernel table not installed: $(rn nft list ruleset)"
in_table 'ip saddr @blocked counter packets 0 bytes 0 drop' || fail "kernel rule: $(kernel_table)"
rn iptables -S FORWARD >"$DIR/ipt"; grep -q WEIR-NFQ9 "$DIR/ipt" || fail "queueing rule not installed"
echo "ok: netdev table t installed in the kernel as netdev weir_t"

ping_from 198.18.22.2 198.18.23.2 3 || fail "ping from an address that is not blocked"
if ping_from 198.18.22.3 198.18.23.2 3; then fail "ping from the blocked address passed"; fi
[ "$(drops)" -ge 3 ] || fail "kernel drop counter: $(ctl counters)"
ctl counters | grep "inet filter forward  ip saddr 198.18.22.3 counter drop" | awk '{ exit !($1 == 0) }' || fail "weir's queue saw the blocked source: $(ctl counters)"
ctl counters | grep "inet filter forward  ip daddr 198.18.23.2 counter accept" | awk '{ exit !($1 >= 1) }' || fail "weir did not see the other traffic: $(ctl counters)"
rn bash -c 'exec 3<>/dev/tcp/127.0.0.1/9560; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' >"$DIR/metrics" || fail "metrics endpoint"
grep -q 'weir_rule_packets_total{table="netdev t",chain="c",.*} [3-9]' "$DIR/metrics" || fail "metrics: $(grep netdev $DIR/metrics)"
echo "ok: the blocked source is dropped at the kernel's ingress hook, counted ($(drops) packets) in weir ctl counters and the metrics"
ctl counters | sed 's/^/  /'

ctl set add netdev t blocked 198.18.22.2 | grep -q added || fail "set add on the kernel's set"
in_table '198.18.22.2' || fail "element not in the kernel's set: $(kernel_table)"
if ping_from 198.18.22.2 198.18.23.2; then fail "ping from an address added to the kernel's set passed"; fi
ctl set list netdev t blocked | grep -q "198.18.22.2" || fail "set list: $(ctl set list netdev t blocked)"
ctl set del netdev t blocked 198.18.22.2 | grep -q deleted || fail "set del on the kernel's set"
ping_from 198.18.22.2 198.18.23.2 || fail "ping after the element was deleted"
echo "ok: set add/list/del on a netdev set change the kernel's set"

# a reload nft refuses (a device that does not exist): refused, named, the old table stays
sed -i 's/ip saddr @blocked counter drop/ip saddr @blocked counter drop\n    ip daddr 198.18.23.9 fwd to "nonexistent0"/' "$DIR/rules.nft"
if ctl reload >"$DIR/reload.out"; then fail "a reload nft refuses was accepted: $(cat $DIR/reload.out)"; fi
grep -q "refused" "$DIR/reload.out" || fail "no refusal: $(cat $DIR/reload.out)"
grep -q 'nft refused table netdev t, chain c, rule `ip daddr 198.18.23.9 fwd to "nonexistent0"`' "$DIR/reload.out" || fail "the refusal does not name the rule: $(cat $DIR/reload.out)"
grep -q "Interface does not exist" "$DIR/reload.out" || fail "nft's message missing: $(cat $DIR/reload.out)"
before=$(drops)
if ping_from 198.18.22.3 198.18.23.2; then fail "the old table stopped dropping after a refused reload"; fi
[ "$(drops)" -gt "$before" ] || fail "the old table's counter stopped: $(ctl counters)"
ping_from 198.18.22.2 198.18.23.2 || fail "traffic stopped after the refused reload"
if in_table nonexistent0; then fail "the refused rule is in the kernel: $(kernel_table)"; fi
echo "ok: a reload nft refuses is refused, naming table, chain and rule; the old table keeps working"
sed 's/^/  /' "$DIR/reload.out"

# a good reload replaces the table in one transaction
sed -e 's/ip saddr @blocked counter drop/ip saddr @blocked counter drop\n    ip daddr 198.18.23.9 counter drop/' "$DIR/good.nft" > "$DIR/rules.nft"
ctl reload | grep -q reloaded || fail "reload"
in_table 'ip daddr 198.18.23.9 counter packets 0 bytes 0 drop' || fail "reloaded table: $(kernel_table)"
if ping_from 198.18.22.3 198.18.23.2; then fail "the reloaded table does not drop"; fi
ping_from 198.18.22.2 198.18.23.2 || fail "traffic after the reload"
ctl status | grep -q "reloads 1 (refused 1)" || fail "status: $(ctl status)"
echo "ok: a reload replaces the kernel's table"
# a reload that leaves the netdev table as it was leaves the kernel's table alone
kept=$(drops)
[ "$kept" -ge 2 ] || fail "the reloaded table did not count: $(ctl counters)"
sed -i 's/ip daddr 198.18.23.2 counter accept/udp dport 9997 counter drop\n    ip daddr 198.18.23.2 counter accept/' "$DIR/rules.nft"
ctl reload | grep -q reloaded || fail "reload"
ctl counters | grep -q "udp dport 9997 counter drop" || fail "the inet change was not loaded: $(ctl counters)"
[ "$(drops)" = "$kept" ] || fail "an unchanged netdev table was replaced (counter $kept, now $(drops))"
echo "ok: a reload that does not change the netdev table keeps it (and its counters)"

# a weir that dies leaves its table; the next one removes it and installs its own
kill -KILL $WPID; wait $WPID 2>/dev/null || true; WPID=
kernel_table >/dev/null || fail "a killed weir left no table (nothing to test)"
cp "$DIR/good.nft" "$DIR/rules.nft"
start
grep -q "removing netdev tables a previous weir left" "$DIR/weir.log" || fail "leftovers not reported: $(cat $DIR/weir.log)"
if in_table 198.18.23.9; then fail "the leftover table was not replaced: $(kernel_table)"; fi
if ping_from 198.18.22.3 198.18.23.2; then fail "ping from the blocked address passed after a restart"; fi
echo "ok: a killed weir's table is removed by the next weir"

kill -TERM $WPID; wait $WPID || true; WPID=
if kernel_table >/dev/null; then fail "kernel table left after SIGTERM: $(kernel_table)"; fi
if queueing; then fail "queueing rules left after SIGTERM"; fi
ping_from 198.18.22.3 198.18.23.2 || fail "traffic after weir stopped"
echo "ok: SIGTERM removed the kernel's table"

# a kernel table of that name that is not weir's: refused, left alone
rn nft add table netdev weir_t
if rn "$WEIR" run --config "$DIR/weir.toml" >"$DIR/weir.log" 2>&1; then fail "weir started over a table that is not its own"; fi
grep -q "the kernel has a table netdev weir_t that is not this weir's" "$DIR/weir.log" || fail "message: $(cat $DIR/weir.log)"
rn nft list table netdev weir_t >/dev/null || fail "weir removed a table that is not its own"
rn nft delete table netdev weir_t
if queueing; then fail "queueing rules left by a refused start"; fi
echo "ok: a kernel table of the same name that is not weir's is refused"
sed 's/^/  /' "$DIR/weir.log"

# a ruleset nft refuses at start: weir does not start, names the rule, leaves nothing behind
sed -e 's/ip saddr @blocked counter drop/ip saddr @blocked counter drop\n    fwd to "nonexistent0"/' "$DIR/good.nft" > "$DIR/rules.nft"
if rn "$WEIR" run --config "$DIR/weir.toml" >"$DIR/weir.log" 2>&1; then fail "weir started with a netdev rule nft refuses"; fi
grep -q 'nft refused table netdev t, chain c, rule `fwd to "nonexistent0"`' "$DIR/weir.log" || fail "message: $(cat $DIR/weir.log)"
if kernel_table >/dev/null || queueing; then fail "a refused start left kernel rules or tables"; fi
cp "$DIR/good.nft" "$DIR/rules.nft"
echo "ok: a netdev rule nft refuses at start: weir does not start, naming it"
sed 's/^/  /' "$DIR/weir.log"

# nfqueue.install = false: nothing installed, and weir says the netdev chains do not run
sed -i 's/^queue = 9/queue = 9\ninstall = false/' "$DIR/weir.toml"
start
grep -q "netdev chains are not installed in the kernel, so they do not run" "$DIR/weir.log" || fail "no warning: $(cat $DIR/weir.log)"
if kernel_table >/dev/null; then fail "a table installed with install = false"; fi
kill -TERM $WPID; wait $WPID || true; WPID=
echo "ok: with nfqueue.install = false nothing is installed, with a warning"
echo "PASS"
