#!/usr/bin/env bash
# Lab test of what each desync action of weir's per-flow scripts puts on the wire (root;
# network namespaces): a client, weir's router (NFQUEUE mode), a plain router one hop past
# weir and a server, in a line, over IPv4 and IPv6. Each case is one profile (on its own queue
# and port) with one action (a few: several); the client sends zapret2's TLS ClientHello for iana.org over TCP
# (or a QUIC Initial over UDP) to the server, which reports the length and SHA-256 of what its
# socket received. AF_PACKET sniffers (python3) capture at the client, one hop past weir and
# at the server.
#
# Checks, per case (tests/lab/wire_check.py, whose model of each action follows nfqws2's
# zapret-antidpi.lua and resolves the positions on the ClientHello itself): exactly which
# segments arrive, in which order, their sequence offsets from the ISN, lengths, payloads,
# flags, TCP options and timestamps, acknowledgment numbers, TTLs, whether the TCP checksum is
# valid or bad on purpose, the IPv4 header checksums and ids, IPv6 extension headers; that
# fakes with TTL 1 reach the hop past weir and not the server; fragments (offsets, MF, one id,
# the reassembled packet and its checksum); `wsize`'s SYN,ACK at the client against the
# server's; that the server received exactly the payload, once; and that the client's
# handshake ACK arrives before weir's packets for the data (WIRE_LAX_ORDER=1: only a note).
#
# Checksum offloads are off on the path (so the captures show the real checksums), and
# receive checksumming at the hop and the server (so that no veth vouches for a checksum: the
# server's TCP drops a bad one, as a real host does).
#
# WIRE_BREAK="name/from/to" runs case `name` with weir's desync string edited (sed s/from/to/)
# while the checker expects the original: a way to see the checks fail. WIRE_DEBUG=DIR keeps
# the captures, the server's log and the cases there.
#
# Usage: tests/lab/scripts-wire.sh [path/to/weir]
set -euo pipefail
C=weirsw-c R=weirsw-r H=weirsw-h S=weirsw-s
NAMESPACES="$C $R $H $S" TOOLS="ip python3 ethtool ping" PREFIX=weirsw
. "$(dirname "$0")/common.sh"
HERE=$(readlink -f "$(dirname "$0")")
FAKES="$HERE/../../../shared/zapret2/files/fake"
HELLO="$FAKES/tls_clienthello_iana_org.bin" QUIC="$FAKES/quic_initial_www_google_com.bin"
[ -f "$HELLO" ] && [ -f "$QUIC" ] || { echo "SKIP: ../shared/zapret2/files/fake is not there"; exit 0; }
HELLO=$(readlink -f "$HELLO") QUIC=$(readlink -f "$QUIC")
CHECK="$HERE/wire_check.py"
export PYTHONDONTWRITEBYTECODE=1 # (no __pycache__ in the checkout)

