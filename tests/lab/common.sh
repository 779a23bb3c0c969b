# Shared by the `weir run` lab scripts (sourced): the weir binary, tool checks, a scratch
# folder, cleanup of namespaces and of weir, and `fail`.
#
# Before sourcing: NAMESPACES (the names the script creates), TOOLS (commands it needs),
# PREFIX (of the scratch folder). After: WEIR, DIR, WPID (set it when weir runs), fail.
WEIR=${1:-target/release/weir}
WEIR=$(readlink -f "$WEIR")
for t in $TOOLS; do
  command -v $t >/dev/null || { echo "SKIP: $t is not installed"; exit 0; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 0; }
DIR=$(mktemp -d /tmp/$PREFIX.XXXXXX)
WPID=
cleanup() {
  [ -n "$WPID" ] && kill "$WPID" 2>/dev/null && wait "$WPID" 2>/dev/null || true
  for n in $NAMESPACES; do ip netns del $n 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$DIR/weir.log" ] && sed 's/^/  weir: /' "$DIR/weir.log"; exit 1; }
# Background processes (servers, captures) a script starts: their PIDs in PIDS, stopped with
# TERM, then KILL after 2 s (a script's EXIT trap calls stop_pids before cleanup).
PIDS=""
stop_pids() {
  local p
  for p in $PIDS; do kill -TERM "$p" 2>/dev/null || true; done
  for p in $PIDS; do
    for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true
  done
  PIDS=""
}
# weir's control socket (bounded in time), and weir stopped: TERM, then KILL after 5 s.
ctl() { timeout 5 "$WEIR" ctl --socket "$DIR/weir.sock" "$@"; }
stop_weir() {
  [ -n "$WPID" ] || return 0
  kill -TERM $WPID 2>/dev/null || true
  for _ in $(seq 50); do kill -0 $WPID 2>/dev/null || break; sleep 0.1; done
  if kill -0 $WPID 2>/dev/null; then echo "weir did not stop within 5 s of TERM: killed"; kill -KILL $WPID 2>/dev/null || true; fi
  wait $WPID 2>/dev/null || true; WPID=
}
# A step done, with the seconds since the last.
T0=$(date +%s.%N)
TS=$T0
ok() {
  local now; now=$(date +%s.%N)
  echo "ok: $* ($(awk -v a="$TS" -v b="$now" 'BEGIN { printf "%.1f s", b - a }'))"; TS=$now
}
for n in $NAMESPACES; do ip netns del $n 2>/dev/null || true; ip netns add $n; ip -n $n link set lo up; done

# `reject` answers the sender: a connection to TCP port 23 of $2 (rejected with a TCP reset) is
# refused at once, not after the SYN's retries; a ping to $3 (rejected with icmpx
# admin-prohibited) gets "Packet filtered" from $4, an IPv6 ping to $5 (a plain reject) "Port
# unreachable" from $6. $1: the client's namespace.
check_reject_answers() {
  local c=$1 server=$2 rej4=$3 r4=$4 rej6=$5 r6=$6
  if ip netns exec $c timeout 3 bash -c "exec 3<>/dev/tcp/$server/23" 2>"$DIR/rst"; then fail "connected to a rejected port"; fi
  grep -q "Connection refused" "$DIR/rst" || fail "no TCP reset for a rejected port: $(cat $DIR/rst)"
  ip netns exec $c ping -c 1 -W 2 $rej4 >"$DIR/rej" 2>&1 || true
  grep -q "From $r4 .*Packet filtered" "$DIR/rej" || fail "no ICMP admin-prohibited for a rejected ping: $(cat $DIR/rej)"
  ip netns exec $c ping -6 -c 1 -W 2 $rej6 >"$DIR/rej6" 2>&1 || true
  grep -q "From $r6 .*Port unreachable" "$DIR/rej6" || fail "no ICMPv6 port unreachable for a rejected ping: $(cat $DIR/rej6)"
}

# tcpdump in namespaces while a step runs: captures_start FILTER "NS DEV"... writes
# $DIR/NS-$TAG.pcap for each (when HAVE_TCPDUMP is set) and waits until each runs;
# captures_stop stops them and fails (through $CAP_FAIL, default fail) if one lost packets.
CAPS="" CAP_NS=""
captures_start() {
  local filter=$1 x; shift
  CAPS="" CAP_NS=""
  [ -n "${HAVE_TCPDUMP:-}" ] || return 0
  for x in "$@"; do
    set -- $x
    rm -f "$DIR/$1-$TAG.pcap"
    ip netns exec $1 timeout 60 tcpdump -i $2 -nn -U --immediate-mode -s 0 -B 16384 -w "$DIR/$1-$TAG.pcap" \
      "$filter" >/dev/null 2>"$DIR/$1-$TAG.tcpdump" &
    PIDS="$PIDS $!"; CAPS="$CAPS $!"; CAP_NS="$CAP_NS $1"
  done
  local n up
  for _ in $(seq 30); do
    up=1; for n in $CAP_NS; do [ -s "$DIR/$n-$TAG.pcap" ] || up=; done
    [ -n "$up" ] && return 0
    sleep 0.1
  done
  ${CAP_FAIL:-fail} "tcpdump did not start: $(cat "$DIR"/*-"$TAG".tcpdump)"
}
captures_stop() {
  local p n
  sleep 0.3   # the last packets
  for p in $CAPS; do kill -TERM $p 2>/dev/null || true; wait $p 2>/dev/null || true; PIDS=${PIDS/ $p/}; done
  CAPS=""
  [ -n "${HAVE_TCPDUMP:-}" ] || return 0
  for n in $CAP_NS; do
    if grep -q "[1-9][0-9]* packets dropped by kernel" "$DIR/$n-$TAG.tcpdump"; then
      ${CAP_FAIL:-fail} "tcpdump in $n lost packets: $(cat "$DIR/$n-$TAG.tcpdump")"
    fi
  done
}

# The labs that run the kernel and then weir as the router: each writes a normalised summary
# per family ($DIR/summary-ROUTER-vFAM); weir's must be the kernel's. $1 says what is the same.
same_summaries() {
  [ -n "${HAVE_TCPDUMP:-}" ] && [[ " $ROUTERS " = *" kernel "* && " $ROUTERS " = *" weir "* ]] || return 0
  local fam
  for fam in 4 6; do
    if diff -u "$DIR/summary-kernel-v$fam" "$DIR/summary-weir-v$fam" > "$DIR/summary.diff"; then
      echo "ok: IPv$fam: $1 through weir as through the kernel"
    else
      echo "-- the kernel's summary (IPv$fam):"; sed 's/^/  /' "$DIR/summary-kernel-v$fam"
      echo "-- weir's summary (IPv$fam):"; sed 's/^/  /' "$DIR/summary-weir-v$fam"
      echo "-- the difference:"; sed 's/^/  /' "$DIR/summary.diff"
      fail "IPv$fam: weir's summary differs from the kernel's"
    fi
  done
}

# weir's configuration of an inline lab router, $DIR/weir.toml: the ruleset rules.nft, io $IO,
# ${WORKERS:-1} workers, the control socket, no metrics; each argument "IFACE ADDR[,ADDR...]
# PREFIX[,PREFIX...]" an interface with its addresses and a route to each prefix by it. A
# script appends what else it needs ([conntrack], [[neighbour]]) with cat >>.
weir_toml() {
  local x n ports=("$@")
  q() { echo "$1" | sed 's/[^,]\{1,\}/"&"/g; s/,/, /g'; }
  {
    printf 'ruleset = "rules.nft"\nmode = "inline"\nio = "%s"\nworkers = %s\n' "$IO" "${WORKERS:-1}"
    printf '[control]\nsocket = "%s/weir.sock"\n[metrics]\naddress = ""\n' "$DIR"
    for x in "${ports[@]}"; do
      set -- $x
      printf '[[interface]]\nname = "%s"\naddress = [%s]\n' "$1" "$(q "$2")"
    done
    for x in "${ports[@]}"; do
      set -- $x
      for n in ${3//,/ }; do printf '[[route]]\nprefix = "%s"\ninterface = "%s"\n' "$n" "$1"; done
    done
  } >"$DIR/weir.toml"
}

# The router of a pass in namespace $1: the kernel (the ruleset $DIR/rules.nft, forwarding on)
# or weir (`weir run` with $DIR/weir.toml, the kernel's forwarding off, waited for until ready,
# 30 s at most; $2 says what it runs, for the failure).
start_kernel() {
  ip netns exec $1 nft -f "$DIR/rules.nft" || fail "the kernel refuses the ruleset"
  ip netns exec $1 sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
}
start_weir() {
  ip netns exec $1 sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0
  ip netns exec $1 "$WEIR" run --config "$DIR/weir.toml" >"$DIR/weir.log" 2>&1 &
  WPID=$!
  for _ in $(seq 300); do
    grep -q ready "$DIR/weir.log" 2>/dev/null && break
    kill -0 $WPID 2>/dev/null || break
    sleep 0.1
  done
  grep -q ready "$DIR/weir.log" || { stop_weir; fail "weir did not start with $2"; }
}
