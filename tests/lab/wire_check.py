#!/usr/bin/env python3
"""What weir's per-flow scripts put on the wire, checked packet by packet (tests/lab/scripts-wire.sh).

  wire_check.py sniff IFACE OUT     capture the frames IFACE receives and sends (AF_PACKET)
                                    into OUT, one hex line each, until SIGTERM (or 60 s)
  wire_check.py check CASES HOP SRV CLI SERVERLOG HELLO UDPDATA TTL
                                    check every case of the file CASES (lines "kind name port
                                    desync") against the captures HOP (one hop past weir), SRV
                                    (the server's side) and CLI (the client's, for what weir
                                    changes on the way back)

The expected packets come from a model of each action written here after nfqws2's
zapret-antidpi.lua (not after weir's code): the split positions are resolved on the payload
(the ClientHello's SNI parsed here), the fakes' contents, sequence offsets (relative to the
ISN), acknowledgment numbers, TTLs, checksums (valid, or bad on purpose), TCP MD5 options,
IPv4 ids and the order. Packets with a TTL of 1 must reach the first hop and not the server.
"""
import copy
import hashlib
import os
import re
import signal
import socket
import struct
import sys
import time

CLIENTS = (bytes([198, 18, 50, 2]), socket.inet_pton(socket.AF_INET6, "2001:db8:50::2"))
SERVERS = (bytes([198, 18, 52, 2]), socket.inet_pton(socket.AF_INET6, "2001:db8:52::2"))


def sniff(iface, out):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind((iface, 0))
    s.settimeout(0.1)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    end = time.time() + 60
    with open(out, "w") as f:
        print("ready", flush=True)
        while not stop and time.time() < end:
            try:
                data, addr = s.recvfrom(65535)
            except socket.timeout:
                continue
            except InterruptedError:
                continue
            if addr[0] != iface:
                continue
            f.write(data.hex() + "\n")
            f.flush()


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


class Pkt:
    """One IPv4 or IPv6 packet (TCP, UDP or a fragment)."""

    def __init__(self, frame):
        ip = frame[14:]
        self.v6 = ip[0] >> 4 == 6
        self.frag, self.mf, self.fragoff, self.dport = False, False, 0, None
        self.exts, self.tsval, self.frags = [], None, None
        if self.v6:
            ip = ip[: 40 + struct.unpack("!H", ip[4:6])[0]]
            self.ip_ok, self.id, self.ttl = True, None, ip[7]
            self.src, self.dst = ip[8:24], ip[24:40]
            nh, off = ip[6], 40
            # extension headers: hop-by-hop, routing, destination options, AH, fragment
            while nh in (0, 43, 60, 51, 44):
                self.exts.append(nh)
                if nh == 44:
                    fw = struct.unpack("!H", ip[off + 2 : off + 4])[0]
                    self.frag, self.mf, self.fragoff = True, bool(fw & 1), fw & 0xFFF8
                    self.id = struct.unpack("!I", ip[off + 4 : off + 8])[0]
                    nh, off = ip[off], off + 8
                else:
                    n = (ip[off + 1] + 2) * 4 if nh == 51 else (ip[off + 1] + 1) * 8
                    nh, off = ip[off], off + n
            self.proto = nh
        else:
            off = (ip[0] & 15) * 4
            ip = ip[: struct.unpack("!H", ip[2:4])[0]]
            self.ip_ok = csum(ip[:off]) == 0xFFFF
            self.id = struct.unpack("!H", ip[4:6])[0]
            fw = struct.unpack("!H", ip[6:8])[0]
            self.mf, self.fragoff = bool(fw & 0x2000), (fw & 0x1FFF) * 8
            self.frag = self.mf or self.fragoff > 0
            self.ttl, self.proto = ip[8], ip[9]
            self.src, self.dst = ip[12:16], ip[16:20]
        self.body = ip[off:]
        if self.fragoff == 0:
            self.parse_l4(self.body)

    def parse_l4(self, l4):
        self.sport, self.dport = struct.unpack("!HH", l4[:4])
        if self.proto == 6:
            self.seq, self.ack = struct.unpack("!II", l4[4:12])
            self.win = struct.unpack("!H", l4[14:16])[0]
            hl = (l4[12] >> 4) * 4
            self.flags = l4[13]
            self.opts = l4[20:hl]
            self.payload = l4[hl:]
            ts = self.option(8)
            self.tsval = struct.unpack("!I", ts[2:6])[0] if ts and len(ts) == 10 else None
            self.sum_ok = self.l4_ok(l4)
        elif self.proto == 17 and not self.frag:
            self.payload = l4[8:]
            self.sum_ok = self.l4_ok(l4)

    def l4_ok(self, l4):
        """Whether the TCP / UDP checksum of this (whole) transport segment is right."""
        if self.v6:
            pseudo = self.src + self.dst + struct.pack("!I", len(l4)) + bytes([0, 0, 0, self.proto])
        else:
            pseudo = self.src + self.dst + bytes([0, self.proto]) + struct.pack("!H", len(l4))
        return csum(pseudo + l4) == 0xFFFF

    def option(self, kind):
        """The TCP option `kind` (its bytes), or None."""
        o, i = self.opts, 0
        while i < len(o):
            if o[i] == 0:
                break
            if o[i] == 1:
                i += 1
                continue
            if o[i] == kind:
                return o[i : i + o[i + 1]]
            i += max(o[i + 1], 2)
        return None

    def md5(self):
        return self.option(19) is not None

    def optkinds(self):
        """The kinds of the TCP options, up to end-of-options."""
        o, i, out = self.opts, 0, []
        while i < len(o) and o[i] != 0:
            out.append(o[i])
            i += 1 if o[i] == 1 else max(o[i + 1], 2)
        return out


