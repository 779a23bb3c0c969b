#!/usr/bin/env bash
# Lab test of the connection-tracking helpers ftp, tftp and sip with real clients and servers
# through a NAT router (root; network namespaces, all named weirhl*, addresses in
# 198.18.0.0/15), first with the kernel as the router (the reference), then with `weir run`
# inline as the router (the kernel's forwarding off), same ruleset, same checks:
#
#   weirhl-c 198.18.60.2/24 -- weirhl-r 198.18.60.1 | 198.18.61.1 -- weirhl-s 198.18.61.2/24
#   (and 198.18.60.200/24)        (router)                 (vsftpd, in.tftpd, sip_ua.py)
#   (curl, tftp, sip_ua.py)
#
# The ruleset: ct helper objects ftp, tftp and sip set in prerouting for tcp dport 21, udp dport
# 69 and udp dport 5060; a forward chain with policy drop that accepts established and related
# packets (each rule counted) and new connections only from the client to tcp 21, udp 69 and
# udp 5060: a data or media connection passes only when it is recognised as related. Two NAT
# passes per router: SNAT (`oifname weirhl-r1 masquerade`: the client's PORT, EPRT and SDP
# address rewritten to the router's 198.18.61.1) and DNAT (the server reached at 198.18.61.100,
# `dnat to 198.18.61.2`, no masquerade: the server's 227 and SDP address rewritten to .100).
#
# Checks, in each pass: curl downloads a file from vsftpd (anonymous) byte for byte in passive
# EPSV and PASV and in active EPRT and PORT mode (vsftpd connects from port 20; it refuses a
# PORT naming another address than the control connection's peer, and a passive data
# connection from another), and twice on one control connection in PASV and in PORT mode from
# the client's second address (a rewrite of another length: 227 grows under DNAT, PORT shrinks
# under SNAT, so the router's sequence adjustment carries over to the second rewrite); tftp gets
# a file from in.tftpd byte for byte; a SIP INVITE and its 200 OK with SDP (sip_ua.py) are
# followed by one "RTP" datagram each way to the media address the other side's SDP names, a
# second call from the second address (its signalling masqueraded to another port); each SIP
# message's Content-Length must match its body. The rewritten addresses are checked where they
# arrive (PORT/EPRT at vsftpd, 227 at curl, SDP at each UA), and after each transfer the forward
# chain's related counter has grown. At the end, the SIP messages each side received through
# weir must be those it received through the kernel (the masqueraded port and the Call-ID
# masked). On a failure the FTP commands and replies each side saw (curl -v, vsftpd's protocol
# log, tcpdump at both ends if installed), the SIP messages and the router's connections are
# printed.
#
# A third pass per router, the control: SNAT without the `ct helper set` rules, where a PASV
# download and a TFTP get must fail (the data connection dropped by the forward chain), nothing
# counted as related.
#
# HL_ROUTERS picks the routers (default "kernel weir"), HL_NAT the passes (default "snat dnat
# nohelper"), HL_IO weir's io (default afpacket), HL_WORKERS its workers (default 1); HL_KEEP=1
# keeps the scratch folder in /tmp/weirhl-kept; HL_KEEP_GOING=1 runs every step and lists the
# failed ones at the end. About 15 s when everything passes.
#
# Usage: tests/lab/helpers.sh [path/to/weir]
set -euo pipefail
C=weirhl-c R=weirhl-r S=weirhl-s
NAMESPACES="$C $R $S" TOOLS="python3 ip nft ethtool curl vsftpd in.tftpd tftp ss cmp" PREFIX=weirhl
. "$(dirname "$0")/common.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
ROUTERS=${HL_ROUTERS:-kernel weir} NATS=${HL_NAT:-snat dnat nohelper} IO=${HL_IO:-afpacket} WORKERS=${HL_WORKERS:-1}
CA=198.18.60.2 CA2=198.18.60.200 RA=198.18.60.1 RB=198.18.61.1 SA=198.18.61.2 PUB=198.18.61.100
# on exit: the servers and captures (stop_pids), weir, then common.sh's cleanup
trap 'stop_pids; [ -n "${HL_KEEP:-}" ] && cp -r "$DIR" /tmp/weirhl-kept; cleanup' EXIT

# --- the lab -------------------------------------------------------------------------------
for n in $NAMESPACES; do
  ip netns exec $n sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
