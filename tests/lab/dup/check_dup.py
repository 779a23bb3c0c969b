#!/usr/bin/env python3
"""Summarise what dup.sh's captures saw: the copies at the monitor ("tap") and the originals
at the server, kind by kind.

Usage: check_dup.py TAP.pcap SERVER.pcap CLIENT4 CLIENT6 ROUTER_TAP_MAC TAP_MAC

Only packets from the client (CLIENT4 / CLIENT6) count: ICMP echo requests, ICMPv6 echo
requests, UDP datagrams. For each one the line says where it was seen, its family, kind,
addresses, TTL or hop limit, IPv4's don't-fragment bit, the payload's length, and at the
tap: whether the MACs are the router's tap port to the tap, and whether the payload is the
one the server received (matched by kind and ICMP sequence or UDP payload). Equal lines are
counted. Exit 1 when a packet is malformed (a checksum of the IPv4 header that is wrong).
"""
import struct
import sys
from collections import Counter


def packets(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        yield data[off:off + incl]
        off += incl


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def parse(f):
    """(family, kind, src, dst, ttl, df, key, payload, macs) or None."""
    if len(f) < 14:
        return None
    et = struct.unpack("!H", f[12:14])[0]
    macs = (f[6:12].hex(":"), f[0:6].hex(":"))
    ip = f[14:]
    if et == 0x0800 and len(ip) >= 20:
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack("!H", ip[2:4])[0]
        ip = ip[:tot]
        if csum(ip[:ihl]) != 0:
            raise SystemExit("an IPv4 header checksum is wrong")
        src = ".".join(map(str, ip[12:16]))
        dst = ".".join(map(str, ip[16:20]))
        ttl, proto, df = ip[8], ip[9], (ip[6] >> 6) & 1
        l4 = ip[ihl:]
        fam = "v4"
        echo = proto == 1 and len(l4) >= 8 and l4[0] == 8
    elif et == 0x86DD and len(ip) >= 40:
        import ipaddress
        plen = struct.unpack("!H", ip[4:6])[0]
        ip = ip[:40 + plen]
        src = str(ipaddress.IPv6Address(ip[8:24]))
        dst = str(ipaddress.IPv6Address(ip[24:40]))
        ttl, proto, df = ip[7], ip[6], "-"
        l4 = ip[40:]
        fam = "v6"
        echo = proto == 58 and len(l4) >= 8 and l4[0] == 128
    else:
        return None
    if echo:
        seq = struct.unpack("!H", l4[6:8])[0]
        return fam, "echo-request", src, dst, ttl, df, ("echo", seq), l4[8:], macs
    if proto == 17 and len(l4) >= 8:
        dport = struct.unpack("!H", l4[2:4])[0]
        return fam, "udp/%d" % dport, src, dst, ttl, df, ("udp", l4[8:]), l4[8:], macs
    return None


def main():
    tap_pcap, srv_pcap, c4, c6, rmac, tmac = sys.argv[1:7]
    clients = (c4, c6)
    seen = {"tap": [], "server": []}
    for where, path in (("tap", tap_pcap), ("server", srv_pcap)):
        for f in packets(path):
            p = parse(f)
            if p and p[2] in clients:
                seen[where].append(p)
    at_server = {(p[0], p[6]): p[7] for p in seen["server"]}
    lines = Counter()
    for where in ("tap", "server"):
        for fam, kind, src, dst, ttl, df, key, payload, macs in seen[where]:
            line = "%s %s %s %s > %s ttl %d df %s len %d" % (where, fam, kind, src, dst, ttl, df, len(payload))
            if where == "tap":
                line += " macs %s" % ("router>tap" if macs == (rmac, tmac) else "%s>%s" % macs)
                same = at_server.get((fam, key)) == payload
                line += " payload %s" % ("as-at-server" if same else "not-seen-at-server")
            lines[line] += 1
    for line in sorted(lines):
        print("%s x%d" % (line, lines[line]))


main()
