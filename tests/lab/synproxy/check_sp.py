#!/usr/bin/env python3
"""Checks the synproxy lab's captures (tests/lab/synproxy.sh) and prints a normalised summary.

  check_sp.py CLIENT.pcap SERVER.pcap CONNS FAMILY CLIENT-ADDR SERVER-ADDR PROXIED-PORTS
              SYNACK-MSS CHECKSUMS [FORGED-PORT]

CONNS: the client's log, one connection a line ("MODE PORT LOCALPORT ok"). FAMILY: 4 or 6.
PROXIED-PORTS: comma-separated server ports whose SYNs the router answers itself, with
SYN-ACK MSS SYNACK-MSS. CHECKSUMS: "full" (every segment a host receives has a correct TCP
checksum) or "partial-ok" (a checksum still to be finished by an offload, the pseudo-header's
sum, is accepted too: the kernel forwards and sends segments that way over veth, where no
device ever finishes them). FORGED-PORT: the client port of a forged bare ACK that must not
reach the server.

Per connection, at the client: the handshake, who answered the SYN (the router: window 0, the
configured MSS, wscale and SACK-permitted and timestamps as the client offered them; or the
server, whose SYN-ACK the server's capture holds, the control); every received segment's
checksum; the server's sequence numbers continuous from the SYN-ACK's ISN (no gap, nothing
before it) and its timestamps continuous from the SYN-ACK's TSval; every TSecr the client
receives one of its own TSvals. At the server: its SYN only after the client's ACK ended the
handshake, with the client's ISN, the cookie's MSS (the largest of Linux's cookie table at or
below the client's), the client's wscale and SACK-permitted, then a bare ACK before any data;
every received checksum; the client's sequence numbers continuous; every TSecr the server
receives one of its own TSvals. At both ends the same number of bytes each way. Cookie values,
ISNs and timestamps differ between runs; the summary names only kinds, flags, option values
and the order of events, so two routers can be compared line for line. Exit 1 on a failure.

A gap in a capture that the receiving end later acknowledges across is the capture's loss
(tcpdump missed a segment now and then, about one run in ten on a busy machine), not the
router's: a TCP receiver acknowledges only what it holds without a hole, so a real jump in the
sequence numbers is never acknowledged across. Such a loss is noted on stderr; a gap never
acknowledged across, a second gap while one is open, or data before the ISN is an error.

pcap is parsed by hand (Ethernet, IPv4 or IPv6 without extension headers, TCP).
"""
import struct
import sys

# Linux's SYN cookie MSS tables (net/ipv4/syncookies.c, net/ipv6/syncookies.c)
MSS_TABLE = {4: [536, 1300, 1440, 1460], 6: [1280 - 60, 1480 - 60, 1500 - 60, 9000 - 60]}
FIN, SYN, RST, PSH, ACK = 1, 2, 4, 8, 16


def fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def csum16(data):
    if len(data) % 2:
        data += b"\0"
    return sum(struct.unpack("!%dH" % (len(data) // 2), data))


class Seg:
    pass


def parse_opts(b):
    o = {}
    i = 0
    while i < len(b):
        k = b[i]
        if k == 0:
            break
        if k == 1:
            i += 1
            continue
        if i + 1 >= len(b) or b[i + 1] < 2:
            o["bad"] = True
            break
        n = b[i + 1]
        v = b[i + 2:i + n]
        if k == 2 and n == 4:
            o["mss"] = struct.unpack("!H", v)[0]
        elif k == 3 and n == 3:
            o["ws"] = v[0]
        elif k == 4 and n == 2:
            o["sack"] = True
        elif k == 8 and n == 10:
            o["ts"] = struct.unpack("!II", v)
        else:
            o.setdefault("other", []).append(k)
        i += n
    return o


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        e = "<"
    else:
        e = ">"
        magic = struct.unpack(">I", data[:4])[0]
    nano = magic == 0xA1B23C4D
    link = struct.unpack(e + "I", data[20:24])[0]
    if link != 1:
        raise SystemExit("%s: link type %d, not Ethernet" % (path, link))
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack(e + "IIII", data[off:off + 16])
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        s = parse_frame(pkt, incl < orig)
        if s:
            s.t = sec + frac / (1e9 if nano else 1e6)
            s.n = len(out)
            out.append(s)
    return out


def parse_frame(p, truncated):
    if len(p) < 14:
        return None
    et = struct.unpack("!H", p[12:14])[0]
    ip = p[14:]
    if et == 0x0800 and len(ip) >= 20:
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack("!H", ip[2:4])[0]
        if ip[9] != 6:
            return None
        src, dst = ip[12:16], ip[16:20]
        tcp = ip[ihl:tot]
        fam = 4
        ph = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    elif et == 0x86DD and len(ip) >= 40:
        plen = struct.unpack("!H", ip[4:6])[0]
        if ip[6] != 6:
            return None
        src, dst = ip[8:24], ip[24:40]
        tcp = ip[40:40 + plen]
        fam = 6
        ph = src + dst + struct.pack("!IxxxB", len(tcp), 6)
    else:
        return None
    if len(tcp) < 20:
        return None
    s = Seg()
    s.fam = fam
    s.src, s.dst = src, dst
    s.sport, s.dport, s.seq, s.ack, off_fl, s.win, s.csum = struct.unpack("!HHIIHHH", tcp[:18])
    hl = (off_fl >> 12) * 4
    s.flags = off_fl & 0x3F
    s.opts = parse_opts(tcp[20:hl])
    s.len = len(tcp) - hl
    if truncated:
        s.ck = "truncated"
    elif fold(csum16(ph) + csum16(tcp)) == 0xFFFF:
        s.ck = "ok"
    elif s.csum == fold(csum16(ph)):
        s.ck = "partial"
    else:
        s.ck = "bad"
    return s


def sdiff(a, b):
    """a - b in sequence space, signed"""
    d = (a - b) & 0xFFFFFFFF
    return d - (1 << 32) if d >= 1 << 31 else d


def fl(s):
    return "".join(c for c, b in (("S", SYN), ("F", FIN), ("R", RST), ("P", PSH), ("A", ACK)) if s.flags & b)


def optstr(o):
    parts = []
    if "mss" in o:
        parts.append("mss %d" % o["mss"])
    if "ws" in o:
        parts.append("wscale %d" % o["ws"])
    if o.get("sack"):
        parts.append("sack-perm")
    if "ts" in o:
        parts.append("ts")
    for k in o.get("other", []):
        parts.append("kind %d" % k)
    return " ".join(parts) or "no options"


def desc(s, c2s):
    return "#%d %s %s seq %d ack %d win %d len %d [%s] csum %s" % (
        s.n, "c>s" if c2s else "s>c", fl(s), s.seq, s.ack, s.win, s.len, optstr(s.opts), s.ck)


class Stream:
    """one direction of a connection as one end saw it: continuity from the SYN's ISN"""

    def __init__(self, isn):
        self.isn, self.hi, self.err, self.gap, self.lost = isn, (isn + 1) & 0xFFFFFFFF, None, None, 0

    def acked(self, ack):
        """the receiver acknowledged up to ack: a receiver acknowledges only what it holds
        without a hole, so a gap it acknowledges across was lost by the capture, not made by
        the router"""
        if self.gap and sdiff(ack, self.gap[1]) >= 0:
            self.lost += sdiff(self.gap[1], self.gap[0])
            self.gap = None

    def add(self, s, what):
        if s.flags & SYN:
            return
        if sdiff(s.seq, (self.isn + 1) & 0xFFFFFFFF) < -1:
            self.err = self.err or "%s: seq %d before ISN+1 %d (a jump back)" % (what, s.seq, self.isn + 1)
            return
        if sdiff(s.seq, self.hi) > 0:
            if self.gap:  # a second gap before the first was acknowledged across
                self.err = self.err or "%s: seq %d after next %d, and the gap before it %s was never acknowledged" % (
                    what, s.seq, self.hi, self.gap)
                return
            self.gap = (self.hi, s.seq, what)
        end = (s.seq + s.len + (1 if s.flags & FIN else 0)) & 0xFFFFFFFF
        if sdiff(end, self.hi) > 0:
            self.hi = end

    def length(self):
        return sdiff(self.hi, (self.isn + 1) & 0xFFFFFFFF)

    def finish(self):
        if self.gap and not self.err:
            self.err = "%s: seq %d after next %d (a gap) never acknowledged across" % (
                self.gap[2], self.gap[1], self.gap[0])


def analyse(mode, port, lport, cpk, spk, fam, caddr, saddr, proxied, synack_mss, cks):
    errs = []
    name = "v%d %d %s" % (fam, port, mode)

    def side(pk):
        out = []
        for s in pk:
            if s.fam != fam:
                continue
            if s.src == caddr and s.dst == saddr and s.sport == lport and s.dport == port:
                out.append((True, s))
            elif s.src == saddr and s.dst == caddr and s.sport == port and s.dport == lport:
                out.append((False, s))
        return out

    C, S = side(cpk), side(spk)
    if not C or not S:
        return name + ": not captured", ["%s: %d packets at the client, %d at the server" % (name, len(C), len(S))], ""

    def first(pk, c2s, pred, after=-1):
        for d, s in pk:
            if d == c2s and s.n > after and pred(s):
                return s
        return None

    def dump(pk, where):
        return "\n    %s:\n      " % where + "\n      ".join(desc(s, d) for d, s in pk[:14])

    ctx = dump(C, "at the client") + dump(S, "at the server")
    csyn = first(C, True, lambda s: s.flags & (SYN | ACK) == SYN)
    csa = first(C, False, lambda s: s.flags & (SYN | ACK) == SYN | ACK)
    if not csyn or not csa:
        return name + ": no handshake", [name + ": no SYN or SYN-ACK at the client"], ctx
    c3 = first(C, True, lambda s: s.flags & (SYN | ACK) == ACK, csa.n)
    ssyn = first(S, True, lambda s: s.flags & (SYN | ACK) == SYN)
    ssa = first(S, False, lambda s: s.flags & (SYN | ACK) == SYN | ACK)
    if not c3 or not ssyn or not ssa:
        return name + ": no handshake", [name + ": the handshake is incomplete"], ctx
    co = csyn.opts
    want_proxy = port in proxied
    summ = ["client SYN [%s]" % optstr(co)]

    # who answered the SYN
    sa = csa.opts
    if want_proxy:
        if csa.win != 0:
            errs.append("the SYN-ACK's window is %d, not 0 (the router's SYN-ACK announces none)" % csa.win)
        if sa.get("mss") != synack_mss:
            errs.append("the SYN-ACK's MSS is %s, not the configured %d" % (sa.get("mss"), synack_mss))
        for k, want in (("ws", 7 if "ws" in co else None), ("sack", True if co.get("sack") else None)):
            if sa.get(k) != want:
                errs.append("the SYN-ACK's %s is %s, the client offered %s: want %s" % (k, sa.get(k), co.get(k), want))
        if ("ts" in sa) != ("ts" in co):
            errs.append("the SYN-ACK has %s timestamp, the client offered %s" % ("a" if "ts" in sa else "no", "one" if "ts" in co else "none"))
        if ssyn.t <= c3.t:
            errs.append("the server saw the SYN (%.6f) before the client's ACK ended the handshake (%.6f): not proxied" % (ssyn.t, c3.t))
        if ssa.seq == csa.seq:
            errs.append("the client's SYN-ACK is the server's (same ISN)")
    else:
        if ssyn.t >= csa.t:
            errs.append("the client got a SYN-ACK (%.6f) before the server saw the SYN (%.6f): answered by the router" % (csa.t, ssyn.t))
        if ssa.seq != csa.seq or ssa.opts != csa.opts:
            errs.append("the client's SYN-ACK is not the server's")
        if csa.win == 0:
            errs.append("the server's SYN-ACK with window 0")
    summ.append("SYN-ACK from the %s: win %s [%s]" % (
        "router" if want_proxy else "server", "0" if csa.win == 0 else ">0", optstr(sa)))
    summ.append("server SYN %s the client's handshake ACK" % ("after" if ssyn.t > c3.t else "before"))

    # the server's SYN
    so = ssyn.opts
    if ssyn.seq != csyn.seq:
        errs.append("the server's SYN has seq %d, the client's ISN is %d" % (ssyn.seq, csyn.seq))
    if want_proxy:
        cm = co.get("mss", 536)
        want_mss = max([m for m in MSS_TABLE[fam] if m <= cm] or [MSS_TABLE[fam][0]])
        if so.get("mss") != want_mss:
            errs.append("the server's SYN has MSS %s, want %d (the cookie's, from the client's %d)" % (so.get("mss"), want_mss, cm))
        if so.get("ws") != co.get("ws"):
            errs.append("the server's SYN has wscale %s, the client's is %s" % (so.get("ws"), co.get("ws")))
        if bool(so.get("sack")) != bool(co.get("sack")):
            errs.append("the server's SYN has %s SACK-permitted, the client offered %s" % (so.get("sack"), co.get("sack")))
        if ("ts" in so) != ("ts" in co):
            errs.append("the server's SYN has %s timestamp" % ("a" if "ts" in so else "no"))
    elif so != co:
        errs.append("the server's SYN has other options than the client's: [%s] vs [%s]" % (optstr(so), optstr(co)))
    summ.append("server SYN seq = client ISN%s [%s]" % ("" if ssyn.seq == csyn.seq else " NOT", optstr(so)))

    # after the handshake: the router's ACKs (to the server before data; to the client)
    s3 = first(S, True, lambda s: not s.flags & SYN, ssa.n)
    if not s3 or s3.len or s3.flags & (FIN | RST):
        errs.append("no bare ACK to the server after its SYN-ACK before the data")
    summ.append("server: bare ACK after its SYN-ACK" if s3 and not s3.len and not s3.flags & (FIN | RST) else "server: no bare ACK")
    c4 = first(C, False, lambda s: not s.flags & SYN, csa.n)
    kind = "none"
    if c4:
        kind = "bare ACK win %s" % (">0" if c4.win else "0") if not c4.len and c4.flags & (FIN | RST | PSH) == 0 else "data"
    if want_proxy:  # (not proxied: the server's first segment, its own business)
        summ.append("client: first segment after the SYN-ACK: " + kind)
    if want_proxy and kind != "bare ACK win >0":
        errs.append("the client got no window update (a bare ACK with a window) after the window-0 SYN-ACK: %s" % kind)

    # checksums of what each end received
    for pk, c2s_recv, where in ((C, False, "client"), (S, True, "server")):
        for d, s in pk:
            if d == c2s_recv and s.ck != "ok" and not (s.ck == "partial" and cks == "partial-ok"):
                errs.append("the %s received a segment with checksum %s: %s" % (where, s.ck, desc(s, d)))
                break

    # sequence numbers: continuous in each direction at each end, the same lengths
    lens = {}
    for pk, where, isn_c, isn_s in ((C, "client", csyn.seq, csa.seq), (S, "server", ssyn.seq, ssa.seq)):
        up, down = Stream(isn_c), Stream(isn_s)
        for d, s in pk:
            (up if d else down).add(s, "%s, %s" % (where, desc(s, d)))
            if not s.flags & SYN and s.flags & ACK:
                other = down if d else up
                other.acked(s.ack)
                if sdiff(s.ack, other.hi) > 0:
                    errs.append("at the %s an ACK for data not sent yet: %s (next %d)" % (where, desc(s, d), other.hi))
                    break
        for st in (up, down):
            st.finish()
            if st.err:
                errs.append(st.err)
            if st.lost:
                print("note: %s %s: the capture at the %s lost %d bytes (acknowledged across by the receiver)" % (
                    name, "up" if st is up else "down", where, st.lost), file=sys.stderr)
        lens[where] = (up.length(), down.length())
    if lens["client"] != lens["server"]:
        errs.append("bytes each way at the client %s, at the server %s" % (lens["client"], lens["server"]))
    summ.append("stream lengths %d up, %d down (FINs counted)" % lens["client"])

    # who closed first (at each end)
    fins = []
    for pk in (C, S):
        f = first(pk, True, lambda s: s.flags & FIN) , first(pk, False, lambda s: s.flags & FIN)
        if not f[0] or not f[1]:
            fins.append("missing")
        else:
            fins.append("client" if f[0].n < f[1].n else "server")
    if fins[0] != fins[1]:
        errs.append("FIN first from the %s at the client, from the %s at the server" % tuple(fins))
    summ.append("first FIN from the " + fins[0])

    # timestamps: the client sees the server's TSvals continue from the SYN-ACK's; each end
    # receives as TSecr only TSvals it sent
    if "ts" in co and "ts" in sa:
        last = sa["ts"][0]
        for d, s in C:
            if d or s.flags & SYN or "ts" not in s.opts:
                continue
            dv = sdiff(s.opts["ts"][0], last)
            if dv < 0 or dv > 20000:
                errs.append("at the client the server's TSval jumps from %d to %d: %s" % (last, s.opts["ts"][0], desc(s, d)))
                break
            last = s.opts["ts"][0]
        for pk, sender, where in ((C, True, "client"), (S, False, "server")):
            sent = set()
            for d, s in pk:
                if "ts" not in s.opts or (want_proxy and s3 is not None and s is s3):
                    # (the router's own ACK to the server: the kernel's TSecr there is the
                    # server's TSval shifted by the offset once more, not checked)
                    continue
                if d == sender:
                    sent.add(s.opts["ts"][0])
                elif s.flags & ACK and s.opts["ts"][1] not in sent:
                    errs.append("the %s received TSecr %d, not a TSval it sent: %s" % (where, s.opts["ts"][1], desc(s, d)))
                    break
        summ.append("timestamps continuous, echoed")
    return "%s: %s" % (name, "; ".join(summ)), ["%s: %s" % (name, e) for e in errs], ctx if errs else ""


def main():
    a = sys.argv[1:]
    cpk, spk = read_pcap(a[0]), read_pcap(a[1])
    fam = int(a[3])
    import ipaddress
    caddr = ipaddress.ip_address(a[4]).packed
    saddr = ipaddress.ip_address(a[5]).packed
    proxied = {int(p) for p in a[6].split(",")}
    synack_mss, cks = int(a[7]), a[8]
    errs, lines, ctxs = [], [], []
    for line in open(a[2]):
        f = line.split()
        if len(f) < 3:
            continue
        summ, e, ctx = analyse(f[0], int(f[1]), int(f[2]), cpk, spk, fam, caddr, saddr, proxied, synack_mss, cks)
        lines.append(summ)
        errs += e
        if ctx:
            ctxs.append("%s %s %s (client port %s), the first packets:%s" % (f[0], f[1], f[2], f[2], ctx))
    if not lines:
        errs.append("no connection in " + a[2])
    if len(a) > 9:
        fp = int(a[9])
        sent = [s for s in cpk if s.sport == fp and s.src == caddr]
        seen = [s for s in spk if s.sport == fp and s.src == caddr]
        if not sent:
            errs.append("the forged ACK is not in the client's capture")
        if seen:
            errs.append("the forged ACK (wrong cookie) reached the server: " + desc(seen[0], True))
        lines.append("v%d forged ACK: %s at the client, %s at the server" % (
            fam, "sent" if sent else "not sent", "arrived" if seen else "nothing"))
    for l in sorted(lines):
        print(l)
    for e in errs:
        print("ERROR: " + e)
    for c in ctxs[:3]:
        print(c)
    sys.exit(1 if errs else 0)


if __name__ == "__main__":
    main()
