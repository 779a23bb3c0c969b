#!/usr/bin/env bash
# Lab test of `weir nft`: a running weir (inline) changed as tools change the kernel through
# `nft` (root; network namespaces named weirnft*, addresses in 198.18.0.0/15):
#
#   weirnft-c 198.18.90.2/24 -- weirnft-r 198.18.90.1 | 198.18.91.1 -- weirnft-s 198.18.91.2/24
#
# weir runs the router; `nft` is a symlink to weir (as tools find it on the PATH), WEIR_SOCKET
# names weir's control socket. The kernel (namespace weirnft-k, the same ruleset) is given the
# same commands, and after each step the two rulesets must be the same (both listings read
# and printed again by `weir check --print -s`). The steps, each checked with pings from the
# client:
#   1. fail2ban's ban and unban (its nftables action's commands): `add element` to the set
#      the forward chain drops, the client's pings stop; `delete element`, they pass again;
#      `list set` shows the element while it is there.
#   2. A batch (`nft -f FILE`: flush the forward chain, refill it with a rule that drops new
#      echo requests after `ct state established accept`): a ping started before it (one
#      ICMP id: its connection established; the ruleset tracks connections from the start,
#      `ct state invalid drop`, as the kernel does only once a rule needs conntrack) goes on
#      answered; a new ping is dropped. The connection survived the change.
#      Then `nft -a list` gives the rule's handle, `delete rule ... handle N` removes it.
#   3. `nft -c -f BAD`: refused with the error at its file, line and column, exit status 1,
#      and `list ruleset` unchanged; a batch whose second command is wrong changes nothing
#      (all or nothing).
#   4. fail2ban itself.
#   5. `weir ctl diff FILE` shows exactly what `weir ctl apply FILE` then changes; `nft -e`
#      echoes the rule added with its handle.
#   7. `nft monitor` shows each change of a batch and the traces of marked packets.
#   8. kube-proxy-style partial syncs (--check, flush and refill a service chain, endpoints
#      added and deleted), equal to the kernel's; a connection to the service established
#      before them still answered.
#   9. nftlb-style per-farm regeneration, equal to the kernel's; the other farm untouched.
#   6. `weir ctl reload` starts again from the ruleset file (last).
#
# Usage: tests/lab/nft.sh [path/to/weir]   (WEIR_NFT_MODE=nfqueue: weir in NFQUEUE mode, the
# kernel forwarding and queueing to it; inline by default)
set -euo pipefail
C=weirnft-c R=weirnft-r S=weirnft-s
K=weirnft-k
NAMESPACES="$C $R $S $K" TOOLS="ip ping timeout nft" PREFIX=weirnft
. "$(dirname "$0")/common.sh"
IO=afpacket
trap 'stop_pids; stop_weir; cleanup' EXIT
CA=198.18.90.2 RA=198.18.90.1 RB=198.18.91.1 SA=198.18.91.2

ip link add weirnft-c0 netns $C type veth peer name weirnft-r0 netns $R
ip link add weirnft-s0 netns $S type veth peer name weirnft-r1 netns $R
ip -n $C addr add $CA/24 dev weirnft-c0; ip -n $C link set weirnft-c0 up; ip -n $C route add default via $RA
ip -n $S addr add $SA/24 dev weirnft-s0; ip -n $S link set weirnft-s0 up; ip -n $S route add default via $RB
ip -n $R addr add $RA/24 dev weirnft-r0; ip -n $R link set weirnft-r0 up
ip -n $R addr add $RB/24 dev weirnft-r1; ip -n $R link set weirnft-r1 up

cat > "$DIR/rules.nft" <<'N'
table inet filter {
  set f2b {
    type ipv4_addr
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ct state invalid drop
    ip saddr @f2b drop
  }
  # (a base chain at input from the start: in NFQUEUE mode the kernel queues to weir the
  # hooks of the ruleset it started with, and fail2ban's chain hooks input)
  chain input {
    type filter hook input priority filter; policy accept;
  }
}
N
if [ "${WEIR_NFT_MODE:-inline}" = nfqueue ]; then
  # NFQUEUE mode: the kernel forwards, weir's rules judge the packets it queues
  printf 'ruleset = "rules.nft"\nmode = "nfqueue"\n[nfqueue]\nqueue = 23\n[control]\nsocket = "%s/weir.sock"\n[metrics]\naddress = ""\n' "$DIR" >"$DIR/weir.toml"
  ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
  ip netns exec $R "$WEIR" run --config "$DIR/weir.toml" >"$DIR/weir.log" 2>&1 &
  WPID=$!
  for _ in $(seq 300); do grep -q ready "$DIR/weir.log" 2>/dev/null && break; sleep 0.1; done
  grep -q ready "$DIR/weir.log" || fail "weir (NFQUEUE mode) did not start: $(cat "$DIR/weir.log")"
