#!/usr/bin/env python3
"""The synproxy lab's TCP peers (tests/lab/synproxy.sh).

  sp_peer.py server ADDR[,ADDR...] PORT[,PORT...] SECONDS
  sp_peer.py client ADDR PORT MODE LOG
  sp_peer.py forge SRC DST DPORT SPORT

Each connection begins with one request line; MODE is one of
  data   the client sends "data N\\n" and N bytes (UPLOAD), the server answers with the
         SHA-256 of what it received (64 hex digits and a newline) and the 200,000-byte
         PAYLOAD, then waits for the client's FIN and closes after it
  cclose the client sends "cclose\\n", the server answers "ok\\n"; the client closes first
  sclose the client sends "sclose\\n", the server answers "bye\\n" and closes first
The payloads are fixed (a seeded generator), so both sides know them. The client checks
every byte and appends "MODE PORT LOCALPORT ok" to LOG; any difference or a timeout is an
error (exit 1). The server runs SECONDS at most; a connection that goes wrong is printed.
"forge" sends, from a raw IPv4 socket, a bare ACK from SRC:SPORT to DST:DPORT whose
acknowledgement number is no SYN cookie (no SYN was ever sent): a synproxy must drop it.
"""
import hashlib
import random
import select
import socket
import sys
import threading
import time

PAYLOAD = random.Random(20240).randbytes(200_000)
UPLOAD = random.Random(20241).randbytes(100_000)
TIMEOUT = 6.0


def read_line(s):
    buf = b""
    while not buf.endswith(b"\n"):
        b = s.recv(1)
        if not b:
            raise EOFError("closed before the end of the line: %r" % buf)
        buf += b
        if len(buf) > 100:
            raise ValueError("line too long: %r" % buf)
    return buf[:-1].decode()


def read_exact(s, n):
    parts, got = [], 0
    while got < n:
        b = s.recv(min(65536, n - got))
        if not b:
            raise EOFError("closed after %d of %d bytes" % (got, n))
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def read_eof(s):
    extra = s.recv(1)
    if extra:
        raise ValueError("data where the peer's FIN was expected: %r" % extra)


def serve_one(c, peer):
    c.settimeout(TIMEOUT)
    try:
        line = read_line(c)
        if line.startswith("data "):
            n = int(line.split()[1])
            got = read_exact(c, n)
            c.sendall(hashlib.sha256(got).hexdigest().encode() + b"\n" + PAYLOAD)
            read_eof(c)
        elif line == "cclose":
            c.sendall(b"ok\n")
            read_eof(c)
        elif line == "sclose":
            c.sendall(b"bye\n")
        else:
            raise ValueError("unknown request %r" % line)
    except Exception as e:  # noqa: BLE001 - printed for the lab's log
        print("server: connection from %s: %s" % (peer, e), flush=True)
    finally:
        c.close()


def server(addrs, ports, seconds):
    socks = []
    for a in addrs.split(","):
        fam = socket.AF_INET6 if ":" in a else socket.AF_INET
        for p in ports.split(","):
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((a, int(p)))
            s.listen(16)
            socks.append(s)
    print("server: listening", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select(socks, [], [], 0.2)
        for s in ready:
            c, peer = s.accept()
            threading.Thread(target=serve_one, args=(c, peer), daemon=True).start()


def client(addr, port, mode, log):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT)
    s.connect((addr, port))
    local = s.getsockname()[1]
    if mode == "data":
        s.sendall(b"data %d\n" % len(UPLOAD) + UPLOAD)
        digest = read_line(s)
        if digest != hashlib.sha256(UPLOAD).hexdigest():
            raise ValueError("the server received other bytes than were sent (sha256 %s)" % digest)
        got = read_exact(s, len(PAYLOAD))
        if got != PAYLOAD:
            first = next(i for i in range(len(got)) if got[i] != PAYLOAD[i])
            raise ValueError("the payload differs from byte %d on" % first)
        s.shutdown(socket.SHUT_WR)
        read_eof(s)
    elif mode == "cclose":
        s.sendall(b"cclose\n")
        if read_line(s) != "ok":
            raise ValueError("no ok")
        s.shutdown(socket.SHUT_WR)
        read_eof(s)
    elif mode == "sclose":
        s.sendall(b"sclose\n")
        if read_line(s) != "bye":
            raise ValueError("no bye")
        read_eof(s)  # the server's FIN first
        s.shutdown(socket.SHUT_WR)
    s.close()
    with open(log, "a") as f:
        f.write("%s %d %d ok\n" % (mode, port, local))


def forge(src, dst, dport, sport):
    import struct

    def csum(b):
        if len(b) % 2:
            b += b"\0"
        t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
        while t >> 16:
            t = (t & 0xFFFF) + (t >> 16)
        return ~t & 0xFFFF

    tcp = struct.pack("!HHIIBBHHH", sport, dport, 0x12345678, 0x0BADC0DE, 5 << 4, 0x10, 501, 0, 0)
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(ph + tcp)) + tcp[18:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    s.bind((src, 0))
    for _ in range(3):
        s.sendto(tcp, (dst, 0))
        time.sleep(0.05)


def main():
    if sys.argv[1] == "forge":
        forge(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "server":
        server(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        try:
            client(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
        except Exception as e:  # noqa: BLE001
            print("client %s port %s %s: %s: %s" % (sys.argv[2], sys.argv[3], sys.argv[4], type(e).__name__, e))
            sys.exit(1)


if __name__ == "__main__":
    main()