done
ip link add weirhl-c0 netns $C address 02:77:68:6c:00:02 type veth peer name weirhl-r0 netns $R address 02:77:68:6c:00:01
ip link add weirhl-s0 netns $S address 02:77:68:6c:01:02 type veth peer name weirhl-r1 netns $R address 02:77:68:6c:01:01
ip -n $C addr add $CA/24 dev weirhl-c0; ip -n $C addr add $CA2/24 dev weirhl-c0; ip -n $C link set weirhl-c0 up; ip -n $C route add default via $RA
ip -n $R addr add $RA/24 dev weirhl-r0; ip -n $R link set weirhl-r0 up
ip -n $R addr add $RB/24 dev weirhl-r1; ip -n $R link set weirhl-r1 up
ip -n $S addr add $SA/24 dev weirhl-s0; ip -n $S link set weirhl-s0 up; ip -n $S route add default via $RB
# the hosts keep their default offloads: their TCP and UDP leave with checksums to finish
for x in "$C weirhl-c0" "$S weirhl-s0"; do
  set -- $x
  ip netns exec $1 ethtool -k $2 | grep -q "^tx-checksumming: on" || fail "$2: tx checksum offload is not on by default"
done

# the files served: random, 300 KB over FTP, 100 KB over TFTP (200 blocks)
chmod 755 "$DIR"
mkdir -p "$DIR/ftp" "$DIR/tftp" "$DIR/empty" "$DIR/out" "$DIR/seen"
head -c 300000 /dev/urandom > "$DIR/ftp/file.bin"
head -c 100000 /dev/urandom > "$DIR/tftp/file.bin"
chmod 755 "$DIR/ftp" "$DIR/tftp" "$DIR/empty"; chmod 644 "$DIR/ftp/file.bin" "$DIR/tftp/file.bin"
cat > "$DIR/vsftpd.conf" <<V
listen=YES
listen_ipv6=NO
listen_address=$SA
background=NO
anonymous_enable=YES
no_anon_password=YES
anon_root=$DIR/ftp
local_enable=NO
write_enable=NO
secure_chroot_dir=$DIR/empty
seccomp_sandbox=NO
isolate=NO
isolate_network=NO
pasv_enable=YES
pasv_min_port=30000
pasv_max_port=30099
port_enable=YES
connect_from_port_20=YES
ftp_data_port=20
xferlog_enable=YES
xferlog_std_format=NO
log_ftp_protocol=YES
vsftpd_log_file=$DIR/vsftpd.log
V
ip netns exec $S vsftpd "$DIR/vsftpd.conf" </dev/null >"$DIR/vsftpd.out" 2>&1 &
PIDS="$PIDS $!"
ip netns exec $S in.tftpd -L -s "$DIR/tftp" -a $SA:69 -u tftp </dev/null >"$DIR/tftpd.out" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 50); do
  ip netns exec $S ss -Hltn 'sport = :21' | grep -q LISTEN && ip netns exec $S ss -Hlun 'sport = :69' | grep -q . && break
  sleep 0.1
done
ip netns exec $S ss -Hltn 'sport = :21' | grep -q LISTEN || fail "vsftpd did not start: $(cat $DIR/vsftpd.out)"
ip netns exec $S ss -Hlun 'sport = :69' | grep -q . || fail "in.tftpd did not start: $(cat $DIR/tftpd.out)"
ok "lab built, vsftpd and in.tftpd listening on $SA"

write_rules() { # snat | dnat | nohelper (snat without the helpers)
  local pre="" post="" h1='tcp dport 21 ct helper set "ftp-std"' h2='udp dport 69 ct helper set "tftp-std"'
  local h3='udp dport 5060 ct helper set "sip-std"'
  case $1 in
    snat) post='oifname "weirhl-r1" masquerade' ;;
    dnat) pre="ip daddr $PUB dnat to $SA" ;;
    nohelper) post='oifname "weirhl-r1" masquerade' h1="" h2="" h3="" ;;
  esac
  cat > "$DIR/rules.nft" <<N
