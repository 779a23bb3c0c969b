#!/usr/bin/env python3
"""The client of the tproxy lab: for server address $1, TCP connections to port 80 (taken by
the router's transparent proxy) with 5 bytes, 100 kB and 1 MB sent, one to port 81 (no proxy
listens on the target: forwarded to the server), UDP datagrams to port 53 (taken) and 54
(nobody: no answer); prints what came back, one line each, in order."""
import os, socket, sys, time

dst = sys.argv[1]
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET


def tcp(port, n):
    s = socket.create_connection((dst, port), timeout=5)
    try:
        s.sendall(b"x" * n)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            got += b
        return got.decode().strip() or "(empty)"
    finally:
        s.close()


def udp(port, n):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(1.5)
    try:
        s.sendto(b"u" * n, (dst, port))
        data, peer = s.recvfrom(4096)
        return f"{data.decode().strip()} (answered from {peer[0]}:{peer[1]})"
    except socket.timeout:
        return "(no answer)"
    finally:
        s.close()


T = os.environ.get("TP_TIMING")
for port, n in ((80, 5), (80, 100_000), (80, 1_000_000), (81, 7)):
    t0 = time.monotonic()
    if T:
        print(f"  (tcp {port} {n} at {t0:.3f})", file=sys.stderr)
    try:
        print(f"tcp {port} {n}: {tcp(port, n)}", flush=True)
    except OSError as e:
        print(f"tcp {port} {n}: error {e}", flush=True)
for port, n in ((53, 9), (54, 3)):
    if T:
        print(f"  (udp {port} {n} at {time.monotonic():.3f})", file=sys.stderr)
    print(f"udp {port} {n}: {udp(port, n)}", flush=True)