# kind name port desync (one profile each, of one instance per action joined by "|"; the
# checker reads the same lines)
F=0x46414b45464b4521deadbeef00112233445566778899aabbccddeeff # a fake payload (28 bytes)
# a fake longer than weir's MSS for what it sends (1300 bytes of another ClientHello)
BIG=0x$(od -An -v -tx1 -N1300 "$FAKES/tls_clienthello_rutracker_org_kyber.bin" | tr -d ' \n')
[ ${#BIG} = 2602 ] || { echo "SKIP: $FAKES/tls_clienthello_rutracker_org_kyber.bin is not there"; exit 0; }
cat > "$DIR/cases" <<E
tcp multisplit 4001 multisplit:pos=1,midsld
tcp multisplit-seqovl 4002 multisplit:pos=2,host,midsld:seqovl=5
tcp multidisorder 4003 multidisorder:pos=1,midsld
tcp fake-ttl 4004 fake:blob=$F:ip_ttl=1
tcp fake-badsum 4005 fake:blob=$F:badsum
tcp fake-badseq 4006 fake:blob=$F:tcp_seq=-10000:tcp_ack=-66000
tcp fake-md5 4007 fake:blob=$F:tcp_md5
tcp fakedsplit-ttl 4008 fakedsplit:pos=midsld:pattern=0x0102030405:ip_ttl=1
tcp fakedsplit-badsum 4009 fakedsplit:pos=host+1:badsum
tcp fakeddisorder-ttl 4010 fakeddisorder:pos=midsld:pattern=0x0a0b0c:ip_ttl=1
tcp fakeddisorder-badseq 4011 fakeddisorder:pos=sld:tcp_seq=-10000:tcp_ack=-66000
tcp hostfakesplit-ttl 4012 hostfakesplit:midhost=midsld:ip_ttl=1
tcp hostfakesplit-md5 4013 hostfakesplit:tcp_md5
tcp tcpseg 4014 tcpseg:pos=1,midsld
tcp tcpseg-badsum 4015 tcpseg:pos=host,endhost:badsum
tcp rst-ttl 4016 rst:ip_ttl=1
tcp rstack-badsum 4017 rst:rstack:badsum
tcp syndata 4018 syndata:blob=0x53594e44415441
tcp wsize 4019 wsize:wsize=64:scale=0
tcp ipfrag-tcp 4020 ipfrag:ipfrag_pos_tcp=48
tcp fake-autottl 4021 fake:blob=$F:ip_autottl=+1,1-64:badsum
tcp fake-repeats 4022 fake:blob=$F:repeats=3:ip_ttl=1
tcp multisplit-repeats 4023 multisplit:pos=midsld:repeats=2
tcp fake-tcpts 4024 fake:blob=$F:tcp_ts=-1000:ip_ttl=1
tcp fake-tcpopts 4025 fake:blob=$F:tcp_nop_del:tcp_ts_up:tcp_md5:tcp_flags_unset=ACK:tcp_flags_set=FIN,URG:ip_ttl=1
tcp multidisorder-seqovl 4026 multidisorder:pos=2,midsld:seqovl=1:seqovl_pattern=0x7e
tcp fakedsplit-seqovl 4027 fakedsplit:pos=midsld:seqovl=3:seqovl_pattern=0x4142:nofake1:nofake4:ip_ttl=1
tcp fakeddisorder-seqovl 4028 fakeddisorder:pos=midsld:seqovl=sld:nofake2:nofake3:tcp_ts_up:badsum
tcp tcpseg-seqovl 4029 tcpseg:pos=host,endhost-1:seqovl=4:seqovl_pattern=0x2e
tcp hostfakesplit-template 4030 hostfakesplit:host=example.com:disorder_after=endhost+3:ip_ttl=1
tcp hostfakesplit-nofake 4031 hostfakesplit:host=ab.cd:nofake1:disorder_after:tcp_md5
tcp multisplit-blob 4032 multisplit:blob=$F:pos=5,-3:nodrop:ip_ttl=1
tcp fake-big 4033 fake:blob=$BIG:ip_ttl=1
tcp multisplit-ipfrag 4034 multisplit:pos=midsld:ipfrag:ipfrag_pos_tcp=40
tcp fake-ipfrag 4035 fake:blob=$F:ipfrag:ipfrag_disorder:ip_ttl=1
tcp seed 4036 fake:blob=$F:ip_ttl=1:badsum|multisplit:pos=1,midsld
tcp fake-rst-tcpseg 4037 fake:blob=$F:tcp_md5|rst:ip_ttl=1|tcpseg:pos=host,endhost
udp udplen 5001 udplen:increment=7:pattern=0x5a5b5c:payload=all
udp ipfrag 5002 ipfrag:ipfrag_pos_udp=16:payload=all
udp ipfrag-disorder 5003 ipfrag:ipfrag_pos_udp=24:ipfrag_disorder:payload=all
udp udplen-shrink 5004 udplen:increment=-100:payload=all
udp udplen-offset 5005 udplen:increment=9:pattern=0x01020304:pattern_offset=2:max=1200:payload=all
udp udplen-min 5006 udplen:min=1201:increment=4:payload=all
tcp6 multisplit6 4101 multisplit:pos=1,host,midsld
tcp6 multidisorder6 4102 multidisorder:pos=1,endhost
tcp6 fake6-ttl 4103 fake:blob=$F:ip6_ttl=1
tcp6 fakedsplit6-badsum 4104 fakedsplit:pos=midsld:pattern=0x0102030405:badsum
tcp6 fakeddisorder6-ttl 4105 fakeddisorder:pos=host:ip6_ttl=1
tcp6 hostfakesplit6-badseq 4106 hostfakesplit:midhost=midsld:tcp_seq=-10000:tcp_ack=-66000
tcp6 tcpseg6-md5 4107 tcpseg:pos=sld,endsld:tcp_md5
tcp6 ipfrag6-tcp 4108 ipfrag:ipfrag_disorder
tcp6 fake6-autottl 4109 fake:blob=$F:ip6_autottl=-1,1-64
tcp6 fake6-exthdr 4110 fake:blob=$F:ip6_hopbyhop:ip6_destopt:ip6_ah:ip6_ttl=1
tcp6 fake6-big 4111 fake:blob=$BIG:tcp_md5:ip6_hopbyhop:ip6_ttl=1
tcp6 multidisorder6-ipfrag 4112 multidisorder:pos=1,midsld:ipfrag:ipfrag_pos_tcp=24
udp6 udplen6 5101 udplen:increment=5:pattern=0x5a5b5c:payload=all
udp6 ipfrag6 5102 ipfrag:ipfrag_pos_udp=16:payload=all
udp6 ipfrag6-disorder 5103 ipfrag:ipfrag_pos_udp=32:ipfrag_disorder:payload=all
E

ip link add weirsw-c0 netns $C type veth peer name weirsw-r0 netns $R
ip link add weirsw-r1 netns $R type veth peer name weirsw-h0 netns $H
ip link add weirsw-h1 netns $H type veth peer name weirsw-s0 netns $S
ip -n $C addr add 198.18.50.2/24 dev weirsw-c0
ip -n $R addr add 198.18.50.1/24 dev weirsw-r0
ip -n $R addr add 198.18.51.1/24 dev weirsw-r1
ip -n $H addr add 198.18.51.2/24 dev weirsw-h0
ip -n $H addr add 198.18.52.1/24 dev weirsw-h1
ip -n $S addr add 198.18.52.2/24 dev weirsw-s0
ip -n $C addr add 2001:db8:50::2/64 dev weirsw-c0 nodad
ip -n $R addr add 2001:db8:50::1/64 dev weirsw-r0 nodad
ip -n $R addr add 2001:db8:51::1/64 dev weirsw-r1 nodad
ip -n $H addr add 2001:db8:51::2/64 dev weirsw-h0 nodad
ip -n $H addr add 2001:db8:52::1/64 dev weirsw-h1 nodad
ip -n $S addr add 2001:db8:52::2/64 dev weirsw-s0 nodad
for d in "$C weirsw-c0" "$R weirsw-r0" "$R weirsw-r1" "$H weirsw-h0" "$H weirsw-h1" "$S weirsw-s0"; do
  set -- $d
  ip -n $1 link set $2 up
  ip netns exec $1 ethtool -K $2 tx off rx off gso off tso off gro off >/dev/null 2>&1 ||
    { echo "SKIP: ethtool cannot turn $2's offloads off"; exit 0; }
done
ip -n $C route add default via 198.18.50.1
ip -n $R route add 198.18.52.0/24 via 198.18.51.2
ip -n $H route add 198.18.50.0/24 via 198.18.51.1
ip -n $S route add default via 198.18.52.1
ip -n $C -6 route add default via 2001:db8:50::1
ip -n $R -6 route add 2001:db8:52::/64 via 2001:db8:51::2
ip -n $H -6 route add 2001:db8:50::/64 via 2001:db8:51::1
ip -n $S -6 route add default via 2001:db8:52::1
for n in $R $H; do
  ip netns exec $n sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
done
# the TTL / hop limit weir sees (the client's, less the router's hop): the same for both
TTL0=$(( $(ip netns exec $C sysctl -n net.ipv4.ip_default_ttl) - 1 ))
[ $TTL0 = $(( $(ip netns exec $C sysctl -n net.ipv6.conf.weirsw-c0.hop_limit) - 1 )) ] ||
  fail "the client's IPv4 TTL and IPv6 hop limit differ"

# neighbours resolved before the cases (the first IPv6 packets to an unresolved neighbour can
# arrive twice, weir or not)
for a in 198.18.52.2 2001:db8:52::2; do
  ip netns exec $C ping -c 1 -i 0.2 -w 3 $a >/dev/null || fail "no ping to $a"
done

# the server: every case's port; for TCP reads until it has the ClientHello's length (or
# 2 s pass), logs and answers the length and SHA-256; for UDP the same per datagram
cat > "$DIR/server.py" <<'P'
import hashlib, socket, sys, threading
want, log = int(sys.argv[1]), open(sys.argv[2], "a")
lock = threading.Lock()
def note(kind, port, got):
    line = "%s %d %d %s" % (kind, port, len(got), hashlib.sha256(got).hexdigest())
    with lock:
        log.write(line + "\n"); log.flush()
    return line.encode()
def addr(kind):
    return (socket.AF_INET6, "2001:db8:52::2") if kind.endswith("6") else (socket.AF_INET, "198.18.52.2")
def tcp(kind, port):
    fam, a = addr(kind)
    s = socket.socket(fam); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a, port)); s.listen(4); s.settimeout(50)
    while True:
        try:
            c, _ = s.accept()
        except socket.timeout:
            return
        c.settimeout(2); got = b""
        try:
            while len(got) < want:
                b = c.recv(65536)
                if not b: break
                got += b
        except (socket.timeout, ConnectionError):
            pass
        try:
            c.sendall(note(kind, port, got) + b"\n"); c.close()
        except OSError:
            pass