table inet hl {
  ct helper ftp-std { type "ftp" protocol tcp; }
  ct helper tftp-std { type "tftp" protocol udp; }
  ct helper sip-std { type "sip" protocol udp; }
  chain pre {
    type filter hook prerouting priority filter; policy accept;
    $h1
    $h2
    $h3
  }
  chain forward {
    type filter hook forward priority filter; policy drop;
    ct state established counter accept
    ct state related counter accept
    iifname "weirhl-r0" ct state new tcp dport 21 counter accept
    iifname "weirhl-r0" ct state new udp dport { 69, 5060 } counter accept
    counter drop
  }
}
table ip hlnat {
  chain pre {
    type nat hook prerouting priority dstnat; policy accept;
    $pre
  }
  chain post {
    type nat hook postrouting priority srcnat; policy accept;
    $post
  }
}
N
}

weir_toml "weirhl-r0 $RA 198.18.60.0/24" "weirhl-r1 $RB 198.18.61.0/24"
cat >>"$DIR/weir.toml" <<T
[[neighbour]]
address = "$CA"
mac = "02:77:68:6c:00:02"
[[neighbour]]
address = "$CA2"
mac = "02:77:68:6c:00:02"
[[neighbour]]
address = "$SA"
mac = "02:77:68:6c:01:02"
T
ctl() { "$WEIR" ctl --socket "$DIR/weir.sock" "$@"; }

# packets counted by the forward chain's rule "ct state related counter accept" (or the
# dropped ones: "counter drop")
counted() { # related | dropped
  local want="ct state related counter"
  [ "$1" = dropped ] && want="^counter"
  if [ "$ROUTER" = kernel ]; then
    ip netns exec $R nft list chain inet hl forward | sed 's/^[[:space:]]*//' | grep -E "$want" |
      grep -o "packets [0-9]*" | awk '{ print $2 }' || true
  else
    ctl counters | awk -v w="$want" '$3 == "inet" && $4 == "hl" && $5 == "forward" {
      r = $0; sub(/^ *[0-9]+ +[0-9]+ +inet +hl +forward +/, "", r); if (r ~ w) print $1 }' || true
  fi
}

# what each side saw, printed when a check fails
captures_start() {
  CAPS=""
  command -v tcpdump >/dev/null || return 0
  local x
  for x in "$C weirhl-c0" "$S weirhl-s0"; do
    set -- $x
    ip netns exec $1 tcpdump -i $2 -nn -U -s 0 -w "$DIR/$1.pcap" \
      'tcp port 21 or udp port 69 or udp port 5060' >/dev/null 2>&1 &
    PIDS="$PIDS $!"; CAPS="$CAPS $!"
  done
  for _ in $(seq 20); do [ -s "$DIR/$C.pcap" ] && [ -s "$DIR/$S.pcap" ] && break; sleep 0.1; done
}
captures_stop() {
  local p
  for p in $CAPS; do kill -TERM $p 2>/dev/null || true; wait $p 2>/dev/null || true; PIDS=${PIDS/ $p/}; done
  CAPS=""
}
diagnose() {
  echo "-- what the client saw (curl -v, last transfer):"
  grep -E "^[<>] (PORT|EPRT|PASV|EPSV|227|229|200|150|425|500|226)" "$DIR/curl.log" 2>/dev/null | sed 's/^/  /' || true
  echo "-- what vsftpd saw (its protocol log, this pass):"
  grep -E '"(PORT|EPRT|PASV|EPSV)|"(227|229|200|425|500|150|226) ' "$DIR/vsftpd.log" 2>/dev/null | tail -20 | sed 's/^/  /' || true
  captures_stop
  local n
  for n in $C $S; do
    [ -s "$DIR/$n.pcap" ] || continue
    echo "-- tcpdump in $n:"
    tcpdump -r "$DIR/$n.pcap" -nn -A 2>/dev/null |
      grep -aE "FTP: (PORT|EPRT|PASV|EPSV|227|229|200 PORT|200 EPRT|425|500) |TFTP|\.5060: |^c=IN|^m=audio" | tail -40 | sed 's/^/  /' || true
  done
  [ "$ROUTER" = weir ] && { echo "-- weir ctl counters:"; ctl counters | sed "s/^/  /"; echo "-- weir ctl ct list:"; ctl ct list | sed "s/^/  /"; } || true
  [ "$ROUTER" = kernel ] && { echo "-- kernel conntrack in $R:"; ip netns exec $R conntrack -L 2>/dev/null | sed 's/^/  /'; } || true
}
hfail() { diagnose; fail "$ROUTER $NAT: $*"; }

