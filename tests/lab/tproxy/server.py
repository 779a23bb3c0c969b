#!/usr/bin/env python3
"""The far server of the tproxy lab: TCP on ports 80 and 81 (both families) answers one line,
"server PORT from CLIENT len N", after the client closes its side; UDP 53 answers
"server-udp 53 from CLIENT len N". What it served is logged to $1."""
import socket, sys, threading

LOG = open(sys.argv[1], "a", buffering=1)


def tcp(fam, port):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", port))
    s.listen(64)
    while True:
        c, peer = s.accept()
        threading.Thread(target=serve, args=(c, peer, port), daemon=True).start()


def serve(c, peer, port):
    c.settimeout(10)
    n = 0
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            n += len(b)
        line = f"server {port} from {peer[0]} len {n}"
        c.sendall(line.encode() + b"\n")
        LOG.write("tcp " + line + "\n")
    except OSError as e:
        LOG.write(f"tcp error {e}\n")
    finally:
        c.close()


def udp(fam):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", 53))
    while True:
        data, peer = s.recvfrom(65536)
        line = f"server-udp 53 from {peer[0]} len {len(data)}"
        s.sendto(line.encode() + b"\n", peer)
        LOG.write("udp " + line + "\n")


for fam in (socket.AF_INET, socket.AF_INET6):
    for port in (80, 81):
        threading.Thread(target=tcp, args=(fam, port), daemon=True).start()
    threading.Thread(target=udp, args=(fam,), daemon=True).start()
print("listening", flush=True)
threading.Event().wait()