def udp(kind, port):
    fam, a = addr(kind)
    s = socket.socket(fam, socket.SOCK_DGRAM); s.bind((a, port)); s.settimeout(50)
    while True:
        try:
            got, peer = s.recvfrom(65536)
        except socket.timeout:
            return
        s.sendto(note(kind, port, got), peer)
for kind, port in (a.split(":") for a in sys.argv[3:]):
    threading.Thread(target=tcp if kind.startswith("tcp") else udp, args=(kind, int(port)), daemon=True).start()
print("ready", flush=True)
threading.Event().wait(55)
P
# the client: each case in turn, TCP (the ClientHello in one write) or UDP (one datagram);
# prints what the server answered
cat > "$DIR/client.py" <<'P'
import socket, sys, time
hello, quic = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
for kind, port in (a.split(":") for a in sys.argv[3:]):
    fam, a = (socket.AF_INET6, "2001:db8:52::2") if kind.endswith("6") else (socket.AF_INET, "198.18.52.2")
    try:
        if kind.startswith("tcp"):
            s = socket.create_connection((a, int(port)), timeout=3)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(hello); got = s.recv(200).decode().strip() or "EOF"
        else:
            s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3)
            s.sendto(quic, (a, int(port))); got = s.recv(200).decode()
        s.close()
    except OSError as e:
        got = "ERROR %s" % e
    print(kind, port, got, flush=True)
    time.sleep(0.05)