# one transfer's related packets: the counter after it minus before
REL0=0
rel_mark() { REL0=$(counted related); REL0=${REL0:-0}; }
rel_check() { # what
  local n; n=$(counted related); n=${n:-0}
  [ "$n" -gt "$REL0" ] || hfail "$1: no packet counted as related (counter $REL0 before, $n after)"
  echo "  $1: $((n - REL0)) related packets"
}

join_lines() { awk 'NR > 1 { printf ", " } { printf "%s", $0 }'; }
ftp_get() { # mode: epsv | pasv | eprt | port, or pasv2 | port2 (two downloads on one control
  # connection, port2 from the client's second address $CA2: under SNAT its PORT shrinks by two
  # bytes, under DNAT the server's 227 grows by two, each time: the router's sequence
  # adjustment carries the offset over the rest of the connection and into the second rewrite)
  local opts=() n=1
  case $1 in
    pasv) opts=(--disable-epsv) ;;
    eprt) opts=(-P -) ;;
    port) opts=(-P - --disable-eprt) ;;
    pasv2) opts=(--disable-epsv); n=2 ;;
    port2) opts=(--interface $CA2 -P $CA2 --disable-eprt); n=2 ;;
  esac
  local i urls=()
  for i in $(seq $n); do
    rm -f "$DIR/out/ftp$i.bin"; urls+=(-o "$DIR/out/ftp$i.bin" "ftp://$TARGET/file.bin")
  done
  rel_mark
  ip netns exec $C timeout 12 curl -sS -v --connect-timeout 3 -m 8 "${opts[@]}" "${urls[@]}" >"$DIR/curl.log" 2>&1 ||
    hfail "ftp $1: curl failed: $(grep -v '^[<>*{}]' $DIR/curl.log | tail -3)"
  for i in $(seq $n); do
    cmp -s "$DIR/ftp/file.bin" "$DIR/out/ftp$i.bin" || hfail "ftp $1: download $i differs"
  done
  if [ $n = 2 ]; then
    grep -q "Re-using existing connection" "$DIR/curl.log" || hfail "ftp $1: curl did not reuse its control connection"
  fi
  rel_check "ftp $1"
  # the address in PORT, EPRT or 227 as the client and as the server saw it: rewritten by the
  # router to its own (SNAT: PORT, EPRT) or to the public address (DNAT: 227)
  local cl sv
  cl=$(grep -aoE '^[<>] (PORT|EPRT|227|229) .*' "$DIR/curl.log" | tr -d '\r' | tail -$n | sed 's/^[<>] //' | join_lines)
  sv=$(grep -aoE '"(PORT|EPRT|227|229) [^"]*' "$DIR/vsftpd.log" | tr -d '"' | tail -$n | join_lines)
  local want=""
  case $NAT/$1 in
    snat/port*) want="PORT 198,18,61,1," ;;
    snat/eprt) want="EPRT |1|198.18.61.1|" ;;
    dnat/pasv*) want="227 Entering Passive Mode (198,18,61,100," ;;
  esac
  case $NAT/$1 in
    snat/*) [ -z "$want" ] || [ "$(grep -oF "$want" <<<"$sv" | wc -l)" = $n ] || hfail "ftp $1: the server saw $sv" ;;
    dnat/*) [ -z "$want" ] || [ "$(grep -oF "$want" <<<"$cl" | wc -l)" = $n ] || hfail "ftp $1: the client saw $cl" ;;
  esac
  ok "ftp $1: $n x 300000 bytes byte for byte (client: $cl; server: $sv)"
}

tftp_get() {
  rm -f "$DIR/out/tftp.bin"
  rel_mark
  ip netns exec $C timeout 8 tftp -m binary $TARGET -c get file.bin "$DIR/out/tftp.bin" >"$DIR/tftp.log" 2>&1 ||
    hfail "tftp: $(cat $DIR/tftp.log)"
  cmp -s "$DIR/tftp/file.bin" "$DIR/out/tftp.bin" || hfail "tftp: the file differs: $(cat $DIR/tftp.log)"
  rel_check "tftp"
  ok "tftp: 100000 bytes byte for byte"
}

sip_call() { # [client address, default $CA; media port, default 40000]
  local ca=${1:-$CA} mport=${2:-40000}
  rel_mark
  ip netns exec $S timeout 15 python3 "$HERE/helpers/sip_ua.py" server $SA 42000 >"$DIR/sip-s.log" 2>&1 &
  local sp=$!
  PIDS="$PIDS $sp"
  for _ in $(seq 50); do ip netns exec $S ss -Hlun 'sport = :5060' | grep -q . && break; sleep 0.1; done
  local rc=0
  ip netns exec $C timeout 15 python3 "$HERE/helpers/sip_ua.py" client $ca $mport $TARGET >"$DIR/sip-c.log" 2>&1 || rc=$?
  local src=0
  wait $sp || src=$?
  PIDS=${PIDS/ $sp/}
  if [ $rc != 0 ] || [ $src != 0 ]; then
    echo "-- sip client (exit $rc):"; sed 's/^/  /' "$DIR/sip-c.log"
    echo "-- sip server (exit $src):"; sed 's/^/  /' "$DIR/sip-s.log"
    hfail "sip from $ca: the call failed (its log above)"
  fi
  # the messages as each side received them, compared between the routers at the end (the
  # masqueraded source port and the Call-ID masked)
  local x
  for x in c s; do
    sed -E 's/(198\.18\.61\.1:)[0-9]+/\1PORT/g; s/weirhl-[0-9]+@/weirhl-ID@/' "$DIR/sip-$x.log" > "$DIR/seen/$ROUTER-$NAT-sip-$ca-$x.log"
  done
  rel_check "sip from $ca"
  local want="INVITE.s SDP names 198.18.61.1:" log=sip-s.log
  [ "$NAT" = dnat ] && want="200 OK.s SDP names 198.18.61.100:" log=sip-c.log
  grep -q "$want" "$DIR/$log" || hfail "sip: the SDP address was not rewritten: $(grep 'SDP names' $DIR/$log)"
  ok "sip from $ca: INVITE/200 OK, RTP both ways ($(grep -o 'INVITE.s SDP names [0-9.:]*' "$DIR/sip-s.log"); $(grep -o "200 OK.s SDP names [0-9.:]*" "$DIR/sip-c.log"))"
}

# weir's own account (one line per worker): the rewrites of another length of pasv2 (DNAT) and
# port2 (SNAT) shifted later sequence numbers; nothing it should have rewritten was left
helper_stats() {
  local h
  h=$(ctl status | grep -o "ct helpers: [^;]*" || true)
  sed 's/^/  weir: /' <<<"$h"
  [ -n "$h" ] || hfail "no ct helper counters in weir ctl status"
  grep -q "seq adjusted [1-9]" <<<"$h" || hfail "no sequence number adjusted: $h"
  if grep -q "not rewritten [1-9]" <<<"$h"; then hfail "packets not rewritten: $h"; fi
}

# the control: without the helpers the PASV data connection is a new one to a port the ruleset
# does not open, dropped in forward; the tftp reply (from another port than 69) matches no
# connection and goes to the router itself under SNAT, not to the client; the control
# connection still works
control() {
  local d0 d1 r
  d0=$(counted dropped); d0=${d0:-0}
  if ip netns exec $C timeout 5 curl -sS -v --connect-timeout 1 -m 3 --disable-epsv \
    -o "$DIR/out/ftp.bin" "ftp://$TARGET/file.bin" >"$DIR/curl.log" 2>&1; then
    hfail "without the ftp helper a PASV download passed"
  fi
  grep -q "^< 227 " "$DIR/curl.log" || hfail "without the ftp helper the control connection failed: $(tail -3 $DIR/curl.log)"
  if ip netns exec $C timeout 2 tftp -m binary $TARGET -c get file.bin "$DIR/out/tftp.bin" >"$DIR/tftp.log" 2>&1 &&
    cmp -s "$DIR/tftp/file.bin" "$DIR/out/tftp.bin"; then
    hfail "without the tftp helper a download passed"
  fi
  d1=$(counted dropped); d1=${d1:-0}; r=$(counted related); r=${r:-0}
  [ "$r" = 0 ] || hfail "without helpers $r packets counted as related"
  [ "$d1" -gt "$d0" ] || hfail "without helpers nothing was dropped"
  ok "without helpers: the ftp PASV data connection dropped by the forward chain ($((d1 - d0)) packets), the tftp get failed, nothing related"
}

# --- the passes ------------------------------------------------------------------------------
# HL_KEEP_GOING=1: a failed step (in a subshell) is noted and the next one runs
FAILED=""
step() {
  if [ -z "${HL_KEEP_GOING:-}" ]; then "$@"; return; fi
  ( "$@" ) || FAILED="$FAILED|$ROUTER $NAT: $*"
  TS=$(date +%s.%N)   # the subshell's ok() cannot move it
}
for ROUTER in $ROUTERS; do
for NAT in $NATS; do
  LABEL=$ROUTER; [ "$ROUTER" = weir ] && LABEL="weir inline (io = $IO, workers = $WORKERS)"
  echo "-- router: $LABEL, $NAT"
  TARGET=$SA; [ "$NAT" = dnat ] && TARGET=$PUB
  write_rules $NAT
  ip -n $C neigh flush all; ip -n $S neigh flush all
  : > "$DIR/vsftpd.log"
  if [ "$ROUTER" = kernel ]; then
    ip netns exec $R nft -f "$DIR/rules.nft" || fail "the kernel refuses the ruleset"
    ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
  else
    ip netns exec $R sysctl -qw net.ipv4.ip_forward=0
    ip netns exec $R "$WEIR" run --config "$DIR/weir.toml" >"$DIR/weir.log" 2>&1 &
    WPID=$!
    for _ in $(seq 300); do grep -q ready "$DIR/weir.log" 2>/dev/null && break; kill -0 $WPID 2>/dev/null || break; sleep 0.1; done
    if ! grep -q ready "$DIR/weir.log"; then
      [ -n "${HL_KEEP_GOING:-}" ] || fail "weir did not start"
      echo "FAILED: weir did not start:"; sed 's/^/  weir: /' "$DIR/weir.log"
      FAILED="$FAILED|$ROUTER $NAT: weir did not start"; kill $WPID 2>/dev/null || true; wait $WPID 2>/dev/null || true; WPID=
      continue
    fi
  fi
  ok "$ROUTER routes"
  captures_start
  F0=$FAILED
  if [ "$NAT" = nohelper ]; then
    step control
  else
    for m in epsv pasv eprt port pasv2 port2; do step ftp_get $m; done
    step tftp_get
    step sip_call
    # a second call from the other address: its signalling masqueraded to another source port
    # (the first call's 198.18.61.1:5060 is taken), its media on another port (the first
    # call's media connection is still there)
    step sip_call $CA2 40010
  fi
  captures_stop
  [ "$ROUTER" = weir ] && [ "$NAT" != nohelper ] && step helper_stats
  D=$(counted dropped)
  echo "  dropped by the forward chain's policy rule: ${D:-0} packets"
  if [ "$ROUTER" = kernel ]; then
    ip netns exec $R sysctl -qw net.ipv4.ip_forward=0
    ip netns exec $R nft flush ruleset
    ip netns exec $R conntrack -F >/dev/null 2>&1 || true
  else
    kill -TERM $WPID; wait $WPID || true; WPID=
  fi
  [ "$NAT" = nohelper ] || [ "$FAILED" != "$F0" ] || ok "$ROUTER $NAT: ftp (EPSV, PASV, EPRT, PORT, twice PASV, twice PORT), tftp and sip through the router"
done
done
# the SIP messages each side received through weir are the ones it received through the kernel
if [[ " $ROUTERS " = *" kernel "* && " $ROUTERS " = *" weir "* ]]; then
  for f in "$DIR"/seen/kernel-*; do
    g=$DIR/seen/weir-${f##*/kernel-}
    [ -f "$g" ] || continue
    if diff -u "$f" "$g" > "$DIR/seen.diff"; then
      echo "ok: ${f##*/kernel-}: the same messages through weir as through the kernel"
    else
      echo "FAILED: ${f##*/kernel-}: other messages through weir than through the kernel:"; sed 's/^/  /' "$DIR/seen.diff"
      FAILED="$FAILED|${f##*/kernel-} differs"
      [ -n "${HL_KEEP_GOING:-}" ] || fail "the SIP messages differ"
    fi
  done
fi
[ -z "$FAILED" ] || { echo "failed steps:"; tr '|' '\n' <<<"${FAILED#|}" | sed 's/^/  /'; }
echo "total $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }')"
[ -z "$FAILED" ] || { echo "FAIL"; exit 1; }
echo "PASS"
