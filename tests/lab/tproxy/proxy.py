#!/usr/bin/env python3
"""A transparent proxy for the tproxy lab (runs in the router's namespace): TCP listeners on
0.0.0.0:8080 and [::]:8080 with IP_TRANSPARENT / IPV6_TRANSPARENT, a UDP socket on :5353 (each
family) with the original destination received (IP_RECVORIGDSTADDR). Each TCP connection gets
one line back: "proxy ORIGINAL-DESTINATION from CLIENT len N" (N: the bytes the client sent
before closing its side); each datagram is answered from its original destination (a
transparent socket bound there): "proxy-udp ORIGINAL-DESTINATION from CLIENT len N". What it
served is written, one line each, to the log given ($1)."""
import socket, struct, sys, threading

SOL_IP, SOL_IPV6 = 0, 41
IP_TRANSPARENT, IP_RECVORIGDSTADDR = 19, 20
IPV6_TRANSPARENT, IPV6_RECVORIGDSTADDR = 75, 74
LOG = open(sys.argv[1], "a", buffering=1)
LOCK = threading.Lock()


def log(line):
    with LOCK:
        LOG.write(line + "\n")


def fmt(addr):
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def tcp(fam):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET6:
        s.setsockopt(SOL_IPV6, socket.IPV6_V6ONLY, 1)
        s.setsockopt(SOL_IPV6, IPV6_TRANSPARENT, 1)
        s.bind(("::", 8080))
    else:
        s.setsockopt(SOL_IP, IP_TRANSPARENT, 1)
        s.bind(("0.0.0.0", 8080))
    s.listen(64)
    while True:
        c, peer = s.accept()
        threading.Thread(target=serve, args=(c, peer), daemon=True).start()


def serve(c, peer):
    c.settimeout(10)
    orig = c.getsockname()
    n = 0
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            n += len(b)
        line = f"proxy {fmt(orig)} from {peer[0]} len {n}"
        c.sendall(line.encode() + b"\n")
        log("tcp " + line)
    except OSError as e:
        log(f"tcp error {e}")
    finally:
        c.close()


def udp(fam):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET6:
        s.setsockopt(SOL_IPV6, socket.IPV6_V6ONLY, 1)
        s.setsockopt(SOL_IPV6, IPV6_TRANSPARENT, 1)
        s.setsockopt(SOL_IPV6, IPV6_RECVORIGDSTADDR, 1)
        s.bind(("::", 5353))
    else:
        s.setsockopt(SOL_IP, IP_TRANSPARENT, 1)
        s.setsockopt(SOL_IP, IP_RECVORIGDSTADDR, 1)
        s.bind(("0.0.0.0", 5353))
    while True:
        data, anc, _, peer = s.recvmsg(65536, 1024)
        orig = None
        for level, typ, d in anc:
            if level == SOL_IP and typ == IP_RECVORIGDSTADDR:
                port, = struct.unpack("!H", d[2:4])
                orig = (socket.inet_ntop(socket.AF_INET, d[4:8]), port)
            if level == SOL_IPV6 and typ == IPV6_RECVORIGDSTADDR:
                port, = struct.unpack("!H", d[2:4])
                orig = (socket.inet_ntop(socket.AF_INET6, d[8:24]), port)
        if orig is None:
            log("udp no original destination")
            continue
        line = f"proxy-udp {fmt(orig)} from {peer[0]} len {len(data)}"
        r = socket.socket(fam, socket.SOCK_DGRAM)
        r.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if fam == socket.AF_INET6:
            r.setsockopt(SOL_IPV6, IPV6_TRANSPARENT, 1)
        else:
            r.setsockopt(SOL_IP, IP_TRANSPARENT, 1)
        try:
            r.bind(orig)
            r.sendto(line.encode() + b"\n", peer[:2])
            log("udp " + line)
        except OSError as e:
            log(f"udp error {e}")
        finally:
            r.close()


for f in (tcp, udp):
    for fam in (socket.AF_INET, socket.AF_INET6):
        threading.Thread(target=f, args=(fam,), daemon=True).start()
print("listening", flush=True)
threading.Event().wait()