def reassemble(pkts):
    """The fragments of each packet put together, where the first arrived: one packet with
    `frags`, the (offset, more fragments, length) of its fragments in arrival order (their
    headers' checksums and TTLs must agree). Incomplete ones stay as they are."""
    slots, groups = [], {}
    for p in pkts:
        if not p.frag:
            slots.append(p)
            continue
        key = (p.src, p.dst, p.proto, p.id)
        if key not in groups:
            groups[key] = []
            slots.append(groups[key])
        groups[key].append(p)
    out = []
    for x in slots:
        if isinstance(x, Pkt):
            out.append(x)
            continue
        body = b""
        for f in sorted(x, key=lambda f: f.fragoff):
            body += f.body if f.fragoff == len(body) else b"\0" * 99999
        last = max(x, key=lambda f: f.fragoff)
        if last.mf or len(body) != last.fragoff + len(last.body):
            out.extend(x)
            continue
        q = copy.copy(min(x, key=lambda f: f.fragoff))
        q.frag, q.mf, q.body = False, False, body
        q.frags = [(f.fragoff, f.mf, len(f.body)) for f in x]
        q.exts = [e for e in q.exts if e != 44]
        q.ip_ok = all(f.ip_ok for f in x) and len({f.ttl for f in x}) == 1
        q.parse_l4(body)
        out.append(q)
    return out


def load(path, back=False):
    """The packets of a capture from the client to the server (`back`: the other way)."""
    out = []
    for line in open(path):
        f = bytes.fromhex(line.strip())
        if len(f) < 34 or f[12:14] not in (b"\x08\x00", b"\x86\xdd"):
            continue
        p = Pkt(f)
        fwd, rev = p.src in CLIENTS and p.dst in SERVERS, p.src in SERVERS and p.dst in CLIENTS
        if rev if back else fwd:
            out.append(p)
    return out


# --- the payload's markers (nfqws2's TLSPos / HostPos) ------------------------------------


def sni(hello):
    """(start, end) of the SNI host name in a TLS ClientHello record."""
    i = 5 + 4 + 2 + 32
    i += 1 + hello[i]
    i += 2 + struct.unpack("!H", hello[i : i + 2])[0]
    i += 1 + hello[i]
    end = i + 2 + struct.unpack("!H", hello[i : i + 2])[0]
    i += 2
    while i + 4 <= end:
        t, n = struct.unpack("!HH", hello[i : i + 4])
        if t == 0:
            # list length, name type, name length, name
            ln = struct.unpack("!H", hello[i + 7 : i + 9])[0]
            return i + 9, i + 9 + ln
        i += 4 + n
    raise SystemExit("no SNI in the ClientHello")