else
  weir_toml "weirnft-r0 $RA 198.18.90.0/24" "weirnft-r1 $RB 198.18.91.0/24"
  start_weir $R "the lab's ruleset"
fi
mkdir "$DIR/bin"; ln -s "$WEIR" "$DIR/bin/nft"
export WEIR_SOCKET="$DIR/weir.sock"
nft() { timeout 10 "$DIR/bin/nft" "$@"; }
# the kernel given the same commands (a namespace of its own), and the two listings compared
# parsed: each printed again by `weir check --print -s` (handles and the printers' layout
# left out)
kernel() { ip netns exec $K nft "$@"; }
ip netns exec $K nft -f "$DIR/rules.nft" || fail "the kernel refuses the lab's ruleset"
same_as_kernel() {
  # (the whole ruleset, or what $2 names: `table ip x`)
  kernel -s list ${2:-ruleset} >"$DIR/k.nft"; nft -s list ${2:-ruleset} >"$DIR/w.nft"
  "$WEIR" check --print -s "$DIR/k.nft" >"$DIR/k.out" 2>&1 || fail "$1: weir cannot read the kernel's listing: $(cat "$DIR/k.out")"
  "$WEIR" check --print -s "$DIR/w.nft" >"$DIR/w.out" 2>&1 || fail "$1: weir cannot read its own listing: $(cat "$DIR/w.out")"
  diff "$DIR/k.out" "$DIR/w.out" >"$DIR/kw.diff" || fail "$1: weir's ruleset differs from the kernel's: $(cat "$DIR/kw.diff")"
}
both() { nft "$@" && kernel "$@"; }
pings() { ip netns exec $C ping -c "${2:-2}" -i 0.2 -W 1 "$1" >/dev/null 2>&1; }

pings $SA || fail "no ping through weir before any change"

# --- 1. fail2ban's ban and unban -------------------------------------------------------------
both add element inet filter f2b { $CA } || fail "add element"
same_as_kernel "add element"
nft list set inet filter f2b | grep -q "$CA" || fail "the banned address is not listed: $(nft list set inet filter f2b)"
if pings $SA 2; then fail "a banned address still passes"; fi
both delete element inet filter f2b { $CA } || fail "delete element"
same_as_kernel "delete element"
nft list set inet filter f2b | grep -q "$CA" && fail "the unbanned address is still listed"
pings $SA || fail "an unbanned address does not pass"
echo "ok: ban and unban with nft add / delete element"
# the same in nft's JSON syntax (`nft -j -f`, what libnftables users send)
j() { printf '{"nftables": [{"%s": {"element": {"family": "inet", "table": "filter", "name": "f2b", "elem": ["%s"]}}}]}' "$1" "$CA" >"$DIR/b.json"; nft -j -f "$DIR/b.json"; }
j add || fail "a JSON batch was refused"
if pings $SA 2; then fail "a JSON ban did not take"; fi
j delete || fail "a JSON unban was refused"
pings $SA || fail "a JSON unban did not take"
printf '{"nftables": [{"add": {"rule": {"family": "inet", "table": "filter", "chain": "nope", "expr": []}}}]}' >"$DIR/bad.json"
if nft -j -f "$DIR/bad.json" 2>"$DIR/bad.json.err"; then fail "a bad JSON batch was accepted"; fi
grep -q "nftables\[0\]" "$DIR/bad.json.err" || fail "the JSON error does not name the command: $(cat "$DIR/bad.json.err")"
echo "ok: ban and unban in nft's JSON syntax; a bad JSON batch refused, naming its command"