P
PORTS=$(awk '{print $1 ":" $3}' "$DIR/cases")
ip netns exec $S python3 "$DIR/server.py" "$(stat -c %s "$HELLO")" "$DIR/server.log" $PORTS >"$DIR/server.out" 2>&1 &
SPID=$!
ip netns exec $H python3 "$CHECK" sniff weirsw-h0 "$DIR/hop.cap" >"$DIR/hop.out" 2>&1 &
HPID=$!
ip netns exec $S python3 "$CHECK" sniff weirsw-s0 "$DIR/srv.cap" >"$DIR/srv.out" 2>&1 &
VPID=$!
ip netns exec $C python3 "$CHECK" sniff weirsw-c0 "$DIR/cli.cap" >"$DIR/cli.out" 2>&1 &
CPID=$!
trap 'kill $SPID $HPID $VPID $CPID 2>/dev/null || true; cleanup' EXIT
touch "$DIR/server.log"
for f in server.out hop.out srv.out cli.out; do
  for i in $(seq 50); do grep -q ready "$DIR/$f" 2>/dev/null && break; sleep 0.1; done
  grep -q ready "$DIR/$f" || fail "$f: not ready: $(cat "$DIR/$f")"
done

# the ruleset: each case's port to its queue; weir's configuration: one profile per queue
{
  echo 'table inet z {'
  echo '  chain post {'
  echo '    type filter hook postrouting priority 101; policy accept;'
  n=300
  while read -r kind name port desync; do
    n=$((n + 1)); echo "    ${kind%6} dport $port queue num $n"
    # an instance on the server's packets, or autottl (which reads their TTL): they are
    # queued too
    case $desync in *dir=in* | *autottl* | wsize*) echo "    ${kind%6} sport $port queue num $n" ;; esac
  done < "$DIR/cases"
  echo '  }'
  echo '}'
} > "$DIR/rules.nft"
cat > "$DIR/weir.toml" <<T
ruleset = "rules.nft"
mode = "nfqueue"
[nfqueue]
queue = 9
[control]
socket = "$DIR/weir.sock"
[scripts]
T
n=300
while read -r kind name port desync; do
  n=$((n + 1))
  if [ -n "${WIRE_BREAK:-}" ] && [ "${WIRE_BREAK%%/*}" = "$name" ]; then
    desync=$(echo "$desync" | sed "s/${WIRE_BREAK#*/}/")
    echo "note: $name runs with desync \"$desync\" (WIRE_BREAK); its check should fail"
  fi
  cat >> "$DIR/weir.toml" <<T