def resolve(marker, data, host):
    """A marker's zero-based offset, or None (nfqws2: it must lie inside the data)."""
    name, sign, num = marker, 1, 0
    for k in ("+", "-"):
        if k in marker[1:]:
            j = marker.index(k, 1)
            name, sign, num = marker[:j], (1 if k == "+" else -1), int(marker[j + 1 :])
    try:
        n = int(marker)
        at = len(data) + n if n < 0 else n
    except ValueError:
        if host is None:
            return None
        hs, he = host
        h = data[hs:he]
        last = h.rindex(b".")
        prev = h.rfind(b".", 0, last)
        sld, sldlen = hs + prev + 1, last - prev - 1
        base = {
            "host": hs,
            "endhost": he,
            "sld": sld,
            "endsld": sld + sldlen,
            "midsld": sld + (1 if sldlen == 1 else sldlen // 2),
        }[name]
        at = base + sign * num
    return at if 0 <= at < len(data) else None


def pattern(pat, off, n):
    return bytes(pat[(off + i) % len(pat)] for i in range(n))


# --- the model of each action ----------------------------------------------------------------


class Exp:
    """An expected packet: data at a sequence offset; `fool` (fooling applied), `orig` (the
    client's own packet, passed), `fakehost` (a generated fake host name of this length),
    `flags` (TCP: the original data segment's PSH,ACK unless said)."""

    def __init__(self, off, data, fool=False, orig=False, fakehost=0, flags=0x18):
        self.off, self.data, self.fool, self.orig, self.fakehost = off, data, fool, orig, fakehost
        self.flags = flags


def parse_desync(s):
    f = s.split(":")
    args = {}
    for a in f[1:]:
        k, _, v = a.partition("=")
        args[k] = v
    return f[0], args


def blob(v):
    assert v.startswith("0x"), v
    return bytes.fromhex(v[2:])


def model(name, a, data, host):
    """The packets an action sends for `data`, in order, and whether the original passes."""
    orig = data
    if "blob" in a and name not in ("fake", "syndata"):
        # the parts of a blob instead of the payload (markers: absolute ones only resolve)
        data, host = blob(a["blob"]), None
    pos = [resolve(m, data, host) for m in a.get("pos", "2").split(",")]
    pts = sorted({p for p in pos if p is not None and p > 0})
    L = len(data)
    ovl_pat = blob(a["seqovl_pattern"]) if "seqovl_pattern" in a else b"\0"
    passes = "nodrop" in a
    tail = [Exp(0, orig, orig=True)] if passes else []
    if name in ("multisplit", "multidisorder"):
        ends = pts + [L]
        parts = [Exp(s, data[s:e], fool=True) for s, e in zip([0] + pts, ends)]
        if name == "multisplit" and int(a.get("seqovl", 0)) > 0:
            # N pattern bytes before the first part
            n = int(a["seqovl"])
            parts[0] = Exp(-n, pattern(ovl_pat, 0, n) + parts[0].data, fool=True)
        if name == "multidisorder" and "seqovl" in a and len(parts) > 1:
            # the pattern before the second part, as long as the marker says (less than the
            # first split point)
            n = resolve(a["seqovl"], data, host)
            if n is not None and 0 < n < pts[0]:
                parts[1] = Exp(parts[1].off - n, pattern(ovl_pat, 0, n) + parts[1].data, fool=True)
        return (parts if name == "multisplit" else parts[::-1]) + tail, passes
    if name == "fake":
        return [Exp(0, blob(a["blob"]), fool=True), Exp(0, data, orig=True)], True
    if name in ("fakedsplit", "fakeddisorder"):
        p = pts[0]
        pat = blob(a["pattern"]) if "pattern" in a else b"\0"
        f1, f2 = Exp(0, pattern(pat, 0, p), fool=True), Exp(p, pattern(pat, p, L - p), fool=True)
        r1, r2 = Exp(0, data[:p]), Exp(p, data[p:])
        if name == "fakedsplit" and int(a.get("seqovl", 0)) > 0:
            n = int(a["seqovl"])
            r1 = Exp(-n, pattern(ovl_pat, 0, n) + r1.data)
        if name == "fakeddisorder" and "seqovl" in a:
            n = resolve(a["seqovl"], data, host)
            if n is not None and 0 < n < p:
                r2 = Exp(p - n, pattern(ovl_pat, 0, n) + r2.data)
        seq = [f1, r1, f1, f2, r2, f2] if name == "fakedsplit" else [f2, r2, f2, f1, r1, f1]
        # nofake1..4: the fakes in sending order
        fakes = iter(range(1, 5))
        seq = [e for e in seq if not e.fool or "nofake%d" % next(fakes) not in a]
        return seq + tail, passes
    if name == "hostfakesplit":
        hs, he = host
        n = he - hs
        t = a.get("host")
        if t and n <= len(t):
            fk = Exp(hs, t[len(t) - n :].encode(), fool=True)
        elif t and n == len(t) + 1:
            fk = Exp(hs, b"." + t.encode(), fool=True)
        else:
            fk = Exp(hs, None, fool=True, fakehost=n)
        out = [Exp(0, data[:hs])] + ([] if "nofake1" in a else [fk])
        mid = resolve(a["midhost"], data, host) if "midhost" in a else None
        if mid is not None and hs < mid < he:
            out += [Exp(hs, data[hs:mid]), Exp(mid, data[mid:he])]
        else:
            out.append(Exp(hs, data[hs:he]))
        out += [] if "nofake2" in a else [fk]
        d = resolve(a["disorder_after"] or "-1", data, host) if "disorder_after" in a else None
        if d is not None and d > he:
            return out + [Exp(d, data[d:]), Exp(he, data[he:d])] + tail, passes
        return out + [Exp(he, data[he:])] + tail, passes
    if name == "rst":
        flags = 0x14 if "rstack" in a else 0x04
        return [Exp(0, b"", fool=True, flags=flags), Exp(0, data, orig=True)], True
    if name == "syndata":
        # the SYN (sequence offset -1) with the blob instead of the client's; the data later
        syn = Exp(-1, blob(a["blob"]) if "blob" in a else bytes(16), fool=True, flags=0x02)
        return [syn, Exp(0, data, orig=True)], True
    if name == "tcpseg":
        x, y = pos[0] if pos[0] is not None else 0, pos[1] if pos[1] is not None else L - 1
        n = int(a.get("seqovl", 0))
        part = Exp(x - n, pattern(ovl_pat, 0, n) + data[x : y + 1], fool=True)
        return [part, Exp(0, orig, orig=True)], True
    raise SystemExit("no model for " + name)


# --- the checks ------------------------------------------------------------------------------


class Fail(Exception):
    pass


def opts_len(kinds):
    """The TCP option bytes of these kinds (as Linux and fooling write them), padded."""
    n = sum({1: 1, 2: 4, 3: 3, 4: 2, 8: 10, 19: 18}[k] for k in kinds)
    return (n + 3) // 4 * 4


def flag_bits(names):
    bits = {"FIN": 1, "SYN": 2, "RST": 4, "PSH": 8, "PUSH": 8, "ACK": 16, "URG": 32, "ECE": 64, "CWR": 128}
    return sum(bits[n.upper()] for n in names.split(",") if n)


def ip6_exts(a):
    """The IPv6 extension headers fooling inserts, in the chain's order (nfqws2: hop-by-hop
    headers at the front, each before the one before; the others at the end, in a fixed
    order)."""
    front = [0 for k in ("ip6_hopbyhop", "ip6_hopbyhop2") if k in a]
    back = [t for k, t in (("ip6_destopt", 60), ("ip6_routing", 43), ("ip6_destopt2", 60), ("ip6_ah", 51)) if k in a]
    return front + back


def autottl(spec, incoming):
    """nfqws2's autottl: the hops guessed from the incoming TTL, plus delta, clamped."""
    d, r = spec.split(",")
    lo, hi = (int(x) for x in r.split("-"))
    orig = 255 if incoming > 223 else 128 if 96 < incoming <= 128 else 64 if 32 < incoming <= 64 else None
    hops = orig - incoming
    fake = min(max(hops + int(d), lo), hi)
    ok = not (int(d) < 0 and fake >= hops or int(d) >= 0 and fake < hops)
    return fake if ok else None


def check_tcp(name_desync, v6, port, hop, srv, cli_back, data, ttl0, errs):
    instances = [parse_desync(d) for d in name_desync.split("|")]
    host = sni(data)
    flow = [p for p in hop if p.proto == 6 and p.dport == port and not p.frag]
    syn = [p for p in flow if p.flags & 0x02]
    hs = [p for p in flow if p.flags == 0x10 and not p.payload]
    if len(syn) != 1 or not hs:
        raise Fail("want one SYN and the handshake's ACK, got %d SYNs, %d ACKs" % (len(syn), len(hs)))
    isn, ack0 = syn[0].seq + 1, hs[0].ack
    # the segments (with data, or resets) and the SYN if the action gave it data
    def segs(cap):
        f = [p for p in cap if p.proto == 6 and p.dport == port and not p.frag]
        return [p for p in f if p.payload or p.flags & 0x04]
    def rows_for(name, a, exp, inst):
        # what the expected packets look like, fooling applied (nfqws2's "standard fooling")
        ttl_arg = "ip6_ttl" if v6 else "ip_ttl"
        ttl_fool = int(a[ttl_arg]) if ttl_arg in a else None
        auto = a.get("ip6_autottl" if v6 else "ip_autottl")
        if auto:
            # the TTL of the server's packets as weir sees them (queued in postrouting, after the
            # router's hop): as the client receives them
            sa = [p for p in cli_back if p.proto == 6 and p.sport == port and p.flags & 0x12 == 0x12]
            if len(sa) != 1:
                raise Fail("autottl: want one SYN,ACK at the client, got %d" % len(sa))
            ttl_fool = autottl(auto, sa[0].ttl) or ttl_fool
        exts = ip6_exts(a) if v6 else []
        # the TCP options: the client's (as in its handshake ACK), changed by fooling in nfqws2's
        # order (NOPs deleted, MD5 added, the timestamp moved up); the parts not fooled only get
        # the timestamp moved up
        base_opts = hs[0].optkinds()

        def ts_up(k):
            return [8] + [x for x in k if x != 8] if 8 in k and "tcp_ts_up" in a else k

        fool_opts = [x for x in base_opts if "tcp_nop_del" not in a or x != 1]
        fool_opts = ts_up(fool_opts + ([19] if "tcp_md5" in a and 19 not in fool_opts else []))
        flags_set = flag_bits(a.get("tcp_flags_set", ""))
        flags_unset = flag_bits(a.get("tcp_flags_unset", ""))
        dts = int(a.get("tcp_ts", 0))
        repeats = int(a.get("repeats", 1))
        dseq = int(a.get("tcp_seq", 0))
        dack = int(a.get("tcp_ack", 0))
        rows = []
        for e in exp:
            f = e.fool
            r = {
                "off": e.off + (dseq if f else 0),
                "len": e.fakehost or len(e.data),
                "data": e.data,
                "fakehost": e.fakehost,
                "ttl": (ttl_fool if f and ttl_fool else ttl0),
                "sum": not (f and "badsum" in a),
                "md5": f and "tcp_md5" in a,
                "ack": None if e.flags & 0x10 == 0 else (dack if f else 0),
                "flags": (e.flags & ~flags_unset | flags_set) if f else e.flags,
                # (the SYN's options are the SYN's, which weir replaced: not seen)
                "opts": None if e.flags & 0x02 else base_opts if e.orig else fool_opts if f else ts_up(base_opts),
                "orig": e.orig,
                "fool": f,
                "exts": exts if f else [],
                "ts": dts if f else 0,
            }
            # what weir sends is cut by nfqws2's DEFAULT_MSS, 1220 less the option bytes (weir
            # knows no connection's MSS; it never cuts below the original's length)
            d, cut = e.data, []
            extra = opts_len(r["opts"] or []) + 8 * len(r["exts"])
            step = max(1220 - extra, len(data))
            if not e.orig and d is not None and len(d) > step:
                cut = [(i, d[i : i + step]) for i in range(0, len(d), step)]
            for i, c in cut or [(0, d)]:
                r2 = dict(r, off=r["off"] + i, data=c, len=len(c) if c is not None else r["len"])
                # ipfrag: what is sent with all the options (not the fakes among real parts) in two
                # fragments when it is longer than the position
                r2["frags"] = None
                if "ipfrag" in a and f and name in ("multisplit", "multidisorder", "tcpseg", "fake", "rst"):
                    at = int(a.get("ipfrag_pos_tcp", 32))
                    total = 20 + opts_len(r["opts"] or []) + r2["len"]
                    if at < total:
                        r2["frags"] = [(0, True, at), (at, False, total - at)]
                        if "ipfrag_disorder" in a:
                            r2["frags"].reverse()
                # (nfqws2 repeats what it sends with the fooling options: the fakes, and the
                # parts of multisplit, multidisorder, tcpseg)
                rows += [dict(r2, copy=k, inst=inst, name=name) for k in range(repeats if f else 1)]
        return rows

    # one instance, or several (a profile's, joined by "|"): what each sends, in turn; the
    # original goes last if none dropped it
    rows, passes_all = [], True
    for inst, (name, a) in enumerate(instances):
        exp, passes = model(name, a, data, host)
        passes_all = passes_all and passes
        rows += [r for r in rows_for(name, a, exp, inst) if not r["orig"]]
        orig_row = [r for r in rows_for(name, a, exp, inst) if r["orig"]]
    if passes_all:
        rows += orig_row
    syndata = any(n == "syndata" for n, a in instances)

    def got_rows(pkts, ack_base):
        out = []
        for p in pkts:
            out.append(
                {
                    "off": (p.seq - isn + 2**31) % 2**32 - 2**31,
                    "len": len(p.payload),
                    "payload": p.payload,
                    "ttl": p.ttl,
                    "sum": p.sum_ok,
                    "md5": p.md5(),
                    "ack": (p.ack - ack_base + 2**31) % 2**32 - 2**31,
                    "ip_ok": p.ip_ok,
                    "flags": p.flags,
                    "id": p.id,
                    "exts": p.exts,
                    "ts": p.tsval,
                    "opts": p.optkinds(),
                    "frags": p.frags,
                }
            )
        return out

    def table(rs):
        return "\n".join(
            "    off=%d len=%d flags=%#x ttl=%d sum=%s opts=%s ack%s exts=%s%s%s"
            % (
                r["off"],
                r["len"],
                r["flags"],
                r["ttl"],
                "ok" if r["sum"] else "BAD",
                r["opts"],
                "-" if r["ack"] is None else "%+d" % r["ack"],
                r["exts"],
                " frags=%s" % (r["frags"],) if r["frags"] else "",
                " (orig)" if r.get("orig") else "",
            )
            for r in rs
        )

    def compare(where, want, got, ids_too):
        msg = "%s: want\n%s\n  got\n%s" % (where, table(want), table(got))
        if len(want) != len(got):
            raise Fail(msg)
        fakehosts = []
        for i, (w, g) in enumerate(zip(want, got)):
            for k in ("off", "len", "flags", "ttl", "sum", "md5", "opts", "ack", "exts", "frags"):
                if w[k] != g[k] and not (k in ("ack", "opts") and w[k] is None):
                    raise Fail("packet %d: %s %s, want %s\n%s" % (i + 1, k, hex(g[k]) if k == "flags" else g[k], hex(w[k]) if k == "flags" else w[k], msg))
            if not g["ip_ok"]:
                raise Fail("packet %d: bad IPv4 header checksum (or its fragments' TTLs differ)\n%s" % (i + 1, msg))
            if w["fakehost"]:
                h = g["payload"]
                if h == data[host[0] : host[1]] or not all(c in b"abcdefghijklmnopqrstuvwxyz0123456789." for c in h):
                    raise Fail("packet %d: fake host %r\n%s" % (i + 1, h, msg))
                fakehosts.append(h)
            elif g["payload"] != w["data"]:
                raise Fail("packet %d: payload %s, want %s\n%s" % (i + 1, g["payload"][:24].hex(), w["data"][:24].hex(), msg))
        if len(set(fakehosts)) > 1:
            raise Fail("the fake host names differ: %r" % fakehosts)
        # TCP timestamps: the original's, tcp_ts added where fooled (the original's is that of
        # a packet not fooled, else the first's less tcp_ts)
        plain = [g for w, g in zip(want, got) if not w["fool"]]
        base = plain[0]["ts"] if plain else (got[0]["ts"] or 0) - want[0]["ts"]
        tsd = [None if g["ts"] is None else (g["ts"] - base + 2**31) % 2**32 - 2**31 for g in got]
        # (syndata: the SYN's timestamp is not the data's)
        if not syndata and any(g["ts"] is not None for g in got) and tsd != [w["ts"] for w in want]:
            raise Fail("%s: TCP timestamps %s from the original's, want %s" % (where, tsd, [w["ts"] for w in want]))
        if not ids_too:
            return
        # IPv4 ids (ip_id=seq), each instance's: the packets weir sent take the original's
        # id + 1, + 2, ... as weir documents it (nfqws2's apply_ip_id gives the first one the
        # original's id itself, and goes on across the instances of a packet: a difference of
        # weir's, not checked); rst's ("none"): the original's
        orig = [g for w, g in zip(want, got) if w["orig"]]
        for inst in sorted({w["inst"] for w in want if not w["orig"]}):
            ws = [(w, g) for w, g in zip(want, got) if not w["orig"] and w["inst"] == inst]
            ids = [g["id"] for w, g in ws]
            # (repeated packets share their id)
            step = [0]
            for w, g in ws[1:]:
                step.append(step[-1] + (w["copy"] == 0))
            if ws[0][0]["name"] == "rst":
                step = [-1 for _ in step]
            if orig:
                ids0 = (orig[0]["id"] + 1) % 65536
            else:
                ids0 = (ids[0] - step[0]) % 65536
            if ids != [(ids0 + i) % 65536 for i in step]:
                raise Fail("%s: IPv4 ids %s (the original's %s)" % (where, ids, orig[0]["id"] if orig else "not seen"))

    data_pkts = segs(hop)
    try:
        compare("one hop past weir", rows, got_rows(data_pkts, ack0), not v6 and not syndata)
    except Fail as e:
        errs.append(str(e))
    # the server's side: what had TTL 1 died at the first hop, the rest one TTL lower
    want_s = [dict(r, ttl=r["ttl"] - 1) for r in rows if r["ttl"] > 1]
    sflow = segs(srv)
    try:
        compare("at the server", want_s, got_rows(sflow, ack0), False)
    except Fail as e:
        errs.append(str(e))
    died = len(rows) - len(want_s)
    what = "%d packets (%d with TTL 1 seen one hop past weir, not at the server)" % (len(rows), died)
    # the client's handshake ACK, sent before the data, must arrive before what weir made of
    # the data (weir's NFQUEUE mode issues an accepted packet's verdict before it sends
    # what scripts made of a later packet of the same direction; WIRE_LAX_ORDER=1: a note)
    first = next((i for i, p in enumerate(flow) if p.payload and not p.flags & 0x02), None)
    if first is not None and flow.index(hs[0]) > first:
        late = "the handshake's ACK arrived after %d of weir's packets" % (flow.index(hs[0]) - first)
        if not os.environ.get("WIRE_LAX_ORDER"):
            errs.append(late)
        what += "; NOTE: " + late
    return what


def check_wsize(desync, port, srv, cli, hop, ttl0, errs):
    """`wsize` on the server's SYN,ACK: what the client receives against what the server sent."""
    name, a = parse_desync(desync)
    sent = [p for p in srv if p.proto == 6 and p.sport == port and p.flags & 0x12 == 0x12]
    got = [p for p in cli if p.proto == 6 and p.sport == port and p.flags & 0x12 == 0x12]
    if len(sent) != 1 or len(got) != 1:
        raise Fail("want one SYN,ACK sent and one received, got %d and %d" % (len(sent), len(got)))
    s, g = sent[0], got[0]

    def opts(p, scale=None):
        o, i, out = p.opts, 0, []
        while i < len(o) and o[i] != 0:
            n = 1 if o[i] == 1 else o[i + 1]
            x = o[i : i + n]
            if x[0] == 3 and scale is not None and scale < x[2]:
                x = bytes([3, 3, scale])
            out.append(x)
            i += n
        return out

    want = {
        "seq": s.seq,
        "ack": s.ack,
        "flags": s.flags,
        "win": int(a.get("wsize", s.win)),
        "opts": opts(s, int(a["scale"]) if "scale" in a else None),
        "ttl": s.ttl - 2,
        "sum": True,
    }
    have = {"seq": g.seq, "ack": g.ack, "flags": g.flags, "win": g.win, "opts": opts(g), "ttl": g.ttl, "sum": g.sum_ok}
    for k in want:
        if want[k] != have[k]:
            show = (lambda v: [x.hex() for x in v]) if k == "opts" else (lambda v: v)
            errs.append("the SYN,ACK the client got: %s %s, want %s (the server sent %s)" % (k, show(have[k]), show(want[k]), show(opts(s)) if k == "opts" else getattr(s, k, None)))
    # the client's first data segment fits the window it was told
    data = [p for p in hop if p.proto == 6 and p.dport == port and p.payload]
    if not data or len(data[0].payload) != want["win"]:
        errs.append("the client's first segment: %s bytes, want %d" % (data and len(data[0].payload), want["win"]))
    return "the SYN,ACK's window %d -> %d, its last option %s -> %s; the client's first segment %d bytes" % (
        s.win,
        g.win,
        opts(s)[-1].hex(),
        opts(g)[-1].hex(),
        len(data[0].payload) if data else 0,
    )


def udplen_want(a, data):
    """nfqws2's udplen: payloads between min and max grow by `increment` bytes of the pattern
    (from pattern_offset) or shrink (never to nothing)."""
    inc, n = int(a.get("increment", 2)), len(data)
    if n < int(a.get("min", 0)) or n > int(a.get("max", 1 << 30)) or inc == 0 or n + inc < 1:
        return data
    if inc < 0:
        return data[: n + inc]
    pat = blob(a["pattern"]) if "pattern" in a else b"\0"
    return data + pattern(pat, int(a.get("pattern_offset", 0)), inc)


def check_l4(name_desync, tcp, port, hop, srv, data, ttl0, errs):
    """`udplen`, and `ipfrag` on UDP or TCP: what arrives at each place."""
    name, a = parse_desync(name_desync)
    n = 0
    for where, cap, ttl in (("one hop past weir", hop, ttl0), ("at the server", srv, ttl0 - 1)):
        try:
            n = check_l4_at(name, a, tcp, port, where, cap, ttl, data)
        except Fail as e:
            errs.append(str(e))
    return (udplen_want(a, data) if name == "udplen" else data), "%d packet(s)" % n


def check_l4_at(name, a, tcp, port, where, cap, ttl, data):
    proto = 6 if tcp else 17
    flow = [p for p in cap if p.proto == proto and p.dport == port]
    if name == "udplen":
        pk = [p for p in flow if not p.frag]
    else:
        # fragments of the flow: the first one has the port; the others share its id (which
        # the next packet of another flow may have, unfragmented)
        ids = {p.id for p in flow if p.frag}
        pk = [p for p in cap if p.proto == proto and p.frag and p.id in ids]
    if any(p.ttl != ttl or not p.ip_ok for p in pk):
        raise Fail("%s: TTLs %s or IP checksums %s" % (where, [p.ttl for p in pk], [p.ip_ok for p in pk]))
    if name == "udplen":
        want = udplen_want(a, data)
        if len(pk) != 1 or pk[0].frag or pk[0].payload != want or not pk[0].sum_ok:
            got = [(len(p.body) - 8, "payload " + ("ok" if p.body[8:] == want else "differs"), "checksum " + ("ok" if getattr(p, "sum_ok", None) else "bad")) for p in pk]
            raise Fail("%s: want one datagram of %d bytes (a valid checksum), got %s" % (where, len(want), got))
    elif name == "ipfrag":
        pos = int(a.get("ipfrag_pos_tcp" if tcp else "ipfrag_pos_udp", 32 if tcp else 8))
        first = [p for p in pk if p.fragoff == 0]
        # the transport header's length, from the first fragment
        hl = (first[0].body[12] >> 4) * 4 if tcp and first else 8
        offs = [(p.fragoff, p.mf, len(p.body)) for p in pk]
        want_offs = [(0, True, pos), (pos, False, hl + len(data) - pos)]
        if "ipfrag_disorder" in a:
            want_offs.reverse()
        if offs != want_offs or len({p.id for p in pk}) != 1:
            raise Fail("%s: fragments (offset, MF, length) %s, want %s, ids %s" % (where, offs, want_offs, [p.id for p in pk]))
        whole = b"".join(p.body for p in sorted(pk, key=lambda p: p.fragoff))
        if whole[hl:] != data:
            raise Fail("%s: the reassembled payload is not the original" % where)
        if not tcp and struct.unpack("!H", whole[4:6])[0] != len(whole):
            raise Fail("%s: reassembled datagram's UDP length wrong" % where)
        if not pk[0].l4_ok(whole):
            raise Fail("%s: reassembled checksum wrong" % where)
        if tcp:
            # the segment is the original's: its sequence number right after the SYN's, and
            # nothing else of the flow carries data
            syn = [p for p in flow if not p.frag and p.flags & 0x02]
            seq = struct.unpack("!I", whole[4:8])[0]
            if len(syn) != 1 or seq != (syn[0].seq + 1) % 2**32:
                raise Fail("%s: the reassembled segment's sequence number is not the ISN + 1" % where)
            if [p for p in flow if not p.frag and p.payload]:
                raise Fail("%s: data outside the fragments" % where)
    else:
        raise SystemExit("no model for " + name)
    return len(pk)


def main():
    if sys.argv[1] == "sniff":
        return sniff(sys.argv[2], sys.argv[3])
    cases, hop_f, srv_f, cli_f, log_f, hello_f, udp_f, ttl0 = sys.argv[2:10]
    hop_raw, srv_raw = load(hop_f), load(srv_f)
    hop, srv = reassemble(hop_raw), reassemble(srv_raw)
    srv_back, cli_back = load(srv_f, back=True), load(cli_f, back=True)
    hello, udpdata = open(hello_f, "rb").read(), open(udp_f, "rb").read()
    got = {}
    for line in open(log_f):
        k, port, n, h = line.split()
        got.setdefault((k, int(port)), []).append((int(n), h))
    bad = 0
    for line in open(cases):
        kind, name, port, desync = line.split()
        port = int(port)
        shown = re.sub(r"0x([0-9a-f]{12})[0-9a-f]{8,}", r"0x\1...", desync)
        errs = []
        want, what = (hello if kind.startswith("tcp") else udpdata), ""
        try:
            if desync.startswith("wsize:"):
                what = check_wsize(desync, port, srv_back, cli_back, hop, int(ttl0), errs)
            elif kind.startswith("tcp") and not desync.startswith("ipfrag:"):
                what = check_tcp(desync, kind == "tcp6", port, hop, srv, cli_back, hello, int(ttl0), errs)
            else:
                tcp = kind.startswith("tcp")
                want, what = check_l4(desync, tcp, port, hop_raw, srv_raw, hello if tcp else udpdata, int(ttl0), errs)
        except Fail as e:
            errs.append(str(e))
        w = (len(want), hashlib.sha256(want).hexdigest())
        if got.get((kind, port)) != [w]:
            errs.append("the server's socket got (length, sha256) %s, want once %s" % (got.get((kind, port)), w))
        if errs:
            bad += 1
            for e in errs:
                print("FAIL: %s (%s): %s" % (name, shown, e))
        else:
            print("ok: %s (%s): %s; the server got exactly %d bytes, sha256 %s..." % (name, shown, what, w[0], w[1][:12]))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