# --- 2. a batch flushes and refills the chain; an established connection lives on -------------
ip netns exec $C ping -i 0.2 -c 40 -W 1 $SA >"$DIR/long.ping" 2>&1 &
PIDS="$PIDS $!"
sleep 1
cat > "$DIR/batch.nft" <<'N'
flush chain inet filter forward
add rule inet filter forward ct state established,related accept
add rule inet filter forward ip saddr @f2b drop
add rule inet filter forward icmp type echo-request drop
N
both -f "$DIR/batch.nft" || fail "the batch was refused"
same_as_kernel "the batch"
nft list chain inet filter forward | grep -q "icmp type echo-request drop" || fail "the batch's rule is not listed: $(nft list ruleset)"
if pings $SA 2; then fail "a new ping passed the batch's drop rule"; fi
wait_long=$(( $(date +%s) + 15 ))
while kill -0 $(echo $PIDS | awk '{print $NF}') 2>/dev/null && [ $(date +%s) -lt $wait_long ]; do sleep 0.5; done
got=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$DIR/long.ping")
[ "${got:-0}" -ge 35 ] || fail "the ping started before the batch lost its connection: $(tail -3 "$DIR/long.ping")"
echo "ok: a batch (flush + refill) applied; the established ping answered $got of 40, a new one dropped"
# the rule deleted by the handle `nft -a` lists (as scripts do)
h=$(nft -a list chain inet filter forward | sed -n 's/.*echo-request drop # handle \([0-9]*\)$/\1/p')
[ -n "$h" ] || fail "no handle listed: $(nft -a list chain inet filter forward)"
nft delete rule inet filter forward handle "$h" || fail "delete rule handle $h"
kh=$(kernel -a list chain inet filter forward | sed -n 's/.*echo-request drop # handle \([0-9]*\)$/\1/p')
kernel delete rule inet filter forward handle "$kh"
same_as_kernel "delete rule by handle"
pings $SA || fail "the rule deleted by its handle still drops"
echo "ok: a rule deleted by the handle nft -a lists"

# --- 3. refused batches change nothing ------------------------------------------------------
nft list ruleset >"$DIR/before"
printf 'add rule inet filter forward tcp dport 22 accept\nadd rule inet filter forward tcp dport 22 acept\n' >"$DIR/bad.nft"
if nft -c -f "$DIR/bad.nft" 2>"$DIR/bad.err"; then fail "a bad batch passed the check"; fi
grep -q "bad.nft:2:" "$DIR/bad.err" || fail "the error does not name the file and line: $(cat "$DIR/bad.err")"
if nft -f "$DIR/bad.nft" 2>/dev/null; then fail "a bad batch was applied"; fi
if kernel -f "$DIR/bad.nft" 2>/dev/null; then fail "the kernel applied the bad batch (the lab is wrong)"; fi
same_as_kernel "a refused batch"
nft list ruleset | diff - "$DIR/before" >/dev/null || fail "a refused batch changed the ruleset: $(nft list ruleset | diff - "$DIR/before")"
nft -c add rule inet filter forward tcp dport 22 accept || fail "a good rule failed the check"
nft list ruleset | diff - "$DIR/before" >/dev/null || fail "-c applied the rule"
if nft add element inet filter nope { 1.2.3.4 } 2>/dev/null; then fail "an element of a missing set was accepted"; fi
echo "ok: refused batches (-c, a typo in the second command, a missing set) change nothing"

# many small batches (a ban each, as fail2ban sends them): the history is folded into the
# listing after 256, and every element is still there
for i in $(seq 1 300); do
  nft add element inet filter f2b { 198.19.$((i / 250)).$((i % 250 + 1)) } || fail "ban $i"
done
n=$(nft list set inet filter f2b | grep -o '198\.19\.[0-9]*\.[0-9]*' | sort -u | wc -l)
[ "$n" = 300 ] || fail "$n of 300 elements listed"
grep -q "session compacted" "$DIR/weir.log" || fail "the session was not compacted after 256 batches"
nft flush set inet filter f2b || fail "flush set"
pings $SA || fail "no ping after the many batches"
echo "ok: 300 one-element batches (the history compacted), then flush set"