[[scripts.profile]]
queue = $n
name = "$name"
filter_${kind%6} = "$port"
T
  # one instance per action ("a|b": a profile of two)
  IFS="|" read -ra insts <<< "$desync"
  for d in "${insts[@]}"; do
    printf '[[scripts.profile.instance]]\ndesync = "%s"\n' "$d" >> "$DIR/weir.toml"
    # (wsize acts on the server's SYN,ACK: its range in)
    case $d in *dir=in*|wsize*) echo 'in_range = "a"' >> "$DIR/weir.toml" ;; esac
  done
done < "$DIR/cases"

ip netns exec $R "$WEIR" run --config "$DIR/weir.toml" >"$DIR/weir.log" 2>&1 &
WPID=$!
for i in $(seq 300); do grep -q ready "$DIR/weir.log" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$DIR/weir.log" || fail "weir did not start"

timeout 40 ip netns exec $C python3 "$DIR/client.py" "$HELLO" "$QUIC" $PORTS >"$DIR/client.out" 2>&1 ||
  fail "the client failed or timed out: $(cat "$DIR/client.out")"
sleep 0.3
# weir sent everything scripts made (the counts are checked packet by packet below)
"$WEIR" ctl --socket "$DIR/weir.sock" status > "$DIR/status" || fail "weir ctl status failed"
grep -Eq "sent by scripts [1-9][0-9]* \(not sent 0\)" "$DIR/status" ||
  fail "weir did not send all that scripts made: $(grep -Eo 'sent by scripts [0-9]+ \(not sent [0-9]+\)' "$DIR/status")"
kill $HPID $VPID $CPID
wait $HPID $VPID $CPID 2>/dev/null || true
[ -n "${WIRE_DEBUG:-}" ] && cp "$DIR"/*.cap "$DIR/server.log" "$DIR/cases" "$WIRE_DEBUG"/
set +e
python3 "$CHECK" check "$DIR/cases" "$DIR/hop.cap" "$DIR/srv.cap" "$DIR/cli.cap" "$DIR/server.log" "$HELLO" "$QUIC" "$TTL0"
rc=$?
set -e
[ $rc = 0 ] || { sed "s/^/  client: /" "$DIR/client.out"; fail "some actions put the wrong packets on the wire (above)"; }
n=$(wc -l < "$DIR/cases")
echo "PASS: scripts wire lab ($n cases)"