# --- 4. fail2ban itself, its nftables action running `nft` (the symlink) ---------------------
if command -v fail2ban-server >/dev/null && command -v python3 >/dev/null; then
  F=$DIR/f2b
  cp -r /etc/fail2ban "$F"; rm -rf "$F"/jail.d/* "$F"/jail.local "$F"/fail2ban.d/*
  printf '[Definition]\nlogtarget = %s/f2b.log\nsocket = %s/f2b.sock\npidfile = %s/f2b.pid\ndbfile = :memory:\n' "$F" "$F" "$F" >"$F/fail2ban.local"
  printf '[Definition]\nfailregex = ^weirtest failure from <HOST>$\n' >"$F/filter.d/weirtest.conf"
  : >"$F/auth.log"
  printf '[weirtest]\nenabled = true\nfilter = weirtest\nlogpath = %s/auth.log\nbackend = polling\nmaxretry = 2\nfindtime = 60\nbantime = 5\ndatepattern = {NONE}\naction = nftables[name=weirtest, port=22, protocol=tcp]\n' "$F" >"$F/jail.local"
  # a service on the router's port 22 (weir delivers to the router's stack)
  ip netns exec $R python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.90.1", 22)); s.listen(16)
while True:
    c, _ = s.accept(); c.close()' &
  PIDS="$PIDS $!"
  connects() { ip netns exec $C python3 -c 'import socket; socket.create_connection(("198.18.90.1", 22), timeout=2)' 2>/dev/null; }
  sleep 0.5
  connects || fail "no connection to the router's port 22 before fail2ban"
  PATH="$DIR/bin:$PATH" ip netns exec $R fail2ban-server -f -x -c "$F" >"$F/server.out" 2>&1 &
  F2B=$!; PIDS="$PIDS $F2B"
  # (its action starts on the first ban: table, chain, set, rule, then the element)
  sleep 1
  printf 'weirtest failure from %s\n' $CA $CA $CA >>"$F/auth.log"
  for _ in $(seq 100); do nft list set inet f2b-table addr-set-weirtest 2>/dev/null | grep -q "$CA" && break; sleep 0.1; done
  nft list set inet f2b-table addr-set-weirtest 2>/dev/null | grep -q "$CA" || fail "fail2ban did not ban: $(tail -20 "$F/f2b.log"; cat "$F/server.out")"
  nft list chain inet f2b-table f2b-chain | grep -q "@addr-set-weirtest reject" || fail "fail2ban's rule: $(nft list ruleset)"
  if connects; then fail "the banned client still connects"; fi
  # unbanned after the ban time (5 s)
  for _ in $(seq 150); do connects && break; sleep 0.1; done
  connects || fail "the client was not unbanned: $(tail -20 "$F/f2b.log")"
  # fail2ban's stop: its rule deleted by the handle `nft -a list` gives, its set and table
  PATH="$DIR/bin:$PATH" ip netns exec $R fail2ban-client -c "$F" stop >/dev/null 2>&1 || true
  for _ in $(seq 100); do kill -0 $F2B 2>/dev/null || break; sleep 0.1; done
  if nft list ruleset | grep -q f2b-table; then fail "fail2ban's table was left behind: $(nft list ruleset; tail -20 "$F/f2b.log")"; fi
  if grep -q "ERROR" "$F/f2b.log"; then fail "fail2ban logged errors: $(grep ERROR "$F/f2b.log")"; fi
  echo "ok: fail2ban (its nftables action through nft = weir): start, ban, unban, stop"
else
  echo "note: fail2ban or python3 is not installed: its step is skipped"
fi

# --- 5. weir ctl diff FILE shows exactly what apply FILE then changes; nft -e echoes ----------
cat > "$DIR/change.nft" <<'N'
add chain inet filter extra
add rule inet filter extra ip saddr 198.18.90.77 counter drop
add element inet filter f2b { 198.18.90.78 }
N
nft -s list ruleset > "$DIR/pre.nft"
ctl diff "$DIR/change.nft" > "$DIR/diff.out" || fail "ctl diff: $(cat "$DIR/diff.out")"
nft -s list ruleset | diff - "$DIR/pre.nft" >/dev/null || fail "ctl diff changed the ruleset"
ctl apply "$DIR/change.nft" > "$DIR/apply.out" || fail "ctl apply: $(cat "$DIR/apply.out")"
nft -s list ruleset > "$DIR/post.nft"
# the lines diff printed as added are exactly the listing's new lines (and none removed)
{ grep '^+' "$DIR/diff.out" || true; } | cut -c2- | sort > "$DIR/diff.add"
{ diff "$DIR/pre.nft" "$DIR/post.nft" || true; } | { grep '^>' || true; } | cut -c3- | sort > "$DIR/real.add"
diff "$DIR/diff.add" "$DIR/real.add" >/dev/null || fail "ctl diff said $(cat "$DIR/diff.out"), apply changed: $(diff "$DIR/pre.nft" "$DIR/post.nft")"
if grep -q '^-' "$DIR/diff.out"; then fail "ctl diff shows removals for a batch that removes nothing: $(cat "$DIR/diff.out")"; fi
[ -s "$DIR/diff.add" ] || fail "ctl diff showed nothing"
out=$(nft -a -e add rule inet filter extra ip saddr 198.18.90.79 drop) || fail "nft -e"
echo "$out" | grep -Eq '^add rule inet filter extra ip saddr 198.18.90.79 drop # handle [0-9]+$' || fail "nft -e echoed: $out"
echo "add rule inet filter nochain accept" > "$DIR/bad.nft"
if ctl diff "$DIR/bad.nft" > "$DIR/diff2.out" 2>&1; then fail "ctl diff of a batch naming a missing chain passed: $(cat "$DIR/diff2.out")"; fi
grep -q "nochain" "$DIR/diff2.out" || fail "ctl diff's error does not name the missing chain: $(cat "$DIR/diff2.out")"
echo "ok: weir ctl diff shows what weir ctl apply then changes; nft -e echoes the rule with its handle"

# --- 7. nft monitor: each change of a batch, and the traces of marked packets ---------------
"$DIR/bin/nft" monitor > "$DIR/mon.out" 2>&1 &
MON=$!; PIDS="${PIDS:-} $MON"
sleep 0.5
cat > "$DIR/mon.nft" <<'N'
add chain inet filter traced
add rule inet filter forward icmp type echo-request jump traced
add rule inet filter traced meta nftrace set 1
add rule inet filter traced ip daddr 198.18.91.2 counter accept
add element inet filter f2b { 198.18.90.80 }
delete element inet filter f2b { 198.18.90.78 }
N
nft -f "$DIR/mon.nft" || fail "the monitored batch"
pings $SA 1 || fail "no ping through the traced chain"
sleep 1.5
kill "$MON" 2>/dev/null || true; wait "$MON" 2>/dev/null || true
for want in "add chain inet filter traced" \
    "add rule inet filter forward icmp type echo-request jump traced" \
    "add rule inet filter traced meta nftrace set 1" \
    "add element inet filter f2b { 198.18.90.80 }" \
    "delete element inet filter f2b { 198.18.90.78 }"; do
  grep -qxF "$want" "$DIR/mon.out" || fail "nft monitor did not show '$want': $(cat "$DIR/mon.out")"
done
grep -Eq '^trace id [0-9a-f]+ inet filter traced rule ip daddr 198.18.91.2 counter packets [0-9]+ bytes [0-9]+ accept \(verdict accept\)$|^trace id [0-9a-f]+ inet filter traced rule ip daddr 198.18.91.2 counter accept \(verdict accept\)$' "$DIR/mon.out" \
  || fail "nft monitor showed no trace of the marked ping: $(cat "$DIR/mon.out")"
grep -Eq '^trace id [0-9a-f]+ inet filter forward packet: ' "$DIR/mon.out" || fail "no trace's packet line: $(cat "$DIR/mon.out")"
echo "ok: nft monitor shows each change of a batch and the trace of a marked packet"

if [ "${WEIR_NFT_MODE:-inline}" = nfqueue ]; then
  # a hook the kernel does not queue to weir: refused with the reason, nothing changed
  if out=$(nft add chain inet filter out '{ type filter hook output priority 0 ; }' 2>&1); then
    fail "NFQUEUE mode: a base chain at a hook the kernel does not queue was accepted"
  fi
  echo "$out" | grep -q "queues to weir only at the hooks" || fail "NFQUEUE mode: the refusal does not say why: $out"
  nft list ruleset | grep -q "chain out" && fail "NFQUEUE mode: the refused chain is listed"
  echo "ok: NFQUEUE mode: a base chain at a hook the kernel does not queue is refused, saying why"
  echo "note: steps 8 and 9 (kube-proxy's and nftlb's DNAT) skipped in NFQUEUE mode: weir refuses NAT there (the kernel's conntrack owns NAT on the packets it queues)"
  ctl reload | grep -q reloaded || fail "reload"
  echo PASS
  exit 0
fi

# --- 8. kube-proxy-style partial syncs: a service's chain flushed and refilled ---------------
# (kube-proxy's nftables mode, its matching narrowed to what ping exercises: one verdict map
# from the service's address and protocol to the service's chain, whose numgen map picks an
# endpoint chain that DNATs; each sync checked first with --check, as kube-proxy does)
ip -n $S addr add 198.18.91.3/24 dev weirnft-s0
VIP=198.18.91.100
cat > "$DIR/kp1.nft" <<'N'
add table ip kube-proxy
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto : verdict ; }
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority dstnat ; policy accept ; }
add chain ip kube-proxy services
add chain ip kube-proxy service-web
add chain ip kube-proxy endpoint-a
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy services ip daddr . meta l4proto vmap @service-ips
add rule ip kube-proxy endpoint-a dnat to 198.18.91.2
add rule ip kube-proxy service-web numgen random mod 1 vmap { 0 : goto endpoint-a }
add element ip kube-proxy service-ips { 198.18.91.100 . icmp : goto service-web }
N
cat > "$DIR/kp2.nft" <<'N'
add chain ip kube-proxy endpoint-b
flush chain ip kube-proxy endpoint-b
add rule ip kube-proxy endpoint-b dnat to 198.18.91.3
flush chain ip kube-proxy service-web
add rule ip kube-proxy service-web numgen random mod 2 vmap { 0 : goto endpoint-a, 1 : goto endpoint-b }
N
cat > "$DIR/kp3.nft" <<'N'
flush chain ip kube-proxy service-web
add rule ip kube-proxy service-web numgen random mod 1 vmap { 0 : goto endpoint-b }
delete chain ip kube-proxy endpoint-a
N
for b in kp1 kp2 kp3; do
  nft -c -f "$DIR/$b.nft" || fail "kube-proxy's --check of $b"
  kernel -c -f "$DIR/$b.nft" || fail "the kernel's --check of $b"
  both -f "$DIR/$b.nft" || fail "kube-proxy's sync $b"
  same_as_kernel "kube-proxy's sync $b" "table ip kube-proxy"
  if [ $b = kp1 ]; then
    pings $VIP || fail "no answer from the service after $b"
    # a connection to the service, established before the next syncs
    ip netns exec $C ping -i 0.2 -c 30 -W 1 $VIP >"$DIR/kp.ping" 2>&1 &
    KP=$!; PIDS="$PIDS $KP"
    sleep 1
  fi
done
pings $VIP || fail "no answer from the service's remaining endpoint after kp3"
wait_kp=$(( $(date +%s) + 15 ))
while kill -0 $KP 2>/dev/null && [ $(date +%s) -lt $wait_kp ]; do sleep 0.5; done
got=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$DIR/kp.ping")
[ "${got:-0}" -ge 27 ] || fail "the connection to the service established before the syncs was lost: $(tail -3 "$DIR/kp.ping")"
echo "ok: kube-proxy-style syncs (check, flush and refill a service chain, endpoints added and deleted) equal the kernel's; the established connection answered $got of 30"

# --- 9. nftlb-style per-farm regeneration: one farm's chain rebuilt, the other untouched ---------
cat > "$DIR/lb1.nft" <<'N'
table ip nftlb {
	map services {
		type ipv4_addr : verdict
	}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr vmap @services
	}
	chain nat-web {
	}
	chain nat-db {
	}
}
flush chain ip nftlb nat-web
add rule ip nftlb nat-web dnat to numgen inc mod 2 map { 0 : 198.18.91.2, 1 : 198.18.91.3 }
flush chain ip nftlb nat-db
add rule ip nftlb nat-db dnat to 198.18.91.2
add element ip nftlb services { 198.18.91.101 : goto nat-web, 198.18.91.102 : goto nat-db }
N
cat > "$DIR/lb2.nft" <<'N'
flush chain ip nftlb nat-web
add rule ip nftlb nat-web dnat to numgen inc mod 1 map { 0 : 198.18.91.3 }
N
nft list chain ip nftlb nat-db >/dev/null 2>&1 && fail "nftlb's table before its first batch"
for b in lb1 lb2; do
  both -f "$DIR/$b.nft" || fail "nftlb's batch $b"
  same_as_kernel "nftlb's batch $b" "table ip nftlb"
  [ $b = lb1 ] && nft -a list chain ip nftlb nat-db > "$DIR/db.before"
done
nft -a list chain ip nftlb nat-db | diff - "$DIR/db.before" >/dev/null || fail "regenerating farm web changed farm db: $(nft -a list chain ip nftlb nat-db)"
pings 198.18.91.101 && pings 198.18.91.102 || fail "no answer from nftlb's farms"
echo "ok: nftlb-style farm regeneration equals the kernel's; the other farm's chain (and handles) untouched"

# --- 6. reload: the file again -------------------------------------------------------------
ctl reload | grep -q reloaded || fail "reload"
nft list ruleset | grep -q "echo-request" && fail "the batch's rules survived a reload from the file"
pings $SA || fail "no ping after the reload"
echo "ok: weir ctl reload starts again from the file"
echo PASS
